"""Where the shipped data directories live.

In a wheel, ``gres/`` and ``templates/`` are packaged as ``slurmpool/_data/``;
in a source checkout (or an editable install) they sit beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    packaged = _PKG / "_data" / name
    if packaged.is_dir():
        return packaged
    source = _PKG.parent / name
    if source.is_dir():
        return source
    raise FileNotFoundError(
        f"slurmpool data directory {name!r} not found in {packaged} or {source}"
    )


def gres_dir() -> Path:
    """The GPU catalogue directory."""
    return _data_dir("gres")


def templates_dir() -> Path:
    """The jinja2 templates directory."""
    return _data_dir("templates")
