"""The state store's pooling migration (core schema 1 -> 2) on a database written by the
previous version."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from slurmpool.modes import GpuMode
from slurmpool.state.db import split_sql, store_path
from slurmpool.state.store import ALLOCATIONS, NewAllocation, NodeStore, open_node_store


def _v1_database(path: Path) -> None:
    """A database as slurmpool with core schema 1 left it, with one allocation."""
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE schema_versions (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    for statement in split_sql(ALLOCATIONS.migrations[0]):
        conn.execute(statement)
    conn.execute("INSERT INTO schema_versions VALUES ('core', 1)")
    conn.execute(
        "INSERT INTO allocations (job_id, user, uid, mode, gpu_index, gpu_uuid, profile, "
        "placement_start, placement_size, state, created_at, updated_at) "
        "VALUES ('7', 'alice', 1000, 'mig', 0, 'GPU-0', '1g.10gb', 6, 1, 'active', 1, 1)"
    )
    conn.commit()
    conn.close()


def test_migrates_from_core_schema_1(tmp_path: Path) -> None:
    path = tmp_path / "n.sqlite"
    _v1_database(path)
    with NodeStore(path) as store:
        assert store.schema_version() == 4
        assert store.meta("boot_id") is None
        assert store.exclusions() == []
        [old] = store.live()
        assert (old.job_id, old.owner_pid, old.details) == ("7", None, {})
        with store.transaction():
            aid = store.add_intent(
                NewAllocation(
                    job_id="8",
                    user="bob",
                    uid=1001,
                    mode=GpuMode.PASSTHROUGH,
                    gpu_index=2,
                    gpu_uuid="GPU-2",
                    owner_pid=42,
                    owner_start=99,
                    details={"vfio": {"group": "37"}},
                )
            )
            store.set_details(aid, {"health": {"nvml": "ok"}})
            store.set_owner(aid, None, None)
        new = store.get(aid)
        assert (new.owner_pid, new.details) == (None, {"health": {"nvml": "ok"}})
        assert store.requeue_count("8") == 0
        with store.transaction():
            store.add_exclusion("9")
            store.add_exclusion("8")
            store.add_exclusion("9")  # again: one entry, its time renewed
        assert store.exclusions() == ["8", "9"]
        with store.transaction():
            store.drop_exclusion("8")
            store.drop_exclusion("404")
        assert store.exclusions() == ["9"]


def test_open_node_store_is_root_only(tmp_path: Path) -> None:
    with open_node_store(tmp_path, "sbx1") as store:
        assert store.path == store_path(tmp_path, "sbx1")
    assert Path(store_path(tmp_path, "sbx1")).stat().st_mode & 0o777 == 0o600


def test_a_slice_held_by_another_job_is_retried_when_that_job_ends(tmp_path: Path) -> None:
    from slurmpool.pooling.reconcile import RETRY_AFTER_KEY, defer, stop_waiting_for
    from slurmpool.pooling.release import HeldByOtherJobs, ReleaseError
    from slurmpool.state.store import RELEASING

    with NodeStore(tmp_path / "n1.sqlite") as store, store.transaction():
        ids = []
        for job in ("1", "2"):
            aid = store.add_intent(NewAllocation(job, "alice", 1000, GpuMode.MIG, 0, "GPU-0"))
            store.mark_active(aid, gi_id=int(job), ci_id=0)
            store.set_state(aid, RELEASING)
            ids.append(aid)
        held, stuck = (store.get(i) for i in ids)
        assert held is not None and stuck is not None
        defer(store, held, HeldByOtherJobs("in use by job 9", ("9",)))
        defer(store, stuck, ReleaseError("busy"))
        assert stop_waiting_for(store, "8") == []
        assert stop_waiting_for(store, "9") == [ids[0]]
        after = {a.id: a.details for a in store.live()}
    assert RETRY_AFTER_KEY not in after[ids[0]] and "waits_for" not in after[ids[0]]
    assert RETRY_AFTER_KEY in after[ids[1]]  # an instance busy for another reason waits
