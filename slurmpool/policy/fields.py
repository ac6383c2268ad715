"""A small field-definition language for the policy file.

One definition drives both the structural validator (which walks PyYAML's
composed node tree, so every problem carries a line number) and the JSON
Schema printed by ``slurmpool policy schema``: the two cannot drift.

Conversion never stops at the first problem: each issue is recorded in the
:class:`Context` and the offending value is left out of the result, so the
semantic checks that follow can still report what else is wrong.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from slurmpool.policy.errors import Issue

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
VAR_PATTERN = r"\$\{[A-Za-z_][A-Za-z0-9_]*\}"

_INT = "tag:yaml.org,2002:int"
_STR = "tag:yaml.org,2002:str"
_BOOL = "tag:yaml.org,2002:bool"
_FLOAT = "tag:yaml.org,2002:float"
_NULL = "tag:yaml.org,2002:null"

_scalar_loader = yaml.SafeLoader("")


def _describe(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    kind = {
        _INT: "an integer",
        _STR: "a string",
        _BOOL: "a boolean",
        _FLOAT: "a number",
        _NULL: "null",
    }.get(node.tag, "a value")
    return f"{kind} ({node.value!r})" if node.tag != _NULL else kind


@dataclass
class Context:
    """Where conversion records issues and the line of every field path."""

    file: str
    variables: Mapping[str, str] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, path: str) -> int | None:
        """The line of ``path``, else of its nearest ancestor that has one."""
        p = path
        while p:
            if p in self.lines:
                return self.lines[p]
            cut = max(p.rfind("."), p.rfind("["))
            p = p[:cut] if cut > 0 else ""
        return self.lines.get("")

    def error(self, path: str, message: str, line: int | None = None) -> None:
        self.issues.append(
            Issue(self.file, line if line is not None else self.line_of(path), path, message)
        )


class Spec:
    """A value's definition: converts a YAML node and describes itself as JSON Schema."""

    description: str = ""
    expected: str = "a value"

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        raise NotImplementedError

    def json_schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def _with_doc(self, schema: dict[str, Any]) -> dict[str, Any]:
        if self.description:
            schema["description"] = self.description
        return schema

    def _wrong(self, node: yaml.Node, path: str, ctx: Context) -> None:
        ctx.error(
            path, f"expected {self.expected}, got {_describe(node)}", node.start_mark.line + 1
        )


@dataclass
class Str(Spec):
    """A string, optionally restricted by a regular expression or an enum.

    ``substitute`` enables ``${name}`` variables (paths); the pattern then
    applies to the substituted text.  ``numbers_ok`` accepts a YAML number
    as its text (for free-form slurm.conf values like ``Port: 17001``).
    """

    expected: str = "a string"
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    substitute: bool = False
    numbers_ok: bool = False
    description: str = ""
    schema_pattern: str | None = None

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        ok_tags = (_STR, _INT) if self.numbers_ok else (_STR,)
        if not isinstance(node, yaml.ScalarNode) or node.tag not in ok_tags:
            self._wrong(node, path, ctx)
            return None
        text = str(node.value)
        if self.substitute:
            missing = [v for v in _VAR.findall(text) if v not in ctx.variables]
            if missing:
                known = ", ".join(sorted(ctx.variables)) or "none were given"
                ctx.error(path, f"undefined variable ${{{missing[0]}}} (variables: {known})")
                return None
            text = _VAR.sub(lambda m: ctx.variables[m.group(1)], text)
        if self.enum is not None and text not in self.enum:
            ctx.error(path, f"expected one of {', '.join(self.enum)}, got {text!r}")
            return None
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            ctx.error(path, f"expected {self.expected}, got {text!r}")
            return None
        return text

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": ["string", "integer"] if self.numbers_ok else "string"}
        if self.enum is not None:
            s["enum"] = list(self.enum)
        pattern = self.schema_pattern or self.pattern
        if pattern is not None:
            s["pattern"] = f"^(?:{pattern})$"
        return self._with_doc(s)


@dataclass
class Int(Spec):
    minimum: int | None = None
    maximum: int | None = None
    description: str = ""

    @property
    def expected(self) -> str:  # type: ignore[override]
        if self.minimum is not None and self.maximum is not None:
            return f"an integer {self.minimum}..{self.maximum}"
        if self.minimum is not None:
            return f"an integer >= {self.minimum}"
        return "an integer"

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.ScalarNode) or node.tag != _INT:
            self._wrong(node, path, ctx)
            return None
        value = _scalar_loader.construct_object(node)
        assert isinstance(value, int)
        if (self.minimum is not None and value < self.minimum) or (
            self.maximum is not None and value > self.maximum
        ):
            ctx.error(path, f"expected {self.expected}, got {value}")
            return None
        return value

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": "integer"}
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.maximum is not None:
            s["maximum"] = self.maximum
        return self._with_doc(s)


@dataclass
class Bool(Spec):
    expected: str = "true or false"
    description: str = ""

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.ScalarNode) or node.tag != _BOOL:
            self._wrong(node, path, ctx)
            return None
        return bool(_scalar_loader.construct_object(node))

    def json_schema(self) -> dict[str, Any]:
        return self._with_doc({"type": "boolean"})


@dataclass
class Seq(Spec):
    item: Spec
    min_items: int = 0
    description: str = ""

    @property
    def expected(self) -> str:  # type: ignore[override]
        return f"a list of {self.item.expected}"

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.SequenceNode):
            self._wrong(node, path, ctx)
            return None
        if len(node.value) < self.min_items:
            ctx.error(path, f"expected at least {self.min_items} item(s), got {len(node.value)}")
        # Invalid items stay as None so later checks keep each item's index.
        return [self.item.convert(child, f"{path}[{i}]", ctx) for i, child in enumerate(node.value)]

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": "array", "items": self.item.json_schema()}
        if self.min_items:
            s["minItems"] = self.min_items
        return self._with_doc(s)


@dataclass
class MapOf(Spec):
    """A free-form mapping of names (matching ``key_pattern``) to values."""

    value: Spec
    key_pattern: str
    key_expected: str
    forbidden_keys: tuple[str, ...] = ()
    description: str = ""
    expected: str = "a mapping"

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.MappingNode):
            self._wrong(node, path, ctx)
            return None
        out: dict[str, Any] = {}
        folded = {k.casefold() for k in self.forbidden_keys}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            kpath = f"{path}.{key}"
            line = knode.start_mark.line + 1
            if not isinstance(key, str) or not re.fullmatch(self.key_pattern, key):
                ctx.error(path, f"expected {self.key_expected} as key, got {key!r}", line)
                continue
            if key.casefold() in folded:
                ctx.error(kpath, f"{key} is set by slurmpool and cannot be overridden", line)
                continue
            if key in out:
                ctx.error(kpath, "duplicate key", line)
                continue
            v = self.value.convert(vnode, kpath, ctx)
            if v is not None:
                out[key] = v
        return out

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "type": "object",
            "propertyNames": {"pattern": f"^(?:{self.key_pattern})$"},
            "additionalProperties": self.value.json_schema(),
        }
        if self.forbidden_keys:
            s["propertyNames"]["not"] = {"enum": list(self.forbidden_keys)}
        return self._with_doc(s)


@dataclass
class Field:
    name: str
    spec: Spec
    required: bool = False
    default: Any = None
    # Allowed only when the object's discriminator has one of these values.
    when: tuple[str, ...] | None = None
    # Required when the discriminator has one of these values.
    required_when: tuple[str, ...] = ()


@dataclass
class Obj(Spec):
    """A mapping with a fixed set of fields; unknown fields are errors."""

    fields: Sequence[Field]
    description: str = ""
    expected: str = "a mapping"
    discriminator: str | None = None
    # Groups of fields of which exactly one must be present.
    exactly_one: Sequence[tuple[str, ...]] = ()

    def defaults(self) -> dict[str, Any]:
        """The value of this object when it is left out entirely."""
        return {f.name: f.default for f in self.fields if f.default is not None}

    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}

    def convert(self, node: yaml.Node, path: str, ctx: Context) -> Any:
        ctx.lines.setdefault(path, node.start_mark.line + 1)
        if not isinstance(node, yaml.MappingNode):
            self._wrong(node, path, ctx)
            return None
        defs = self.by_name()
        seen: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            line = knode.start_mark.line + 1
            fpath = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str) or key not in defs:
                ctx.error(
                    fpath,
                    f"unknown field {key!r}; expected one of {', '.join(defs)}",
                    line,
                )
                continue
            if key in seen:
                ctx.error(fpath, "duplicate field", line)
                continue
            seen[key] = (knode, vnode)
        out: dict[str, Any] = {}
        for name, (knode, vnode) in seen.items():
            fpath = f"{path}.{name}" if path else name
            ctx.lines[fpath] = knode.start_mark.line + 1
            value = defs[name].spec.convert(vnode, fpath, ctx)
            if value is not None:
                out[name] = value
        mode = out.get(self.discriminator) if self.discriminator else None
        for f in self.fields:
            fpath = f"{path}.{f.name}" if path else f.name
            if f.name in seen:
                if f.when is not None and mode is not None and mode not in f.when:
                    ctx.error(
                        fpath,
                        f"field {f.name!r} is only valid with {self.discriminator} "
                        f"{' or '.join(f.when)}, not {mode}",
                    )
                    out.pop(f.name, None)
                continue
            needed = f.required or (mode is not None and mode in f.required_when)
            if needed:
                what = f"{f.spec.expected}"
                if f.spec.description:
                    what += f": {f.spec.description}"
                ctx.error(
                    fpath,
                    f"missing field {f.name!r} ({what})",
                    node.start_mark.line + 1,
                )
            elif f.default is not None:
                out[f.name] = copy.deepcopy(f.default)
        for group in self.exactly_one:
            present = [g for g in group if g in seen]
            if len(present) != 1:
                got = ", ".join(present) if present else "none"
                ctx.error(
                    path,
                    f"expected exactly one of {', '.join(group)}, got {got}",
                    node.start_mark.line + 1,
                )
        return out

    def json_schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {f.name: f.spec.json_schema() for f in self.fields},
        }
        required = [f.name for f in self.fields if f.required]
        if required:
            s["required"] = required
        conditions: list[dict[str, Any]] = []
        d = self.discriminator
        for f in self.fields:
            if d is None:
                break
            if f.when is not None:
                conditions.append(
                    {
                        "if": {"properties": {d: {"not": {"enum": list(f.when)}}}, "required": [d]},
                        "then": {"not": {"required": [f.name]}},
                    }
                )
            for value in f.required_when:
                conditions.append(
                    {
                        "if": {"properties": {d: {"const": value}}, "required": [d]},
                        "then": {"required": [f.name]},
                    }
                )
        for group in self.exactly_one:
            conditions.append({"oneOf": [{"required": [g]} for g in group]})
        if conditions:
            s["allOf"] = conditions
        return self._with_doc(s)
