"""Daemons the sandbox starts: spawned in the foreground, recorded by PID, stopped by PID.

A recorded process carries its start time (``/proc/<pid>/stat`` field 22),
so a PID reused by an unrelated process after a crash is never signalled.
Nothing here looks processes up by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Daemon:
    name: str  # "munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd-sbx1"
    pid: int
    start_time: int | None  # clock ticks since boot, from /proc/<pid>/stat
    argv: tuple[str, ...]
    log: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["argv"] = list(self.argv)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Daemon:
        return cls(
            name=str(d["name"]),
            pid=int(d["pid"]),
            start_time=None if d.get("start_time") is None else int(d["start_time"]),
            argv=tuple(str(a) for a in d.get("argv", ())),
            log=str(d.get("log", "")),
        )


def process_start_time(pid: int, proc_root: str = "/proc") -> int | None:
    try:
        text = Path(proc_root, str(pid), "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after it.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[19])


def _state(pid: int) -> str | None:
    try:
        text = Path("/proc", str(pid), "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()[0]


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def is_running(d: Daemon) -> bool:
    """The recorded process still exists (not a zombie) and is the same process."""
    _reap(d.pid)
    state = _state(d.pid)
    if state is None or state in ("Z", "X"):
        return False
    return d.start_time is None or process_start_time(d.pid) == d.start_time


def spawn(
    name: str, argv: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path | None = None
) -> Daemon:
    """Start ``argv`` in its own session with stdout/stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    return Daemon(name, proc.pid, process_start_time(proc.pid), tuple(argv), str(log))


def stop(daemons: Sequence[Daemon], grace_s: float = 10.0) -> list[str]:
    """SIGTERM each running daemon by PID, wait up to ``grace_s``, then SIGKILL by PID.

    Returns one line per daemon saying what happened.  Stops in reverse
    start order.
    """
    report: list[str] = []
    pending: list[Daemon] = []
    for d in reversed(daemons):
        if not is_running(d):
            report.append(f"{d.name} (pid {d.pid}): not running")
            continue
        try:
            os.kill(d.pid, signal.SIGTERM)
            pending.append(d)
        except ProcessLookupError:
            report.append(f"{d.name} (pid {d.pid}): not running")
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        pending = [d for d in pending if is_running(d)]
        if pending:
            time.sleep(0.1)
    for d in pending:
        try:
            os.kill(d.pid, signal.SIGKILL)
            report.append(f"{d.name} (pid {d.pid}): killed after {grace_s:g} s")
        except ProcessLookupError:
            pass
    stopped = {d.pid for d in pending}
    for d in reversed(daemons):
        if d.pid not in stopped and not any(line.startswith(f"{d.name} ") for line in report):
            report.append(f"{d.name} (pid {d.pid}): stopped")
    # Reap what we can so no zombie is left behind by a long-lived caller.
    end = time.monotonic() + 2.0
    while time.monotonic() < end and any(is_running(d) for d in daemons):
        time.sleep(0.05)
    return report


def hold_mount_namespace(d: Daemon) -> int | None:
    """An open descriptor of ``d``'s mount namespace, or None when ``d`` is not running.

    While the descriptor is open the namespace exists, so its identity (see
    :func:`processes_in`) cannot pass to a namespace made later.
    """
    try:
        fd = os.open(f"/proc/{d.pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    if not is_running(d):  # the PID was reused between the check and the open
        os.close(fd)
        return None
    return fd


def processes_in(namespace_fds: Sequence[int], proc_root: str = "/proc") -> list[Daemon]:
    """Every live process whose mount namespace is one of ``namespace_fds``: what a
    sandbox node left behind (slurmstepd, job processes), found by namespace, not name."""
    wanted = set()
    for fd in namespace_fds:
        st = os.fstat(fd)
        wanted.add((st.st_dev, st.st_ino))
    found: list[Daemon] = []
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"{entry.path}/ns/mnt")  # a zombie has none: nothing left to stop
            if (st.st_dev, st.st_ino) not in wanted:
                continue
            with open(f"{entry.path}/cmdline", "rb") as f:
                argv = tuple(a.decode(errors="replace") for a in f.read().split(b"\0") if a)
        except OSError:
            continue
        pid = int(entry.name)
        name = argv[0] if argv else f"pid {pid}"
        found.append(Daemon(name, pid, process_start_time(pid, proc_root), argv, ""))
    return found


def tail(path: str | os.PathLike[str], lines: int = 20) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])
