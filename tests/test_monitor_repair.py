"""monitord's repair of the fit counts slurmctld has of its node (slurmpool.monitor.repair),
on the simulator with a fake Slurm."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pooling_env import EMPTY_NODE_GRES, NODE, Pool, make_pool
from prometheus_client import generate_latest

from slurmpool.configgen.nodeconfig import load_node_config
from slurmpool.gpu.select import open_backend
from slurmpool.monitor.daemon import Monitor, MonitorSettings
from slurmpool.monitor.exporter import make_registry
from slurmpool.monitor.repair import FAILED, IN_STEP, SENT, FitRepair
from slurmpool.monitor.sampler import Sampler
from slurmpool.pooling.slurmjob import SlurmJobs
from slurmpool.slurm.runner import Runner

# One GPU's slices held by a 7g (held, so counted), the other GPU free.
CARVED_7G = (
    "gpu:a100:1,vgpu:14,vgpufit:s1:7,vgpufit:s2:3,vgpufit:s3:2,vgpufit:s4:1,vgpufit:s7:2,"
    "vgpufit:next:2,vgpufit:pad:26"
)


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    pool = make_pool(tmp_path)
    assert pool.hook("prolog", pool.env("100", vgpu=7))[0] == 0  # a 7g, published
    assert pool.node_gres() == CARVED_7G
    return pool


def _repair(pool: Pool, lines: list[str]) -> FitRepair:
    config = load_node_config(pool.config_path)
    cls = config.node_class(NODE)
    assert cls is not None and cls.publishes_fit
    return FitRepair(
        node=NODE,
        config=config,
        cls=cls,
        open_backend=lambda: open_backend(f"sim:{pool.sim_dir}"),
        runner=SlurmJobs.from_env(pool.env("1")).runner,
        log=lines.append,
    )


def test_a_pass_sends_what_slurmctld_lost_then_only_reads(pool: Pool) -> None:
    lines: list[str] = []
    repair = _repair(pool, lines)
    assert repair() == IN_STEP and lines == []  # a quiet pass logs nothing
    pool.set_node_gres(EMPTY_NODE_GRES)  # slurmd registered again
    assert repair() == SENT
    assert pool.node_gres() == CARVED_7G
    [line] = lines
    assert line.startswith("fit: action=fit-repaired level=info gen=")
    assert "slurmctld_had=next:1,pad:14,s1:14,s2:6,s3:4,s4:2,s7:2" in line
    assert repair() == IN_STEP


def test_a_pass_that_cannot_reach_slurmctld_fails_and_says_so(pool: Pool) -> None:
    lines: list[str] = []
    (pool.bin_dir / "sinfo").write_text("#!/bin/sh\necho 'Unable to contact' >&2\nexit 1\n")
    assert _repair(pool, lines)() == FAILED
    assert "action=fit-publish-failed level=warning" in lines[0]


def _run_until(
    pool: Pool,
    db: Path,
    done: threading.Event,
    before: Callable[[], None] = lambda: None,
    **more: Any,
) -> Monitor:
    """monitord on the pool's GPUs, passes and pushes every 0.05 s, run in this thread
    (its store is this thread's) until ``done``; ``before`` runs once it is made."""
    settings = MonitorSettings(interval_s=0.05, port=None, repair_every_s=0.05, push_poll_s=0.05)
    with open_backend(f"sim:{pool.sim_dir}") as backend:
        mon = Monitor(
            node=NODE, store_path=db, sampler=Sampler(backend, NODE), settings=settings, **more
        )
        before()
        stop = threading.Event()

        def stopper() -> None:
            done.wait(30)  # a loop that never gets there fails the assert below
            stop.set()

        threading.Thread(target=stopper).start()
        mon.run(stop)
    assert done.is_set(), "never got there"
    return mon


def test_monitord_repairs_at_start_and_every_interval(pool: Pool, tmp_path: Path) -> None:
    calls: list[float] = []
    outcomes = iter([SENT, IN_STEP, FAILED])
    third = threading.Event()

    def fake_repair() -> str:
        calls.append(0.0)
        if len(calls) == 3:
            third.set()
        return next(outcomes, IN_STEP)

    mon = _run_until(pool, tmp_path / "monitor.sqlite", third, repair=fake_repair)
    st = mon.collector.stats
    assert (st.fit_repairs, st.fit_repair_failures) == (1, 1)
    text = generate_latest(make_registry(mon.collector)).decode()
    assert "slurmpool_fit_repairs_total 1.0" in text
    assert "slurmpool_fit_repair_failures_total 1.0" in text


def test_a_repair_that_raises_is_counted_and_the_loop_goes_on(pool: Pool, tmp_path: Path) -> None:
    calls: list[int] = []
    second = threading.Event()
    lines: list[str] = []

    def broken() -> str:
        calls.append(1)
        if len(calls) == 2:
            second.set()
        raise RuntimeError("GPU 0 is not visible to NVML")

    mon = _run_until(pool, tmp_path / "monitor.sqlite", second, repair=broken, log=lines.append)
    assert mon.collector.stats.fit_repair_failures >= 2
    assert "fit: repair error: RuntimeError: GPU 0 is not visible to NVML" in lines


def test_the_pusher_outlives_a_store_it_cannot_open(pool: Pool, tmp_path: Path) -> None:
    db = tmp_path / "monitor.sqlite"
    lines: list[str] = []
    errors = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if sum("accounting push error" in x for x in lines) >= 2:
            errors.set()

    def break_store() -> None:  # a directory where the store was: no connection opens
        db.unlink()
        db.mkdir()

    _run_until(pool, db, errors, runner=Runner(), log=log, before=break_store)
    assert any("accounting push error: StateStoreError" in x for x in lines)
