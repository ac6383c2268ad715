"""Package names imported from their submodule on first use (PEP 562).

A job hook imports one module of a package (``slurmpool.gpu.backend``) and
Python runs the package's ``__init__`` first: with lazy names there, the hook
does not load the package's other modules.  Type checkers see the plain
imports under ``if TYPE_CHECKING:`` in the package.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: name -> submodule in ``where``."""
    import sys

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later lookups are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
