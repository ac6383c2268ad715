"""Create, reset and describe simulated GPU nodes.

A simulated node is a state directory (see :mod:`slurmpool.sim.state`), a
device root with ``nvidiaN``/``nvidia-caps`` nodes and a ``mig-minors`` file,
all built from the GPU catalogue.  NUMA placement and CPU affinity are
deterministic: GPUs are split evenly over ``numa_nodes`` nodes in index
order (first half NUMA 0, second half NUMA 1 by default) and NUMA node ``k``
owns CPUs ``k*cpus_per_numa .. (k+1)*cpus_per_numa - 1``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpool.catalogue import GpuModel, default_catalogue, load_catalogue
from slurmpool.sim import capabilities, devices
from slurmpool.sim.state import IMMEDIATE_MIG_MODE as IMMEDIATE_MIG_MODE
from slurmpool.sim.state import SCHEMA, SimError, State, StateStore, fold, new_acc

DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_VERSION = 12040
# PCI buses of the eight GPUs of a DGX A100, then a plain sequence.
_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
# Simulator estimates, not catalogue facts: power at idle and at full load.
POWER_IDLE_MW = 60_000
POWER_MAX_MW = 400_000

# Architecture by catalogue name prefix, longest prefix first.
_ARCH_PREFIXES = (
    ("GB", "blackwell"),
    ("B", "blackwell"),
    ("GH", "hopper"),
    ("H", "hopper"),
    ("L", "ada"),
    ("A", "ampere"),
    ("T", "turing"),
    ("V", "volta"),
)


def _hostname() -> str:
    import socket

    return socket.gethostname()


def _gpu_uuid(name: str) -> str:
    import uuid

    return str(uuid.uuid5(uuid.NAMESPACE_URL, name))


def architecture(model_name: str) -> str:
    for prefix, arch in _ARCH_PREFIXES:
        if model_name.upper().startswith(prefix):
            return arch
    return "unknown"


@dataclass(frozen=True, slots=True)
class SimGpuSpec:
    """One simulated GPU.  ``nvml_name``/``pci_device_id`` override what NVML reports
    (e.g. to simulate a board that is not in the catalogue)."""

    model: str
    mig: bool = False
    nvml_name: str | None = None
    pci_device_id: int | None = None

    @classmethod
    def parse(cls, text: str) -> SimGpuSpec:
        """``MODEL`` or ``MODEL:mig``, as on the ``sim init --gpu`` command line."""
        model, sep, flag = text.partition(":")
        if sep and flag not in ("mig", "nomig"):
            raise SimError(f"bad GPU spec {text!r}: expected MODEL or MODEL:mig")
        return cls(model, flag == "mig")


@dataclass(frozen=True, slots=True)
class SimNode:
    """Where a simulated node lives.  Point a backend at it with ``backend_spec``."""

    state_dir: Path
    device_root: Path
    mig_minors_path: Path

    @property
    def backend_spec(self) -> str:
        return f"sim:{self.state_dir}"


GpuArg = SimGpuSpec | tuple[str, bool] | str


def _spec(g: GpuArg) -> SimGpuSpec:
    if isinstance(g, SimGpuSpec):
        return g
    if isinstance(g, str):
        return SimGpuSpec.parse(g)
    model, mig = g
    return SimGpuSpec(model, bool(mig))


def _cpulist(first: int, count: int) -> str:
    return f"{first}-{first + count - 1}" if count > 1 else str(first)


def create_node(
    state_dir: str | os.PathLike[str],
    device_root: str | os.PathLike[str],
    gpus: Sequence[GpuArg],
    *,
    force: bool = False,
    proc_root: str | os.PathLike[str] | None = None,
    node_name: str | None = None,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    numa_nodes: int | None = None,
    cpus_per_numa: int = 16,
    catalogue_dir: str | os.PathLike[str] | None = None,
    admin_uids: Sequence[int] | None = None,
    cap_mode: int = devices.CAP_MODE,
    modify_device_files: bool = True,
) -> SimNode:
    """Build a simulated node.

    ``gpus`` items are ``(model, mig_enabled)``, ``"MODEL[:mig]"`` or
    :class:`SimGpuSpec`.  The ``mig-minors`` file goes to
    ``<proc_root>/driver/nvidia-caps/mig-minors`` (``proc_root`` defaults to
    ``<state_dir>/proc``).  MIG administration (mode changes, creating and
    destroying instances) is allowed to ``admin_uids``: root and the calling
    user by default; other users get ``NVMLError_NoPermission`` as on a real
    node.  ``modify_device_files`` is the driver's ``NVreg_ModifyDeviceFiles``
    (1 by default, as in the driver): whether ``nvidia-modprobe -f`` resets
    capability nodes to the mode the driver advertises (see
    :mod:`slurmpool.sim.capabilities`).  An existing node is only replaced with
    ``force=True``.
    """
    if not gpus:
        raise SimError("a simulated node needs at least one GPU")
    state_path = Path(state_dir).absolute()
    dev_root = Path(device_root).absolute()
    proc = Path(proc_root).absolute() if proc_root is not None else state_path / "proc"
    minors_path = proc / "driver" / "nvidia-caps" / "mig-minors"
    store = StateStore(state_path)
    if store.exists() and not force:
        raise SimError(f"{store.path} already exists; pass force=True (--force) to replace it")
    cat = load_catalogue(catalogue_dir) if catalogue_dir is not None else default_catalogue()
    specs = [_spec(g) for g in gpus]
    models = [cat.get(s.model) for s in specs]
    for s, m in zip(specs, models, strict=True):
        if s.mig and m.mig is None:
            mig_models = ", ".join(x.name for x in cat if x.mig)
            raise SimError(f"{m.name} does not support MIG; MIG models: {mig_models}")

    state_path.mkdir(parents=True, exist_ok=True)
    os.chmod(state_path, 0o777)
    dev_root.mkdir(parents=True, exist_ok=True)
    if force:
        devices.remove_device_nodes(dev_root)
    kind = devices.make_device_nodes(dev_root, list(range(len(specs))), cap_mode)
    capabilities.make_reset_nodes(dev_root, list(range(len(specs))))
    devices.write_mig_minors(minors_path)
    capabilities.write_params(str(proc), modify_device_files)

    n = len(specs)
    numa = numa_nodes if numa_nodes is not None else (2 if n > 1 else 1)
    now = time.time()
    uids = sorted({0, os.geteuid()} if admin_uids is None else set(admin_uids))
    name = node_name or _hostname()
    state: State = {
        "schema": SCHEMA,
        "node_name": name,
        "driver_version": driver_version,
        "cuda_version": DEFAULT_CUDA_VERSION,
        "device_root": str(dev_root),
        "mig_minors_path": str(minors_path),
        "proc_root": str(proc),
        "modify_device_files": modify_device_files,
        "catalogue_dir": str(Path(catalogue_dir).absolute()) if catalogue_dir else None,
        "admin_uids": uids,
        "device_nodes": kind,
        "next_serial": 1,
        "created": now,
        "gpus": [
            _gpu_state(i, s, m, f"{name}:{state_path}", i * numa // n, cpus_per_numa, now)
            for i, (s, m) in enumerate(zip(specs, models, strict=True))
        ],
    }
    store.write(state)
    capabilities.sync_access_files(state)
    lock = Path(store.lock_path)
    lock.touch()
    os.chmod(lock, 0o666)
    return SimNode(state_path, dev_root, minors_path)


def _gpu_state(
    index: int,
    spec: SimGpuSpec,
    model: GpuModel,
    where: str,
    numa_node: int,
    cpus_per_numa: int,
    now: float,
) -> State:
    geo = model.mig
    mig = bool(spec.mig and geo)
    return {
        "index": index,
        "model": model.name,
        "name": spec.nvml_name or (model.nvml_names[0] if model.nvml_names else model.name),
        "pci_device_id": spec.pci_device_id
        if spec.pci_device_id is not None
        else (model.pci_device_ids[0] if model.pci_device_ids else 0),
        # Unique across a cluster, as real GPUs' are: the sandbox's nodes share the
        # state dir's path (each sees its own at the same place), not their names.
        "uuid": "GPU-" + _gpu_uuid(f"slurmpool-sim:{where}:{index}"),
        "serial": f"{1560000000000 + index:013d}",
        "minor": index,
        "bus": _BUSES[index] if index < len(_BUSES) else 0x10 + index,
        "numa_node": numa_node,
        "cpus": _cpulist(numa_node * cpus_per_numa, cpus_per_numa),
        "arch": architecture(model.name),
        "mig_capable": geo is not None,
        "mig_current": mig,
        "mig_pending": mig,
        "compute_slices": geo.compute_slices if geo else 0,
        "memory_slices": geo.memory_slices if geo else 0,
        "memory_mib": model.memory_mib,
        "power_idle_mw": POWER_IDLE_MW,
        "power_max_mw": POWER_MAX_MW,
        "gis": [],
        "processes": [],
        "acc": new_acc(now),
    }


def open_node(state_dir: str | os.PathLike[str]) -> SimNode:
    """The paths of an existing simulated node."""
    st = StateStore(state_dir).read()
    return SimNode(Path(state_dir).absolute(), Path(st["device_root"]), Path(st["mig_minors_path"]))


def reset_gpu(state_dir: str | os.PathLike[str], index: int | None = None) -> list[int]:
    """Simulate a GPU reset (``nvidia-smi -r``): apply a pending MIG mode.

    MIG instances do not survive a reset, so they are destroyed.  Refuses
    (like the driver) while processes run on the GPU.  ``index=None`` resets
    every GPU.  Returns the indices that were reset.
    """
    done = []
    with StateStore(state_dir).transaction() as st:
        targets = [g for g in st["gpus"] if index is None or g["index"] == index]
        if not targets:
            raise SimError(f"no GPU {index} on this node (it has {len(st['gpus'])})")
        for g in targets:
            if g["processes"]:
                pids = ", ".join(str(p["pid"]) for p in g["processes"])
                raise SimError(f"cannot reset GPU {g['index']}: in use by pid {pids}")
        now = time.time()
        for g in targets:
            fold(g, now)
            g["gis"] = []
            g["mig_current"] = g["mig_pending"]
            done.append(g["index"])
        capabilities.sync_access_files(st)
    return done


def node_summary(state_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """A plain description of a simulated node (for ``slurmpool sim show``)."""
    st = StateStore(state_dir).read()
    return {
        "node_name": st["node_name"],
        "state_dir": str(Path(state_dir).absolute()),
        "device_root": st["device_root"],
        "mig_minors_path": st["mig_minors_path"],
        "driver_version": st["driver_version"],
        "device_nodes": st["device_nodes"],
        "gpus": [
            {
                "index": g["index"],
                "model": g["model"],
                "uuid": g["uuid"],
                "mig_capable": g["mig_capable"],
                "mig_current": g["mig_current"],
                "mig_pending": g["mig_pending"],
                "numa_node": g["numa_node"],
                "cpus": g["cpus"],
                "instances": [
                    {
                        "gi_id": gi["id"],
                        "profile": gi["profile"],
                        "placement": [gi["start"], gi["size"]],
                        "cis": [{"ci_id": c["id"], "uuid": c["uuid"]} for c in gi["cis"]],
                    }
                    for gi in g["gis"]
                ],
                "processes": [
                    {k: p[k] for k in ("pid", "gi", "ci", "used_mib", "util")}
                    for p in g["processes"]
                ],
            }
            for g in st["gpus"]
        ],
    }
