"""``slurmpool policy validate|schema``: check a pool policy, print its JSON Schema."""

from __future__ import annotations

import json

import click

from slurmpool.cli.common import EXIT_USAGE, var_option
from slurmpool.policy.errors import PolicyError
from slurmpool.policy.loader import load_policy
from slurmpool.policy.model import Policy
from slurmpool.policy.schema import json_schema


def summary(policy: Policy) -> str:
    lines = [f"{policy.source}: valid policy {policy.version} for cluster {policy.cluster}"]
    for g in policy.node_groups:
        modes: dict[str, int] = {}
        for gpu in g.gpus:
            modes[gpu.mode] = modes.get(gpu.mode, 0) + 1
        desc = ", ".join(f"{n} {m}" for m, n in modes.items())
        pool = f", vgpu:{g.vgpu_count} ({g.vgpu_unit})" if g.vgpu_unit else ""
        lines.append(f"  node group {g.name}: {g.nodes}: {len(g.gpus)} GPU(s): {desc}{pool}")
    for p in policy.partitions:
        flag = " (default)" if p.default else ""
        lines.append(f"  partition {p.name}{flag}: {', '.join(p.node_groups)}")
    return "\n".join(lines)


@click.group()
def policy() -> None:
    """Pool policy files (format v1)."""


@policy.command()
@click.argument("file", type=click.Path(dir_okay=False))
@var_option
def validate(file: str, variables: dict[str, str]) -> None:
    """Validate FILE; print a summary (exit 0) or every problem found (exit 2).

    Example: ``slurmpool policy validate examples/sandbox.yaml --var root=/tmp/sbx``
    """
    try:
        result = load_policy(file, variables=variables)
    except PolicyError as err:
        click.echo(str(err), err=True)
        raise SystemExit(EXIT_USAGE) from None
    click.echo(summary(result))


@policy.command()
def schema() -> None:
    """Print the policy's JSON Schema (draft 2020-12), for editors.

    Example: ``slurmpool policy schema > policy.schema.json``
    """
    click.echo(json.dumps(json_schema(), indent=2))
