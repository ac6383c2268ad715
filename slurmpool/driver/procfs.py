"""The driver's files under ``/proc/driver/nvidia``: its module parameters and
the access file of each capability.

- ``params`` lists the kernel module's parameters, ``Name: value`` per line.
  ``ModifyDeviceFiles`` (``NVreg_ModifyDeviceFiles``, 1 by default) lets the
  driver's user-space helper ``nvidia-modprobe`` create device nodes and reset
  their owner and mode; at 0 the driver makes and touches no device node
  (NVIDIA driver README, "Modifying device files").
- ``capabilities/mig/config``, ``capabilities/mig/monitor``,
  ``capabilities/gpu<g>/mig/gi<i>/access`` and ``.../gi<i>/ci<c>/access`` exist
  while the capability does (a GPU or compute instance's from its creation to
  its destruction).  Each says which ``/dev/nvidia-caps/nvidia-cap<minor>`` node
  grants it, the mode the driver gives that node (``DeviceFileMode``, decimal:
  292 is 0444) and whether the driver may change it (``DeviceFileModify``);
  ``nvidia-modprobe -f <access file>`` makes the node root's with that mode
  (NVIDIA MIG user guide, "Device Nodes and Capabilities").

Shared by the hooks, ``doctor`` and the simulator.  Standard library only.
"""

from __future__ import annotations

import os

from slurmpool.records import record

PROC_DRIVER = "/proc/driver/nvidia"
PARAMS = "params"
CAPABILITIES = "capabilities"


def params_path(proc_root: str = "/proc") -> str:
    return os.path.join(proc_root, "driver", "nvidia", PARAMS)


def capabilities_dir(proc_root: str = "/proc") -> str:
    return os.path.join(proc_root, "driver", "nvidia", CAPABILITIES)


def access_path(proc_root: str, gpu_minor: int, gi_id: int, ci_id: int | None = None) -> str:
    """The access file of a GPU instance (``ci_id`` None) or compute instance."""
    parts = [capabilities_dir(proc_root), f"gpu{gpu_minor}", "mig", f"gi{gi_id}"]
    if ci_id is not None:
        parts.append(f"ci{ci_id}")
    return os.path.join(*parts, "access")


def parse_fields(text: str, source: str) -> dict[str, str]:
    """``Name: value`` lines as a dict; ValueError naming ``source`` and the line otherwise."""
    fields = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"{source}: line {lineno}: expected 'Name: value', got {line!r}")
        fields[name.strip()] = value.strip()
    return fields


def _int_field(fields: dict[str, str], name: str, source: str) -> int:
    raw = fields.get(name)
    if raw is None:
        raise ValueError(f"{source}: no {name} line")
    try:
        return int(raw, 0)
    except ValueError:
        raise ValueError(f"{source}: {name} is {raw!r}, expected a number") from None


def modify_device_files(text: str, source: str = PARAMS) -> bool:
    """Whether the driver's ``params`` let it create and reset device nodes."""
    return _int_field(parse_fields(text, source), "ModifyDeviceFiles", source) != 0


@record(frozen=True, slots=True)
class CapabilityAccess:
    """One capability's access file: its device node's minor, the mode the driver
    gives that node, and whether the driver may create or change the node."""

    minor: int
    mode: int
    modify: bool


def parse_access(text: str, source: str = "access") -> CapabilityAccess:
    fields = parse_fields(text, source)
    return CapabilityAccess(
        minor=_int_field(fields, "DeviceFileMinor", source),
        mode=_int_field(fields, "DeviceFileMode", source),
        modify=_int_field(fields, "DeviceFileModify", source) != 0,
    )


def access_text(access: CapabilityAccess) -> str:
    """The file as the driver writes it (the mode in decimal)."""
    return (
        f"DeviceFileMinor: {access.minor}\n"
        f"DeviceFileMode: {access.mode}\n"
        f"DeviceFileModify: {int(access.modify)}\n"
    )
