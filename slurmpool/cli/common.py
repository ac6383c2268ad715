"""Helpers shared by CLI commands: error reporting and JSON output."""

from __future__ import annotations

import json
from typing import Any, NoReturn

import click

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
