"""A simulated MPS control daemon: ``python -m slurmpool.sim.mps [-d | -f]``.

It stands in for ``nvidia-cuda-mps-control`` on a simulated node and keeps the
rules of the real one that decide what a job gets (NVIDIA's MPS documentation,
"nvidia-cuda-mps-control" and the environment variables appendix):

- the daemon serves the GPU named by ``CUDA_VISIBLE_DEVICES`` when it starts and
  listens in ``CUDA_MPS_PIPE_DIRECTORY`` (default ``/tmp/nvidia-mps``), where it
  writes ``nvidia-cuda-mps-control.pid``; it logs to
  ``$CUDA_MPS_LOG_DIRECTORY/control.log``;
- one MPS server per user: a client of another user waits until the running
  server's clients are gone, then that server stops and one for the new user
  starts;
- a server takes the default limits current when it starts
  (``set_default_active_thread_percentage``,
  ``set_default_device_pinned_mem_limit``); ``set_active_thread_percentage PID``
  and ``set_device_pinned_mem_limit PID`` change a running server's limits for
  the clients that connect afterwards;
- a client's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
  ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` can only lower its server's limits;
- a client that cannot reach a daemon runs without MPS;
- a server is a CUDA context on the GPU that its clients share: where
  ``SLURMPOOL_SIM_STATE`` names the simulated node when the daemon starts, each
  server registers on the served GPU, so the compute mode judges it
  (:mod:`slurmpool.sim.processes`).  On an EXCLUSIVE_PROCESS GPU that another
  context holds, the server does not start, and its clients fail.

Without ``-d``/``-f`` it is the control client: each line of standard input is
a command, its answer is printed (``echo get_server_list | ...``).  Commands
that change or stop the daemon are root's (and the daemon owner's); clients of
any user may connect.  Servers are real processes (forked, running as their
user, sleeping), so their PIDs are real.  Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurmpool.sim.state import ENV_STATE_DIR

DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
DEFAULT_LOG_DIR = "/var/log/nvidia-mps"
PID_FILE = "nvidia-cuda-mps-control.pid"
SERVER = "nvidia-cuda-mps-server"
SOCKET = "control"
# Internal requests of the simulated CUDA client (the real protocol is private).
CLIENT = "__client"
CLIENT_EXIT = "__client_exit"
BUSY = "busy"
ADMIN = {
    "quit",
    "start_server",
    "set_default_active_thread_percentage",
    "set_active_thread_percentage",
    "set_default_device_pinned_mem_limit",
    "set_device_pinned_mem_limit",
}
_UNITS = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}


class MpsError(Exception):
    """A command the daemon refuses, with the reason."""


def parse_mib(value: str) -> int:
    """``500M``, ``2G``, ``1T`` (or plain MiB) as MiB."""
    v = value.strip().upper()
    unit = v[-1] if v and v[-1] in "MGT" else ""
    number = v[: len(v) - len(unit)]
    if not number.isdigit():
        raise MpsError(f"bad memory limit {value!r}: expected a number with M, G or T")
    return int(number) * _UNITS[unit]


def client_limits(env: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The (thread percentage, device-0 pinned MiB) a client asks for in its environment."""
    threads = None
    raw = env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "").strip()
    if raw:
        try:
            threads = max(1, min(100, int(float(raw))))
        except ValueError:
            threads = None
    pinned = None
    for item in env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "").split(","):
        dev, _, value = item.partition("=")
        if dev.strip() == "0" and value:
            try:
                pinned = parse_mib(value)
            except MpsError:
                pinned = None
    return threads, pinned


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


@dataclass
class Server:
    """One user's MPS server: its process and the limits its new clients get."""

    uid: int
    pid: int
    threads: int
    pinned: dict[str, int]  # device -> MiB
    clients: list[int] = field(default_factory=list)


class Daemon:
    """The control daemon's state and commands (one thread; one command per connection)."""

    def __init__(self, gpu: str, log: str | None, state_dir: str | None = None) -> None:
        self.gpu = gpu
        self.log_path = log
        self.state_dir = state_dir
        self.owner = os.geteuid()
        self.default_threads = 100
        self.default_pinned: dict[str, int] = {}
        self.server: Server | None = None
        self.waiting: set[int] = set()  # clients told to wait (logged once each)
        self.running = True

    def log(self, text: str) -> None:
        if self.log_path is None:
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with open(self.log_path, "a") as f:
            f.write(f"[{stamp}] {text}\n")

    # -- servers -------------------------------------------------------------

    def _clients(self) -> list[int]:
        if self.server is None:
            return []
        self.server.clients = [p for p in self.server.clients if _alive(p)]
        return self.server.clients

    def _server_for(self, uid: int) -> Server | None:
        """The server of ``uid``, started if need be; None while another user's has clients."""
        if self.server is not None and self.server.uid == uid:
            return self.server
        if self._clients():
            return None
        self._stop_server()
        pid = os.fork()
        if pid == 0:  # the server: its user's process, idle until stopped
            try:
                # Not the daemon's socket nor a client's connection: those must close
                # when the daemon closes them.
                os.closerange(3, os.sysconf("SC_OPEN_MAX"))
                os.setsid()
                if os.geteuid() == 0 and uid != 0:
                    os.setgid(uid)
                    os.setuid(uid)
                signal.pause()
            finally:
                os._exit(0)
        self.log(f"Starting new server {pid} for user {uid}")
        try:
            self._hold_context(pid)
        except MpsError as e:
            self._end(pid)
            self.log(f"Server {pid} failed to start: {e}")
            raise
        self.server = Server(uid, pid, self.default_threads, dict(self.default_pinned))
        return self.server

    def _hold_context(self, pid: int) -> None:
        """Register the server ``pid`` as its clients' context on the served GPU."""
        if self.state_dir is None:
            return
        from slurmpool.sim.processes import attach_process
        from slurmpool.sim.state import SimError, StateStore

        try:
            gpus = StateStore(self.state_dir).read()["gpus"]
            index = next(
                (g["index"] for g in gpus if self.gpu in (g["uuid"], str(g["index"]))), None
            )
            if index is None:
                raise MpsError(f"no GPU {self.gpu} on the simulated node in {self.state_dir}")
            attach_process(
                self.state_dir, index, pid=pid, used_mib=0, util=0, name=SERVER, context=pid
            )
        except SimError as e:
            raise MpsError(f"the MPS server could not create its context: {e}") from None

    def _end(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        if self.state_dir is not None:
            from slurmpool.sim.processes import detach_process
            from slurmpool.sim.state import SimError

            with contextlib.suppress(OSError, SimError):
                detach_process(self.state_dir, pid)

    def _stop_server(self) -> None:
        if self.server is None:
            return
        pid = self.server.pid
        self._end(pid)
        self.log(f"Server {pid} exited")
        self.server = None

    def _running(self, pid_text: str) -> Server:
        if self.server is None or str(self.server.pid) != pid_text:
            raise MpsError(f"no server with PID {pid_text}")
        return self.server

    # -- commands ------------------------------------------------------------

    def handle(self, line: str, uid: int, peer_pid: int) -> str:
        words = line.split()
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        if cmd in ADMIN and uid not in (0, self.owner):
            raise MpsError(f"{cmd}: permission denied (uid {uid})")
        if cmd == CLIENT:
            server = self._server_for(uid)
            if server is None:
                assert self.server is not None
                waiter = int(args[0]) if args else peer_pid
                if waiter not in self.waiting:
                    self.waiting.add(waiter)
                    self.log(
                        f"Client {waiter} of user {uid} waits: server {self.server.pid} of "
                        f"user {self.server.uid} has {len(self.server.clients)} client(s)"
                    )
                return f"{BUSY} {self.server.uid}"
            server.clients.append(int(args[0]) if args else peer_pid)
            limits = {"threads": server.threads, "pinned_mib": server.pinned.get("0")}
            return json.dumps({"gpu": self.gpu, "server": server.pid, **limits})
        if cmd == CLIENT_EXIT:
            self._clients()
            if self.server is not None and args:
                self.server.clients = [p for p in self.server.clients if p != int(args[0])]
            return ""
        if cmd == "get_server_list":
            return "" if self.server is None else str(self.server.pid)
        if cmd == "get_client_list":
            self._running(args[0] if args else "")
            return "\n".join(str(p) for p in self._clients())
        if cmd == "start_server":
            if len(args) != 2 or args[0] != "-uid" or not args[1].isdigit():
                raise MpsError("usage: start_server -uid <user id>")
            if self._server_for(int(args[1])) is None:
                assert self.server is not None
                raise MpsError(f"the server of user {self.server.uid} has clients")
            return ""
        if cmd == "set_default_active_thread_percentage":
            self.default_threads = _percent(args[0] if args else "")
            return str(self.default_threads)
        if cmd == "get_default_active_thread_percentage":
            return str(self.default_threads)
        if cmd in ("set_active_thread_percentage", "get_active_thread_percentage"):
            server = self._running(args[0] if args else "")
            if cmd.startswith("set"):
                server.threads = _percent(args[1] if len(args) > 1 else "")
            return str(server.threads)
        if cmd == "set_default_device_pinned_mem_limit":
            if len(args) != 2:
                raise MpsError("usage: set_default_device_pinned_mem_limit <dev> <value>")
            self.default_pinned[args[0]] = parse_mib(args[1])
            return ""
        if cmd == "set_device_pinned_mem_limit":
            if len(args) != 3:
                raise MpsError("usage: set_device_pinned_mem_limit <PID> <dev> <value>")
            server = self._running(args[0])
            server.pinned[args[1]] = parse_mib(args[2])
            return ""
        if cmd == "get_device_pinned_mem_limit":
            server = self._running(args[0] if args else "")
            value = server.pinned.get(args[1] if len(args) > 1 else "0")
            return "none" if value is None else f"{value}M"
        if cmd == "quit":
            self._stop_server()
            self.running = False
            return ""
        raise MpsError(f"unknown command {cmd!r}")


def _percent(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 100:
        raise MpsError(f"bad thread percentage {text!r}: expected 1..100")
    return int(text)


def serve(pipe_dir: str, daemon: Daemon, ready_fd: int | None = None) -> None:
    """Answer commands on ``<pipe_dir>/control`` until ``quit``."""
    path = os.path.join(pipe_dir, SOCKET)
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    os.chmod(path, 0o666)  # clients of every user connect; commands check the peer's uid
    sock.listen(16)
    with open(os.path.join(pipe_dir, PID_FILE), "w") as f:
        f.write(f"{os.getpid()}\n")
    daemon.log(f"Starting control daemon on GPU {daemon.gpu}")
    if ready_fd is not None:
        os.write(ready_fd, b"ready")
        os.close(ready_fd)
    try:
        while daemon.running:
            conn, _ = sock.accept()
            with conn:
                line = conn.makefile("r").readline().strip()
                try:
                    answer = daemon.handle(line, _peer_uid(conn), 0)
                    reply = "ok\n" + (answer + "\n" if answer else "")
                except (MpsError, ValueError) as e:
                    reply = f"error\n{e}\n"
                conn.sendall(reply.encode())
    finally:
        sock.close()
        for name in (SOCKET, PID_FILE):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(pipe_dir, name))
        daemon.log("Control daemon exited")


def request(pipe_dir: str, line: str, timeout: float = 10.0) -> tuple[bool, str]:
    """Send one command; (ok, answer).  OSError when no daemon listens there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(os.path.join(pipe_dir, SOCKET))
        s.sendall(line.encode() + b"\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    status, _, answer = data.decode().partition("\n")
    return status == "ok", answer.rstrip("\n")


@dataclass(frozen=True)
class ClientLimits:
    """What an MPS client runs under: its server's limits, lowered by its environment."""

    gpu: str
    server: int
    threads: int
    pinned_mib: int | None
    pipe_dir: str


def connect_client(env: Mapping[str, str], pid: int, wait_s: float = 3600.0) -> ClientLimits | None:
    """What a CUDA client gets from MPS: None without a daemon, else the server's
    GPU and the limits it runs under (its own environment can only lower them).
    Waits while another user's server has clients, as a real client does."""
    pipe_dir = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR
    deadline = time.monotonic() + wait_s
    while True:
        try:
            ok, answer = request(pipe_dir, f"{CLIENT} {pid}")
        except OSError:
            return None
        if not ok:
            raise MpsError(answer)
        if not answer.startswith(BUSY):
            break
        if time.monotonic() > deadline:
            raise MpsError(f"the MPS server of user {answer.split()[1]} kept its clients")
        time.sleep(0.1)
    got = json.loads(answer)
    threads, pinned = client_limits(env)
    have = got["pinned_mib"]
    if pinned is not None:
        have = pinned if have is None else min(int(have), pinned)
    return ClientLimits(
        gpu=str(got["gpu"]),
        server=int(got["server"]),
        threads=int(got["threads"]) if threads is None else min(int(got["threads"]), threads),
        pinned_mib=None if have is None else int(have),
        pipe_dir=pipe_dir,
    )


def disconnect_client(pipe_dir: str, pid: int) -> None:
    with contextlib.suppress(OSError):
        request(pipe_dir, f"{CLIENT_EXIT} {pid}")


def _start(env: Mapping[str, str], foreground: bool) -> int:
    pipe_dir = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR
    log_dir = env.get("CUDA_MPS_LOG_DIRECTORY") or DEFAULT_LOG_DIR
    gpu = env.get("CUDA_VISIBLE_DEVICES", "")
    if "," in gpu or not gpu:
        print("error: CUDA_VISIBLE_DEVICES must name the one GPU to serve", file=sys.stderr)
        return 1
    os.makedirs(pipe_dir, exist_ok=True)
    os.makedirs(log_dir, exist_ok=True)
    pid_file = os.path.join(pipe_dir, PID_FILE)
    if os.path.exists(pid_file):
        try:
            request(pipe_dir, "get_server_list", timeout=2)
        except OSError:
            pass
        else:
            print(f"An instance of this daemon is already running in {pipe_dir}", file=sys.stderr)
            return 1
    state = env.get(ENV_STATE_DIR) or None
    daemon = Daemon(gpu, os.path.join(log_dir, "control.log"), state)
    if foreground:
        serve(pipe_dir, daemon)
        return 0
    read_end, write_end = os.pipe()
    if os.fork() != 0:
        os.close(write_end)
        ready = os.read(read_end, 16)  # returns once the socket listens (or the child died)
        return 0 if ready == b"ready" else 1
    os.close(read_end)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        serve(pipe_dir, daemon, write_end)
    finally:
        os._exit(0)


def _control(env: Mapping[str, str]) -> int:
    pipe_dir = env.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE_DIR
    status = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            ok, answer = request(pipe_dir, line.strip())
        except OSError as e:
            print(f"Cannot find MPS control daemon process ({e.strerror})", file=sys.stderr)
            return 1
        if answer:
            print(answer, file=sys.stdout if ok else sys.stderr)
        status = status or (0 if ok else 1)
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["-d"], ["-f"]):
        return _start(os.environ, foreground=args == ["-f"])
    if args:
        print("usage: nvidia-cuda-mps-control [-d | -f]", file=sys.stderr)
        return 2
    return _control(os.environ)


if __name__ == "__main__":
    sys.exit(main())
