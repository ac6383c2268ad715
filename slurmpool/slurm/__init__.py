"""Slurm access: one subprocess choke point, version detection, pure parsers.

Standard library only, so the job hooks can import it cheaply.  The names
below are imported from their submodule on first use, so a hook that needs
only :mod:`.runner` (a requeue) does not load the parsers.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.slurm.parse import (
        Gres,
        GresConfEntry,
        JobInfo,
        NodeInfo,
        Record,
        gres_totals,
        parse_gres,
        parse_jobs,
        parse_nodes,
        parse_records,
        parse_slurmd_gres,
    )
    from slurmpool.slurm.runner import (
        DEFAULT_SEARCH_PATH,
        CommandResult,
        Runner,
        SlurmCommandError,
        SlurmCommandNotFound,
        SlurmCommandTimeout,
    )
    from slurmpool.slurm.version import (
        FEATURE_GATES,
        Features,
        SlurmVersion,
        SlurmVersionError,
        detect_version,
        parse_version,
    )

_PARSE = frozenset(
    (
        "Gres",
        "GresConfEntry",
        "JobInfo",
        "NodeInfo",
        "Record",
        "gres_totals",
        "parse_gres",
        "parse_jobs",
        "parse_nodes",
        "parse_records",
        "parse_slurmd_gres",
    )
)
_RUNNER = frozenset(
    (
        "DEFAULT_SEARCH_PATH",
        "CommandResult",
        "Runner",
        "SlurmCommandError",
        "SlurmCommandNotFound",
        "SlurmCommandTimeout",
    )
)
_VERSION = frozenset(
    (
        "FEATURE_GATES",
        "Features",
        "SlurmVersion",
        "SlurmVersionError",
        "detect_version",
        "parse_version",
    )
)

__all__ = [
    "DEFAULT_SEARCH_PATH",
    "FEATURE_GATES",
    "CommandResult",
    "Features",
    "Gres",
    "GresConfEntry",
    "JobInfo",
    "NodeInfo",
    "Record",
    "Runner",
    "SlurmCommandError",
    "SlurmCommandNotFound",
    "SlurmCommandTimeout",
    "SlurmVersion",
    "SlurmVersionError",
    "detect_version",
    "gres_totals",
    "parse_gres",
    "parse_jobs",
    "parse_nodes",
    "parse_records",
    "parse_slurmd_gres",
    "parse_version",
]


def __getattr__(name: str) -> object:
    if name in _PARSE:
        from slurmpool.slurm import parse

        value: object = getattr(parse, name)
    elif name in _RUNNER:
        from slurmpool.slurm import runner

        value = getattr(runner, name)
    elif name in _VERSION:
        from slurmpool.slurm import version

        value = getattr(version, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value
