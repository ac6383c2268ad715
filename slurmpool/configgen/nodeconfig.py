"""The compiled node config (``node-config.json``) the job hooks read.

Everything a hook needs at job time, without the policy, YAML, jinja2 or
the catalogue: the hooks load this on every job start, so this module
imports only the standard library, :mod:`slurmpool.hostlist`, :mod:`slurmpool.modes` and
:mod:`slurmpool.records` (neither :mod:`dataclasses`, :mod:`typing` nor
:mod:`pathlib`: see :mod:`slurmpool.records`).
"""

from __future__ import annotations

import json
import os

from slurmpool.hostlist import HostList
from slurmpool.modes import GpuMode
from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

NODE_CONFIG_SCHEMA = 1
NODE_CONFIG_NAME = "node-config.json"
# Where install puts it by default (slurm_config_dir /etc/slurm), and where hooks look.
DEFAULT_NODE_CONFIG = f"/etc/slurm/{NODE_CONFIG_NAME}"
# The node config to use when no --node-config is given (`slurmpool sandbox exec` sets it).
NODE_CONFIG_ENV = "SLURMPOOL_NODE_CONFIG"
# Where `slurmpool install` puts the monitord unit unless told (and doctor looks).
SYSTEMD_DIR = "/etc/systemd/system"


class NodeConfigError(ValueError):
    """The node config is missing, unreadable or of another schema."""


@record(frozen=True, slots=True)
class NodeGpu:
    index: int
    minor: int
    model: str
    mode: GpuMode
    shares: int
    mps: bool
    vfio: bool
    layout: tuple[str, ...]
    slurm_type: str

    @property
    def pooled(self) -> bool:
        return self.mode.pooled


@record(frozen=True)
class NodeClassConfig:
    name: str
    hostlist: str
    vgpu_unit: str | None  # "compute-slice" | "share" | None
    units_per_gpu: int
    vgpu_count: int
    gpus: tuple[NodeGpu, ...]
    _compiled: HostList

    def contains(self, nodename: str) -> bool:
        return self._compiled.contains(nodename)

    @property
    def pooled_gpus(self) -> tuple[NodeGpu, ...]:
        return tuple(g for g in self.gpus if g.pooled)

    @property
    def publishes_fit(self) -> bool:
        """The class pools MIG GPUs in compute slices: its nodes publish what they can
        carve (:mod:`slurmpool.pooling.publish`)."""
        return self.vgpu_unit == "compute-slice" and any(g.mode is GpuMode.MIG for g in self.gpus)


STRAY_KILL = "kill"
STRAY_REFUSE = "refuse"

# Paths a node config may omit (configs written before they existed still load).
DEFAULT_PATHS = {
    "sysfs_root": "/sys",
    "vfio_dev_dir": "/dev/vfio",
    "proc_root": "/proc",
    "run_dir": "/run/slurmpool",
    "job_cgroup_root": "/sys/fs/cgroup/devices/slurm",
    "mps_control": "/usr/bin/nvidia-cuda-mps-control",
}


@record(frozen=True, slots=True)
class PoolingPolicy:
    """Job-time pooling knobs.  Every field has a safe default, so node configs
    written before a knob existed still load.

    ``stray_processes``: what the prolog does with processes left on a whole GPU by
    an earlier job: ``kill`` them (the default: they belong to no running job on a
    GPU Slurm just handed out) or ``refuse`` the GPU (requeue the job).
    ``allow_disable_mig``: may the prolog turn MIG off on an idle passthrough GPU
    (off by default: a mode change resets Ampere boards and needs an admin's yes).
    ``destroy_retry_s``: how long the epilog retries destroying a busy instance.
    ``kill_grace_s``: SIGTERM to SIGKILL delay for stray processes.
    """

    stray_processes: str = STRAY_KILL
    allow_disable_mig: bool = False
    destroy_retry_s: float = 20.0
    kill_grace_s: float = 3.0


def _pooling(d: Any) -> PoolingPolicy:
    if d is None:
        return PoolingPolicy()
    if not isinstance(d, dict):
        raise TypeError(f"pooling: expected an object, got {type(d).__name__}")
    default = PoolingPolicy()
    stray = str(d.get("stray_processes", default.stray_processes))
    if stray not in (STRAY_KILL, STRAY_REFUSE):
        raise ValueError(f"pooling.stray_processes: expected 'kill' or 'refuse', got {stray!r}")
    return PoolingPolicy(
        stray_processes=stray,
        allow_disable_mig=bool(d.get("allow_disable_mig", default.allow_disable_mig)),
        destroy_retry_s=float(d.get("destroy_retry_s", default.destroy_retry_s)),
        kill_grace_s=float(d.get("kill_grace_s", default.kill_grace_s)),
    )


@record(frozen=True)
class NodeConfig:
    cluster: str
    gpu_backend: str
    accounting: bool
    slurm_version: str
    paths: dict[str, str]
    hooks: dict[str, int]
    # model -> {vgpu count: profile name}
    profiles: dict[str, dict[int, str]]
    classes: tuple[NodeClassConfig, ...]
    pooling: PoolingPolicy = PoolingPolicy()
    # How slurm_version was decided: "slurmd -V" (detected), "policy slurm_version".
    slurm_detected_by: str = ""

    def path(self, name: str) -> str:
        """A configured path (``state_dir``, ``devices_root``...), with defaults for newer keys."""
        value = self.paths.get(name, DEFAULT_PATHS.get(name))
        if value is None:
            raise NodeConfigError(f"node config has no path {name!r}; paths: {sorted(self.paths)}")
        return value

    def node_class(self, nodename: str) -> NodeClassConfig | None:
        """The class of ``nodename`` (SLURMD_NODENAME), or None if no class has it."""
        for c in self.classes:
            if c.contains(nodename):
                return c
        return None

    def profile_for(self, model: str, count: int) -> str | None:
        """The MIG profile a ``vgpu:count`` request gets on one GPU of ``model``."""
        return self.profiles.get(model, {}).get(count)


def _gpu(d: dict[str, Any]) -> NodeGpu:
    return NodeGpu(
        index=int(d["index"]),
        minor=int(d["minor"]),
        model=str(d["model"]),
        mode=GpuMode(d["mode"]),
        shares=int(d["shares"]),
        mps=bool(d["mps"]),
        vfio=bool(d["vfio"]),
        layout=tuple(d["layout"]),
        slurm_type=str(d["slurm_type"]),
    )


def parse_node_config(data: Any, source: str = NODE_CONFIG_NAME) -> NodeConfig:
    if not isinstance(data, dict) or data.get("schema") != NODE_CONFIG_SCHEMA:
        got = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise NodeConfigError(
            f"{source}: expected node config schema {NODE_CONFIG_SCHEMA}, got {got!r}"
        )
    try:
        classes = tuple(
            NodeClassConfig(
                name=str(c["name"]),
                hostlist=str(c["hostlist"]),
                vgpu_unit=c["vgpu_unit"],
                units_per_gpu=int(c["units_per_gpu"]),
                vgpu_count=int(c["vgpu_count"]),
                gpus=tuple(_gpu(g) for g in c["gpus"]),
                _compiled=HostList(str(c["hostlist"])),
            )
            for c in data["node_classes"]
        )
        return NodeConfig(
            cluster=str(data["cluster"]),
            gpu_backend=str(data["gpu_backend"]),
            accounting=bool(data["accounting"]),
            slurm_version=str(data["slurm_version"]),
            paths={str(k): str(v) for k, v in data["paths"].items()},
            hooks={str(k): int(v) for k, v in data["hooks"].items()},
            profiles={
                m: {int(n): str(p) for n, p in table.items()}
                for m, table in data["profiles"].items()
            },
            classes=classes,
            pooling=_pooling(data.get("pooling")),
            slurm_detected_by=str(data.get("slurm_detected_by", "")),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise NodeConfigError(f"{source}: malformed node config: {err!r}") from None


def load_node_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Read ``node-config.json`` (written by ``generate-config`` / ``install``)."""
    p = os.fspath(path)
    try:
        with open(p) as f:
            data = json.loads(f.read())
    except OSError as err:
        raise NodeConfigError(f"{p}: cannot read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise NodeConfigError(f"{p}: line {err.lineno}: invalid JSON: {err.msg}") from None
    return parse_node_config(data, p)
