"""Helpers shared by CLI commands: error reporting and JSON output."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from slurmpool.policy import Policy
    from slurmpool.slurm.version import InstalledSlurm

# Exit codes used across commands.
EXIT_OK = 0
EXIT_FAIL = 1  # the answer is "no" (does not fit, check failed)
EXIT_USAGE = 2  # bad input: unknown model/profile, malformed file


def usage_error(message: str) -> NoReturn:
    """Print ``error: message`` to stderr and exit with EXIT_USAGE."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_USAGE)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def installed_slurm_for(policy: Policy) -> InstalledSlurm | None:
    """The Slurm installed here, when the policy names none to generate for
    (None when it does: its ``slurm_version`` is the override).  Exits with a
    usage error saying what was tried when no Slurm answers."""
    if policy.slurm_version is not None:
        return None
    from slurmpool.cli.nodeopts import slurm_runner
    from slurmpool.slurm.version import SlurmVersionError, installed_version

    try:
        return installed_version(slurm_runner())
    except SlurmVersionError as e:
        usage_error(
            f"{policy.source}: cannot tell which Slurm to generate for: {e}; "
            'set slurm_version in the policy (the nodes\' Slurm, e.g. "24.11")'
        )
