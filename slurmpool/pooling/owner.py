"""Which hook process holds a record: PID plus kernel start time.

A record in ``intent`` or ``releasing`` names its owner.  Reconcile treats a
record whose owner is gone as crashed half-way; the start time guards
against a PID reused by an unrelated process.
"""

from __future__ import annotations

import os

from slurmpool.records import record


@record(frozen=True, slots=True)
class Owner:
    pid: int
    start: int | None


def start_time(pid: int, proc_root: str = "/proc") -> int | None:
    """Kernel start time (clock ticks since boot) of a live, non-zombie ``pid``, else None."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def current(proc_root: str = "/proc") -> Owner:
    pid = os.getpid()
    return Owner(pid, start_time(pid, proc_root))


def alive(pid: int | None, start: int | None, proc_root: str = "/proc") -> bool:
    """True while the owner process runs; a record without an owner has none alive."""
    if pid is None:
        return False
    now = start_time(pid, proc_root)
    if now is None:
        return False
    return start is None or now == start


def boot_id(proc_root: str = "/proc") -> str | None:
    """This boot's id (``sys/kernel/random/boot_id``), or None where the kernel has none.

    A process start time means nothing across boots, and no record made before a
    boot describes the hardware after it.
    """
    try:
        with open(os.path.join(proc_root, "sys", "kernel", "random", "boot_id")) as f:
            return f.read().strip() or None
    except OSError:
        return None
