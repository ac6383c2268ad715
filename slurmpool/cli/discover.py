"""``slurmpool discover``: list this node's GPUs and MIG instances."""

from __future__ import annotations

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, usage_error
from slurmpool.discover import discover as discover_node
from slurmpool.discover import render_text
from slurmpool.gpu.backend import BackendUnavailable, GpuBackendError
from slurmpool.gpu.select import BackendSpecError, open_backend

ENV_BACKEND = "SLURMPOOL_GPU_BACKEND"


@click.command()
@json_option("the inventory (schema 1)")
@click.option(
    "--backend",
    "spec",
    envvar=ENV_BACKEND,
    default="nvml",
    show_default=True,
    help=f"GPU backend: 'nvml' or 'sim:<state dir>' (env: {ENV_BACKEND}).",
)
def discover(as_json: bool, spec: str) -> None:
    """Print the node's GPUs: model, memory, MIG mode and instances, minors, PCI, NUMA.

    Example: ``slurmpool discover --json --backend sim:/tmp/node1/state``
    """
    try:
        backend = open_backend(spec)
    except BackendSpecError as e:
        usage_error(str(e))
    except BackendUnavailable as e:
        click.echo(f"error: {e}; use --backend sim:DIR for the simulator", err=True)
        raise SystemExit(EXIT_FAIL) from None
    try:
        with backend:
            inventory = discover_node(backend)
    except GpuBackendError as e:
        click.echo(f"error: discovery failed: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    for warning in inventory["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        echo_json(inventory)
    else:
        click.echo(render_text(inventory))
