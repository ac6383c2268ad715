"""What a test needs from the machine, and what happens when it is missing.

A missing tool skips the test on a developer's machine, saying what is missing.
Under ``SLURMPOOL_STRICT_TESTS=1`` (CI, and ``make test`` after
``scripts/setup-host --test`` has installed everything) it fails instead: a
test that cannot run there is a broken set-up, not a pass.

Skips that depend on the hardware rather than the set-up (a real NVIDIA driver,
a Slurm version without a feature) stay plain ``pytest.skip``.
"""

from __future__ import annotations

import functools
import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

STRICT = os.environ.get("SLURMPOOL_STRICT_TESTS") == "1"
SETUP_HINT = "scripts/setup-host --test installs every test need (as root)"


def missing(what: str) -> NoReturn:
    """Skip (or, strict, fail) the calling test or module: ``what`` is missing."""
    if STRICT:
        pytest.fail(f"SLURMPOOL_STRICT_TESTS=1 but {what}; {SETUP_HINT}", pytrace=False)
    pytest.skip(f"{what}; {SETUP_HINT}", allow_module_level=True)


def module(name: str) -> ModuleType:
    """Import ``name``, or :func:`missing` when it is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        missing(f"Python module {name} is not installed ({e})")


def program(name: str, *fallbacks: str) -> str:
    """The path of program ``name`` (on PATH or one of ``fallbacks``), or :func:`missing`."""
    found = shutil.which(name) or next((f for f in fallbacks if os.access(f, os.X_OK)), None)
    if found is None:
        missing(f"program {name} is not installed")
    return found


def root(why: str) -> None:
    """:func:`missing` unless the tests run as root (``why``: what needs it)."""
    if os.geteuid() != 0:
        missing(f"not running as root ({why})")


def hook_python() -> str:
    """pytest's interpreter, for hook wrappers that install writes: install refuses an
    interpreter job users cannot run (one under a 0700 home, say)."""
    from slurmpool.install import why_others_cannot_run

    why = why_others_cannot_run(sys.executable)
    if why is not None:
        missing(f"job users cannot run {sys.executable}: {why}")
    return sys.executable


@functools.cache
def _python_any_user_can_run() -> tuple[str, str | None] | None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return None
    import slurmpool

    source = str(Path(slurmpool.__file__).resolve().parents[1])
    ver = sys.version_info[:2]
    check = f"import sys; assert sys.version_info[:2] == {ver!r}; import slurmpool.sim.workload"
    candidates = [(sys.executable, None), (f"/usr/bin/python{ver[0]}.{ver[1]}", source)]
    for py, path in [*candidates, ("/usr/bin/python3", source)]:
        env = [f"PYTHONPATH={path}"] if path else ["-u", "PYTHONPATH"]
        probe = subprocess.run(
            ["runuser", "-u", "nobody", "--", "env", *env, py, "-c", check],
            capture_output=True,
            cwd="/",
            check=False,
        )
        if probe.returncode == 0:
            return py, path
    return None


def python_for_jobs() -> tuple[str, str | None]:
    """(interpreter, PYTHONPATH or None) with which any user, a job's, runs slurmpool:
    pytest's own interpreter where others can run it and import slurmpool there (the
    /opt/slurmpool venv), else the system Python with this source on PYTHONPATH (a
    checkout others can read); :func:`missing` when neither works (a checkout under a
    0700 home, run with an interpreter under it)."""
    found = _python_any_user_can_run()
    if found is None:
        missing("no Python that every user (a job's) can run slurmpool with, as user nobody")
    return found


def python_for_jobs_shell() -> str:
    """:func:`python_for_jobs` as the start of a job script's command line."""
    py, path = python_for_jobs()
    return f"PYTHONPATH={path} {py}" if path else py
