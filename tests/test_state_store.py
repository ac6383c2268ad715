"""The node state store: schema, life cycle, concurrency across processes, migrations."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from slurmpool.modes import GpuMode
from slurmpool.state.db import Component, StateDB, StateStoreError, StoreBusy, store_path
from slurmpool.state.store import (
    ACTIVE,
    RELEASED,
    SCHEMA_VERSION,
    NewAllocation,
    NodeStore,
    open_node_store,
)


def _new(job: str, start: int = 0) -> NewAllocation:
    return NewAllocation(
        job_id=job,
        user="alice",
        uid=1000,
        mode=GpuMode.MIG,
        gpu_index=0,
        gpu_uuid="GPU-0",
        profile="1g.10gb",
        placement_start=start,
        placement_size=1,
    )


def test_life_cycle(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.db") as store:
        with store.transaction():
            aid = store.add_intent(_new("42"))
        assert store.get(aid).state == "intent"
        with store.transaction():
            store.mark_active(aid, gi_id=13, ci_id=0, mig_uuid="MIG-x", cap_minors=[120, 121])
        a = store.get(aid)
        assert (a.state, a.gi_id, a.cap_minors) == (ACTIVE, 13, (120, 121))
        with store.transaction():
            store.set_state(aid, RELEASED)
        assert store.live() == []
        assert store.for_job("42", include_released=True)[0].released_at is not None


def test_rollback_on_error(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.db") as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.add_intent(_new("1"))
            raise RuntimeError("prolog failed half-way")
        assert store.live() == []


def test_bad_state_rejected(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.db") as store, pytest.raises(ValueError, match="unknown"):
        store.set_state(1, "gone")


def _claim_slot(path: str, job: str, q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    store = NodeStore(path)
    with store.transaction():
        taken = {a.placement_start for a in store.live()}
        slot = next(i for i in range(64) if i not in taken)
        store.add_intent(_new(job, slot))
    q.put(slot)


def test_concurrent_writers_never_take_the_same_slot(tmp_path: Path) -> None:
    path = str(tmp_path / "n.db")
    NodeStore(path).close()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_claim_slot, args=(path, str(i), q)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    slots = sorted(q.get(timeout=5) for _ in procs)
    assert slots == list(range(8))


def test_schema_version_and_newer_schema_refused(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with NodeStore(path) as store:
        assert store.schema_version() == SCHEMA_VERSION
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE schema_versions SET version = ? WHERE component = 'core'", (SCHEMA_VERSION + 1,)
    )
    conn.commit()
    conn.close()
    with pytest.raises(StateStoreError, match="newer than this slurmpool"):
        NodeStore(path)


def test_reopen_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    with NodeStore(path) as store, store.transaction():
        store.add_intent(_new("7"))
        store.record_requeue("8", "no room for 4g.40gb")
    with NodeStore(path) as store:
        assert [a.job_id for a in store.live()] == ["7"]
        assert store.requeue_count() == 1


def test_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StateStoreError, match=str(path)):
        NodeStore(path)


def test_component_migrations_apply_in_order(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    NodeStore(path).close()
    extra = Component("test-extra", ("CREATE TABLE extra_a (x INTEGER)",))
    with NodeStore(path, (extra,)) as store:
        assert store.schema_version("test-extra") == 1
    # A later release appends a migration; an existing database picks it up.
    later = Component("test-extra", (*extra.migrations, "ALTER TABLE extra_a ADD COLUMN y TEXT"))
    with NodeStore(path, (later,)) as store:
        assert store.schema_version("test-extra") == 2
        store.conn.execute("INSERT INTO extra_a (x) VALUES (1)")
        assert store.conn.execute("SELECT y FROM extra_a").fetchone()[0] is None
        assert store.schema_version() == SCHEMA_VERSION


def test_only_the_named_components_are_migrated(tmp_path: Path) -> None:
    path = tmp_path / "n.db"
    a = Component("a", ("CREATE TABLE a_t (x INTEGER)",))
    b = Component("b", ("CREATE TABLE b_t (x INTEGER)",))
    with StateDB(path, (a,)) as db:
        tables = {r[0] for r in db.conn.execute("SELECT name FROM sqlite_master")}
        assert "a_t" in tables and "b_t" not in tables and "allocations" not in tables
        assert (db.schema_version("a"), db.schema_version("b")) == (1, 0)
    with StateDB(path, (b, a)) as db:  # b joins later; a is left as it is
        assert (db.schema_version("a"), db.schema_version("b")) == (1, 1)


def test_a_component_named_twice_is_refused(tmp_path: Path) -> None:
    a = Component("a", ("CREATE TABLE a_t (x INTEGER)",))
    with pytest.raises(ValueError, match="components named twice"):
        StateDB(tmp_path / "n.db", (a, Component("a", ())))


def test_a_store_locked_while_it_opens_is_busy_not_an_error(tmp_path: Path) -> None:
    """Another process holds the file's lock while this one opens it (switching a new
    file to WAL needs the lock): StoreBusy, which hooks handle, and not a failure."""
    path = tmp_path / "s.db"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreBusy, match="locked by another process"):
            StateDB(path, [], timeout_s=0.05)
    finally:
        other.execute("ROLLBACK")
        other.close()
    StateDB(path, []).close()  # and once it is free, it opens


def test_opening_the_store_again_keeps_the_locks_of_open_connections(tmp_path: Path) -> None:
    """A long-lived process (monitord) opens the store again while a connection of its
    own is open.  Opening the database file outside SQLite and closing it would drop
    every POSIX lock the process holds on it (they belong to the process, not the
    descriptor), so another process's closing connection would find itself the last,
    delete the WAL and its index under the open connection, and leave every later
    connection 'disk I/O error' (seen in monitord on the sandbox)."""
    other = (
        "import sys; from slurmpool.state.store import open_node_store; "
        "s = open_node_store(sys.argv[1], 'n1'); s.live(); s.close()"
    )
    with open_node_store(str(tmp_path), "n1") as held:
        held.live()
        with open_node_store(str(tmp_path), "n1") as again:  # the same process
            again.live()
        subprocess.run([sys.executable, "-c", other, str(tmp_path)], check=True)
        path = store_path(str(tmp_path), "n1")
        assert os.path.exists(f"{path}-wal") and os.path.exists(f"{path}-shm")
        with held.transaction():
            held.set_meta("x", "1")
        with open_node_store(str(tmp_path), "n1") as third:
            assert third.meta("x") == "1"
