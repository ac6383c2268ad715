"""slurmpool: GPU pooling for Slurm (MIG carving, whole-GPU binding, time-sliced shares)."""

__version__ = "0.1.0"
