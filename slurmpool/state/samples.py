"""GPU samples in the node state store: one row per device and job per pass.

Tables (the component :data:`SAMPLES`, named ``monitor`` in files): monitord
writes them, the epilog and ``jobstats`` read them.

- ``gpu_samples``: raw rows for timelines and running-job views, kept for a
  bounded time and row count (:func:`prune`);
- ``job_device_totals``: running totals per job and device (sample count,
  utilisation sum and max over the samples that had one, peak memory,
  first and last energy reading), updated in the same transaction as the
  rows, so a job's summary is exact however long it ran, whatever the
  retention of the raw rows.

Utilisation ``None`` means "not available" (MIG on Ampere): it is stored as
NULL and never counted as zero.

Standard library only: the epilog reads these tables.
"""

from __future__ import annotations

import time

from slurmpool.modes import DeviceKind
from slurmpool.records import record
from slurmpool.state.db import Component

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

    from slurmpool.state.db import StateDB

WHOLE_GPU = -1  # gi_id stored for a whole GPU (a key column cannot be NULL)

KIND_GPU = DeviceKind.GPU  # a whole GPU (passthrough)
KIND_MIG = DeviceKind.MIG  # a MIG instance
KIND_SHARE = DeviceKind.SHARE  # a time-sliced share of a GPU
KINDS = tuple(DeviceKind)

SAMPLES = Component(
    "monitor",
    (
        """
        CREATE TABLE gpu_samples (
            id            INTEGER PRIMARY KEY,
            t             REAL    NOT NULL,
            job_id        TEXT,
            user          TEXT,
            account       TEXT,
            gpu_index     INTEGER NOT NULL,
            gi_id         INTEGER NOT NULL,
            kind          TEXT    NOT NULL,
            model         TEXT,
            profile       TEXT,
            util          REAL,
            util_source   TEXT,
            mem_used_mib  INTEGER,
            mem_total_mib INTEGER,
            power_mw      INTEGER,
            energy_mj     INTEGER,
            nprocs        INTEGER NOT NULL DEFAULT 0
        );
        CREATE INDEX gpu_samples_job ON gpu_samples (job_id, t) WHERE job_id IS NOT NULL;
        CREATE INDEX gpu_samples_t ON gpu_samples (t);
        CREATE TABLE job_device_totals (
            job_id          TEXT    NOT NULL,
            gpu_index       INTEGER NOT NULL,
            gi_id           INTEGER NOT NULL,
            kind            TEXT    NOT NULL,
            model           TEXT,
            profile         TEXT,
            slices          INTEGER,
            total_slices    INTEGER,
            user            TEXT,
            account         TEXT,
            first_t         REAL    NOT NULL,
            last_t          REAL    NOT NULL,
            n               INTEGER NOT NULL,
            util_n          INTEGER NOT NULL,
            util_sum        REAL    NOT NULL,
            util_max        REAL,
            util_source     TEXT,
            mem_max_mib     INTEGER,
            mem_total_mib   INTEGER,
            energy_first_mj INTEGER,
            energy_last_mj  INTEGER,
            PRIMARY KEY (job_id, gpu_index, gi_id)
        );
        CREATE INDEX job_device_totals_last ON job_device_totals (last_t);
        """,
    ),
)


@record(frozen=True, slots=True)
class DeviceSample:
    """One device (whole GPU, MIG instance or share) in one pass, attributed to a job or not.

    ``gi_id`` is None for a whole GPU.  ``util`` is percent, None where the
    hardware does not report it; ``util_source`` says where it came from
    (``nvml``: the GPU's utilisation; ``gpm``: GPM SM utilisation).
    ``slices``/``total_slices`` weigh a MIG instance within its GPU (2 of 7).
    """

    t: float
    gpu_index: int
    gi_id: int | None
    kind: str
    job_id: str | None = None
    user: str | None = None
    account: str | None = None
    model: str | None = None
    profile: str | None = None
    slices: int | None = None
    total_slices: int | None = None
    util: float | None = None
    util_source: str | None = None
    mem_used_mib: int | None = None
    mem_total_mib: int | None = None
    power_mw: int | None = None
    energy_mj: int | None = None
    nprocs: int = 0
    uuid: str | None = None


@record(frozen=True, slots=True)
class DeviceTotals:
    """Running totals of one job on one device (a row of ``job_device_totals``)."""

    job_id: str
    gpu_index: int
    gi_id: int | None
    kind: str
    model: str | None
    profile: str | None
    slices: int | None
    total_slices: int | None
    user: str | None
    account: str | None
    first_t: float
    last_t: float
    n: int
    util_n: int
    util_sum: float
    util_max: float | None
    util_source: str | None
    mem_max_mib: int | None
    mem_total_mib: int | None
    energy_first_mj: int | None
    energy_last_mj: int | None

    @property
    def util_mean(self) -> float | None:
        return self.util_sum / self.util_n if self.util_n else None

    @property
    def energy_j(self) -> float | None:
        if self.energy_first_mj is None or self.energy_last_mj is None:
            return None
        return max(0, self.energy_last_mj - self.energy_first_mj) / 1000.0


def _gi(gi_id: int | None) -> int:
    return WHOLE_GPU if gi_id is None else gi_id


def _gi_back(value: int) -> int | None:
    return None if value == WHOLE_GPU else int(value)


_INSERT = """INSERT INTO gpu_samples (t, job_id, user, account, gpu_index, gi_id, kind, model,
    profile, util, util_source, mem_used_mib, mem_total_mib, power_mw, energy_mj, nprocs)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""

_UPSERT = """INSERT INTO job_device_totals (job_id, gpu_index, gi_id, kind, model, profile,
    slices, total_slices, user, account, first_t, last_t, n, util_n, util_sum, util_max,
    util_source, mem_max_mib, mem_total_mib, energy_first_mj, energy_last_mj)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (job_id, gpu_index, gi_id) DO UPDATE SET
        last_t = excluded.last_t,
        n = n + 1,
        util_n = util_n + excluded.util_n,
        util_sum = util_sum + excluded.util_sum,
        util_max = CASE WHEN excluded.util_max IS NULL THEN util_max
                        WHEN util_max IS NULL OR excluded.util_max > util_max
                        THEN excluded.util_max ELSE util_max END,
        util_source = COALESCE(excluded.util_source, util_source),
        mem_max_mib = MAX(COALESCE(mem_max_mib, 0), COALESCE(excluded.mem_max_mib, 0)),
        mem_total_mib = COALESCE(excluded.mem_total_mib, mem_total_mib),
        account = COALESCE(excluded.account, account),
        energy_first_mj = COALESCE(energy_first_mj, excluded.energy_first_mj),
        energy_last_mj = COALESCE(excluded.energy_last_mj, energy_last_mj)"""


def write_samples(store: StateDB, samples: Sequence[DeviceSample]) -> None:
    """Store one pass: its raw rows and the running totals of every attributed row."""
    rows = [
        (
            s.t,
            s.job_id,
            s.user,
            s.account,
            s.gpu_index,
            _gi(s.gi_id),
            s.kind,
            s.model,
            s.profile,
            s.util,
            s.util_source,
            s.mem_used_mib,
            s.mem_total_mib,
            s.power_mw,
            s.energy_mj,
            s.nprocs,
        )
        for s in samples
    ]
    totals = [
        (
            s.job_id,
            s.gpu_index,
            _gi(s.gi_id),
            s.kind,
            s.model,
            s.profile,
            s.slices,
            s.total_slices,
            s.user,
            s.account,
            s.t,
            s.t,
            1 if s.util is not None else 0,
            s.util if s.util is not None else 0.0,
            s.util,
            s.util_source,
            s.mem_used_mib,
            s.mem_total_mib,
            s.energy_mj,
            s.energy_mj,
        )
        for s in samples
        if s.job_id is not None
    ]
    with store.transaction() as conn:
        conn.executemany(_INSERT, rows)
        if totals:
            conn.executemany(_UPSERT, totals)


def job_totals(store: StateDB, job_id: str) -> list[DeviceTotals]:
    """The running totals of ``job_id`` per device, by GPU and instance."""
    rows = store.conn.execute(
        "SELECT * FROM job_device_totals WHERE job_id = ? ORDER BY gpu_index, gi_id", (job_id,)
    ).fetchall()
    out = []
    for r in rows:
        d = dict(r)
        d["gi_id"] = _gi_back(d["gi_id"])
        out.append(DeviceTotals(**d))
    return out


def job_samples(store: StateDB, job_id: str, since: float | None = None) -> list[DeviceSample]:
    """The raw rows of ``job_id`` still kept, oldest first."""
    sql = "SELECT * FROM gpu_samples WHERE job_id = ?"
    args: list[object] = [job_id]
    if since is not None:
        sql += " AND t >= ?"
        args.append(since)
    rows = store.conn.execute(sql + " ORDER BY t, gpu_index, gi_id", args).fetchall()
    return [_sample(r) for r in rows]


def _sample(r: sqlite3.Row) -> DeviceSample:
    return DeviceSample(
        t=r["t"],
        gpu_index=r["gpu_index"],
        gi_id=_gi_back(r["gi_id"]),
        kind=r["kind"],
        job_id=r["job_id"],
        user=r["user"],
        account=r["account"],
        model=r["model"],
        profile=r["profile"],
        util=r["util"],
        util_source=r["util_source"],
        mem_used_mib=r["mem_used_mib"],
        mem_total_mib=r["mem_total_mib"],
        power_mw=r["power_mw"],
        energy_mj=r["energy_mj"],
        nprocs=r["nprocs"],
    )


@record(frozen=True, slots=True)
class Retention:
    """How much raw history to keep: rows newer than ``max_age_s``, at most ``max_rows``.

    Running totals of a job are kept ``totals_age_s`` after its last sample
    (the epilog takes them at job end; this bounds what a lost epilog leaves).
    """

    max_age_s: float = 48 * 3600.0
    max_rows: int = 2_000_000
    totals_age_s: float = 14 * 86400.0


def prune(store: StateDB, retention: Retention, now: float | None = None) -> int:
    """Apply ``retention``; returns the number of raw rows deleted."""
    t = time.time() if now is None else now
    with store.transaction() as conn:
        deleted = conn.execute(
            "DELETE FROM gpu_samples WHERE t < ?", (t - retention.max_age_s,)
        ).rowcount
        count = int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
        if count > retention.max_rows:
            cut = conn.execute(
                "SELECT t FROM gpu_samples ORDER BY t DESC LIMIT 1 OFFSET ?",
                (retention.max_rows,),
            ).fetchone()
            if cut is not None:
                deleted += conn.execute("DELETE FROM gpu_samples WHERE t <= ?", (cut[0],)).rowcount
        conn.execute(
            "DELETE FROM job_device_totals WHERE last_t < ?", (t - retention.totals_age_s,)
        )
    return int(deleted)


def forget_totals(store: StateDB, job_id: str) -> None:
    """Drop ``job_id``'s running totals once a summary holds them, so a later run of the
    job on this node (a requeue) is summarised from its own samples only."""
    with store.transaction() as conn:
        conn.execute("DELETE FROM job_device_totals WHERE job_id = ?", (job_id,))
