"""Slurm access: one subprocess choke point, version detection, pure parsers.

Standard library only, so the job hooks can import it cheaply.  The names
below are imported from their submodule on first use, so a hook that needs
only :mod:`.runner` (a requeue) does not load the parsers.
"""

from __future__ import annotations

from slurmpool.lazy import lazy_exports

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

# Where each name lives.
_LAZY = {
    "Gres": "parse",
    "GresConfEntry": "parse",
    "JobInfo": "parse",
    "NodeInfo": "parse",
    "Record": "parse",
    "gres_totals": "parse",
    "parse_gres": "parse",
    "parse_jobs": "parse",
    "parse_nodes": "parse",
    "parse_records": "parse",
    "parse_slurmd_gres": "parse",
    "DEFAULT_SEARCH_PATH": "runner",
    "CommandResult": "runner",
    "Runner": "runner",
    "SlurmCommandError": "runner",
    "SlurmCommandNotFound": "runner",
    "SlurmCommandTimeout": "runner",
    "FEATURE_GATES": "version",
    "Features": "version",
    "SlurmVersion": "version",
    "SlurmVersionError": "version",
    "detect_version": "version",
    "parse_version": "version",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
