"""GPU access: what slurmpool needs from a node's GPUs, and how to open them.

- :mod:`.backend`: the records and errors every backend speaks (standard
  library only: the job hooks import it on every job);
- :mod:`.interface`: the :class:`~.interface.GpuBackend` protocol;
- :mod:`.nvml`: the one implementation, over pynvml or the simulator's NVML;
- :mod:`.select`: ``open_backend("nvml")`` for the real driver,
  ``open_backend("sim:DIR")`` for a simulated node.

What the driver offers besides NVML (importing pynvml, the ``mig-minors``
table) is :mod:`slurmpool.driver`, shared with the simulator.

Import names from their module; this face loads nothing.
"""
