"""The MPS control daemon of a ``shared`` GPU with ``mps: true``: one per GPU.

A job's ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` are its own to change; only the limits
the control daemon gives a server bind its clients (a client's environment can
lower them, never raise them: NVIDIA's MPS documentation, environment variables
appendix).  So the prolog starts the GPU's daemon (``nvidia-cuda-mps-control
-d``, pipe directory ``<run_dir>/mps/gpu<index>``), starts the job's user's
server and sets that server's limits to the user's shares of the GPU.

MPS runs one server per user at a time on a daemon: a client of another user
waits until the running server's clients are gone.  Where another user's
server has clients, the prolog starts nothing (the job's CUDA calls wait their
turn) and the daemon's default limits, one share's worth, bind the server that
starts for the job later: never more than a share, and never more than the
job's shares.  The epilog lowers the user's server to what the user still
holds, and stops the daemon when no share of the GPU is left.

The limits bind only clients of the daemon: a process that steers around it
(another ``CUDA_MPS_PIPE_DIRECTORY``, or none) would get a CUDA context of its
own, unlimited.  So while its daemon serves it, the GPU is in the
``EXCLUSIVE_PROCESS`` compute mode, where the MPS server's context is the only
one (NVIDIA's MPS guide); the mode found before is kept in the node's store and
put back when the daemon stops, or by reconcile after a crash.  A process that
holds the GPU's one context outside MPS (it took it while no server ran) would
keep every share holder's server out: the prolog stops it before it starts its
server.  A daemon that is busy, refuses or does not answer within the hook's
time makes the job wait its turn elsewhere (:class:`MpsBusy`), never a drain.

The pipe directory is root's with an ACL that lets through only the users who
hold a share of the GPU (:func:`let_in`): any other job on the node could
otherwise connect, hold the daemon for its own user, and keep the share
holders waiting.
"""

from __future__ import annotations

import os

from slurmpool.modes import GpuMode
from slurmpool.pooling.shared import share_limits
from slurmpool.safefs import own_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from slurmpool.configgen.nodeconfig import NodeGpu
    from slurmpool.pooling.node import Job, Node
    from slurmpool.state.store import Allocation

PID_FILE = "nvidia-cuda-mps-control.pid"
# The longest one command may take, within what is left of the hook's budget.
COMMAND_TIMEOUT_S = 10
# The node_meta key keeping a GPU's compute mode from before its daemon came.
MODE_KEY = "mps_compute_mode:gpu{}"


class MpsError(RuntimeError):
    """The control daemon is missing or could not be used (a node's set-up: root's)."""


class MpsBusy(MpsError):
    """The daemon is busy, refused, or gave no answer in time: the job waits its turn."""


def pipe_dir(run_dir: str, gpu_index: int) -> str:
    return os.path.join(run_dir, "mps", f"gpu{gpu_index}")


def log_dir(state_dir: str, gpu_index: int) -> str:
    return os.path.join(state_dir, "mps", f"gpu{gpu_index}")


class MpsControl:
    """``nvidia-cuda-mps-control`` for one GPU's pipe directory."""

    def __init__(
        self, program: str, pipe: str, log: str, budget: Callable[[], float] | None = None
    ) -> None:
        self.program = program
        self.pipe = pipe
        self.log = log
        # How long the next command may take (the hook's deadline decides).
        self.budget = budget or (lambda: float(COMMAND_TIMEOUT_S))

    def _env(self, **more: str) -> dict[str, str]:
        return {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "CUDA_MPS_PIPE_DIRECTORY": self.pipe,
            "CUDA_MPS_LOG_DIRECTORY": self.log,
            **more,
        }

    def _run(self, argv: Sequence[str], stdin: str = "", **env: str) -> str:
        import subprocess

        timeout = self.budget()
        if timeout <= 0:
            raise MpsBusy(f"no time left in the hook for {self.program} {' '.join(argv)}")
        try:
            proc = subprocess.run(
                [self.program, *argv],
                input=stdin,
                env=self._env(**env),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except FileNotFoundError:
            raise MpsError(f"{self.program} not found (paths.mps_control)") from None
        except subprocess.TimeoutExpired:
            raise MpsBusy(f"{self.program} gave no answer within {timeout:.1f} s") from None
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip().splitlines()
            raise MpsBusy(
                f"{self.program} {' '.join(argv)} {stdin.strip()!r}: exit {proc.returncode}"
                + (f": {said[-1]}" if said else "")
            )
        return proc.stdout

    def command(self, line: str) -> str:
        return self._run([], line + "\n")

    def running(self) -> bool:
        # The share holders' clients connect in the pipe directory.  A link in its place
        # would lead root to a daemon of someone else's: it is made root's own first.
        # Its mode is its ACL's (:func:`let_in`), left as it is.
        own_dir(self.pipe, -1, parents=2)
        if not os.path.exists(os.path.join(self.pipe, PID_FILE)):
            return False
        try:
            self.command("get_server_list")
        except MpsError:
            return False
        return True

    def start(self, gpu_uuid: str) -> None:
        """Start the daemon for the GPU ``gpu_uuid`` (a UUID, as NVIDIA advises)."""
        own_dir(self.log, 0o700, parents=1)
        self._run(["-d"], CUDA_VISIBLE_DEVICES=gpu_uuid)

    def servers(self) -> list[int]:
        return [int(w) for w in self.command("get_server_list").split() if w.isdigit()]

    def clients(self, server: int) -> list[int]:
        return [int(w) for w in self.command(f"get_client_list {server}").split() if w.isdigit()]

    def set_defaults(self, threads: int, pinned_mib: int) -> None:
        self.command(f"set_default_active_thread_percentage {threads}")
        self.command(f"set_default_device_pinned_mem_limit 0 {pinned_mib}M")

    def set_limits(self, server: int, threads: int, pinned_mib: int) -> None:
        self.command(f"set_active_thread_percentage {server} {threads}")
        self.command(f"set_device_pinned_mem_limit {server} 0 {pinned_mib}M")

    def start_server(self, uid: int) -> None:
        self.command(f"start_server -uid {int(uid)}")

    def quit(self) -> None:
        self.command("quit")


def process_uid(pid: int, proc_root: str = "/proc") -> int | None:
    """The real uid of ``pid`` (an MPS server runs as its user)."""
    from slurmpool.procjob import real_uid_and_parent

    got = real_uid_and_parent(pid, proc_root)
    return None if got is None else got[0]


# -- what the hooks do ---------------------------------------------------------


def control_for(node: Node, gpu_index: int) -> MpsControl:
    from slurmpool.pooling.deadline import EXIT_RESERVE_S

    return MpsControl(
        node.config.path("mps_control"),
        pipe_dir(node.run_dir, gpu_index),
        log_dir(node.state_dir, gpu_index),
        lambda: node.deadline.within(COMMAND_TIMEOUT_S, EXIT_RESERVE_S),
    )


def hold_exclusive(node: Node, gpu: NodeGpu) -> str | None:
    """Put the GPU in EXCLUSIVE_PROCESS, keeping the mode it had; what was done, if anything."""
    from slurmpool.driver.compute import COMPUTE_EXCLUSIVE_PROCESS, compute_mode_name

    backend, index = node.backend(), node.nvml_index(gpu)
    found = backend.compute_mode(index)
    if found == COMPUTE_EXCLUSIVE_PROCESS:
        return None
    store = node.store()
    with store.transaction():
        if not store.meta(MODE_KEY.format(gpu.index)):  # the first daemon's: the site's
            store.set_meta(MODE_KEY.format(gpu.index), str(found))
    backend.set_compute_mode(index, COMPUTE_EXCLUSIVE_PROCESS)
    return f"compute mode {compute_mode_name(found)} -> EXCLUSIVE_PROCESS"


def restore_mode(node: Node, gpu: NodeGpu) -> str | None:
    """Give the GPU back the compute mode it had before its daemon came."""
    from slurmpool.driver.compute import compute_mode_name

    store = node.store()
    saved = store.meta(MODE_KEY.format(gpu.index))
    if not saved:
        return None
    node.backend().set_compute_mode(node.nvml_index(gpu), int(saved))
    with store.transaction():
        store.set_meta(MODE_KEY.format(gpu.index), "")
    return f"compute mode back to {compute_mode_name(int(saved))}"


def outside_mps(node: Node, gpu: NodeGpu, ctl: MpsControl) -> list[int]:
    """The processes with a context on the GPU that are neither the daemon's servers nor
    their clients.  The GPU's processes are listed first: a client is on the daemon's
    list before it has its context."""
    on_gpu = [p.pid for p in node.backend().processes(node.nvml_index(gpu))]
    if not on_gpu:
        return []
    servers = ctl.servers() if ctl.running() else []
    known = set(servers)
    for s in servers:
        known.update(ctl.clients(s))
    return [p for p in on_gpu if p not in known]


def _stop_outsiders(node: Node, job: Job, gpu: NodeGpu, ctl: MpsControl) -> str:
    from slurmpool.pooling.procs import stop_processes
    from slurmpool.pooling.release import kill_grace

    pids = outside_mps(node, gpu, ctl)
    if not pids:
        return ""
    node.log.event(
        "outside-mps",
        level="warning",
        job=job.job_id,
        gpu=gpu.index,
        pids=",".join(map(str, pids)),
        detail="a context outside MPS on an EXCLUSIVE_PROCESS GPU keeps every server out",
    )
    left = stop_processes(pids, kill_grace(node), node.proc_root)
    if left:
        raise MpsBusy(f"GPU {gpu.index}: processes {left} outside MPS survived SIGKILL")
    return f"stopped {len(pids)} process(es) outside MPS; "


def user_shares(records: Sequence[Allocation], gpu_index: int, uid: int) -> int:
    """The shares of ``gpu_index`` that ``uid``'s live records hold."""
    return sum(
        r.shares or 0
        for r in records
        if r.mode is GpuMode.SHARED and r.gpu_index == gpu_index and r.uid == uid
    )


def holders(records: Sequence[Allocation], gpu_index: int) -> set[int]:
    """The uids with a live share of ``gpu_index``."""
    return {r.uid for r in records if r.mode is GpuMode.SHARED and r.gpu_index == gpu_index}


def let_in(ctl: MpsControl, gpu_index: int, records: Sequence[Allocation]) -> None:
    """Only the users holding a share of the GPU reach its daemon: its pipe directory
    is root's, 0700, with an ACL letting each of them through (others' jobs on the node,
    CPU-only ones included, can neither hold the daemon nor talk to it)."""
    from slurmpool.pooling.acl import let_traverse

    let_traverse(ctl.pipe, holders(records, gpu_index))


def limit_user(node: Node, job: Job, gpu: NodeGpu, gpu_uuid: str, memory_mib: int) -> str:
    """Start the GPU's daemon if need be and hold the job's user's server to the
    user's shares of the GPU; returns what was done, for the log."""
    ctl = control_for(node, gpu.index)
    mode = hold_exclusive(node, gpu)  # before the daemon, before any process of the job
    started = not ctl.running()
    let_in(ctl, gpu.index, node.store().live())
    if started:
        ctl.start(gpu_uuid)
    ctl.set_defaults(*share_limits(1, gpu.shares, memory_mib))
    held = min(gpu.shares, user_shares(node.store().live(), gpu.index, job.uid))
    threads, pinned = share_limits(max(1, held), gpu.shares, memory_mib)
    uids = {s: process_uid(s, node.proc_root) for s in ctl.servers()}
    others = {s: u for s, u in uids.items() if u != job.uid}
    busy = [s for s in others if ctl.clients(s)]
    done = (f"{mode}; " if mode else "") + ("daemon started; " if started else "")
    if busy:
        return done + (
            f"waits: server {busy[0]} of uid {others[busy[0]]} has clients; "
            f"the job's server will start with one share's limits"
        )
    done += _stop_outsiders(node, job, gpu, ctl)
    ctl.start_server(job.uid)
    mine = [s for s in ctl.servers() if process_uid(s, node.proc_root) == job.uid]
    if not mine:
        raise MpsBusy(f"start_server -uid {job.uid} started no server of that user")
    ctl.set_limits(mine[0], threads, pinned)
    return done + f"server {mine[0]}: {threads}% threads, {pinned} MiB pinned ({held}/{gpu.shares})"


def after_release(node: Node, released: Sequence[Allocation]) -> list[str]:
    """After a job's shares went back: lower each user's server to what the user
    still holds, and stop the daemon of a GPU with no share left."""
    done = []
    live = node.store().live()
    for a in released:
        if a.mode is not GpuMode.SHARED or not a.details.get("mps"):
            continue
        if not holders(live, a.gpu_index):
            done.extend(_stand_down(node, a.gpu_index))
            continue
        ctl = control_for(node, a.gpu_index)
        if not ctl.running():
            continue
        let_in(ctl, a.gpu_index, live)
        held = user_shares(live, a.gpu_index, a.uid)
        total = int(a.details.get("total_shares", a.shares or 1))
        memory = int(a.details.get("memory_mib", 0))
        for server in ctl.servers():
            if held and memory and process_uid(server, node.proc_root) == a.uid:
                ctl.set_limits(server, *share_limits(min(held, total), total, memory))
                done.append(f"GPU {a.gpu_index}: server {server} lowered to {held}/{total}")
    return done


def _stand_down(node: Node, gpu_index: int) -> list[str]:
    """A GPU with no share left: its daemon stops, its compute mode goes back."""
    done = []
    ctl = control_for(node, gpu_index)
    if ctl.running():
        ctl.quit()
        done.append(f"GPU {gpu_index}: daemon stopped")
    gpu = next((g for g in node.gpus(GpuMode.SHARED) if g.index == gpu_index), None)
    restored = restore_mode(node, gpu) if gpu is not None else None
    if restored:
        done.append(f"GPU {gpu_index}: {restored}")
    return done


def tidy(node: Node) -> list[str]:
    """What a crashed epilog left on the MPS GPUs that hold no share: a running daemon,
    a compute mode not given back (reconcile runs this)."""
    live = node.store().live()
    done = []
    for g in node.gpus(GpuMode.SHARED):
        if not g.mps or holders(live, g.index):
            continue
        done.extend(_stand_down(node, g.index))
    return done
