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

from slurmpool.lazy import lazy_exports

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.sim.node import (
        SimGpuSpec,
        SimNode,
        create_node,
        node_summary,
        open_node,
        reset_gpu,
    )
    from slurmpool.sim.nvml import SimNvml
    from slurmpool.sim.processes import attach_process, detach_process
    from slurmpool.sim.state import ENV_STATE_DIR, SimError, SimOutOfMemory

# Imported on first use: the hooks load only the parts they touch (slurmpool.sim.nvml).
_LAZY = {
    "ENV_STATE_DIR": "state",
    "SimError": "state",
    "SimOutOfMemory": "state",
    "SimGpuSpec": "node",
    "SimNode": "node",
    "create_node": "node",
    "node_summary": "node",
    "open_node": "node",
    "reset_gpu": "node",
    "attach_process": "processes",
    "detach_process": "processes",
    "SimNvml": "nvml",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
