"""Several processes see one simulated GPU (prolog, epilog and monitor are separate processes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpool.gpu.select import open_backend
from slurmpool.sim.node import create_node

CREATE = """
import json, sys
from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
b = open_backend("sim:" + sys.argv[1])
m = b.create_instance(0, sys.argv[2], Placement(int(sys.argv[3]), int(sys.argv[4])))
print(json.dumps({"gi": m.gi_id, "uuid": m.uuid}))
"""

DESTROY = """
import sys
from slurmpool.gpu.select import open_backend
b = open_backend("sim:" + sys.argv[1])
print(b.destroy_instance(0, int(sys.argv[2])))
"""

RACE = """
import json, random, sys
import pynvml
from slurmpool.gpu.backend import NoRoomError
from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
b = open_backend("sim:" + sys.argv[1])
random.seed(int(sys.argv[2]))
tries = [("1g.10gb", Placement(s, 1)) for s in range(7)]
tries += [("2g.20gb", Placement(s, 2)) for s in (0, 2, 4)]
random.shuffle(tries)
made = []
for profile, pl in tries:
    try:
        made.append(b.create_instance(0, profile, pl).gi_id)
    except NoRoomError:
        pass
print(json.dumps(made))
"""


def _run(code: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture
def state(tmp_path: Path) -> str:
    create_node(tmp_path / "state", tmp_path / "dev", [("A100-SXM4-80GB", True)])
    return str(tmp_path / "state")


def test_create_in_one_process_see_and_destroy_in_another(state: str) -> None:
    made = json.loads(_run(CREATE, state, "3g.40gb", "4", "4"))
    with open_backend(f"sim:{state}") as b:
        [inst] = b.instances(0)
        assert (inst.gi_id, inst.uuid, inst.profile) == (made["gi"], made["uuid"], "3g.40gb")
    assert _run(DESTROY, state, str(made["gi"])) == "True"
    assert _run(DESTROY, state, str(made["gi"])) == "False"  # resumable / idempotent
    with open_backend(f"sim:{state}") as b:
        assert b.instances(0) == []


def test_concurrent_creates_never_overlap(state: str) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACE, state, str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(5)
    ]
    made: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        made += json.loads(out)
    with open_backend(f"sim:{state}") as b:
        instances = b.instances(0)
    assert sorted(made) == sorted(i.gi_id for i in instances)
    assert len(set(made)) == len(made)
    mask = 0
    for i in instances:
        assert not mask & i.placement.mask, f"overlap at {i.placement}"
        mask |= i.placement.mask
    assert mask == 0x7F  # the board is full: slots 0..6 taken, slot 7 is never used by 1g/2g


def test_readers_never_miss_a_write_of_the_same_size(state: str) -> None:
    # Readers cache by (inode, size, mtime): each write must look different even
    # when the JSON has the same length and the inode is reused.
    from slurmpool.sim.state import StateStore

    reader, writer = StateStore(state), StateStore(state)
    for i in range(50):
        with writer.transaction() as st:
            st["driver_version"] = f"550.54.{10 + i % 2}"
        assert reader.read()["driver_version"] == f"550.54.{10 + i % 2}"


class _DestroyFirst:
    """The NVML module of one backend; the first call of ``fn`` first lets another
    backend (another job's hook) destroy the instance ``victim``."""

    def __init__(self, nv: object, fn: str, other: object, victim: int) -> None:
        self._nv, self._fn, self._other, self._victim = nv, fn, other, victim
        self.fired = False

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._nv, name)
        if name != self._fn or self.fired:
            return attr

        def first(*args: object) -> object:
            if not self.fired:
                self.fired = True
                assert self._other.destroy_instance(0, self._victim)  # type: ignore[attr-defined]
            return attr(*args)  # type: ignore[operator]

        return first


@pytest.mark.parametrize(
    "fn",
    [
        "nvmlDeviceGetGpuInstanceId",  # while listing MIG devices
        "nvmlGpuInstanceGetInfo",  # while listing GPU instances
        "nvmlGpuInstanceGetComputeInstances",  # while describing one
        "nvmlDeviceGetMemoryInfo",  # while reading a MIG device
    ],
)
def test_a_scan_skips_instances_destroyed_while_it_runs(state: str, fn: str) -> None:
    from slurmpool.placement import Placement

    with open_backend(f"sim:{state}") as mine, open_backend(f"sim:{state}") as theirs:
        made = [mine.create_instance(0, "1g.10gb", Placement(s, 1)).gi_id for s in range(7)]
        [first] = [i.gi_id for i in mine.instances(0) if i.placement.start == 0]
        spy = _DestroyFirst(mine._nv, fn, theirs, first)  # type: ignore[attr-defined]
        mine._nv = spy  # type: ignore[attr-defined]
        seen = mine.instances(0)
        assert spy.fired
        assert sorted(i.gi_id for i in seen) == sorted(g for g in made if g != first)
        assert all(i.uuid and i.uuid.startswith("MIG-") for i in seen)
        assert mine.processes(0) == []


def test_destroying_an_instance_another_hook_just_destroyed_is_not_an_error(state: str) -> None:
    from slurmpool.placement import Placement

    with open_backend(f"sim:{state}") as mine, open_backend(f"sim:{state}") as theirs:
        gi = mine.create_instance(0, "2g.20gb", Placement(0, 2)).gi_id
        spy = _DestroyFirst(mine._nv, "nvmlComputeInstanceDestroy", theirs, gi)  # type: ignore[attr-defined]
        mine._nv = spy  # type: ignore[attr-defined]
        assert mine.destroy_instance(0, gi) is False  # someone else's destroy won
        assert spy.fired and theirs.instances(0) == []
