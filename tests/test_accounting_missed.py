"""monitord makes the summary of a job whose epilog made none, from its samples, once."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_slurmdbd import FakeDbd

from slurmpool.accounting import outbox
from slurmpool.accounting.missed import QUIET_S, candidates
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.monitor.daemon import COMPONENTS, Monitor, MonitorSettings
from slurmpool.monitor.sampler import Sampler
from slurmpool.placement import Placement
from slurmpool.sim.node import create_node
from slurmpool.sim.processes import attach_process
from slurmpool.slurm.runner import Runner
from slurmpool.state.store import RELEASED, NewAllocation, NodeStore


@pytest.fixture
def sampled(tmp_path: Path) -> Iterator[tuple[Path, NvmlBackend]]:
    """Job 11 held a 2g instance on a simulated A100 and was sampled three times; its
    allocation is released (a later hook's reconcile did it: the epilog was killed)."""
    n = create_node(tmp_path / "sim", tmp_path / "dev", gpus=[("A100-SXM4-80GB", True)])
    backend = open_backend(n.backend_spec)
    inst = backend.create_instance(0, "2g", Placement(0, 2))
    attach_process(n.state_dir, 0, inst.gi_id, inst.ci_id, pid=os.getpid(), used_mib=3000, util=0)
    db = tmp_path / "n1.sqlite"
    with NodeStore(db, COMPONENTS) as store, store.transaction():
        aid = store.add_intent(
            NewAllocation("11", "alice", 1000, "mig", 0, "GPU-0", profile="2g.20gb")
        )
        store.mark_active(aid, gi_id=inst.gi_id, ci_id=inst.ci_id)
    mon = Monitor(node="n1", store_path=db, sampler=Sampler(backend, "n1"), settings=SETTINGS)
    for _ in range(3):
        mon.pass_once()
    mon.close()
    with NodeStore(db, COMPONENTS) as store, store.transaction():
        store.set_state(aid, RELEASED)
    yield db, backend
    backend.close()


SETTINGS = MonitorSettings(interval_s=0.2, port=None)


def _monitor(db: Path, backend: NvmlBackend, fake: FakeDbd, later_s: float) -> Monitor:
    runner = Runner(env={"PATH": str(fake.bin)}, search_path=(str(fake.bin),), timeout=20)
    return Monitor(
        node="n1",
        store_path=db,
        sampler=Sampler(backend, "n1"),
        settings=SETTINGS,
        runner=runner,
        clock=lambda: time.time() + later_s,
    )


def _rows(db: Path) -> list[outbox.Pending]:
    with NodeStore(db, COMPONENTS) as store:
        return outbox.pending(store)


def test_a_job_without_an_epilog_summary_gets_one_from_its_samples_once(
    sampled: tuple[Path, NvmlBackend], tmp_path: Path
) -> None:
    db, backend = sampled
    fake = FakeDbd(tmp_path / "dbd")  # slurmctld has forgotten job 11, accounting not
    fake.add_job("11")
    mon = _monitor(db, backend, fake, later_s=QUIET_S / 2)
    mon.push_once()  # not quiet long enough yet: it may still run
    mon.close()
    assert _rows(db) == []
    mon = _monitor(db, backend, fake, later_s=QUIET_S + 5)
    results = mon.push_once()
    mon.close()
    assert [(r.job_id, r.outcome) for r in results] == [("11", "written")]
    (item,) = _rows(db)
    assert (item.job_id, item.run) == ("11", 0)
    (dev,) = item.part["devices"]
    assert (dev["profile"], dev["mem_max_mib"], dev["samples"]) == ("2g.20gb", 3000, 3)
    assert item.part["carved"][0]["profile"] == "2g.20gb"
    # made once: the next looks (and the push that empties the outbox) make no other
    mon = _monitor(db, backend, fake, later_s=QUIET_S + 5 + 1000)
    assert [r.outcome for r in mon.push_once()] == ["settled"]
    mon.close()
    with NodeStore(db, COMPONENTS) as store:
        assert candidates(store, time.time() + 5000) == []
        assert outbox.count(store) == 0


def test_a_job_slurmctld_still_runs_or_the_epilog_summarised_is_left_alone(
    sampled: tuple[Path, NvmlBackend], tmp_path: Path
) -> None:
    db, backend = sampled
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("11", state="PENDING", end="Unknown")
    fake.set_state("11", "PENDING")  # requeued: its next run's epilog summarises it
    mon = _monitor(db, backend, fake, later_s=QUIET_S + 5)
    assert mon.push_once() == []
    mon.close()
    assert _rows(db) == []
    off = _monitor(db, backend, fake, later_s=QUIET_S + 5)
    off.settings = dataclasses.replace(SETTINGS, missed_every_s=None)  # accounting off
    fake.set_live("11", None)
    assert off.push_once() == []
    off.close()
    with NodeStore(db, COMPONENTS) as store:
        (m,) = candidates(store, time.time() + QUIET_S + 5)
        assert (m.job_id, m.run) == ("11", 0)
        outbox.put(store, "11", "n1", None, {"run": 0})  # the epilog's summary
        assert candidates(store, time.time() + QUIET_S + 5) == []
