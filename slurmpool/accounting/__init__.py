"""GPU usage into Slurm accounting.

- :mod:`.codec`: the ``sp1:`` AdminComment encoding (survives 22.05's lowercasing);
- :mod:`.summary`: a job's summary from its samples (pure);
- :mod:`.outbox`: the durable outbox in the node state store;
- :mod:`.enqueue`: what the epilog calls (summary + outbox, standard library only);
- :mod:`.push`: writing summaries with ``sacctmgr``, verifying with ``sacct``, backoff.

Importing this package imports nothing else.
"""
