"""The GPU modes: one vocabulary, and every table keyed by it covers every mode."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from slurmpool.modes import ALLOCATED_MODES, MODES, DeviceKind, GpuMode
from slurmpool.pooling import release
from slurmpool.state import store


def test_words_are_the_policy_words() -> None:
    assert MODES == ("passthrough", "mig", "mig-static", "shared")
    assert GpuMode("mig-static") is GpuMode.MIG_STATIC
    assert f"{GpuMode.MIG_STATIC}" == str(GpuMode.MIG_STATIC) == "mig-static"
    assert json.dumps({"mode": GpuMode.SHARED, "kind": DeviceKind.SHARE}) == (
        '{"mode": "shared", "kind": "share"}'
    )
    with pytest.raises(ValueError, match="'vgpu' is not a valid GpuMode"):
        GpuMode("vgpu")


@pytest.mark.parametrize(
    ("mode", "pooled", "mig", "kind"),
    [
        (GpuMode.PASSTHROUGH, False, False, DeviceKind.GPU),
        (GpuMode.MIG, True, True, DeviceKind.MIG),
        (GpuMode.MIG_STATIC, False, True, DeviceKind.MIG),
        (GpuMode.SHARED, True, False, DeviceKind.SHARE),
    ],
)
def test_what_each_mode_is(mode: GpuMode, pooled: bool, mig: bool, kind: DeviceKind) -> None:
    assert (mode.pooled, mode.mig_enabled, mode.device_kind) == (pooled, mig, kind)


def test_every_allocated_mode_can_be_undone() -> None:
    assert set(release._UNDO) == set(ALLOCATED_MODES)


def test_the_store_takes_exactly_the_allocated_modes(tmp_path: Path) -> None:
    db = store.NodeStore(tmp_path / "state.db")
    for mode in GpuMode:
        new = store.NewAllocation(
            job_id="1", user="u", uid=1000, mode=mode, gpu_index=0, gpu_uuid="GPU-0"
        )
        if mode in ALLOCATED_MODES:
            with db.transaction():
                alloc_id = db.add_intent(new)
            assert db.get(alloc_id).mode is mode  # read back as the enum, not a word
        else:  # mig-static instances are Slurm's typed gpu GRES, never a record
            with pytest.raises(sqlite3.IntegrityError), db.transaction():
                db.add_intent(new)
