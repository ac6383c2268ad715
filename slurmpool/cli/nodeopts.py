"""Options and lookups shared by the node-side commands (monitord, accounting, jobstats).

The only place these commands read the environment (besides
:func:`slurmpool.cli.common.slurm_runner`): ``$SLURMD_NODENAME`` and
``$SLURMPOOL_NODE_CONFIG`` become explicit values passed below.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from slurmpool.cli.common import usage_error
from slurmpool.configgen.nodeconfig import (
    DEFAULT_NODE_CONFIG,
    NODE_CONFIG_ENV,
    NodeConfig,
    NodeConfigError,
    load_node_config,
)
from slurmpool.modes import GpuMode
from slurmpool.state.db import StateStoreError, store_path

F = TypeVar("F", bound=Callable[..., Any])


def _resolve_node(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    return node_name(value)


def node_option(fn: F) -> F:
    """``--node NAME``, passed on as ``node``: resolved, never None."""
    return click.option(
        "--node",
        default=None,
        callback=_resolve_node,
        help="This node's Slurm name [$SLURMD_NODENAME or hostname].",
    )(fn)


def node_config_option(fn: F) -> F:
    """``--node-config PATH`` (a :class:`~pathlib.Path`), default the installed one."""
    return click.option(
        "--node-config",
        type=click.Path(dir_okay=False, path_type=Path),
        default=DEFAULT_NODE_CONFIG,
        envvar=NODE_CONFIG_ENV,
        show_default=True,
        help=f"The node config written by `slurmpool install` [${NODE_CONFIG_ENV}].",
    )(fn)


def node_options(fn: F) -> F:
    """``--node-config``, ``--node`` and ``--state-db`` (this order in --help)."""
    fn = click.option(
        "--state-db",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The node state store [<state_dir>/<node>.sqlite from the node config].",
    )(fn)
    return node_config_option(node_option(fn))


@dataclass(frozen=True)
class NodeContext:
    config: NodeConfig
    config_path: Path
    node: str
    store_path: Path
    raw: dict[str, Any]

    def gpu_modes(self) -> dict[int, GpuMode]:
        cls = self.config.node_class(self.node)
        return {g.index: g.mode for g in cls.gpus} if cls is not None else {}

    def monitor_settings(self) -> dict[str, Any]:
        """The optional ``monitor`` object of the node config (interval_s, port, ...)."""
        value = self.raw.get("monitor")
        return value if isinstance(value, dict) else {}


def node_name(explicit: str | None) -> str:
    """``explicit``, else ``$SLURMD_NODENAME``, else the short host name."""
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def node_context(node_config: Path, node: str, state_db: Path | None) -> NodeContext:
    try:
        config = load_node_config(node_config)
        raw = json.loads(node_config.read_text())
    except (NodeConfigError, OSError, ValueError) as e:
        usage_error(f"{e} (pass --node-config PATH)")
    try:
        path = state_db or Path(store_path(config.path("state_dir"), node))
    except StateStoreError as e:
        usage_error(f"{e} (pass --node NAME)")
    return NodeContext(config, node_config, node, path, raw)


def existing_store(ctx: NodeContext) -> Path:
    """The node's state store, refused when it does not exist: reading a wrong path
    must not create an empty store and report that nothing is waiting."""
    if not ctx.store_path.is_file():
        usage_error(
            f"no node state store at {ctx.store_path} (node {ctx.node}, from "
            f"{ctx.config_path}): pass the right --node, --node-config or --state-db; on a "
            "sandbox node run it as `slurmpool sandbox exec NODE -- slurmpool ...`"
        )
    return ctx.store_path


def settle_option(fn: F) -> F:
    """``--settle SECONDS``: how long a stored summary waits for its second check."""
    return click.option(
        "--settle",
        "settle_s",
        type=click.FloatRange(min=0),
        default=None,
        help="Seconds between storing a summary and checking it again "
        "[node config monitor.settle_s, else 90].",
    )(fn)


def settle_seconds(ctx: NodeContext, explicit: float | None) -> float:
    """The settle time: ``explicit``, else the node config's, else the default."""
    from slurmpool.accounting.push import SETTLE_S

    if explicit is not None:
        return explicit
    value = ctx.monitor_settings().get("settle_s", SETTLE_S)
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        usage_error(f"node config monitor.settle_s: expected seconds (>= 0), got {value!r}")
    return float(value)
