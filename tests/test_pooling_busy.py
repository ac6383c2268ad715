"""A busy node is not a broken one: decide under the node lock, act outside it.

Real hooks (separate processes) on the simulator; Slurm is the recording stand-in
of :mod:`pooling_env`.  A "stuck" instance holds a process the hooks will never
signal (PID 1), so destroying it fails as a GPU process that survives SIGKILL does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from pooling_env import NODE, ListLog, Pool, allocation, make_pool

from slurmpool.modes import GpuMode
from slurmpool.pooling import caps, ended, owner
from slurmpool.pooling.reconcile import BOOT_KEY, INSTANCE_GONE, RETRY_AFTER_KEY, plan
from slurmpool.records import replace
from slurmpool.sim.processes import attach_process
from slurmpool.state.store import ACTIVE, INTENT, RELEASED, RELEASING, Allocation, open_node_store

# What the wrapper would pass for a 9 s prolog: the hook keeps 3 s below it, waits on
# the lock for at most a third of the rest, and stops 4 s before its end.
SHORT_BUDGET_S = 9


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return make_pool(tmp_path)


@contextmanager
def lock_held(pool: Pool) -> Iterator[None]:
    """Another process's write transaction on the node's store."""
    store = open_node_store(pool.state_dir, NODE)
    store.conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        store.conn.execute("ROLLBACK")
        store.close()


def _records(pool: Pool, job: str) -> list[Allocation]:
    with pool.store() as store:
        return store.for_job(job, include_released=True)


def _stuck_release(pool: Pool, job: str) -> Allocation:
    """A job whose epilog died half-way while its instance holds an unkillable process."""
    env = pool.env(job, vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    [a] = _records(pool, job)
    attach_process(pool.sim_dir, a.gpu_index, a.gi_id, a.ci_id, pid=1, used_mib=10, util=1)
    pool.fault("before-destroy-ci")
    assert pool.hook("epilog", env)[0] == -9
    [a] = _records(pool, job)
    assert a.state == RELEASING
    return a


def test_three_prologs_behind_a_stuck_instance_neither_wait_nor_drain(pool: Pool) -> None:
    stuck = _stuck_release(pool, "500")
    jobs = ["501", "502", "503"]
    envs = {j: pool.env(j, vgpu=1) for j in jobs}
    start = time.monotonic()
    procs = {j: pool.start_hook("prolog", envs[j]) for j in jobs}
    results = {j: p.communicate(timeout=120) for j, p in procs.items()}
    elapsed = time.monotonic() - start
    for j, p in procs.items():
        assert p.returncode == 0, results[j][1]
        assert [a.state for a in _records(pool, j)] == [ACTIVE], results[j][1]
    errors = "".join(err for _, err in results.values())
    assert "node-busy" not in errors and "broken-node" not in errors
    # One hook tried the stuck instance, for its patience; the others went on.
    assert errors.count("action=reconcile-stuck ") == 1
    assert elapsed < 27  # each prolog's own budget (30 s less its margin)
    [a] = _records(pool, "500")
    assert a.state == RELEASING and a.owner_pid is None
    assert float(a.details[RETRY_AFTER_KEY]) > time.time()
    # Within the retry delay, a job start does not wait on it again.
    rc, _, err = pool.hook("prolog", pool.env("504", vgpu=1))
    assert rc == 0 and "reconcile-stuck" not in err
    assert stuck.id == a.id


def test_a_busy_store_requeues_the_job_and_exits_zero(pool: Pool) -> None:
    env = pool.env("700", vgpu=1)
    with lock_held(pool):
        rc, _, err = pool.hook("prolog", env, budget_s=SHORT_BUDGET_S)
    assert rc == 0, err
    assert "action=node-busy level=warning" in err
    assert "action=requeue-uncounted" in err
    assert "requeue 700" in pool.calls
    update = next(c for c in pool.slurm_calls() if c.startswith("update"))
    assert "slurmpool: requeued: node node1 busy" in update
    assert pool.instances() == []


def test_a_requeue_slurm_refuses_leaves_the_job_without_gpus_not_the_node_drained(
    pool: Pool,
) -> None:
    assert pool.hook("prolog", pool.env("710", vgpu=14))[0] == 0
    scontrol = pool.bin_dir / "scontrol"
    scontrol.write_text(
        scontrol.read_text().replace(
            "exit 0\n", 'case "$1" in requeue*) echo "slurmctld down" >&2; exit 1;; esac\nexit 0\n'
        )
    )
    rc, _, err = pool.hook("prolog", pool.env("711", vgpu=1))
    assert rc == 0, err
    assert "action=requeue-failed level=error" in err
    assert "action=not-requeued level=error" in err
    assert _records(pool, "711") == []
    assert pool.hook("task-prolog", pool.env("711", vgpu=1))[1] == ""


def test_an_epilog_without_the_lock_leaves_the_release_to_the_next_hook(pool: Pool) -> None:
    env = pool.env("600", vgpu=2)
    assert pool.hook("prolog", env)[0] == 0
    with lock_held(pool):
        rc, _, err = pool.hook("epilog", env, budget_s=SHORT_BUDGET_S)
    assert rc == 0, err
    assert "action=release-deferred level=warning" in err
    assert ended.jobs(str(pool.run_dir)) == {"600"}
    assert len(pool.instances()) == 1  # still there: nobody could record its release
    rc, _, err = pool.hook("prolog", pool.env("601", vgpu=1))
    assert rc == 0, err
    assert "job ended" in err
    assert [a.state for a in _records(pool, "600")] == [RELEASED]
    assert ended.jobs(str(pool.run_dir)) == frozenset()
    assert [i[1] for i in pool.instances()] == ["1g.10gb"]  # 601's only


def test_a_requeued_run_first_gives_back_what_its_last_run_owed(pool: Pool) -> None:
    env = pool.env("610", vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    [first] = _records(pool, "610")
    with lock_held(pool):
        assert pool.hook("epilog", env, budget_s=SHORT_BUDGET_S)[0] == 0
    rc, _, err = pool.hook("prolog", {**env, "SLURM_JOB_RESTART_COUNT": "1"})
    assert rc == 0, err
    states = {a.id: a.state for a in _records(pool, "610")}
    assert states.pop(first.id) == RELEASED
    assert list(states.values()) == [ACTIVE]  # a fresh allocation, not the old run's
    assert ended.jobs(str(pool.run_dir)) == frozenset()
    assert len(pool.instances()) == 1


# -- the plan, pure -----------------------------------------------------------------


def _alloc(id: int, job: str, state: str, **details: object) -> Allocation:
    return allocation(id=id, job_id=job, state=state, details=dict(details))


def test_plan_finishes_dead_hooks_and_ended_jobs_and_waits_out_retries() -> None:
    records = [
        _alloc(1, "1", INTENT),  # a dead prolog's
        _alloc(2, "2", RELEASING, **{RETRY_AFTER_KEY: 200.0}),  # stuck, retry later
        _alloc(3, "3", RELEASING, **{RETRY_AFTER_KEY: 50.0}),  # stuck, due again
        _alloc(4, "4", ACTIVE),  # a running job's
        _alloc(5, "5", ACTIVE),  # a job whose epilog owed its release
        _alloc(6, "6", INTENT),  # a live prolog's
    ]
    todo = plan(records, {}, lambda r: r.id == 6, now=100.0, ended_jobs={"5"})
    assert [(f.alloc.id, f.why) for f in todo.finish] == [
        (1, "hook gone"),
        (3, "hook gone"),
        (5, "job ended"),
    ]
    assert todo.orphans == ()


# -- truth from the hardware ----------------------------------------------------------


def test_after_a_boot_the_store_is_rebuilt_from_nvml(pool: Pool) -> None:
    assert pool.hook("prolog", pool.env("800", vgpu=2))[0] == 0
    [old] = _records(pool, "800")
    with pool.store() as store, store.transaction():
        assert store.meta(BOOT_KEY) == owner.boot_id()
        store.set_meta(BOOT_KEY, "an-earlier-boot")  # the records predate this boot
    ended.mark(str(pool.run_dir), "800")
    rc, _, err = pool.hook("prolog", pool.env("801", vgpu=14))  # the whole node
    assert rc == 0, err
    assert "action=node-rebooted level=warning released=1" in err
    assert "action=orphan-destroyed" in err  # 800's instance: nobody's after the boot
    [old] = _records(pool, "800")
    assert old.state == RELEASED and "node rebooted" in old.note
    assert ended.jobs(str(pool.run_dir)) == frozenset()
    assert sorted(i[1] for i in pool.instances()) == ["7g.80gb", "7g.80gb"]


def test_instances_destroyed_out_of_band_free_their_slices(pool: Pool) -> None:
    """An admin's `nvidia-smi mig -dci/-dgi`: a vgpu:7 job is no longer requeued for it."""
    assert pool.hook("prolog", pool.env("810", vgpu=14))[0] == 0
    with pool.backend() as b:
        for a in _records(pool, "810"):
            assert b.destroy_instance(a.gpu_index, a.gi_id)
    rc, _, err = pool.hook("prolog", pool.env("811", vgpu=7))
    assert rc == 0, err
    assert err.count('why="instance gone"') == 2
    assert "requeue" not in err
    assert [a.state for a in _records(pool, "810")] == [RELEASED, RELEASED]
    assert [a.state for a in _records(pool, "811")] == [ACTIVE]


def test_a_rerun_prolog_never_hands_out_a_uuid_that_is_gone(pool: Pool) -> None:
    env = pool.env("820", vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    [a] = _records(pool, "820")
    with pool.backend() as b:
        assert b.destroy_instance(a.gpu_index, a.gi_id)
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert "already-allocated" not in err
    exported = pool.hook("task-prolog", env)[1]
    live = {i[4] for i in pool.instances()}
    assert a.mig_uuid not in exported and a.mig_uuid not in live
    assert len(live) == 1 and live.pop() in exported


def test_a_gone_instance_leaves_the_files_of_a_newer_one_alone(pool: Pool) -> None:
    from slurmpool.placement import Placement
    from slurmpool.pooling.release import undo

    assert pool.hook("prolog", pool.env("830", vgpu=1))[0] == 0
    [a] = _records(pool, "830")
    with pool.backend() as b:
        assert b.destroy_instance(a.gpu_index, a.gi_id)
        newer = b.create_instance(a.gpu_index, "1g.10gb", Placement(*a.placement))
    assert sorted(a.cap_minors) == sorted((newer.gi_minor, newer.ci_minor))
    caps.grant(pool.dev, list(a.cap_minors), 2000)  # the newer instance's job
    node = pool.node(ListLog())
    try:
        assert undo(node, a).detail == "instance already gone"
    finally:
        node.close()
    for minor in a.cap_minors:
        assert caps.owner(pool.dev, minor)[0] == 2000


def test_plan_finds_active_records_whose_instance_is_gone() -> None:
    from slurmpool.gpu.backend import MigInstance
    from slurmpool.placement import Placement

    def mig(id: int, uuid: str, gpu: int) -> Allocation:
        a = _alloc(id, str(id), ACTIVE)
        return replace(
            a,
            mode=GpuMode.MIG,
            gpu_index=gpu,
            mig_uuid=uuid,
            placement_start=0,
            placement_size=1,
            profile="1g.10gb",
        )

    here = MigInstance(
        gpu_index=0,
        profile="1g.10gb",
        profile_id=19,
        placement=Placement(0, 1),
        gi_id=9,
        ci_id=0,
        uuid="MIG-here",
        gi_minor=None,
        ci_minor=None,
        memory_total_mib=9856,
        memory_used_mib=0,
    )
    records = [mig(1, "MIG-here", 0), mig(2, "MIG-gone", 0), mig(3, "MIG-unlisted", 1)]
    todo = plan(records, {0: [here]}, lambda r: False, now=0.0)
    assert [(f.alloc.id, f.why) for f in todo.finish] == [(2, INSTANCE_GONE)]


# -- whole or nothing -------------------------------------------------------------------


def test_a_vgpu14_prolog_killed_between_its_instances_is_carved_whole_on_rerun(
    pool: Pool,
) -> None:
    env = pool.env("900", vgpu=14)
    pool.fault("before-create-gi", nth=2)  # the first 7g active and handed out
    assert pool.hook("prolog", env)[0] == -9
    first, second = _records(pool, "900")
    assert (first.state, second.state) == (ACTIVE, INTENT)
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert "already-allocated" not in err
    records = _records(pool, "900")
    assert {a.id: a.state for a in records}[first.id] == RELEASED
    live = [a for a in records if a.state == ACTIVE]
    assert len(live) == 2 and first.id not in {a.id for a in live}
    exported = pool.hook("task-prolog", env)[1]
    uuids = {i[4] for i in pool.instances()}
    assert len(uuids) == 2 and all(u in exported for u in uuids)


def test_complete_means_every_planned_part_active() -> None:
    from slurmpool.pooling.prolog import PARTS, complete

    def part(id: int, state: str = ACTIVE, parts: int | None = 2) -> Allocation:
        a = _alloc(id, "1", state)
        return replace(a, details={} if parts is None else {PARTS: parts})

    assert complete([part(1), part(2)])
    assert not complete([part(1)])  # the other part was never made, or undone
    assert not complete([part(1), part(2, INTENT)])
    assert complete([part(1, parts=None)])  # made before parts were counted
    assert complete([part(1, parts=1), replace(part(2, parts=1), mode=GpuMode.PASSTHROUGH)])


def test_a_killed_prolog_is_undone_and_its_job_requeued_by_the_second_run(pool: Pool) -> None:
    """What the wrapper runs when the prolog died by a signal (``--after-kill``)."""
    assert pool.hook("prolog", pool.env("910", vgpu=1))[0] == 0  # a neighbour
    neighbour = pool.instances()
    env = pool.env("911", vgpu=7)
    pool.fault("after-create-ci")
    assert pool.hook("prolog", env)[0] == -9
    assert len(pool.instances()) == 2
    rc, _, err = pool.hook("prolog", env, 10, "--after-kill")
    assert rc == 0, err
    assert "action=prolog-killed level=warning" in err
    assert "requeue 911" in pool.calls
    update = next(c for c in pool.slurm_calls() if c.startswith("update"))
    assert "slurmpool: requeued 1x: the prolog was killed half-way" in update
    assert {a.state for a in _records(pool, "911")} == {RELEASED}
    assert pool.instances() == neighbour


def test_after_kill_is_for_the_prolog_only() -> None:
    from slurmpool.hooks.__main__ import UsageError, parse_args

    assert parse_args(["prolog", "--after-kill"]).after_kill
    with pytest.raises(UsageError, match="unexpected argument '--after-kill'"):
        parse_args(["epilog", "--after-kill"])
