"""The NVML simulator: simulated GPU nodes that behave like the real driver.

Create a node, then point a backend at it::

    from slurmpool.gpu.select import open_backend
    from slurmpool.sim.node import create_node

    node = create_node(tmp / "state", tmp / "dev", gpus=[("A100-SXM4-80GB", True)])
    backend = open_backend(node.backend_spec)      # "sim:<state dir>"

:mod:`.nvml` (the pynvml-compatible module object) needs pynvml, which the
test workload (:mod:`.workload`) does not; this face loads nothing.
"""
