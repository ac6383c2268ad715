"""The simulated node's shared state: one JSON file guarded by an fcntl lock.

Every process that touches a simulated node (prolog, epilog, monitor, test
workloads) reads and writes the same ``state.json`` in the state directory,
so they all see one GPU, as they would through the real driver.

- Writers take an exclusive ``flock`` on ``state.lock`` (a file that is never
  replaced), re-read the state, change it and write it back atomically
  (temporary file + ``os.replace``).
- Readers do not lock: thanks to the atomic rename they always see a whole
  file.  A parsed copy is cached per process and reused while the file's
  inode, size and mtime are unchanged, so the many NVML calls of one hook
  cost a ``stat`` each.
- Processes registered by a PID that has died (or whose PID was reused) are
  pruned whenever the state is read, so a SIGKILLed workload deregisters.

The directory and both files are world-writable on purpose: a test workload
running as an unprivileged user must register its processes.  The simulator
is a test fixture, not a security boundary; MIG administration is still
restricted to the node's admin uids in code (see :mod:`slurmpool.sim.nvml`).

Only the standard library is used: the test workload runs on a bare
interpreter as an unprivileged user.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

SCHEMA = 1
STATE_FILE = "state.json"
LOCK_FILE = "state.lock"
ENV_STATE_DIR = "SLURMPOOL_SIM_STATE"
# Architectures whose MIG mode change applies at once (no GPU reset).
IMMEDIATE_MIG_MODE = frozenset({"hopper", "blackwell"})

if TYPE_CHECKING:
    State = dict[str, Any]
else:  # the same alias without importing typing (annotations are never evaluated)
    State = dict


class SimError(Exception):
    """A simulated node is missing, malformed, or asked to do something impossible."""


class SimOutOfMemory(SimError):
    """A process asked for more device memory than is free (CUDA would fail to allocate)."""


class SimDeviceBusy(SimError):
    """The GPU's compute mode refuses another context (CUDA's "all CUDA-capable devices
    are busy or unavailable")."""


# -- process liveness ----------------------------------------------------------


def process_start_time(pid: int) -> int | None:
    """The kernel start time (clock ticks since boot) of a live, non-zombie ``pid``.

    ``None`` when the process does not exist or is a zombie.  Comparing start
    times guards against a PID that was reused after the registered process
    died.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = data[data.rfind(b")") + 2 :].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def pid_alive(pid: int, start_time: int | None) -> bool:
    if os.path.isdir("/proc/self"):
        current = process_start_time(pid)
        if current is None:
            return False
        return start_time is None or current == start_time
    try:  # no procfs: fall back to the signal-0 probe
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- derived quantities (utilisation, power, accumulators) --------------------


def gi_util(gpu: State, gi_id: int) -> int:
    """Utilisation of one GPU instance in percent: its processes' sum, capped at 100."""
    return min(100, sum(p["util"] for p in gpu["processes"] if p["gi"] == gi_id))


def gpu_util(gpu: State) -> int:
    """Utilisation of a GPU without MIG: its processes' sum, capped at 100."""
    return min(100, sum(p["util"] for p in gpu["processes"] if p["gi"] is None))


def busy_fraction(gpu: State) -> float:
    """The share of the whole board that is busy, 0..1 (MIG instances weighted by slices)."""
    if not gpu["mig_current"]:
        return gpu_util(gpu) / 100.0
    total = gpu["compute_slices"] or 1
    return sum(gi_util(gpu, gi["id"]) * gi["slices"] for gi in gpu["gis"]) / (100.0 * total)


def power_mw(gpu: State) -> int:
    idle, peak = gpu["power_idle_mw"], gpu["power_max_mw"]
    return int(idle + (peak - idle) * busy_fraction(gpu))


def fold(gpu: State, now: float) -> None:
    """Integrate energy and busy time up to ``now``.

    Call before anything that changes a GPU's processes or instances, so the
    counters (energy, GPM busy time) stay exact and never go backwards.
    """
    acc = gpu["acc"]
    dt = max(0.0, now - acc["t"])
    acc["energy_mj"] += power_mw(gpu) * dt
    acc["busy"] += busy_fraction(gpu) * 100.0 * dt
    acc["t"] = now
    for gi in gpu["gis"]:
        gacc = gi["acc"]
        gacc["busy"] += gi_util(gpu, gi["id"]) * max(0.0, now - gacc["t"])
        gacc["t"] = now


def energy_mj(gpu: State, now: float) -> int:
    acc = gpu["acc"]
    return int(acc["energy_mj"] + power_mw(gpu) * max(0.0, now - acc["t"]))


def gpu_busy(gpu: State, now: float) -> float:
    """Accumulated busy time of the whole GPU in percent-seconds."""
    acc = gpu["acc"]
    return float(acc["busy"] + busy_fraction(gpu) * 100.0 * max(0.0, now - acc["t"]))


def gi_busy(gpu: State, gi: State, now: float) -> float:
    """Accumulated busy time of one GPU instance in percent-seconds."""
    acc = gi["acc"]
    return float(acc["busy"] + gi_util(gpu, gi["id"]) * max(0.0, now - acc["t"]))


def new_acc(now: float) -> State:
    return {"t": now, "busy": 0.0, "energy_mj": 0.0}


# -- the store ------------------------------------------------------------------


class StateStore:
    """Read and change the state of one simulated node."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = os.fspath(state_dir)
        self.path = os.path.join(self.dir, STATE_FILE)
        self.lock_path = os.path.join(self.dir, LOCK_FILE)
        self._cache: State | None = None
        self._cache_key: tuple[int, int, int] | None = None

    def exists(self) -> bool:
        return os.path.isfile(self.path)

    def read(self) -> State:
        """The current state (treat as read-only), with dead processes pruned."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise SimError(
                f"no simulated node at {self.dir}: {self.path} does not exist "
                "(create one with `slurmpool sim init`)"
            ) from None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._cache is None or key != self._cache_key:
            self._cache = self._load()
            self._cache_key = key
        state = self._cache
        if _has_dead(state):
            with self.transaction() as fresh:
                state = fresh
        return state

    @contextlib.contextmanager
    def transaction(self) -> Iterator[State]:
        """Lock, load, yield the state for changes, and write it back atomically.

        An exception inside the block leaves the stored state unchanged.
        """
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._load()
            prune(state, time.time())
            yield state
            self.write(state)
        finally:
            os.close(fd)  # closing releases the flock

    def write(self, state: State) -> None:
        """Replace the state file atomically (callers hold the lock or own the directory)."""
        tmp = os.path.join(self.dir, f".{STATE_FILE}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, separators=(",", ":"))
        os.chmod(tmp, 0o666)
        _stamp_after(tmp, self.path)
        os.replace(tmp, self.path)
        self._cache = None

    def _load(self) -> State:
        try:
            with open(self.path) as f:
                state = json.load(f)
        except FileNotFoundError:
            raise SimError(f"no simulated node at {self.dir}: {self.path} does not exist") from None
        except json.JSONDecodeError as e:
            raise SimError(f"{self.path}: not a simulator state file: {e}") from None
        if not isinstance(state, dict) or state.get("schema") != SCHEMA:
            raise SimError(
                f"{self.path}: unsupported simulator state (expected schema {SCHEMA}, "
                f"got {state.get('schema') if isinstance(state, dict) else state!r})"
            )
        return state


def _stamp_after(tmp: str, current: str) -> None:
    """Give ``tmp`` an mtime strictly newer than ``current``'s.

    Readers cache by (inode, size, mtime); inodes are reused and timestamps
    are coarse, so a strictly increasing mtime is what makes every version
    of the file distinguishable.
    """
    try:
        prev = os.stat(current).st_mtime_ns
    except FileNotFoundError:
        return
    for stamp in (max(time.time_ns(), prev + 1), prev + 1_000, prev + 1_000_000_000):
        os.utime(tmp, ns=(stamp, stamp))
        if os.stat(tmp).st_mtime_ns > prev:
            return


def _has_dead(state: State) -> bool:
    return any(
        not pid_alive(p["pid"], p.get("start_time")) for g in state["gpus"] for p in g["processes"]
    )


def prune(state: State, now: float) -> bool:
    """Drop processes whose PID is gone; True if any were dropped."""
    changed = False
    for gpu in state["gpus"]:
        alive = [p for p in gpu["processes"] if pid_alive(p["pid"], p.get("start_time"))]
        if len(alive) != len(gpu["processes"]):
            fold(gpu, now)
            gpu["processes"] = alive
            changed = True
    return changed


def state_dir_from_env(explicit: str | None, env: dict[str, str] | os._Environ[str]) -> str:
    """The state directory: ``explicit`` if given, else ``$SLURMPOOL_SIM_STATE``."""
    value = explicit or env.get(ENV_STATE_DIR)
    if not value:
        raise SimError(f"no simulator state directory: pass --state DIR or set ${ENV_STATE_DIR}")
    return value
