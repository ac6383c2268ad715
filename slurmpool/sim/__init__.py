"""The NVML simulator: simulated GPU nodes that behave like the real driver.

Create a node, then point a backend at it::

    from slurmpool.sim import create_node
    from slurmpool.gpu import open_backend

    node = create_node(tmp / "state", tmp / "dev", gpus=[("A100-SXM4-80GB", True)])
    backend = open_backend(node.backend_spec)      # "sim:<state dir>"

``SimNvml`` (the pynvml-compatible module object) is imported lazily: it
needs pynvml, which the test workload does not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slurmpool.sim.node import (
    SimGpuSpec,
    SimNode,
    create_node,
    node_summary,
    open_node,
    reset_gpu,
)
from slurmpool.sim.processes import attach_process, detach_process
from slurmpool.sim.state import ENV_STATE_DIR, SimError, SimOutOfMemory

if TYPE_CHECKING:
    from slurmpool.sim.nvml import SimNvml

__all__ = [
    "ENV_STATE_DIR",
    "SimError",
    "SimGpuSpec",
    "SimNode",
    "SimNvml",
    "SimOutOfMemory",
    "attach_process",
    "create_node",
    "detach_process",
    "node_summary",
    "open_node",
    "reset_gpu",
]


def __getattr__(name: str) -> Any:
    if name == "SimNvml":
        from slurmpool.sim.nvml import SimNvml

        return SimNvml
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
