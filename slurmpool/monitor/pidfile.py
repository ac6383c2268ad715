"""monitord's PID file in the node's run dir: how ``doctor`` tells that it runs.

monitord writes its PID at start and removes the file when it stops; a file left by a
monitord that died names a process that is gone, or one that is not a monitord.
"""

from __future__ import annotations

import os

from slurmpool.safefs import open_read_write, own_dir, remove_in

PID_FILE = "monitord.pid"


def claim(run_dir: str) -> None:
    """Write this process's PID (the run dir made root's, 0755, where missing)."""
    fd = open_read_write(os.path.join(own_dir(run_dir, -1), PID_FILE), 0o644)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    finally:
        os.close(fd)


def release(run_dir: str) -> None:
    """Remove the PID file if it is still this process's."""
    if running(run_dir) == os.getpid():
        remove_in(run_dir, PID_FILE)


def running(run_dir: str, proc_root: str = "/proc") -> int | None:
    """The PID of the monitord the file names, if that process runs and is a monitord."""
    try:
        with open(os.path.join(run_dir, PID_FILE), "rb") as f:
            pid = int(f.read(32).strip() or b"0")
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as f:
            argv = f.read().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and b"monitord" in argv and b"slurmpool" in b" ".join(argv) else None
