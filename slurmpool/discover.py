"""Node inventory: what GPUs a node has, as slurmpool sees them.

:func:`discover` returns the inventory as a JSON-ready dict (schema 1);
other modules (configuration generation, doctor, install) depend on these
keys::

    {"schema": 1, "hostname": str, "backend": str, "driver_version": str,
     "warnings": [str],
     "gpus": [{"index", "uuid", "name", "model", "memory_mib",
               "mig_capable", "mig_enabled", "mig_pending", "minor",
               "pci_bus_id", "pci_device_id", "numa_node", "cpu_affinity",
               "instances": [{"profile", "placement": [start, size],
                              "gi_id", "ci_id", "uuid", "gi_minor",
                              "ci_minor", "memory_mib"}]}]}

``mig_enabled``/``mig_pending`` are the current and pending MIG modes (a
change waits for a GPU reset when they differ).  ``model`` is the catalogue
name, ``null`` for a GPU the catalogue does not know (with a warning);
``pci_device_id`` is a hex string like ``"0x20B210DE"``.
"""

from __future__ import annotations

import socket
from typing import Any

from slurmpool.gpu.backend import GpuInfo, MigInstance
from slurmpool.gpu.interface import GpuBackend

SCHEMA = 1


def _instance(m: MigInstance) -> dict[str, Any]:
    return {
        "profile": m.profile,
        "placement": [m.placement.start, m.placement.size],
        "gi_id": m.gi_id,
        "ci_id": m.ci_id,
        "uuid": m.uuid,
        "gi_minor": m.gi_minor,
        "ci_minor": m.ci_minor,
        "memory_mib": m.memory_total_mib,
    }


def _gpu(g: GpuInfo, instances: list[MigInstance]) -> dict[str, Any]:
    return {
        "index": g.index,
        "uuid": g.uuid,
        "name": g.name,
        "model": g.model,
        "memory_mib": g.memory_total_mib,
        "mig_capable": g.mig_capable,
        "mig_enabled": g.mig_current,
        "mig_pending": g.mig_pending,
        "minor": g.minor,
        "pci_bus_id": g.pci_bus_id,
        "pci_device_id": f"0x{g.pci_device_id:08X}",
        "numa_node": g.numa_node,
        "cpu_affinity": g.cpu_affinity,
        "instances": [_instance(m) for m in instances],
    }


def discover(backend: GpuBackend, *, hostname: str | None = None) -> dict[str, Any]:
    """The inventory of the node behind ``backend`` (see the module docstring)."""
    gpus = []
    warnings = []
    for g in backend.gpus():
        if g.model is None:
            warnings.append(
                f"GPU {g.index} ({g.name}, PCI device id 0x{g.pci_device_id:08X}) is not in "
                "the GPU catalogue; listed with model null (add a gres/ file for it)"
            )
        gpus.append(_gpu(g, backend.instances(g.index) if g.mig_current else []))
    return {
        "schema": SCHEMA,
        "hostname": hostname or socket.gethostname(),
        "backend": backend.name,
        "driver_version": backend.driver_version(),
        "warnings": warnings,
        "gpus": gpus,
    }


def _mig_state(g: dict[str, Any]) -> str:
    if not g["mig_capable"]:
        return "MIG n/a"
    state = "MIG on" if g["mig_enabled"] else "MIG off"
    if g["mig_pending"] != g["mig_enabled"]:
        state += f" (pending {'on' if g['mig_pending'] else 'off'}: needs a GPU reset)"
    return state


def render_text(inventory: dict[str, Any]) -> str:
    """The inventory as a human-readable listing."""
    lines = [
        f"node {inventory['hostname']}  backend {inventory['backend']}  "
        f"driver {inventory['driver_version']}  {len(inventory['gpus'])} GPU(s)"
    ]
    for g in inventory["gpus"]:
        numa = "-" if g["numa_node"] is None else g["numa_node"]
        lines.append(
            f"GPU {g['index']}  {g['model'] or g['name'] + ' (not in catalogue)'}  {g['uuid']}  "
            f"{g['memory_mib']} MiB  {_mig_state(g)}  /dev/nvidia{g['minor']}  "
            f"PCI {g['pci_bus_id']} ({g['pci_device_id']})  NUMA {numa}  "
            f"CPUs {g['cpu_affinity'] or '-'}"
        )
        for m in g["instances"]:
            start, size = m["placement"]
            caps = "/".join(
                "-" if c is None else f"nvidia-cap{c}" for c in (m["gi_minor"], m["ci_minor"])
            )
            ci = "-" if m["ci_id"] is None else m["ci_id"]
            lines.append(
                f"    {m['profile']:<12} placement {start}:{size}  GI {m['gi_id']} CI {ci}  "
                f"{m['uuid'] or '(no compute instance)'}  caps {caps}  {m['memory_mib']} MiB"
            )
    return "\n".join(lines)
