"""Rebinding a whole GPU from ``nvidia`` to ``vfio-pci`` for a job that starts a VM.

The kernel's sysfs sequence, all under a configurable sysfs root:

1. ``bus/pci/devices/<addr>/driver_override`` <- ``vfio-pci``
2. ``bus/pci/devices/<addr>/driver/unbind`` <- ``<addr>`` (if a driver is bound)
3. ``bus/pci/drivers_probe`` <- ``<addr>``; the device's ``driver`` link now
   names ``vfio-pci`` and ``iommu_group`` its group; ``/dev/vfio/<group>``
   goes to the job's user.

Restore is the same with an empty override, which lets the original driver
claim the device again.  While bound to vfio-pci the GPU is invisible to
NVML (NVML indices of the other GPUs may shift: see :meth:`Node.nvml_index`).
"""

from __future__ import annotations

import os

from slurmpool.records import record

VFIO_DRIVER = "vfio-pci"


class VfioError(OSError):
    """A sysfs step failed or the device did not end up where expected."""


class Sysfs:
    """Reads and writes below a sysfs root (``/sys``, or a fake tree in tests)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)

    def path(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def write(self, rel: str, text: str) -> None:
        path = self.path(rel)
        try:
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            raise VfioError(f"writing {text.strip()!r} to {path}: {e.strerror}") from None

    def link_name(self, rel: str) -> str | None:
        """Basename of a symlink's target (a driver or IOMMU group), None if absent."""
        try:
            return os.path.basename(os.readlink(self.path(rel)))
        except OSError:
            return None

    def exists(self, rel: str) -> bool:
        return os.path.exists(self.path(rel))


def pci_address(bus_id: str) -> str:
    """NVML's ``00000000:07:00.0`` as sysfs spells it: ``0000:07:00.0``."""
    text = bus_id.strip().lower()
    domain, sep, rest = text.partition(":")
    if not sep or rest.count(":") != 1 or "." not in rest:
        raise VfioError(f"PCI bus id {bus_id!r} is not DOMAIN:BUS:DEVICE.FUNCTION")
    return f"{int(domain, 16):04x}:{rest}"


@record(frozen=True, slots=True)
class VfioBinding:
    """What to undo.  Recorded (group None) before the first sysfs write, so a
    prolog killed half-way still leaves enough for reconcile to restore."""

    address: str
    original_driver: str | None
    group: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {
            "address": self.address,
            "original_driver": self.original_driver,
            "group": self.group,
        }

    @classmethod
    def from_dict(cls, d: dict[str, str | None]) -> VfioBinding:
        group = d.get("group")
        return cls(
            str(d["address"]), d.get("original_driver"), None if group is None else str(group)
        )


def _dev(address: str) -> str:
    return f"bus/pci/devices/{address}"


def bind(sysfs: Sysfs, address: str) -> VfioBinding:
    """Bind ``address`` to vfio-pci; idempotent when it already is."""
    dev = _dev(address)
    if not sysfs.exists(dev):
        raise VfioError(f"no PCI device {address} under {sysfs.path('bus/pci/devices')}")
    original = sysfs.link_name(f"{dev}/driver")
    if original != VFIO_DRIVER:
        sysfs.write(f"{dev}/driver_override", VFIO_DRIVER)
        if original is not None:
            sysfs.write(f"{dev}/driver/unbind", address)
        sysfs.write("bus/pci/drivers_probe", address)
    now = sysfs.link_name(f"{dev}/driver")
    if now != VFIO_DRIVER:
        raise VfioError(
            f"{address} is bound to {now or 'no driver'} after drivers_probe, expected "
            f"{VFIO_DRIVER} (is the vfio-pci module loaded?)"
        )
    group = sysfs.link_name(f"{dev}/iommu_group")
    if group is None:
        raise VfioError(f"{address} has no iommu_group (is the IOMMU enabled?)")
    return VfioBinding(address, original if original != VFIO_DRIVER else None, group)


def unbind(sysfs: Sysfs, binding: VfioBinding) -> str | None:
    """Give the device back to its original driver; returns the driver now bound."""
    dev = _dev(binding.address)
    sysfs.write(f"{dev}/driver_override", "\n")  # an empty override clears it
    if sysfs.link_name(f"{dev}/driver") == VFIO_DRIVER:
        sysfs.write(f"{dev}/driver/unbind", binding.address)
    sysfs.write("bus/pci/drivers_probe", binding.address)
    now = sysfs.link_name(f"{dev}/driver")
    if binding.original_driver is not None and now != binding.original_driver:
        raise VfioError(
            f"{binding.address} is bound to {now or 'no driver'} after restore, expected "
            f"{binding.original_driver}"
        )
    return now


def group_path(vfio_dev_dir: str | os.PathLike[str], group: str) -> str:
    if not group.isdigit():
        raise VfioError(f"IOMMU group {group!r} is not a number")
    return os.path.join(os.fspath(vfio_dev_dir), group)


def hand_group(vfio_dev_dir: str | os.PathLike[str], group: str, uid: int) -> str:
    """``/dev/vfio/<group>`` to the job's user (mode 0600)."""
    path = group_path(vfio_dev_dir, group)
    try:
        os.chown(path, uid, -1, follow_symlinks=False)
        os.chmod(path, 0o600)
    except OSError as e:
        raise VfioError(f"cannot hand {path} to uid {uid}: {e.strerror}") from None
    return path


def restore_group(vfio_dev_dir: str | os.PathLike[str], group: str) -> None:
    path = group_path(vfio_dev_dir, group)
    if os.path.exists(path):
        os.chown(path, 0, 0, follow_symlinks=False)
        os.chmod(path, 0o600)
