"""Helpers shared by CLI commands: error reporting, JSON output, ``--var`` and the
policy it fills in, the Slurm runner."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from slurmpool.policy.model import Policy
    from slurmpool.slurm.runner import Runner
    from slurmpool.slurm.version import InstalledSlurm

# Exit codes used across commands.
EXIT_OK = 0
EXIT_FAIL = 1  # the answer is "no" (does not fit, check failed)
EXIT_USAGE = 2  # bad input: unknown model/profile, malformed file

F = TypeVar("F", bound="Callable[..., Any]")


def usage_error(message: str) -> NoReturn:
    """Print ``error: message`` to stderr and exit with EXIT_USAGE."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(EXIT_USAGE)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def _policy_variables(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {item!r}")
        out[name] = value
    return out


def var_option(fn: F) -> F:
    """``--var NAME=VALUE`` (repeatable), passed on as ``variables``: a dict."""
    return click.option(
        "--var",
        "variables",
        multiple=True,
        metavar="NAME=VALUE",
        callback=_policy_variables,
        help="Substitute ${NAME} in the policy's paths (repeatable).",
    )(fn)


def json_option(what: str) -> Callable[[F], F]:
    """``--json`` (passed on as ``as_json``): print ``what`` as JSON instead of text."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON.")


def root_option(help_text: str) -> Callable[[F], F]:
    """``--root DIR`` (default ``/``): a staged tree every path is taken inside."""
    from pathlib import Path

    return click.option(
        "--root",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("/"),
        show_default=True,
        help=help_text,
    )


def load_policy_or_exit(path: str | Path, variables: Mapping[str, str]) -> Policy:
    """The policy at ``path``; a usage error naming every problem when it is invalid."""
    from slurmpool.policy.errors import PolicyError
    from slurmpool.policy.loader import load_policy

    try:
        return load_policy(path, variables=variables)
    except PolicyError as e:
        usage_error(str(e))


def slurm_runner(timeout: float = 30.0) -> Runner:
    """A Runner with this process's PATH and SLURM_CONF."""
    from slurmpool.slurm.runner import DEFAULT_SEARCH_PATH, Runner

    env = {"PATH": os.environ.get("PATH", os.pathsep.join(DEFAULT_SEARCH_PATH))}
    search = tuple(p for p in env["PATH"].split(os.pathsep) if p) + DEFAULT_SEARCH_PATH
    return Runner(
        env=env, search_path=search, timeout=timeout, slurm_conf=os.environ.get("SLURM_CONF")
    )


def installed_slurm_for(policy: Policy) -> InstalledSlurm | None:
    """The Slurm installed here, when the policy names none to generate for
    (None when it does: its ``slurm_version`` is the override).  Exits with a
    usage error saying what was tried when no Slurm answers."""
    if policy.slurm_version is not None:
        return None
    from slurmpool.slurm.version import SlurmVersionError, installed_version

    try:
        return installed_version(slurm_runner())
    except SlurmVersionError as e:
        usage_error(
            f"{policy.source}: cannot tell which Slurm to generate for: {e}; "
            'set slurm_version in the policy (the nodes\' Slurm, e.g. "24.11")'
        )
