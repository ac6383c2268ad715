"""Crash tests for the hooks: the simulated driver kills its caller at a chosen call.

A test (or an admin rehearsing a failure on a sandbox) plants a fault with
:func:`plant`; the next process that makes that NVML call on the simulated
node, the ``nth`` time, is killed with SIGKILL just before or just after the
call.  The hooks never look for faults: the simulated driver does, so a real
node, whose hooks use the real NVML library, has no way to be told to crash.

Points (``before-`` or ``after-`` an NVML call that changes the GPU):

- ``before-create-gi``: the allocation is recorded as an intent, nothing exists;
- ``after-create-gi``: a GPU instance without its compute instance;
- ``after-create-ci``: a whole instance, not yet handed to the job;
- ``before-destroy-ci``: the epilog has marked the allocation releasing;
- ``after-destroy-gi``: the instance is gone, the record not yet released.

With ``nth=2`` on ``before-create-gi``, a two-instance job (``vgpu:14``) is
killed between its instances: the first one active and handed out.
"""

from __future__ import annotations

import os
import signal

FAULTS_DIR = "faults"

# Point -> (when, NVML function).
POINTS: dict[str, tuple[str, str]] = {
    "before-create-gi": ("before", "nvmlDeviceCreateGpuInstanceWithPlacement"),
    "after-create-gi": ("after", "nvmlDeviceCreateGpuInstanceWithPlacement"),
    "after-create-ci": ("after", "nvmlGpuInstanceCreateComputeInstance"),
    "before-destroy-ci": ("before", "nvmlComputeInstanceDestroy"),
    "after-destroy-gi": ("after", "nvmlGpuInstanceDestroy"),
}


class FaultError(ValueError):
    """An unknown point or a bad count."""


def _path(state_dir: str | os.PathLike[str], when: str, function: str) -> str:
    return os.path.join(os.fspath(state_dir), FAULTS_DIR, f"{when}-{function}")


def plant(state_dir: str | os.PathLike[str], point: str, nth: int = 1) -> str:
    """Kill the process making ``point``'s call the ``nth`` time from now; the path."""
    if point not in POINTS:
        raise FaultError(f"unknown fault point {point!r}; expected one of {', '.join(POINTS)}")
    if nth < 1:
        raise FaultError(f"nth: expected a count of 1 or more, got {nth}")
    path = _path(state_dir, *POINTS[point])
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w") as f:
        f.write(f"{nth}\n")
    return path


def planted(state_dir: str | os.PathLike[str]) -> list[str]:
    """The fault files waiting under ``state_dir`` (names, sorted)."""
    try:
        return sorted(os.listdir(os.path.join(os.fspath(state_dir), FAULTS_DIR)))
    except OSError:
        return []


def strike(state_dir: str, when: str, function: str) -> None:
    """Called by the simulated driver around its calls: count down a planted fault, and
    at zero remove it (one shot) and SIGKILL this process."""
    path = _path(state_dir, when, function)
    try:
        with open(path) as f:
            left = int(f.read().strip() or "1")
    except (OSError, ValueError):
        return
    if left > 1:
        with open(path, "w") as f:
            f.write(f"{left - 1}\n")
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        return  # another process took it
    os.kill(os.getpid(), signal.SIGKILL)
