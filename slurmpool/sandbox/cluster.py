"""``slurmpool sandbox``: a real Slurm cluster on this machine, on loopback.

``up`` starts munged, MariaDB, slurmdbd, slurmctld and one slurmd per node
of the policy (default: the bundled ``examples/sandbox.yaml``), every one in
the foreground under this sandbox's directory, with ports picked free at
``up``.  Each slurmd runs in its own mount namespace where its host's
simulated GPUs (sim state, device nodes, mig-minors) and state dir are
bind-mounted at the same paths, so one generated config serves every node
as on real hosts.  The sandbox starts as a site that runs Slurm already
(:mod:`slurmpool.sandbox.site`: its own slurm.conf, cgroup.conf, gres.conf,
job_submit.lua and Prolog), and the generated config goes into it with the
same code as ``slurmpool install --controller`` and ``--node``.

Every PID started is recorded in ``sandbox.json``; ``down`` signals only
those PIDs.  Nothing is installed on the machine: missing programs are
reported with the ``apt-get install`` line that provides them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pwd
import secrets
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpool.configgen.nodeconfig import NODE_CONFIG_ENV, NODE_CONFIG_NAME
from slurmpool.gpu.select import sim_state_dir
from slurmpool.install import (
    MANIFEST_NAME,
    STATE_DIR_MODE,
    Role,
    SiteOptions,
    apply,
    others_can_run,
    plan_install,
    target_for_policy,
)
from slurmpool.policy.model import Policy
from slurmpool.sandbox import procs
from slurmpool.sandbox.hosts import loopback_hosts, machine_names
from slurmpool.sandbox.layout import (
    DEFAULT_SANDBOX_DIR,
    PER_HOST_DIRS,
    Layout,
    SandboxState,
    load_state,
)
from slurmpool.sandbox.requirements import missing_programs
from slurmpool.sandbox.site import SITE_PROLOG_NAME, node_ports, site_files, site_prolog
from slurmpool.sandbox.users import machine_login_users
from slurmpool.slurm.parse import NodeInfo, parse_nodes
from slurmpool.slurm.runner import Runner, SlurmCommandError
from slurmpool.slurm.version import InstalledSlurm

MARIADB_USER = "slurm"
ACCOUNT = "sandbox"
SLURM_USER = "slurm"
# Where sbatch, salloc and srun read the account a job is charged to.
ACCOUNT_ENV = ("SBATCH_ACCOUNT", "SALLOC_ACCOUNT", "SLURM_ACCOUNT")


@dataclass(frozen=True)
class DaemonUser:
    name: str
    uid: int
    gid: int


class SandboxError(RuntimeError):
    """The sandbox could not be brought up (the message says which daemon and why)."""


class SandboxRunning(SandboxError):
    """A sandbox is already running in that directory."""


@dataclass(frozen=True)
class SandboxOptions:
    directory: Path = Path(DEFAULT_SANDBOX_DIR)
    policy: Path | None = None  # default: the bundled examples/sandbox.yaml
    python: str = sys.executable
    timeout_s: float = 90.0
    cluster: str | None = None  # default: the policy's cluster name
    # Interpreter for the hooks; default: ``python`` if every user can run it, else the
    # system python3 with this slurmpool's source on PYTHONPATH (the hooks need only the
    # standard library).
    hook_python: str | None = None
    # Seconds between monitord's sampling passes on every node.
    monitor_interval_s: float = 2.0
    # Seconds between monitord's repairs of the vgpufit counts slurmctld has of a node
    # (30 on a real node): short, so that tests wait on the repair, not the clock.
    monitor_repair_s: float = 1.0
    # Seconds before monitord checks a stored summary again.  Shorter than a real
    # cluster's: every Slurm command answers within a second on loopback, and this is
    # still longer than slurmctld's records were seen to lag the database (20 s).
    accounting_settle_s: float = 25.0
    # Configless, as many sites run Slurm: slurmctld serves the configuration
    # (SlurmctldParameters=enable_configless) and each slurmd fetches it
    # (--conf-server), reading no slurm.conf of its own.
    configless: bool = False


def hook_interpreter(options: SandboxOptions) -> tuple[str, str | None]:
    """(interpreter, PYTHONPATH) for the hook wrappers that job users can run."""
    if options.hook_python is not None:
        return options.hook_python, None
    if others_can_run(options.python):
        return options.python, None
    source = Path(__file__).resolve().parents[2]
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if others_can_run(candidate) and others_can_run(str(source)):
            return candidate, ":".join([str(source), *_hook_pylib(options)])
    raise SandboxError(
        f"job users cannot run {options.python} (TaskProlog runs as the job's user) and no "
        "system python3 can run slurmpool from its source; pass hook_python"
    )


def _hook_pylib(options: SandboxOptions) -> list[str]:
    """A world-readable copy of pynvml (one file) for the system python3: the prolog
    and epilog open the simulator's NVML backend, which needs pynvml's classes."""
    try:
        import pynvml
    except ImportError:
        return []
    pylib = Path(options.directory).absolute() / "pylib"
    pylib.mkdir(parents=True, exist_ok=True)
    os.chmod(pylib, 0o755)
    target = pylib / "pynvml.py"
    shutil.copyfile(str(pynvml.__file__), target)
    os.chmod(target, 0o644)
    return [str(pylib)]


def monitord_argv(
    python: str,
    python_path: str | None,
    *,
    node_config: str,
    node: str,
    port: int,
    interval_s: float,
    settle_s: float,
    repair_s: float = 1.0,
) -> list[str]:
    """monitord as the installed unit runs it (``python -I -m slurmpool monitord
    --node-config ...``), on its own port: every sandbox node shares one loopback."""
    # -I would drop PYTHONPATH: where slurmpool comes from source, keep the path.
    head = (
        [python, "-I"]
        if python_path is None
        else ["/usr/bin/env", f"PYTHONPATH={python_path}", python]
    )
    return [
        *head,
        "-m",
        "slurmpool",
        "monitord",
        "--node-config",
        node_config,
        "--node",
        node,
        "--address",
        "127.0.0.1",
        "--port",
        str(port),
        "--interval",
        f"{interval_s:g}",
        "--settle",
        f"{settle_s:g}",
        "--repair-interval",
        f"{repair_s:g}",
    ]


def _serves(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return b"slurmpool_monitor_passes_total" in r.read()
    except OSError:
        return False


def default_policy_path() -> Path:
    pkg = Path(__file__).resolve().parent.parent
    for candidate in (
        pkg / "_data" / "examples" / "sandbox.yaml",
        pkg.parent / "examples" / "sandbox.yaml",
    ):
        if candidate.is_file():
            return candidate
    raise SandboxError(
        "the bundled examples/sandbox.yaml is missing from this installation; pass --policy"
    )


# --- small helpers --------------------------------------------------------


def free_port_block(count: int, low: int = 20000, high: int = 40000) -> list[int]:
    """``count`` consecutive TCP ports free on 127.0.0.1 (checked by binding), below the
    kernel's ephemeral range: a port from it may be taken by any outgoing connection
    between this check and the daemon's bind ("Address already in use")."""
    ephemeral = _ephemeral_low()
    if ephemeral - low > count:
        high = min(high, ephemeral)
    for _ in range(200):
        base = low + secrets.randbelow(high - low - count)
        ports = list(range(base, base + count))
        if all(_port_free(p) for p in ports):
            return ports
    raise SandboxError(f"no block of {count} free ports between {low} and {high} on 127.0.0.1")


def _ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The first port the kernel hands out to outgoing connections (32768 by default)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout_s: float,
    alive: Callable[[], bool] | None = None,
    interval_s: float = 0.1,
) -> None:
    """Poll ``check`` until true; fail early when ``alive`` says the daemon died."""
    deadline = time.monotonic() + timeout_s
    while True:
        if check():
            return
        if alive is not None and not alive():
            raise SandboxError(f"{what}: the daemon exited")
        if time.monotonic() > deadline:
            raise SandboxError(f"{what}: not ready after {timeout_s:g} s")
        time.sleep(interval_s)
        interval_s = min(interval_s * 1.5, 1.0)


def _now_iso() -> str:
    """Now as Slurm prints times by default (local time, to the second)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S")


def _ctld_answers(slurm: Runner) -> bool:
    return slurm.run("scontrol", "ping", check=False, timeout=10).stdout.count("UP") > 0


def namespace_argv(
    runner: Runner, binds: Sequence[tuple[Path, Path]], argv: Sequence[str]
) -> list[str]:
    """``argv`` run in a private mount namespace after bind-mounting each (source, target).

    ``unshare`` execs the shell, which execs ``argv``: the PID stays the same.
    """
    script = (
        'while [ "$1" != "--" ]; do mount --bind "$1" "$2" || exit 111; shift 2; done; '
        'shift; exec "$@"'
    )
    pairs: list[str] = []
    for src, dst in binds:
        pairs += [str(src), str(dst)]
    return [
        runner.which("unshare"),
        "--mount",
        "--propagation",
        "private",
        "--",
        "/bin/sh",
        "-c",
        script,
        "sh",
        *pairs,
        "--",
        *argv,
    ]


def _is_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


# --- configuration text ---------------------------------------------------


CGROUP_ROOT = Path("/sys/fs/cgroup")
# ${root}/cgroup: the machine's cgroup hierarchy, where it can fence devices.
CGROUP_LINK = "cgroup"


def host_fences_devices(cgroup_root: Path = CGROUP_ROOT) -> bool:
    """Whether slurmd here can fence jobs' devices: the cgroup v1 devices controller
    is mounted (Slurm's cgroup/v1 needs nothing more; cgroup/v2 needs a systemd
    delegation the sandbox does not set up)."""
    return (cgroup_root / "devices" / "devices.deny").exists()


def remove_node_cgroups(nodes: Sequence[str], cgroup_root: Path = CGROUP_ROOT) -> list[str]:
    """Remove the empty cgroups slurmd made for ``nodes`` (``<controller>/slurm_<node>``,
    a multiple-slurmd build's names) once the sandbox's processes are gone."""
    report = []
    for node in nodes:
        for top in sorted(cgroup_root.glob(f"*/slurm_{node}")):
            dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            for d in [*dirs, top]:
                with contextlib.suppress(OSError):  # not empty: holds a process
                    d.rmdir()
            if top.exists():
                report.append(f"cgroup {top} still holds processes; left in place")
    return report


def slurmdbd_conf(
    layout: Layout, ports: dict[str, int], password: str, slurm_user: str = "root"
) -> str:
    """``slurm_user``: slurmctld's SlurmUser; slurmdbd runs as the same user, which it
    takes for the one slurmctld that may add TRES to the database."""
    return "\n".join(
        [
            "AuthType=auth/munge",
            f"AuthInfo=socket={layout.munge_socket}",
            "CommunicationParameters=NoInAddrAny",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={ports['slurmdbd']}",
            f"SlurmUser={slurm_user}",
            f"LogFile={layout.log('slurmdbd')}",
            f"PidFile={layout.run_dir}/slurmdbd.pid",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={ports['mariadb']}",
            f"StorageUser={MARIADB_USER}",
            f"StoragePass={password}",
            "StorageLoc=slurm_acct_db",
            "",
        ]
    )


# --- the cluster ----------------------------------------------------------


class Sandbox:
    """One sandbox directory: bring it up, inspect it, take it down."""

    def __init__(self, directory: Path, runner: Runner) -> None:
        self.layout = Layout(Path(directory).absolute())
        self.runner = runner

    # -- queries --

    def state(self) -> SandboxState | None:
        return load_state(self.layout)

    def running(self) -> list[procs.Daemon]:
        st = self.state()
        return [d for d in st.daemons if procs.is_running(d)] if st else []

    def slurm(self) -> Runner:
        st = self.state()
        if st is None:
            raise SandboxError(f"no sandbox in {self.layout.root}")
        return self.runner.with_conf(st.slurm_conf)

    def env_lines(self) -> list[str]:
        st = self.state()
        if st is None or st.phase != "up":
            raise SandboxError(
                f"no running sandbox in {self.layout.root}; run: slurmpool sandbox up"
            )
        # The site's job_submit.lua wants every job to name an account; as a site's
        # login profile would, the environment names the sandbox's.
        return [
            f"export SLURM_CONF={st.slurm_conf}",
            f"export SLURMPOOL_SANDBOX_DIR={self.layout.root}",
            *(f"export {v}={ACCOUNT}" for v in ACCOUNT_ENV),
        ]

    def on_node(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on ``node``: in a mount namespace with that host's files bound."""
        st = self.state()
        if st is None or node not in st.nodes:
            raise SandboxError(f"no node {node!r} in the sandbox at {self.layout.root}")
        return self.on_node_argv(node, argv)

    def node_env(self, node: str) -> dict[str, str]:
        """The environment of a command run on ``node`` (see :meth:`on_node`): the
        sandbox's SLURM_CONF, SLURMD_NODENAME and node config (SLURMPOOL_NODE_CONFIG)."""
        st = self.state()
        if st is None or node not in st.nodes:
            raise SandboxError(f"no node {node!r} in the sandbox at {self.layout.root}")
        env = self.runner.child_env()
        env["SLURM_CONF"] = st.slurm_conf
        env["SLURMD_NODENAME"] = node
        env[NODE_CONFIG_ENV] = str(Path(st.slurm_conf).parent / NODE_CONFIG_NAME)
        return env

    def on_node_argv(self, node: str, argv: Sequence[str]) -> list[str]:
        return namespace_argv(self.runner, self.layout.host_binds(node), argv)

    def monitord_url(self, node: str) -> str:
        """Where ``node``'s monitord serves /metrics and /jobs/<id>."""
        st = self.state()
        if st is None or f"monitord:{node}" not in st.ports:
            raise SandboxError(f"no monitord for node {node!r} in {self.layout.root}")
        return f"http://127.0.0.1:{st.ports[f'monitord:{node}']}"

    def restart(self, name: str) -> procs.Daemon:
        """Stop daemon ``name`` (e.g. ``monitord-sbx1``, ``slurmd-sbx1``, ``slurmctld``)
        by PID and start it again as it was started, reading the configuration as it is
        now; wait until it serves again (a slurmd: until slurmctld has its new
        registration)."""
        st = self.state()
        old = next((d for d in st.daemons if d.name == name), None) if st else None
        if st is None or old is None:
            raise SandboxError(f"no daemon {name!r} in the sandbox at {self.layout.root}")
        node = name.removeprefix("slurmd-") if name.startswith("slurmd-") else None
        started_before = self._slurmd_start_time(node) if node else None
        procs.stop([old])
        st.daemons.remove(old)
        if started_before is not None:
            # SlurmdStartTime counts seconds: a slurmd started in the same second as the
            # last one (26.05 re-executes slurmd on reconfigure) would look unregistered.
            wait_for(name, lambda: _now_iso() != started_before, 2)
        env = self.runner.child_env()
        env["SLURM_CONF"] = st.slurm_conf
        d = self._spawn(st, name, old.argv, env)
        if name.startswith("monitord-"):
            self._wait_monitord(st, d)
            return d
        if node:

            def ready() -> bool:
                # SlurmdStartTime changes when slurmctld takes the new registration.
                return self._slurmd_start_time(node) not in (None, started_before)

        elif name == "slurmctld":
            sr = self.runner.with_conf(st.slurm_conf)

            def ready() -> bool:
                # A restarted slurmctld knows no node's state until each slurmd answers.
                if not _ctld_answers(sr):
                    return False
                try:
                    return all(n.state != "UNKNOWN" for n in self.nodes())
                except SlurmCommandError:  # answering pings, not yet node queries
                    return False

        else:
            return d
        try:
            wait_for(name, ready, 30, lambda: procs.is_running(d))
        except SandboxError:
            raise self._fail(name, d, self.layout.log(name)) from None
        return d

    def _slurmd_start_time(self, node: str) -> str | None:
        st = self.state()
        if st is None:
            return None
        res = self.runner.with_conf(st.slurm_conf).run(
            "scontrol", "show", "node", node, check=False, timeout=10
        )
        nodes = parse_nodes(res.stdout) if res.ok else []
        return nodes[0].record.get("SlurmdStartTime") if nodes else None

    def _wait_monitord(self, state: SandboxState, d: procs.Daemon) -> None:
        node = d.name.removeprefix("monitord-")
        url = f"http://127.0.0.1:{state.ports[f'monitord:{node}']}/metrics"
        try:
            wait_for(d.name, lambda: _serves(url), 30, lambda: procs.is_running(d))
        except SandboxError:
            raise self._fail(d.name, d) from None

    def nodes(self) -> list[NodeInfo]:
        out = self.slurm().run("scontrol", "show", "node", timeout=15)
        return parse_nodes(out.stdout)

    # -- up --

    def up(
        self, options: SandboxOptions, progress: Callable[[str], None] | None = None
    ) -> SandboxState:
        say = progress or (lambda _msg: None)
        t0 = time.monotonic()
        missing = missing_programs(self.runner)
        if missing:
            raise SandboxError(missing.message())
        if os.geteuid() != 0:
            raise SandboxError(
                "the sandbox runs Slurm daemons and mount namespaces: run it as root"
            )
        old = self.state()
        if old is not None:
            alive = [d for d in old.daemons if procs.is_running(d)]
            if alive:
                names = ", ".join(f"{d.name} (pid {d.pid})" for d in alive)
                raise SandboxRunning(
                    f"a sandbox is already running in {self.layout.root}: {names}; "
                    "stop it with: slurmpool sandbox down"
                )
        if self.layout.root.exists():
            shutil.rmtree(self.layout.root)

        policy_path = options.policy or default_policy_path()
        policy = self._with_installed_slurm(self._load_policy(policy_path))
        cluster = options.cluster or policy.cluster
        node_names = [n for g in policy.node_groups for n in g.hostlist.expand()]
        ports_list = free_port_block(4 + 2 * len(node_names))
        ports = {
            "slurmctld": ports_list[0],
            "slurmdbd": ports_list[1],
            "mariadb": ports_list[2],
            "slurmd": ports_list[3],
        }
        n = len(node_names)
        for name, port, metrics in zip(
            node_names, ports_list[4 : 4 + n], ports_list[4 + n :], strict=True
        ):
            ports[f"slurmd:{name}"] = port
            ports[f"monitord:{name}"] = metrics
        policy = self._with_ports(policy, ports)
        etc = Path(policy.paths.slurm_config_dir)
        state = SandboxState(
            directory=str(self.layout.root),
            cluster=cluster,
            slurm_conf=str(etc / "slurm.conf"),
            policy=str(policy_path),
            nodes=node_names,
            partition=policy.default_partition.name if policy.default_partition else None,
            ports=ports,
        )
        self._make_dirs(etc, node_names)
        state.save(self.layout)
        try:
            self._bring_up(state, policy, options, etc, say)
        except BaseException:
            state.phase = "failed"
            state.save(self.layout)
            procs.stop(state.daemons, grace_s=5)
            raise
        state.phase = "up"
        state.startup_s = round(time.monotonic() - t0, 1)
        state.save(self.layout)
        return state

    def _load_policy(self, path: Path) -> Policy:
        from slurmpool.policy.errors import PolicyError
        from slurmpool.policy.loader import load_policy

        try:
            return load_policy(path, variables={"root": str(self.layout.node_root)})
        except PolicyError as e:
            raise SandboxError(f"policy {path}: {e}") from None

    def policy_as_installed(self, state: SandboxState) -> Policy:
        """The policy exactly as ``up`` installed it (installed Slurm, loopback ports)."""
        policy = self._with_installed_slurm(self._load_policy(Path(state.policy)))
        return self._with_ports(policy, state.ports)

    def site_files(
        self, state: SandboxState, policy: Policy, configless: bool = False
    ) -> dict[str, str]:
        """The site's own Slurm files (:mod:`slurmpool.sandbox.site`) by name, as they
        lie in the policy's Slurm directory before slurmpool is installed."""
        return site_files(
            self.layout,
            state.cluster,
            state.ports,
            policy.node_groups,
            policy.partitions,
            policy.paths.devices_root,
            fence_devices=host_fences_devices(),
            configless=configless,
            slurm_user=self.slurm_user.name,
        )

    @functools.cached_property
    def slurm_user(self) -> DaemonUser:
        """The user slurmctld and slurmdbd run as: ``slurm``, as at most sites (Debian's
        Slurm packages create it); root on a machine without one."""
        try:
            pw = pwd.getpwnam(SLURM_USER)
        except KeyError:
            return DaemonUser("root", 0, 0)
        return DaemonUser(pw.pw_name, pw.pw_uid, pw.pw_gid)

    def site_options(self) -> SiteOptions:
        """What install is told about the sandbox's own slurm.conf: where the host cannot
        fence devices it runs task/none (:func:`.site.site_slurm_conf`), which install accepts only
        when told to pool unfenced."""
        return SiteOptions(
            slurm=self.installed_slurm.version,
            task_cgroup="require" if host_fences_devices() else "skip",
        )

    def _with_installed_slurm(self, policy: Policy) -> Policy:
        """The policy generating for the Slurm this machine runs, whatever version it
        names (see :meth:`installed_slurm`)."""
        return dataclasses.replace(policy, slurm_version=None)

    @functools.cached_property
    def installed_slurm(self) -> InstalledSlurm:
        """The Slurm the sandbox runs: what its config may use (Extra in
        job_submit.lua, scontrol --json in the prolog) depends on it."""
        from slurmpool.slurm.version import SlurmVersionError, installed_version

        try:
            return installed_version(self.runner)
        except SlurmVersionError as e:
            raise SandboxError(f"cannot tell the installed Slurm's version: {e}") from None

    def _with_ports(self, policy: Policy, ports: dict[str, int]) -> Policy:
        """The policy with every node group's NodeAddr/Port set to the chosen loopback ports."""
        groups = []
        for g in policy.node_groups:
            port = node_ports(g.hostlist.expand(), ports)
            options = [(k, v) for k, v in g.slurm_node_options if k not in ("Port", "NodeAddr")]
            options += [("NodeAddr", "127.0.0.1"), ("Port", port)]
            groups.append(dataclasses.replace(g, slurm_node_options=tuple(options)))
        return dataclasses.replace(policy, node_groups=tuple(groups))

    def _make_dirs(self, etc: Path, node_names: Sequence[str]) -> None:
        L = self.layout
        L.root.mkdir(parents=True)
        # Readable by the test users: they reach the munge socket and slurm.conf.
        os.chmod(L.root, 0o755)
        for d in (L.munge_dir, L.mariadb_dir, L.ctld_state, L.spool, L.run_dir, L.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        L.site_dir.mkdir()
        os.chmod(L.site_dir, 0o755)
        try:
            machine_hosts = Path("/etc/hosts").read_text(errors="replace")
        except OSError:
            machine_hosts = ""
        L.etc_hosts.write_text(loopback_hosts(machine_hosts, machine_names()))
        os.chmod(L.etc_hosts, 0o644)
        etc.mkdir(parents=True, exist_ok=True)
        for sub in PER_HOST_DIRS:
            (L.node_root / sub).mkdir(parents=True, exist_ok=True)
        for name in node_names:
            for sub in PER_HOST_DIRS:
                (L.host_dir(name) / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(L.host_dir(name) / "state", STATE_DIR_MODE)
        if host_fences_devices():
            # The sandbox policies' job_cgroup_root lies below it: the prolog fences
            # MIG capabilities in the job cgroups slurmd makes there.
            (L.node_root / CGROUP_LINK).symlink_to(CGROUP_ROOT)

    def _spawn(
        self, state: SandboxState, name: str, argv: Sequence[str], env: dict[str, str]
    ) -> procs.Daemon:
        d = procs.spawn(name, argv, self.layout.log(f"{name}.out"), env, cwd=self.layout.root)
        state.daemons.append(d)
        state.save(self.layout)
        return d

    def _fail(
        self, what: str, d: procs.Daemon, log: Path | None = None, probe: str | None = None
    ) -> SandboxError:
        logs = [Path(d.log)] + ([log] if log is not None else [])
        if procs.is_running(d):
            # Alive but not answering: say so, with what its client last heard.
            parts = [f"{what} started (pid {d.pid}) but did not become ready"]
            if probe:
                parts.append(probe)
        else:
            parts = [f"{what} failed to start (pid {d.pid}, argv {' '.join(d.argv)})"]
        for p in logs:
            parts.append(f"--- last lines of {p} ---\n{procs.tail(p)}")
        return SandboxError("\n".join(parts))

    def _bring_up(
        self,
        state: SandboxState,
        policy: Policy,
        options: SandboxOptions,
        etc: Path,
        say: Callable[[str], None],
    ) -> None:
        L = self.layout
        r = self.runner
        env = r.child_env()
        env["SLURM_CONF"] = state.slurm_conf

        # Simulated GPUs, created inside each host's namespace: recorded paths are the shared ones.
        say("creating simulated GPUs")
        for group in policy.node_groups:
            gpus = ",".join(
                f"{g.model}:{'mig' if g.mode.mig_enabled else 'nomig'}" for g in group.gpus
            )
            for name in group.hostlist.expand():
                argv = namespace_argv(
                    r,
                    L.host_binds(name),
                    [
                        options.python,
                        "-I",
                        "-m",
                        "slurmpool.sandbox.provision",
                        "--backend",
                        policy.gpu_backend,
                        "--devices-root",
                        policy.paths.devices_root,
                        "--mig-minors",
                        policy.paths.mig_minors,
                        "--node",
                        name,
                        "--gpus",
                        gpus,
                    ],
                )
                try:
                    r.run(argv[0], *argv[1:], timeout=60)
                except SlurmCommandError as e:
                    raise SandboxError(f"creating the simulated GPUs of {name}: {e}") from None

        say("starting munged")
        key = L.munge_dir / "munge.key"
        r.run("mungekey", "--create", f"--keyfile={key}", timeout=20)
        os.chmod(key, 0o400)
        munged = self._spawn(
            state,
            "munged",
            [
                r.which("munged"),
                "--foreground",
                "--force",
                f"--socket={L.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={L.munge_dir / 'munged.pid'}",
                f"--log-file={L.log('munged')}",
                f"--seed-file={L.munge_dir / 'munged.seed'}",
            ],
            env,
        )
        try:
            wait_for("munged", L.munge_socket.exists, 10, lambda: procs.is_running(munged))
        except SandboxError:
            raise self._fail("munged", munged, L.log("munged")) from None
        os.chmod(L.munge_dir, 0o755)

        say("starting MariaDB")
        datadir = L.mariadb_dir / "data"
        try:
            r.run(
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                timeout=60,
            )
        except SlurmCommandError as e:
            raise SandboxError(f"mariadb-install-db failed: {e}") from None
        mariadbd = self._spawn(
            state,
            "mariadbd",
            [
                r.which("mariadbd"),
                "--no-defaults",
                f"--datadir={datadir}",
                f"--socket={L.mariadb_socket}",
                f"--port={state.ports['mariadb']}",
                "--bind-address=127.0.0.1",
                "--user=root",
                f"--pid-file={L.mariadb_dir / 'mariadbd.pid'}",
                f"--log-error={L.log('mariadbd')}",
                "--skip-log-bin",
                # slurmdbd logs "Database settings not recommended values" at start below
                # its thresholds (accounting_storage/as_mysql: half its recommendation).
                # Measured: 22.05 wants 512 MiB of pool, 24.11 more than 1 GiB; 2 GiB
                # satisfies both.  The pool is reserved, not touched: a sandbox's
                # database stays small (mariadbd's resident memory stays far below).
                "--innodb-buffer-pool-size=2G",
                "--innodb-log-file-size=32M",
                "--innodb-lock-wait-timeout=450",
                "--innodb-flush-log-at-trx-commit=0",
                # MariaDB 11.8 turns snapshot isolation on; 26.05's slurmdbd says it will
                # die on a write conflict under it.  (loose-: 10.11 lacks the option.)
                "--loose-innodb-snapshot-isolation=OFF",
                "--skip-name-resolve",
            ],
            env,
        )
        try:
            wait_for("mariadbd", L.mariadb_socket.exists, 30, lambda: procs.is_running(mariadbd))
        except SandboxError:
            raise self._fail("mariadbd", mariadbd, L.log("mariadbd")) from None
        password = secrets.token_hex(12)
        # The database exists before slurmdbd starts: with libmariadb 3.4 (Debian trixie
        # and newer) slurmdbd's retry after "unknown database" (1049) on the same handle
        # leaves every later query failing (error 5027), so it must not need to create it.
        sql = (
            "CREATE DATABASE IF NOT EXISTS slurm_acct_db; "
            f"CREATE USER '{MARIADB_USER}'@'127.0.0.1' IDENTIFIED BY '{password}'; "
            f"GRANT ALL ON slurm_acct_db.* TO '{MARIADB_USER}'@'127.0.0.1'; FLUSH PRIVILEGES;"
        )
        r.run(
            "mariadb",
            "--no-defaults",
            f"--socket={L.mariadb_socket}",
            "-u",
            "root",
            "-e",
            sql,
            timeout=20,
        )

        say("writing slurm.conf and installing slurmpool's config")
        for name, text in self.site_files(state, policy, options.configless).items():
            (etc / name).write_text(text)
        dbd_conf = etc / "slurmdbd.conf"
        dbd_conf.write_text(slurmdbd_conf(L, state.ports, password, self.slurm_user.name))
        os.chmod(dbd_conf, 0o600)
        # What a site gives its SlurmUser: slurmdbd reads its conf only if the file is
        # that user's, and both daemons write their logs and slurmctld its state.
        for path in (dbd_conf, L.ctld_state, L.log("slurmdbd"), L.log("slurmctld")):
            path.touch()
            os.chown(path, self.slurm_user.uid, self.slurm_user.gid)
        prolog = L.site_dir / SITE_PROLOG_NAME
        prolog.write_text(site_prolog(L))
        os.chmod(prolog, 0o755)
        self._install(policy, state, options)

        say("starting slurmdbd")
        daemon_ns = L.daemon_binds
        slurmdbd = self._spawn(
            state, "slurmdbd", namespace_argv(r, daemon_ns, [r.which("slurmdbd"), "-D"]), env
        )
        sr = r.with_conf(state.slurm_conf)
        last_answer = [""]

        def dbd_ready() -> bool:
            res = sr.run("sacctmgr", "-n", "-P", "list", "cluster", check=False, timeout=10)
            last_answer[0] = (res.stderr or res.stdout).strip()
            return res.ok

        try:
            wait_for("slurmdbd", dbd_ready, 40, lambda: procs.is_running(slurmdbd))
        except SandboxError:
            raise self._fail(
                "slurmdbd", slurmdbd, L.log("slurmdbd"), probe=f"sacctmgr: {last_answer[0]}"
            ) from None
        sr.run("sacctmgr", "-i", "add", "cluster", state.cluster, timeout=20)
        sr.run("sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={state.cluster}", timeout=20)
        self._add_users(sr, machine_login_users())

        say("starting slurmctld")
        ctld = self._spawn(
            state,
            "slurmctld",
            namespace_argv(r, daemon_ns, [r.which("slurmctld"), "-D", "-i"]),
            env,
        )

        try:
            wait_for("slurmctld", lambda: _ctld_answers(sr), 30, lambda: procs.is_running(ctld))
        except SandboxError:
            raise self._fail("slurmctld", ctld, L.log("slurmctld")) from None

        say("starting slurmd on " + ", ".join(state.nodes))
        slurmds = {}
        for name in state.nodes:
            slurmd = [r.which("slurmd"), "-D", "-N", name]
            binds = L.host_binds(name)
            if options.configless:
                slurmd, binds = self._configless_slurmd(name, slurmd, state)
            argv = namespace_argv(r, binds, slurmd)
            slurmds[name] = self._spawn(state, f"slurmd-{name}", argv, env)

        def nodes_idle() -> bool:
            try:
                nodes = parse_nodes(sr.run("scontrol", "show", "node", timeout=10).stdout)
            except SlurmCommandError:
                return False
            states = {n.name: n for n in nodes}
            return all(
                n in states and states[n].state == "IDLE" and not states[n].flags
                for n in state.nodes
            )

        def all_slurmds() -> bool:
            return all(procs.is_running(d) for d in slurmds.values())

        try:
            wait_for("nodes idle", nodes_idle, max(10.0, options.timeout_s), all_slurmds)
        except SandboxError:
            for name, d in slurmds.items():
                if not procs.is_running(d):  # the dead one's own words, not a symptom
                    raise self._fail(f"slurmd -N {name}", d, L.log(f"slurmd-{name}")) from None
            detail = sr.run("sinfo", "-N", "-o", "%N %T %E", check=False, timeout=10).stdout
            logs = ["slurmctld", *(f"slurmd-{n}" for n in state.nodes)]
            raise SandboxError(
                f"nodes did not become idle:\n{detail}"
                + "".join(
                    f"\n--- last lines of {L.log(x)} ---\n{procs.tail(L.log(x))}" for x in logs
                )
            ) from None

        say("starting monitord on " + ", ".join(state.nodes))
        python, python_path = hook_interpreter(options)
        for name in state.nodes:
            argv = monitord_argv(
                python,
                python_path,
                node_config=str(etc / NODE_CONFIG_NAME),
                node=name,
                port=state.ports[f"monitord:{name}"],
                interval_s=options.monitor_interval_s,
                settle_s=options.accounting_settle_s,
                repair_s=options.monitor_repair_s,
            )
            d = self._spawn(state, f"monitord-{name}", self.on_node_argv(name, argv), env)
            self._wait_monitord(state, d)

    def _configless_slurmd(
        self, name: str, slurmd: list[str], state: SandboxState
    ) -> tuple[list[str], list[tuple[Path, Path]]]:
        """A slurmd that fetches its configuration from slurmctld, as on a configless
        node: without SLURM_CONF, with --conf-server; munged at its default socket (all a
        slurmd without a configuration knows), and /run/slurm, where it links the copy
        it keeps, of this node alone (tests/data/probe-configless.sh)."""
        L = self.layout
        munge_run = L.root / "munge-run"
        munge_run.mkdir(exist_ok=True)
        link = munge_run / "munge.socket.2"
        if not link.is_symlink():
            link.symlink_to(L.munge_socket)
        run_slurm = L.host_dir(name) / "run-slurm"
        run_slurm.mkdir(exist_ok=True)
        for mount_point in (Path("/run/munge"), Path("/run/slurm")):
            mount_point.mkdir(parents=True, exist_ok=True)
        binds = [
            *L.host_binds(name),
            (munge_run, Path("/run/munge")),
            (run_slurm, Path("/run/slurm")),
        ]
        server = f"127.0.0.1:{state.ports['slurmctld']}"
        return [
            self.runner.which("env"),
            "-u",
            "SLURM_CONF",
            *slurmd,
            "--conf-server",
            server,
        ], binds

    def _install(self, policy: Policy, state: SandboxState, options: SandboxOptions) -> None:
        from slurmpool.configgen.render import generate

        generated = generate(policy, installed=self.installed_slurm)
        python, python_path = hook_interpreter(options)
        target = target_for_policy(
            policy,
            slurm_conf=state.slurm_conf,
            systemd_dir=str(self.layout.systemd_dir),
            python=python,
            python_path=python_path,
            timeout_bin=self.runner.which("timeout"),
        )
        # As a site deploys it: the shared configuration on the controller, then what
        # a node needs (here one install serves every node: they share node_root).
        roles: tuple[Role, ...] = ("controller", "node")
        for role in roles:
            plan = plan_install(target, generated.files, options=self.site_options(), role=role)
            apply(plan)
        # Each host sees its own state dir; on a real cluster install runs on every
        # node, so each has the manifest (doctor reads what the hooks import from it).
        for name in state.nodes:
            shutil.copy2(target.manifest, self.layout.host_dir(name) / "state" / MANIFEST_NAME)
        self._write_mps_control(policy, python, python_path)

    def _write_mps_control(self, policy: Policy, python: str, python_path: str | None) -> None:
        """The simulated ``nvidia-cuda-mps-control`` at the policy's ``mps_control``, where
        it lies in the sandbox (the hooks start it for shared GPUs with ``mps: true``)."""
        path = Path(policy.paths.mps_control)
        if not path.is_relative_to(self.layout.node_root):
            return  # a real program the sandbox must not replace
        path.parent.mkdir(parents=True, exist_ok=True)
        env = f"PYTHONPATH={shlex.quote(python_path)} " if python_path else ""
        # The node's simulated GPUs, where its servers hold their CUDA contexts.
        env += f"SLURMPOOL_SIM_STATE={shlex.quote(sim_state_dir(policy.gpu_backend) or '')} "
        path.write_text(
            "#!/bin/sh\n# The simulator's MPS control daemon, standing in for NVIDIA's.\n"
            f'{env}exec {shlex.quote(python)} -m slurmpool.sim.mps "$@"\n'
        )
        path.chmod(0o755)

    # -- users --

    def add_user(self, *users: str) -> None:
        """Give each of ``users`` (existing Unix users) an association in the sandbox's
        default account; one that has it already is left as it is."""
        unknown = [u for u in users if not _is_user(u)]
        if unknown:
            raise SandboxError(f"no such Unix user: {', '.join(unknown)}")
        self._add_users(self.slurm(), users)

    @staticmethod
    def _add_users(slurm: Runner, users: Sequence[str]) -> None:
        # Only users without the association: asked to add nothing new, sacctmgr exits 0
        # with "Nothing new added" on 22.05 but 1 with "Nothing added" on 24.11 and later.
        have = slurm.run(
            "sacctmgr",
            "-n",
            "-P",
            "show",
            "assoc",
            "where",
            f"account={ACCOUNT}",
            "format=User",
            timeout=30,
        ).stdout.split()
        missing = [u for u in dict.fromkeys(users) if u not in have]
        if not missing:
            return
        # DefaultAccount: a job that names no account is charged to this one.
        res = slurm.run(
            "sacctmgr",
            "-i",
            "add",
            "user",
            ",".join(missing),
            f"Account={ACCOUNT}",
            f"DefaultAccount={ACCOUNT}",
            timeout=30,
            check=False,
        )
        if not res.ok:
            said = f"{res.stdout}{res.stderr}".strip()
            raise SandboxError(
                f"sacctmgr add user {','.join(missing)}: {said} (Slurm 24.11 and later also "
                "refuse a user whose uid an association of a removed user still holds: "
                "`sacctmgr -i delete user OLD_NAME`)"
            )

    def remove_user(self, *users: str) -> None:
        """Delete the associations of ``users`` from the sandbox's accounting; do it before
        the Unix user goes, or a new user given the same uid cannot be added (24.11+)."""
        res = self.slurm().run("sacctmgr", "-i", "delete", "user", ",".join(users), check=False)
        said = f"{res.stdout}{res.stderr}".strip()
        if not res.ok and "Nothing deleted" not in said:
            raise SandboxError(f"sacctmgr delete user {','.join(users)}: {said}")

    # -- down --

    def _cancel_jobs(self, st: SandboxState, grace_s: float) -> list[str]:
        """Cancel every job while slurmctld still runs, and wait (KillWait, epilog) until
        none is left, so each ends as on a real cluster and its MIG instance is freed."""
        ctld = next((d for d in st.daemons if d.name == "slurmctld"), None)
        if ctld is None or not procs.is_running(ctld):
            return []
        slurm = self.runner.with_conf(st.slurm_conf)

        def job_ids() -> list[str]:
            res = slurm.run("squeue", "-h", "-o", "%A", check=False, timeout=10)
            return res.stdout.split() if res.ok else []

        jobs = job_ids()
        if not jobs:
            return []
        slurm.run("scancel", *jobs, check=False, timeout=20)
        # KillWait (5 s) before SIGKILL, then the epilog: grace_s on top of that.
        try:
            wait_for("jobs cancelled", lambda: not job_ids(), 15 + grace_s)
        except SandboxError:
            return [f"cancelled jobs {', '.join(jobs)}; still ending: {', '.join(job_ids())}"]
        return [f"cancelled jobs {', '.join(jobs)}: ended"]

    def down(self, grace_s: float = 10.0, remove: bool = True) -> list[str]:
        st = self.state()
        if st is None:
            if self.layout.root.exists() and remove:
                return [f"no state file in {self.layout.root}; nothing was stopped"]
            return [f"no sandbox in {self.layout.root}"]
        # Each slurmd's namespace is held open first: the slurmstepds and job processes in
        # it outlive slurmd (they are not its children) and are found through it afterwards.
        held: dict[str, int] = {}
        report: list[str] = []
        for d in st.daemons:
            if d.name.startswith("slurmd-"):
                fd = procs.hold_mount_namespace(d)
                if fd is None:
                    report.append(f"{d.name} was not running: its jobs' processes are not known")
                else:
                    held[d.name] = fd
        try:
            report += self._cancel_jobs(st, grace_s)
            report += procs.stop(st.daemons, grace_s=grace_s)
            left = procs.processes_in(list(held.values()))
            report += [f"left by a node: {line}" for line in procs.stop(left, grace_s=grace_s)]
            still = [d for d in [*st.daemons, *left] if procs.is_running(d)]
        finally:
            for fd in held.values():
                os.close(fd)
        if still:
            names = ", ".join(f"{d.name} (pid {d.pid})" for d in still)
            raise SandboxError(f"still running after SIGKILL: {names}; directory kept")
        report += remove_node_cgroups(st.nodes)
        if remove:
            shutil.rmtree(self.layout.root, ignore_errors=True)
            report.append(f"removed {self.layout.root}")
        return report
