"""Slurm access: one subprocess choke point, version detection, pure parsers.

Standard library only, so the job hooks can import it cheaply.  Import names
from their module (:mod:`.runner`, :mod:`.parse`, :mod:`.version`, ...); this
face loads nothing, so a hook that needs only the runner loads no parser.
"""
