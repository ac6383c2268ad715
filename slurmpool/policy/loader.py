"""Reading a policy file: YAML -> located structural checks -> semantic checks.

Paths and ``gpu_backend`` may contain ``${name}`` variables, substituted from
the ``variables`` mapping before validation (the sandbox passes its root
directory this way; ``--var name=value`` on the command line).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

from slurmpool.catalogue import Catalogue, default_catalogue
from slurmpool.policy.errors import Issue, PolicyError
from slurmpool.policy.fields import Context
from slurmpool.policy.model import Policy
from slurmpool.policy.schema import POLICY, VERSION
from slurmpool.policy.validate import build_policy


def parse_policy(
    text: str,
    file: str = "<policy>",
    variables: Mapping[str, str] | None = None,
    catalogue: Catalogue | None = None,
) -> Policy:
    """Validate policy text; raise :class:`PolicyError` listing every problem."""
    ctx = Context(file=file, variables=dict(variables or {}))
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(err, "problem", None) or str(err)
        raise PolicyError([Issue(file, line, "", f"invalid YAML: {problem}")]) from None
    if root is None:
        raise PolicyError([Issue(file, 1, "", "empty policy; expected a mapping with version: v1")])
    # An unknown version means the rest may follow other rules: stop there.
    if isinstance(root, yaml.MappingNode):
        for knode, vnode in root.value:
            if (
                knode.value == "version"
                and isinstance(vnode, yaml.ScalarNode)
                and vnode.value != VERSION
            ):
                raise PolicyError(
                    [
                        Issue(
                            file,
                            vnode.start_mark.line + 1,
                            "version",
                            f"unknown version {vnode.value!r}; this slurmpool reads {VERSION}",
                        )
                    ]
                )
    data = POLICY.convert(root, "", ctx)
    policy = build_policy(data, ctx, catalogue or default_catalogue()) if data else None
    if ctx.issues or policy is None:
        raise PolicyError(ctx.issues or [Issue(file, 1, "", "invalid policy")])
    return policy


def load_policy(
    path: str | os.PathLike[str],
    variables: Mapping[str, str] | None = None,
    catalogue: Catalogue | None = None,
) -> Policy:
    """Read and validate a policy file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise PolicyError([Issue(str(p), None, "", f"cannot read: {err.strerror}")]) from None
    return parse_policy(text, str(p), variables, catalogue)
