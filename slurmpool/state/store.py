"""The hooks' allocations in the node's state database (:mod:`slurmpool.state.db`).

It records every allocation slurmpool made on the node with a two-phase
life cycle, ``intent -> active -> releasing -> released``, so that a hook
killed half-way leaves a record the next hook run can reconcile.  Placement
decisions and their records happen inside one ``BEGIN IMMEDIATE``
transaction (:meth:`NodeStore.transaction`): SQLite then lets one writer in
at a time, and concurrent prologs on a node never pick the same slots.

Standard library only: the job hooks open this on every job start.
"""

from __future__ import annotations

import json
import os
import time

from slurmpool.modes import GpuMode
from slurmpool.records import field, record
from slurmpool.state.db import Component, StateDB, create_private, store_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable, Sequence
    from typing import Any

INTENT = "intent"
ACTIVE = "active"
RELEASING = "releasing"
RELEASED = "released"
# The details key for the job's run (its restart count) that the prolog made a record in:
# an epilog's own count is already the next run's after `scontrol requeue` (measured on
# 22.05), the prolog's is the run's own.
RUN = "run"
LIVE_STATES = (INTENT, ACTIVE, RELEASING)

# The allocations and requeues tables ("core": the name files already carry).
ALLOCATIONS = Component(
    "core",
    (
        """
        CREATE TABLE allocations (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id          TEXT    NOT NULL,
            user            TEXT    NOT NULL,
            uid             INTEGER NOT NULL,
            mode            TEXT    NOT NULL CHECK (mode IN ('mig', 'passthrough', 'shared')),
            gpu_index       INTEGER NOT NULL,
            gpu_uuid        TEXT    NOT NULL,
            profile         TEXT,
            placement_start INTEGER,
            placement_size  INTEGER,
            shares          INTEGER,
            gi_id           INTEGER,
            ci_id           INTEGER,
            mig_uuid        TEXT,
            cap_minors      TEXT    NOT NULL DEFAULT '[]',
            state           TEXT    NOT NULL
                            CHECK (state IN ('intent', 'active', 'releasing', 'released')),
            created_at      REAL    NOT NULL,
            updated_at      REAL    NOT NULL,
            released_at     REAL,
            note            TEXT    NOT NULL DEFAULT ''
        );
        CREATE INDEX allocations_job ON allocations (job_id);
        CREATE INDEX allocations_live ON allocations (state) WHERE state != 'released';
        CREATE TABLE requeues (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id  TEXT NOT NULL,
            at      REAL NOT NULL,
            reason  TEXT NOT NULL
        );
        """,
        # 2: which hook process holds a record mid-transition (so reconcile can tell a
        # crashed hook from a running one) and mode-specific facts needed to undo an
        # allocation (vfio driver and group, health counters) as a JSON object.
        """
        ALTER TABLE allocations ADD COLUMN owner_pid INTEGER;
        ALTER TABLE allocations ADD COLUMN owner_start INTEGER;
        ALTER TABLE allocations ADD COLUMN details TEXT NOT NULL DEFAULT '{}';
        CREATE INDEX requeues_job ON requeues (job_id);
        """,
        # 3: facts about the node the records depend on (the boot they were made in).
        """
        CREATE TABLE node_meta (
            key     TEXT PRIMARY KEY,
            value   TEXT NOT NULL
        );
        """,
        # 4: the jobs this node's prolog added to their own ExcNodeList on a requeue, which
        # its epilog takes the node out of again once it frees slices (pooling/exclude.py).
        """
        CREATE TABLE exclusions (
            job_id  TEXT PRIMARY KEY,
            at      REAL NOT NULL
        );
        """,
    ),
)
SCHEMA_VERSION = ALLOCATIONS.version


def open_node_store(
    state_dir: str | os.PathLike[str],
    node: str,
    components: Sequence[Component] = (),
    timeout_s: float = 30.0,
    lock_wait: Callable[[], float] | None = None,
) -> NodeStore:
    """Open ``node``'s store with the allocations and ``components``, creating it
    readable by root only (mode 0600); ``timeout_s`` and ``lock_wait`` as for
    :class:`~slurmpool.state.db.StateDB`."""
    path = store_path(state_dir, node)
    create_private(path)
    return NodeStore(path, components, timeout_s=timeout_s, lock_wait=lock_wait)


@record(frozen=True, slots=True)
class Allocation:
    id: int
    job_id: str
    user: str
    uid: int
    mode: GpuMode
    gpu_index: int
    gpu_uuid: str
    profile: str | None
    placement_start: int | None
    placement_size: int | None
    shares: int | None
    gi_id: int | None
    ci_id: int | None
    mig_uuid: str | None
    cap_minors: tuple[int, ...]
    state: str
    created_at: float
    updated_at: float
    released_at: float | None
    note: str
    owner_pid: int | None = None
    owner_start: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Allocation:
        d: dict[str, Any] = dict(row)
        d["mode"] = GpuMode(d["mode"])
        d["cap_minors"] = tuple(json.loads(d["cap_minors"]))
        d["details"] = json.loads(d.get("details") or "{}")
        return cls(**d)

    @property
    def placement(self) -> tuple[int, int] | None:
        """``(start, size)`` of a MIG allocation, None for other modes."""
        if self.placement_start is None or self.placement_size is None:
            return None
        return (self.placement_start, self.placement_size)


@record(slots=True)
class NewAllocation:
    """What a hook intends to allocate, before the hardware is touched."""

    job_id: str
    user: str
    uid: int
    mode: GpuMode
    gpu_index: int
    gpu_uuid: str
    profile: str | None = None
    placement_start: int | None = None
    placement_size: int | None = None
    shares: int | None = None
    note: str = ""
    owner_pid: int | None = None
    owner_start: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


class NodeStore(StateDB):
    """The state database at ``path`` with the allocations and ``components``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        components: Sequence[Component] = (),
        timeout_s: float = 30.0,
        lock_wait: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(path, (ALLOCATIONS, *components), timeout_s, lock_wait)

    def schema_version(self, name: str = ALLOCATIONS.name) -> int:
        return super().schema_version(name)

    # -- allocations ------------------------------------------------------------

    def live(self) -> list[Allocation]:
        """Allocations not yet released (intent, active, releasing)."""
        rows = self.conn.execute(
            "SELECT * FROM allocations WHERE state != 'released' ORDER BY id"
        ).fetchall()
        return [Allocation.from_row(r) for r in rows]

    def for_job(self, job_id: str, include_released: bool = False) -> list[Allocation]:
        sql = "SELECT * FROM allocations WHERE job_id = ?"
        if not include_released:
            sql += " AND state != 'released'"
        rows = self.conn.execute(sql + " ORDER BY id", (job_id,)).fetchall()
        return [Allocation.from_row(r) for r in rows]

    def get(self, alloc_id: int) -> Allocation:
        row = self.conn.execute("SELECT * FROM allocations WHERE id = ?", (alloc_id,)).fetchone()
        if row is None:
            raise KeyError(alloc_id)
        return Allocation.from_row(row)

    def add_intent(self, new: NewAllocation) -> int:
        now = time.time()
        cur = self.conn.execute(
            """INSERT INTO allocations (job_id, user, uid, mode, gpu_index, gpu_uuid, profile,
                   placement_start, placement_size, shares, state, created_at, updated_at, note,
                   owner_pid, owner_start, details)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'intent', ?, ?, ?, ?, ?, ?)""",
            (
                new.job_id,
                new.user,
                new.uid,
                new.mode,
                new.gpu_index,
                new.gpu_uuid,
                new.profile,
                new.placement_start,
                new.placement_size,
                new.shares,
                now,
                now,
                new.note,
                new.owner_pid,
                new.owner_start,
                json.dumps(new.details),
            ),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def mark_active(
        self,
        alloc_id: int,
        gi_id: int | None = None,
        ci_id: int | None = None,
        mig_uuid: str | None = None,
        cap_minors: Sequence[int] = (),
    ) -> None:
        self.conn.execute(
            """UPDATE allocations SET state = 'active', gi_id = ?, ci_id = ?, mig_uuid = ?,
                   cap_minors = ?, updated_at = ? WHERE id = ?""",
            (gi_id, ci_id, mig_uuid, json.dumps(list(cap_minors)), time.time(), alloc_id),
        )

    def set_owner(self, alloc_id: int, pid: int | None, start: int | None) -> None:
        """Record which hook process now holds the allocation (None: nobody)."""
        self.conn.execute(
            "UPDATE allocations SET owner_pid = ?, owner_start = ?, updated_at = ? WHERE id = ?",
            (pid, start, time.time(), alloc_id),
        )

    def set_details(self, alloc_id: int, details: dict[str, Any]) -> None:
        """Replace the mode-specific facts of an allocation (a JSON object)."""
        self.conn.execute(
            "UPDATE allocations SET details = ?, updated_at = ? WHERE id = ?",
            (json.dumps(details), time.time(), alloc_id),
        )

    def set_state(self, alloc_id: int, state: str, note: str | None = None) -> None:
        if state not in (INTENT, ACTIVE, RELEASING, RELEASED):
            raise ValueError(f"unknown allocation state {state!r}")
        now = time.time()
        self.conn.execute(
            """UPDATE allocations SET state = ?, updated_at = ?,
                   released_at = CASE WHEN ? = 'released' THEN ? ELSE released_at END,
                   note = COALESCE(?, note)
               WHERE id = ?""",
            (state, now, state, now, note, alloc_id),
        )

    # -- requeues -----------------------------------------------------------------

    def record_requeue(self, job_id: str, reason: str) -> None:
        self.conn.execute(
            "INSERT INTO requeues (job_id, at, reason) VALUES (?, ?, ?)",
            (job_id, time.time(), reason),
        )

    def requeue_count(self, job_id: str | None = None) -> int:
        """Requeues recorded on this node (of one job when ``job_id`` is given)."""
        if job_id is None:
            return int(self.conn.execute("SELECT COUNT(*) FROM requeues").fetchone()[0])
        row = self.conn.execute("SELECT COUNT(*) FROM requeues WHERE job_id = ?", (job_id,))
        return int(row.fetchone()[0])

    # -- exclusions ---------------------------------------------------------------

    def add_exclusion(self, job_id: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO exclusions (job_id, at) VALUES (?, ?)", (job_id, time.time())
        )

    def exclusions(self) -> list[str]:
        """The jobs this node excluded itself from, oldest first."""
        rows = self.conn.execute("SELECT job_id FROM exclusions ORDER BY at, job_id")
        return [str(r[0]) for r in rows.fetchall()]

    def drop_exclusion(self, job_id: str) -> None:
        self.conn.execute("DELETE FROM exclusions WHERE job_id = ?", (job_id,))

    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM node_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO node_meta (key, value) VALUES (?, ?)", (key, value)
        )

    def requeues(self, limit: int = 20) -> list[tuple[str, float, str]]:
        rows = self.conn.execute(
            "SELECT job_id, at, reason FROM requeues ORDER BY id DESC LIMIT ?", (limit,)
        ).fetchall()
        return [(r["job_id"], r["at"], r["reason"]) for r in rows]
