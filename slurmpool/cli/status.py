"""``slurmpool status``: what this node's GPU pool holds now."""

from __future__ import annotations

from pathlib import Path

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, usage_error
from slurmpool.cli.nodeopts import node_config_option, node_option


@click.command()
@json_option("the status (schema 1)")
@node_config_option
@node_option
def status(as_json: bool, node_config: Path, node: str) -> None:
    """Show this node's GPUs, their mode, MIG instances with jobs and users, free
    capacity per profile and the requeue count.

    Example: ``slurmpool status --node sbx1 --node-config /etc/slurm/node-config.json --json``
    """
    from slurmpool.configgen.nodeconfig import NodeConfigError, load_node_config
    from slurmpool.gpu.backend import GpuBackendError
    from slurmpool.gpu.select import open_backend
    from slurmpool.pooling.deadline import Deadline
    from slurmpool.pooling.node import Broken, Node
    from slurmpool.pooling.status import node_status, render_text
    from slurmpool.state.db import StateStoreError

    try:
        config = load_node_config(node_config)
    except NodeConfigError as e:
        usage_error(str(e))
    cls = config.node_class(node)
    if cls is None:
        usage_error(f"node {node!r} is in no node class of {node_config}; pass --node")

    class _Quiet:
        def event(
            self, action: str, fields: object = None, level: str = "info", **more: object
        ) -> str:
            return action

    pool = Node(
        node,
        config,
        cls,
        _Quiet(),
        lambda: open_backend(config.gpu_backend, mig_minors_path=config.path("mig_minors")),
        Deadline(30),
    )
    try:
        data = node_status(pool)
    except (GpuBackendError, StateStoreError, Broken) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    finally:
        pool.close()
    if as_json:
        echo_json(data)
    else:
        click.echo(render_text(data))
