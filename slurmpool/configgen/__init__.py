"""Generating Slurm's configuration and the node config from a policy.

``generate`` and ``GeneratedConfig`` are imported lazily: the job hooks
import :mod:`slurmpool.configgen.nodeconfig` and must not pay for jinja2.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.configgen.render import GeneratedConfig, generate

__all__ = ["GeneratedConfig", "generate"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from slurmpool.configgen import render

        return getattr(render, name)
    raise AttributeError(name)
