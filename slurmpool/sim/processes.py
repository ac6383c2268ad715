"""Processes running on simulated devices.

A test workload registers itself (pid, memory, utilisation) on the device it
opened and removes itself on exit; if it is killed, the state store prunes
it on the next read (see :mod:`slurmpool.sim.state`).  Memory is checked
like a CUDA allocation: asking for more than the device has free fails.

A registration is a CUDA context, and the GPU's compute mode (nvmlComputeMode_t)
decides whether it may have one: ``DEFAULT`` any number, ``PROHIBITED`` none,
``EXCLUSIVE_PROCESS`` one.  Under MPS the clients share their MPS server's one
context: a process registers with ``context`` the PID of the server it is a
client of (or is, for the server itself), and processes of one context count
once; a process outside MPS is a context of its own.  So with EXCLUSIVE_PROCESS
only one server's clients reach the GPU (NVIDIA's MPS guide recommends that mode
with MPS for that reason), and a server cannot start while another context
holds the GPU.
"""

from __future__ import annotations

import os
import time

from slurmpool.driver.compute import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_PROHIBITED
from slurmpool.sim.state import (
    SimDeviceBusy,
    SimError,
    SimOutOfMemory,
    StateStore,
    fold,
    process_start_time,
)

BUSY = "all CUDA-capable devices are busy or unavailable"

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.sim.state import State


def _device(st: State, gpu_index: int, gi_id: int | None, ci_id: int | None) -> State:
    gpus = st["gpus"]
    if not 0 <= gpu_index < len(gpus):
        raise SimError(f"no GPU {gpu_index} on this node (it has {len(gpus)})")
    gpu: State = gpus[gpu_index]
    if gi_id is None:
        if gpu["mig_current"]:
            raise SimError(f"GPU {gpu_index} is in MIG mode: processes run on a MIG instance")
        return gpu
    gi = next((g for g in gpu["gis"] if g["id"] == gi_id), None)
    if gi is None or not any(c["id"] == ci_id for c in gi["cis"]):
        raise SimError(f"GPU {gpu_index} has no MIG device gi{gi_id}/ci{ci_id}")
    return gpu


def device_memory(st: State, gpu_index: int, gi_id: int | None) -> tuple[int, int]:
    """``(total, used)`` MiB of a whole GPU (``gi_id=None``) or of one GPU instance."""
    gpu = st["gpus"][gpu_index]
    if gi_id is None:
        return gpu["memory_mib"], sum(p["used_mib"] for p in gpu["processes"])
    gi = next(g for g in gpu["gis"] if g["id"] == gi_id)
    return gi["memory_mib"], sum(p["used_mib"] for p in gpu["processes"] if p["gi"] == gi_id)


def attach_process(
    state_dir: str | os.PathLike[str],
    gpu_index: int,
    gi_id: int | None = None,
    ci_id: int | None = None,
    *,
    pid: int,
    used_mib: int,
    util: int,
    name: str = "",
    context: int | None = None,
) -> None:
    """Register ``pid`` on a GPU (``gi_id=None``) or a MIG device, or raise.

    ``context``: the PID of the MPS server whose context the process shares (its
    own PID for the server); None outside MPS.  Raises :class:`SimOutOfMemory` when
    ``used_mib`` does not fit in the device's free memory, :class:`SimDeviceBusy`
    when the GPU's compute mode refuses the context, :class:`SimError` when the
    device does not exist.
    """
    if used_mib < 0 or not 0 <= util <= 100:
        raise SimError(f"bad process: memory {used_mib} MiB, utilisation {util}% (0..100)")
    start = process_start_time(pid)
    with StateStore(state_dir).transaction() as st:
        gpu = _device(st, gpu_index, gi_id, ci_id)
        gpu["processes"] = [p for p in gpu["processes"] if p["pid"] != pid]
        _check_compute_mode(gpu, gi_id, ci_id, pid if context is None else context)
        total, used = device_memory(st, gpu_index, gi_id)
        if used + used_mib > total:
            raise SimOutOfMemory(
                f"out of memory: asked for {used_mib} MiB, {total - used} MiB free "
                f"of {total} MiB on the device"
            )
        fold(gpu, time.time())
        gpu["processes"].append(
            {
                "pid": pid,
                "start_time": start,
                "gi": gi_id,
                "ci": ci_id,
                "used_mib": used_mib,
                "util": util,
                "name": name,
                **({"context": context} if context is not None else {}),
            }
        )


def context_of(p: State) -> int:
    """The CUDA context a registered process uses: its MPS server's, or its own."""
    return int(p.get("context") or p["pid"])


def _check_compute_mode(gpu: State, gi_id: int | None, ci_id: int | None, context: int) -> None:
    """Raise :class:`SimDeviceBusy` where the GPU's compute mode refuses ``context``.

    The simulator counts contexts per CUDA device (the GPU, or one MIG device); how
    the real driver applies a compute mode to MIG devices is not measured here."""
    mode = gpu.get("compute_mode", COMPUTE_DEFAULT)
    if mode == COMPUTE_PROHIBITED:
        raise SimDeviceBusy(f"{BUSY} (GPU {gpu['index']}: compute mode PROHIBITED)")
    if mode != COMPUTE_EXCLUSIVE_PROCESS:
        return
    holders = [
        p
        for p in gpu["processes"]
        if (p.get("gi"), p.get("ci")) == (gi_id, ci_id) and context_of(p) != context
    ]
    if holders:
        held = context_of(holders[0])
        by = f"MPS server {held}" if holders[0].get("context") else f"pid {held}"
        raise SimDeviceBusy(
            f"{BUSY} (GPU {gpu['index']}: compute mode EXCLUSIVE_PROCESS, held by {by})"
        )


def detach_process(state_dir: str | os.PathLike[str], pid: int) -> bool:
    """Remove ``pid`` from every device; True if it was registered."""
    found = False
    with StateStore(state_dir).transaction() as st:
        now = time.time()
        for gpu in st["gpus"]:
            keep = [p for p in gpu["processes"] if p["pid"] != pid]
            if len(keep) != len(gpu["processes"]):
                fold(gpu, now)
                gpu["processes"] = keep
                found = True
    return found
