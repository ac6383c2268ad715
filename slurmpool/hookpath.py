"""Where the hooks' interpreter finds slurmpool: resolved once, at install time.

The wrappers run the interpreter isolated and without site initialisation
(``-I -S``): no environment, no user site, no ``.pth`` file is read or run at
job time.  ``install`` asks the interpreter for its import path instead and
writes the answer into each wrapper as a literal list, so what root imports on
a job start is fixed when the admin installs, and :mod:`slurmpool.trust` can
check every directory of it.

The list has the ``--python-path`` entries first, then the interpreter's own
path under ``-I -S`` (the standard library), then what its site initialisation
adds (site-packages, a venv's, and the directory lines of ``.pth`` files).
When slurmpool or pynvml is still not found there (an editable install served
by an import hook), the directory the interpreter imports it from is added.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

from slurmpool.trust import RootPath

# What the hooks import beyond the standard library.
HOOK_PACKAGES = ("slurmpool", "pynvml")

# Run by the hooks' interpreter under -I -S; argv[1]: JSON [front entries, packages].
_PROBE = r"""
import json, os, sys
front, packages = json.loads(sys.argv[1])
base = list(sys.path)
import site
site.main()
back = []
def add(p):
    p = os.path.normpath(p)
    if os.path.isdir(p) and p not in front and p not in base and p not in back:
        back.append(p)
for p in sys.path:
    add(p)
from importlib.machinery import PathFinder
import importlib.util
def find(name):
    spec = PathFinder.find_spec(name, front + base + back)
    return None if spec is None else spec.origin
found = {}
for name in packages:
    found[name] = find(name)
    spec = importlib.util.find_spec(name) if found[name] is None else None
    if spec is not None and spec.origin is not None:
        top = os.path.dirname(spec.origin)
        add(os.path.dirname(top) if spec.submodule_search_locations else top)
        found[name] = find(name)
print(json.dumps({"front": front, "base": base, "back": back, "found": found}))
"""


class HookPathError(RuntimeError):
    """The interpreter cannot be asked, or does not find what the hooks import."""


@dataclass(frozen=True, slots=True)
class HookImportPath:
    """The hooks' ``sys.path``: ``front`` + ``base`` (the interpreter's own) + ``back``."""

    python: str
    front: tuple[str, ...]
    base: tuple[str, ...]
    back: tuple[str, ...]
    packages: Mapping[str, str]  # package -> the file it is imported from

    @property
    def entries(self) -> tuple[str, ...]:
        return (*self.front, *self.base, *self.back)

    def root_paths(self) -> list[RootPath]:
        """What root runs and imports on every job start, for :func:`slurmpool.trust.check`:
        the interpreter, each import directory with what lies directly in it (a module
        there may shadow a standard one), and all of slurmpool and pynvml."""
        out = [RootPath("the hooks' interpreter", self.python)]
        out += [
            RootPath("the hooks' import path entry", e, "children", may_be_missing=True)
            for e in self.entries
        ]
        for name, origin in sorted(self.packages.items()):
            if os.path.basename(origin) == "__init__.py":
                out.append(RootPath(f"the hooks' package {name}", os.path.dirname(origin), "tree"))
            else:
                out.append(RootPath(f"the hooks' module {name}", origin))
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "python": self.python,
            "front": list(self.front),
            "base": list(self.base),
            "back": list(self.back),
            "packages": dict(self.packages),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> HookImportPath:
        def strings(key: str) -> tuple[str, ...]:
            value = data[key]
            if not isinstance(value, list):
                raise TypeError(f"{key}: expected a list")
            return tuple(str(x) for x in value)

        packages = data["packages"]
        if not isinstance(packages, dict):
            raise TypeError("packages: expected a mapping")
        return cls(
            python=str(data["python"]),
            front=strings("front"),
            base=strings("base"),
            back=strings("back"),
            packages={str(k): str(v) for k, v in packages.items()},
        )


def front_entries(python_path: str | None) -> tuple[str, ...]:
    """The ``--python-path`` entries the hooks put before the interpreter's own path."""
    return tuple(p for p in (python_path or "").split(os.pathsep) if p)


def resolve_import_path(python: str, python_path: str | None = None) -> HookImportPath:
    """Ask ``python`` (as the hooks run it) where it imports slurmpool and pynvml from."""
    front = list(front_entries(python_path))
    argv = [python, "-I", "-S", "-c", _PROBE, json.dumps([front, list(HOOK_PACKAGES)])]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HookPathError(f"cannot run the hooks' interpreter {python}: {e}") from None
    if done.returncode != 0:
        raise HookPathError(
            f"the hooks' interpreter {python} could not report its import path "
            f"(exit {done.returncode}): {done.stderr.strip()[-500:]}"
        )
    try:
        data = json.loads(done.stdout)
        found = data["found"]
        path = HookImportPath(
            python=python,
            front=tuple(data["front"]),
            base=tuple(data["base"]),
            back=tuple(data["back"]),
            packages={k: v for k, v in found.items() if v is not None},
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        raise HookPathError(
            f"the hooks' interpreter {python} gave an unreadable import path: "
            f"{done.stdout.strip()[-500:]!r}"
        ) from None
    missing = [name for name in HOOK_PACKAGES if name not in path.packages]
    if missing:
        raise HookPathError(
            f"the hooks' interpreter {python} cannot import {' and '.join(missing)} "
            f"(it searches {', '.join(path.entries)}); install slurmpool into it, or pass "
            "--python-path with the directory that holds slurmpool"
        )
    return path
