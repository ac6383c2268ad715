"""Generating Slurm's configuration and the node config from a policy.

:mod:`.render` writes the files (jinja2); :mod:`.nodeconfig` is the node
config the job hooks read, which must not pay for jinja2.  This face loads
nothing.
"""
