"""Import pynvml without paying for :mod:`ctypes.util`.

pynvml does ``from ctypes.util import find_library`` at import and never calls
it on Linux (it opens ``libnvidia-ml.so.1`` by name).  ``ctypes.util`` imports
shutil, subprocess, tempfile, bz2 and lzma: measured here, about 35 ms of a
job hook's start (``python -I -S -c 'import ctypes.util'`` against
``-c pass``), more than the rest of a prolog's NVML work.  So while pynvml is
imported, ``ctypes.util`` is a one-function stand-in whose ``find_library``
imports the real module on first call; afterwards ``sys.modules`` holds no trace
of it, and any other importer gets the real ``ctypes.util``.

Call :func:`preload_pynvml` before ``import pynvml`` (the import is then a
``sys.modules`` hit, and type checkers still see the plain import).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

_STAND_IN = "ctypes.util"


def _find_library(name: str) -> str | None:
    """``ctypes.util.find_library``, imported on its first call."""
    from ctypes.util import find_library

    return find_library(name)


def preload_pynvml() -> ModuleType:
    """Import pynvml (ImportError if it is not installed) and return it."""
    loaded = sys.modules.get("pynvml")
    if loaded is not None:
        return loaded
    if _STAND_IN in sys.modules:  # someone already paid for it
        import pynvml

        return pynvml
    import ctypes

    stand_in = type(sys)(_STAND_IN, "find_library only; the real module loads on first call")
    stand_in.find_library = _find_library  # type: ignore[attr-defined]
    sys.modules[_STAND_IN] = stand_in
    try:
        import pynvml
    finally:
        if sys.modules.get(_STAND_IN) is stand_in:
            del sys.modules[_STAND_IN]
        if getattr(ctypes, "util", None) is stand_in:
            del ctypes.util
    return pynvml
