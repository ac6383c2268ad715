"""The vfio-pci rebinding sequence against a fake sysfs tree whose "kernel" reacts to
writes the way the PCI core does (driver_override, unbind, drivers_probe)."""

from __future__ import annotations

import os
from pathlib import Path

import needs
import pytest

from slurmpool.pooling import vfio

ADDR = "0000:47:00.0"


class FakeKernel(vfio.Sysfs):
    """A sysfs tree plus the kernel's reaction to each write, and a write log."""

    def __init__(self, root: Path, vfio_loaded: bool = True) -> None:
        super().__init__(root)
        self.writes: list[tuple[str, str]] = []
        self.vfio_loaded = vfio_loaded
        dev = root / "bus/pci/devices" / ADDR
        dev.mkdir(parents=True)
        for drv in ("nvidia", "vfio-pci"):
            (root / "bus/pci/drivers" / drv).mkdir(parents=True)
            (root / "bus/pci/drivers" / drv / "unbind").write_text("")
        (root / "kernel/iommu_groups/37").mkdir(parents=True)
        os.symlink(root / "kernel/iommu_groups/37", dev / "iommu_group")
        (dev / "driver_override").write_text("(null)\n")
        (root / "bus/pci/drivers_probe").write_text("")
        self._bind("nvidia")

    def _dev(self) -> Path:
        return Path(self.root) / "bus/pci/devices" / ADDR

    def _bind(self, driver: str) -> None:
        os.symlink(Path(self.root) / "bus/pci/drivers" / driver, self._dev() / "driver")

    def write(self, rel: str, text: str) -> None:
        super().write(rel, text)
        self.writes.append((rel, text))
        dev = self._dev()
        if rel.endswith("/driver/unbind"):
            (dev / "driver").unlink()
        elif rel == "bus/pci/drivers_probe" and not (dev / "driver").is_symlink():
            override = (dev / "driver_override").read_text().strip()
            if override in ("", "(null)"):
                self._bind("nvidia")
            elif override == "vfio-pci" and self.vfio_loaded:
                self._bind("vfio-pci")


def test_pci_address() -> None:
    assert vfio.pci_address("00000000:47:00.0") == ADDR
    with pytest.raises(vfio.VfioError):
        vfio.pci_address("garbage")


def test_bind_then_restore(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path / "sys")
    dev = f"bus/pci/devices/{ADDR}"
    b = vfio.bind(k, ADDR)
    assert b == vfio.VfioBinding(ADDR, "nvidia", "37")
    assert k.writes == [
        (f"{dev}/driver_override", "vfio-pci"),
        (f"{dev}/driver/unbind", ADDR),
        ("bus/pci/drivers_probe", ADDR),
    ]
    assert k.link_name(f"{dev}/driver") == "vfio-pci"
    assert vfio.bind(k, ADDR).group == "37"  # idempotent: no further writes
    assert len(k.writes) == 3
    k.writes.clear()
    assert vfio.unbind(k, b) == "nvidia"
    assert k.writes == [
        (f"{dev}/driver_override", "\n"),
        (f"{dev}/driver/unbind", ADDR),
        ("bus/pci/drivers_probe", ADDR),
    ]
    assert vfio.unbind(k, b) == "nvidia"  # again: already back, still fine


def test_bind_fails_clearly_without_vfio_pci(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path / "sys", vfio_loaded=False)
    with pytest.raises(vfio.VfioError, match="expected vfio-pci"):
        vfio.bind(k, ADDR)
    with pytest.raises(vfio.VfioError, match="no PCI device"):
        vfio.bind(k, "0000:99:00.0")


def test_group_device_goes_to_the_user_and_back(tmp_path: Path) -> None:
    needs.root("chown")
    (tmp_path / "37").write_text("")
    path = Path(vfio.hand_group(tmp_path, "37", 1234))
    assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (1234, 0o600)
    vfio.restore_group(tmp_path, "37")
    assert path.stat().st_uid == 0
    with pytest.raises(vfio.VfioError):
        vfio.group_path(tmp_path, "../x")
