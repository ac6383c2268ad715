"""The Slurm a unit test generates config for: a node running Debian bookworm's
slurm-wlm 22.05.8, as ``slurmd -V`` reports it.  Tests that need another version
say so with their own :class:`~slurmpool.slurm.version.InstalledSlurm`, or put
stand-in Slurm programs first on PATH with :func:`programs_on_path`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmpool.slurm.version import InstalledSlurm, parse_version

NODE_SLURM = InstalledSlurm(parse_version("slurm-wlm 22.05.8"), "slurmd -V")

# What install asks of every site's own slurm.conf (slurmpool.slurm.siteneeds): nodes
# shared between jobs, and the task plugin that fences devices.
SITE_NEEDS = "SelectType=select/cons_tres\nTaskPlugin=task/affinity,task/cgroup\n"


def programs_on_path(directory: Path, monkeypatch: pytest.MonkeyPatch, **scripts: str) -> Path:
    """Write each ``name=shell body`` as an executable in ``directory`` and put it
    first on PATH, where the CLI looks for Slurm's programs before the usual places."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        path = directory / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ.get('PATH', '')}")
    return directory


def node_slurm_on_path(directory: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``slurmd`` that says it is :data:`NODE_SLURM`, first on PATH."""
    programs_on_path(directory, monkeypatch, slurmd="echo 'slurm-wlm 22.05.8'")
