"""Plain-data classes for the job-hook path, without importing :mod:`dataclasses`.

Slurm starts a fresh interpreter for every prolog, task prolog and epilog.  On
the target machines ``import dataclasses`` (which pulls in inspect, ast, dis and
tokenize) and the per-class work of ``@dataclass`` cost about a fifth of a
hook's run, so the modules a hook imports declare their records with
:func:`record` instead.  It builds the same ``__init__``, ``__repr__``,
``__eq__``, ``__hash__``, ordering, frozen and ``__slots__`` behaviour as
``@dataclass`` for the options slurmpool uses (``frozen``, ``slots``,
``order``, ``eq`` and ``field(default=, default_factory=, repr=, init=,
compare=)``), plus :func:`fields`, :func:`asdict` and :func:`replace`.  Type
checkers see the standard ``dataclasses`` names themselves, and
tests/test_records.py holds the two to the same behaviour.

Modules off the hook path (CLI, sandbox, reports) use :mod:`dataclasses`.
"""

from __future__ import annotations

from types import FunctionType

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: object = _Missing()
_FACTORY: object = _Missing()  # __init__ default of a field with a default_factory
_MUTABLE_DEFAULTS = (list, dict, set)


class _FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record."""


class _Field:
    __slots__ = ("compare", "default", "default_factory", "init", "name", "repr")

    def __init__(
        self,
        default: object = _MISSING,
        default_factory: object = _MISSING,
        repr: bool = True,
        init: bool = True,
        compare: bool = True,
    ) -> None:
        if default is not _MISSING and default_factory is not _MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.repr = repr
        self.init = init
        self.compare = compare

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r})"


def _field(
    *,
    default: object = _MISSING,
    default_factory: object = _MISSING,
    repr: bool = True,
    init: bool = True,
    compare: bool = True,
) -> object:
    return _Field(default, default_factory, repr, init, compare)


def _lazy_annotations(cls: type) -> dict[str, Any]:
    """The class's own annotations where Python evaluates them lazily (3.14+, PEP 649,
    a module without ``from __future__ import annotations``): as strings, as that
    import gives them, so nothing is evaluated.  Before 3.14 such a class has none."""
    import importlib

    try:
        annotationlib = importlib.import_module("annotationlib")
    except ImportError:
        return {}
    found: dict[str, Any] = annotationlib.get_annotations(cls, format=annotationlib.Format.STRING)
    return found


def _is_classvar(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return isinstance(text, str) and text.split("[", 1)[0].rsplit(".", 1)[-1] == "ClassVar"


def _collect(cls: type) -> list[_Field]:
    found: dict[str, _Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for f in _fields_of(base):
            found[f.name] = f
    # Not inspect.get_annotations: importing inspect is the cost this module avoids.
    own = cls.__dict__.get("__annotations__")  # noqa: RUF063
    if own is None:
        own = _lazy_annotations(cls)
    for name, annotation in own.items():
        if _is_classvar(annotation):
            continue
        value = cls.__dict__.get(name, _MISSING)
        f = value if isinstance(value, _Field) else _Field(default=value)
        if isinstance(f.default, _MUTABLE_DEFAULTS):
            raise ValueError(
                f"mutable default {type(f.default)} for field {name} is not allowed: "
                "use default_factory"
            )
        f.name = name
        found[name] = f
    return list(found.values())


def _function(cls: type, name: str, source: str, env: dict[str, object]) -> Callable[..., object]:
    """A generated method of ``cls``, compiled on its first call.

    Compiling is most of what declaring a record costs, and a hook run calls
    the methods of few of the records it imports; so the class gets a stub
    that compiles the real method, puts it on the class and calls it.
    """

    def compile_on_first_call(*args: object, **kwargs: object) -> object:
        scope: dict[str, object] = {}
        exec(source, env, scope)  # the source is built here from field names
        fn = scope[name]
        assert isinstance(fn, FunctionType)
        fn.__qualname__ = stub.__qualname__
        if cls.__dict__.get(name) is stub:
            type.__setattr__(cls, name, fn)
        return fn(*args, **kwargs)

    stub = compile_on_first_call
    stub.__name__ = name
    stub.__qualname__ = f"{cls.__qualname__}.{name}"
    return stub


def _init(cls: type, fields: list[_Field], frozen: bool, slots: bool) -> Callable[..., object]:
    env: dict[str, object] = {"_FACTORY": _FACTORY, "_osa": object.__setattr__}
    params: list[str] = []
    body: list[str] = []
    seen_default = False
    for i, f in enumerate(fields):
        has_default = f.default is not _MISSING or f.default_factory is not _MISSING
        if f.init:
            if has_default:
                seen_default = True
            elif seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        if f.default_factory is not _MISSING:
            env[f"_f{i}"] = f.default_factory
            if f.init:
                params.append(f"{f.name}=_FACTORY")
                value = f"_f{i}() if {f.name} is _FACTORY else {f.name}"
            else:
                value = f"_f{i}()"
        elif f.init:
            if f.default is not _MISSING:
                env[f"_d{i}"] = f.default
                params.append(f"{f.name}=_d{i}")
            else:
                params.append(f.name)
            value = f.name
        elif slots and f.default is not _MISSING:
            env[f"_d{i}"] = f.default
            value = f"_d{i}"
        else:
            continue
        if frozen:
            body.append(f"    _osa(_self_, {f.name!r}, {value})")
        else:
            body.append(f"    _self_.{f.name} = {value}")
    source = (
        f"def __init__(_self_{''.join(', ' + p for p in params)}):\n"
        + ("\n".join(body) if body else "    pass")
        + "\n"
    )
    return _function(cls, "__init__", source, env)


def _tuple(names: list[str], var: str) -> str:
    return "(" + "".join(f"{var}.{n}," for n in names) + ")"


def _methods(
    cls: type, fields: list[_Field], frozen: bool, order: bool, eq: bool
) -> dict[str, object]:
    compared = [f.name for f in fields if f.compare]
    shown = [f.name for f in fields if f.repr]
    out: dict[str, object] = {}

    def __repr__(self: object) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in shown)
        return f"{type(self).__qualname__}({inner})"

    out["__repr__"] = __repr__
    if eq:
        out["__eq__"] = _function(
            cls,
            "__eq__",
            "def __eq__(self, other):\n"
            "    if other.__class__ is self.__class__:\n"
            f"        return {_tuple(compared, 'self')} == {_tuple(compared, 'other')}\n"
            "    return NotImplemented\n",
            {},
        )
    if order:
        for name, op in (("__lt__", "<"), ("__le__", "<="), ("__gt__", ">"), ("__ge__", ">=")):
            if name in cls.__dict__:
                raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
            out[name] = _function(
                cls,
                name,
                f"def {name}(self, other):\n"
                "    if other.__class__ is self.__class__:\n"
                f"        return {_tuple(compared, 'self')} {op} {_tuple(compared, 'other')}\n"
                "    return NotImplemented\n",
                {},
            )
    if frozen:
        field_names = frozenset(f.name for f in fields)

        def __setattr__(self: object, name: str, value: object) -> None:
            if type(self) is cls or name in field_names:
                raise _FrozenInstanceError(f"cannot assign to field {name!r}")
            object.__setattr__(self, name, value)

        def __delattr__(self: object, name: str) -> None:
            if type(self) is cls or name in field_names:
                raise _FrozenInstanceError(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        out["__setattr__"] = __setattr__
        out["__delattr__"] = __delattr__
    return out


def _hash(cls: type, fields: list[_Field], frozen: bool, eq: bool) -> object:
    """The ``__hash__`` to set, _MISSING to leave it (dataclasses' rules for unsafe_hash=False)."""
    own = cls.__dict__.get("__hash__", _MISSING)
    explicit = own is not _MISSING and not (own is None and "__eq__" in cls.__dict__)
    if not eq or explicit:
        return _MISSING
    if not frozen:
        return None
    compared = _tuple([f.name for f in fields if f.compare], "self")
    return _function(cls, "__hash__", f"def __hash__(self):\n    return hash({compared})\n", {})


def _with_slots(cls: type, fields: list[_Field]) -> type:
    body = dict(cls.__dict__)
    names = tuple(f.name for f in fields)
    body["__slots__"] = names
    for name in (*names, "__dict__", "__weakref__"):
        body.pop(name, None)
    new = type(cls)(cls.__name__, cls.__bases__, body)
    new.__qualname__ = cls.__qualname__
    return new


def _fields_of(obj: object) -> tuple[_Field, ...]:
    found: tuple[_Field, ...] = getattr(obj, "__record_fields__", ())
    return found


def _getstate(self: object) -> list[object]:
    return [getattr(self, f.name) for f in _fields_of(self)]


def _setstate(self: object, state: list[object]) -> None:
    for f, value in zip(_fields_of(self), state, strict=True):
        object.__setattr__(self, f.name, value)


def _process(cls: type, frozen: bool, slots: bool, order: bool, eq: bool) -> type:
    fields = _collect(cls)
    if slots:
        cls = _with_slots(cls, fields)
    else:
        for f in fields:
            if isinstance(cls.__dict__.get(f.name), _Field):
                if f.default is _MISSING:
                    delattr(cls, f.name)
                else:
                    setattr(cls, f.name, f.default)
    attrs: dict[str, object] = {
        "__record_fields__": tuple(fields),
        "__match_args__": tuple(f.name for f in fields if f.init),
    }
    if "__init__" not in cls.__dict__:
        attrs["__init__"] = _init(cls, fields, frozen, slots)
    for name, fn in _methods(cls, fields, frozen, order, eq).items():
        if name in ("__repr__", "__eq__") and name in cls.__dict__:
            continue  # the class's own, as with @dataclass
        attrs[name] = fn
    hash_fn = _hash(cls, fields, frozen, eq)
    if hash_fn is not _MISSING:
        attrs["__hash__"] = hash_fn
    if slots and frozen:
        attrs["__getstate__"] = _getstate
        attrs["__setstate__"] = _setstate
    for name, value in attrs.items():
        type.__setattr__(cls, name, value)
    return cls


def _record(
    cls: type | None = None,
    /,
    *,
    frozen: bool = False,
    slots: bool = False,
    order: bool = False,
    eq: bool = True,
) -> object:
    def wrap(c: type) -> type:
        return _process(c, frozen, slots, order, eq)

    return wrap if cls is None else wrap(cls)


def _fields(obj: object) -> tuple[_Field, ...]:
    found = getattr(obj, "__record_fields__", None)
    if found is None:
        raise TypeError("must be called with a record type or instance")
    return tuple(found)


def _asdict(obj: object) -> dict[str, object]:
    if getattr(type(obj), "__record_fields__", None) is None:
        raise TypeError("asdict() should be called on record instances")
    out = _as_plain(obj)
    assert isinstance(out, dict)
    return out


def _as_plain(value: object) -> object:
    found = getattr(type(value), "__record_fields__", None)
    if found is not None:
        return {f.name: _as_plain(getattr(value, f.name)) for f in found}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_plain(v) for v in value)
    if isinstance(value, dict):
        return type(value)((_as_plain(k), _as_plain(v)) for k, v in value.items())
    return value


def _replace(obj: object, /, **changes: object) -> object:
    for f in _fields(obj):
        if not f.init:
            if f.name in changes:
                raise ValueError(f"field {f.name} is declared with init=False")
            continue
        changes.setdefault(f.name, getattr(obj, f.name))
    return type(obj)(**changes)


if TYPE_CHECKING:
    from dataclasses import FrozenInstanceError as FrozenInstanceError
    from dataclasses import asdict as asdict
    from dataclasses import dataclass as record
    from dataclasses import field as field
    from dataclasses import fields as fields
    from dataclasses import replace as replace
else:
    FrozenInstanceError = _FrozenInstanceError
    asdict = _asdict
    field = _field
    fields = _fields
    record = _record
    replace = _replace

__all__ = ["FrozenInstanceError", "asdict", "field", "fields", "record", "replace"]
