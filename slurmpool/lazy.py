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
    module: str, where: Mapping[str, str], package: str | None = None
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``module``: name -> the submodule of ``package``
    (``module`` itself by default, for a package's ``__init__``) that defines it."""
    import sys

    base = package or module

    def __getattr__(name: str) -> object:
        where_from = where.get(name)
        if where_from is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"{base}.{where_from}"), name)
        setattr(sys.modules[module], name, value)  # later lookups are plain attributes
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module])) | set(where))

    return __getattr__, __dir__
