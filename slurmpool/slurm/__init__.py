"""Slurm access: one subprocess choke point, version detection, pure parsers.

Standard library only, so the job hooks can import it cheaply.
"""

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
