"""``slurmpool status``: what this node's GPU pool holds now."""

from __future__ import annotations

import click

from slurmpool.cli.common import EXIT_FAIL, echo_json, json_option, usage_error
from slurmpool.cli.nodeopts import node_name as default_node_name
from slurmpool.configgen.nodeconfig import DEFAULT_NODE_CONFIG, NODE_CONFIG_ENV


@click.command()
@json_option("the status (schema 1)")
@click.option(
    "--node-config",
    "node_config",
    default=DEFAULT_NODE_CONFIG,
    envvar=NODE_CONFIG_ENV,
    show_default=True,
    help=f"The compiled node config install wrote [${NODE_CONFIG_ENV}].",
)
@click.option("--node", "node_name", help="Node name (default: $SLURMD_NODENAME or the host name).")
def status(as_json: bool, node_config: str, node_name: str | None) -> None:
    """Show this node's GPUs, their mode, MIG instances with jobs and users, free
    capacity per profile and the requeue count.

    Example: ``slurmpool status --node sbx1 --node-config /etc/slurm/node-config.json --json``
    """
    from slurmpool.configgen.nodeconfig import NodeConfigError, load_node_config
    from slurmpool.gpu.backend import GpuBackendError
    from slurmpool.gpu.select import open_backend
    from slurmpool.pooling.node import Broken, Deadline, Node
    from slurmpool.pooling.status import node_status, render_text
    from slurmpool.state.db import StateStoreError

    name = default_node_name(node_name)
    try:
        config = load_node_config(node_config)
    except NodeConfigError as e:
        usage_error(str(e))
    cls = config.node_class(name)
    if cls is None:
        usage_error(f"node {name!r} is in no node class of {node_config}; pass --node")

    class _Quiet:
        def event(
            self, action: str, fields: object = None, level: str = "info", **more: object
        ) -> str:
            return action

    node = Node(
        name,
        config,
        cls,
        _Quiet(),
        lambda: open_backend(config.gpu_backend, mig_minors_path=config.path("mig_minors")),
        Deadline(30),
    )
    try:
        data = node_status(node)
    except (GpuBackendError, StateStoreError, Broken) as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(EXIT_FAIL) from None
    finally:
        node.close()
    if as_json:
        echo_json(data)
    else:
        click.echo(render_text(data))
