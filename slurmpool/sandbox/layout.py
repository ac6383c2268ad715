"""Where everything of one sandbox lives, and the state file that records it.

::

    <dir>/sandbox.json        ports, nodes, every PID started (the state file)
    <dir>/node/               ${root} of the policy: what every host sees at the same paths
        etc/slurm/            slurm.conf (+ Include), generated files, slurmdbd.conf
        hooks/                hook wrappers (shared by all hosts)
        sim/ dev/ proc/ state/  mount points: each slurmd sees its own host's copy
        cgroup                a link to /sys/fs/cgroup where it has the v1 devices controller
    <dir>/hosts/<node>/{sim,dev,proc,state}   the per-host directories
    <dir>/site/               the site's own prolog (what slurmpool must coexist with)
    <dir>/etc-hosts           /etc/hosts as the Slurm daemons see it (names on loopback)
    <dir>/munge/ mariadb/ ctld/ spool/ run/ log/ systemd/
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmpool.sandbox.procs import Daemon

DEFAULT_SANDBOX_DIR = "/tmp/slurmpool-sandbox"
STATE_FILE = "sandbox.json"
# Sub-directories of the policy root that belong to one host (bind-mounted per slurmd).
PER_HOST_DIRS = ("sim", "dev", "proc", "state", "run")


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path

    @property
    def node_root(self) -> Path:
        return self.root / "node"

    def host_dir(self, node: str) -> Path:
        return self.root / "hosts" / node

    def host_binds(self, node: str) -> list[tuple[Path, Path]]:
        """(source, target) bind mounts that make ``node``'s own files appear under
        node_root, and the machine's names resolve to loopback (:attr:`daemon_binds`)."""
        own = [(self.host_dir(node) / d, self.node_root / d) for d in PER_HOST_DIRS]
        return own + self.daemon_binds

    @property
    def etc_hosts(self) -> Path:
        """The /etc/hosts every Slurm daemon of the sandbox sees (see :mod:`.hosts`)."""
        return self.root / "etc-hosts"

    @property
    def daemon_binds(self) -> list[tuple[Path, Path]]:
        return [(self.etc_hosts, Path("/etc/hosts"))]

    @property
    def site_dir(self) -> Path:
        return self.root / "site"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def mariadb_dir(self) -> Path:
        return self.root / "mariadb"

    @property
    def mariadb_socket(self) -> Path:
        return self.mariadb_dir / "mariadbd.sock"

    @property
    def ctld_state(self) -> Path:
        return self.root / "ctld"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def systemd_dir(self) -> Path:
        return self.root / "systemd"

    @property
    def state_file(self) -> Path:
        return self.root / STATE_FILE

    def log(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"


@dataclass
class SandboxState:
    """What ``up`` recorded: enough for ``down``, ``status`` and ``env``."""

    directory: str
    cluster: str
    slurm_conf: str
    policy: str
    nodes: list[str]
    partition: str | None
    ports: dict[str, int]
    daemons: list[Daemon] = field(default_factory=list)
    phase: str = "starting"  # starting | up | failed
    startup_s: float | None = None

    def to_json(self) -> str:
        data: dict[str, Any] = {
            "directory": self.directory,
            "cluster": self.cluster,
            "slurm_conf": self.slurm_conf,
            "policy": self.policy,
            "nodes": self.nodes,
            "partition": self.partition,
            "ports": self.ports,
            "daemons": [d.to_dict() for d in self.daemons],
            "phase": self.phase,
            "startup_s": self.startup_s,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> SandboxState:
        d = json.loads(text)
        return cls(
            directory=str(d["directory"]),
            cluster=str(d["cluster"]),
            slurm_conf=str(d["slurm_conf"]),
            policy=str(d.get("policy", "")),
            nodes=[str(n) for n in d["nodes"]],
            partition=d.get("partition"),
            ports={str(k): int(v) for k, v in d["ports"].items()},
            daemons=[Daemon.from_dict(x) for x in d.get("daemons", [])],
            phase=str(d.get("phase", "up")),
            startup_s=d.get("startup_s"),
        )

    def save(self, layout: Layout) -> None:
        tmp = layout.state_file.with_suffix(".tmp")
        tmp.write_text(self.to_json())
        os.replace(tmp, layout.state_file)


def load_state(layout: Layout) -> SandboxState | None:
    try:
        text = layout.state_file.read_text()
    except FileNotFoundError:
        return None
    return SandboxState.from_json(text)
