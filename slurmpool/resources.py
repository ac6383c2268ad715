"""Where the shipped data directories live.

In a wheel, ``gres/`` and ``templates/`` are packaged as ``slurmpool/_data/``;
in a source checkout (or an editable install) they sit beside the package.

Paths are plain strings: the job hooks import this (through the catalogue),
and :mod:`pathlib` is a noticeable part of a hook's start-up.
"""

from __future__ import annotations

import os

_PKG = os.path.dirname(os.path.realpath(__file__))


def _data_dir(name: str) -> str:
    packaged = os.path.join(_PKG, "_data", name)
    if os.path.isdir(packaged):
        return packaged
    source = os.path.join(os.path.dirname(_PKG), name)
    if os.path.isdir(source):
        return source
    raise FileNotFoundError(
        f"slurmpool data directory {name!r} not found in {packaged} or {source}"
    )


def gres_dir() -> str:
    """The GPU catalogue directory."""
    return _data_dir("gres")


def templates_dir() -> str:
    """The jinja2 templates directory."""
    return _data_dir("templates")
