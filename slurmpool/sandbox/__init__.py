"""A real Slurm cluster on this machine (loopback only) for the README and integration tests.

:class:`~.cluster.Sandbox` brings it up and down; :mod:`.layout` says where
everything lives.
"""
