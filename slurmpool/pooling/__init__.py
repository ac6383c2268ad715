"""Per-job GPU pooling, run by the job hooks.

- ``mig``: a MIG instance carved for the job in the prolog, destroyed in the epilog;
- ``passthrough``: whole GPUs Slurm allocated as ``gpu`` GRES, checked (and
  optionally rebound to ``vfio-pci``) for the job;
- ``shared``: a share of a non-MIG GPU, with MPS limits where enabled.

Pure decisions (:mod:`.request`, :mod:`.mig`, :mod:`.shared`,
:mod:`.passthrough`, the plan half of :mod:`.reconcile`, :mod:`.exports`)
are separate from side effects (:mod:`.prolog`, :mod:`.epilog`,
:mod:`.caps`, :mod:`.vfio`, :mod:`.requeue`, :mod:`.procs`).  The
environment and every filesystem root are parameters.  Nothing here is
imported by ``slurmpool.hooks`` until a hook needs it.
"""
