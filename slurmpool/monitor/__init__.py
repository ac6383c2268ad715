"""GPU monitoring on a node: sample the GPUs, attribute them to jobs, keep and export it.

- :mod:`.samples`: the sample record, its tables in the node store, retention
  (standard library only: the epilog reads samples);
- :mod:`.attribution`: which job a device or a process belongs to;
- :mod:`.sampler`: one sampling pass over a :class:`~slurmpool.gpu.interface.GpuBackend`;
- :mod:`.exporter`: Prometheus metrics and the per-job JSON endpoint;
- :mod:`.daemon`: the loop of ``slurmpool monitord``.

Importing this package imports nothing else: the hooks use ``samples`` alone.
"""
