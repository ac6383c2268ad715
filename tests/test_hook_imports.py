"""What the installed hook wrappers import on a job, run as slurmd runs them.

Slurm starts a fresh interpreter for every prolog, task prolog and epilog, so
each module a hook imports is paid on every job start (benchmarks/bench_hooks.py
measures the wall time).  These tests run the real wrappers (``slurmpool
install``'s template: /bin/sh, ``timeout``, ``python -I -S`` and the boot code)
against a simulated node, with ``-X importtime`` added by a stand-in
interpreter, and list what was imported.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from pooling_env import Pool, make_pool

from slurmpool.hookpath import resolve_import_path
from slurmpool.install import HOOKS, InstallTarget, render_wrapper

# Costly at start and not needed at job time (measured: ARCHITECTURE.md budgets).
NEVER = (
    "click",
    "jinja2",
    "yaml",
    "dataclasses",
    "typing",
    "pathlib",
    "inspect",
    "ctypes.util",  # pynvml imports it for find_library, unused on Linux
    "shutil",
    "tempfile",
    "bz2",
    "lzma",
    "hashlib",
    "slurmpool.policy",
    "slurmpool.configgen.plan",
)
# The task prolog only reads the job's export file: no store, no GPU.
NOT_IN_TASK_PROLOG = ("sqlite3", "pynvml", "ctypes", "subprocess", "slurmpool.gpu.nvml")
# The prolog reads the allocation with one squeue call (subprocess); prolog and epilog
# both publish what the node can carve when it changed (two scontrol calls, the node's
# two Gres lines read without the text parser).
NOT_ON_THE_COMMON_PATH = ("slurmpool.slurm.parse",)
ONLY_IN_THE_PROLOG = ("slurmpool.slurm.allocation",)
TO_SLURM = ("subprocess", "slurmpool.slurm.runner", "slurmpool.slurm.nodegres")


@pytest.fixture
def wrapped(tmp_path: Path) -> tuple[Pool, dict[str, Path]]:
    pool = make_pool(tmp_path / "pool")
    python = tmp_path / "python-importtime"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -X importtime "$@"\n')
    python.chmod(0o755)
    target = InstallTarget(
        slurm_conf=str(tmp_path / "slurm.conf"),
        config_dir=str(pool.config_path.parent),
        hooks_dir=str(tmp_path / "hooks"),
        state_dir=str(pool.state_dir),
        python=str(python),
        timeout_bin=shutil.which("timeout") or "/usr/bin/timeout",
    )
    import_path = resolve_import_path(str(python))
    wrappers = {}
    for spec in HOOKS:
        path = tmp_path / "hooks" / spec.name
        path.parent.mkdir(exist_ok=True)
        path.write_text(render_wrapper(spec, [], target, import_path))
        path.chmod(0o755)
        wrappers[spec.name] = path
    return pool, wrappers


def _imports(pool: Pool, wrapper: Path, job_id: str, hook: str) -> set[str]:
    import subprocess

    env = pool.env(
        job_id,
        uid=os.getuid(),
        SLURM_JOB_GID=str(os.getgid()),
        vgpu=2,
        SLURM_SCRIPT_CONTEXT=hook,
    )
    proc = subprocess.run([str(wrapper)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    if hook == "task-prolog":
        assert "CUDA_VISIBLE_DEVICES=MIG-" in proc.stdout
    return {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


def test_each_hook_imports_only_what_the_job_needs(wrapped: tuple[Pool, dict[str, Path]]) -> None:
    pool, wrappers = wrapped
    seen = {}
    for hook in ("prolog", "task-prolog", "epilog"):
        seen[hook] = _imports(pool, wrappers[hook], "4100", hook)
    assert "pynvml" in seen["prolog"] and "sqlite3" in seen["epilog"]  # the probe works
    for hook, modules in seen.items():
        assert sorted(modules & set(NEVER)) == [], hook
        if hook == "task-prolog":
            assert sorted(modules & set(NOT_IN_TASK_PROLOG)) == []
        assert sorted(modules & set(NOT_ON_THE_COMMON_PATH)) == [], hook
        if hook != "prolog":
            assert sorted(modules & set(ONLY_IN_THE_PROLOG)) == [], hook
    assert set(ONLY_IN_THE_PROLOG) <= seen["prolog"]
    # The job's 2g changed what the node can carve, and its end changed it back.
    assert set(TO_SLURM) <= seen["prolog"] & seen["epilog"]
