"""What the NVIDIA driver offers besides NVML calls, shared by the GPU backend
(:mod:`slurmpool.gpu`) and the simulator (:mod:`slurmpool.sim`), which import
it and never each other's internals:

- :mod:`.pynvml_import`: importing pynvml cheaply;
- :mod:`.mig_minors`: the ``mig-minors`` table of MIG capability minors;
- :mod:`.procfs`: ``/proc/driver/nvidia``: the module parameters and the
  capabilities' access files.
"""
