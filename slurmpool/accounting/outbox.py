"""The durable accounting outbox in the node state store.

The epilog puts each job's summary (this node's part) here in the same
SQLite database as the allocations, so a summary survives a crash, a
slurmd or monitord restart and a dead slurmdbd.  A summary leaves the
outbox only after ``sacct`` shows it stored (:mod:`.push`).  One row per
job, node and run (the job's restart count): enqueueing again replaces the
row (a rerun epilog), so nothing is ever pushed twice as two entries, and a
requeued job's later run on the same node never replaces an earlier run's
summary that is still waiting.

Standard library only: the epilog writes here.
"""

from __future__ import annotations

import json
import time

from slurmpool.records import record
from slurmpool.state.db import Component

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from slurmpool.state.db import StateDB

# The outbox table, in the node's state database.
OUTBOX = Component(
    "accounting",
    (
        """
        CREATE TABLE accounting_outbox (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id          TEXT    NOT NULL,
            node            TEXT    NOT NULL,
            cluster         TEXT,
            part            TEXT    NOT NULL,
            created_at      REAL    NOT NULL,
            attempts        INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL    NOT NULL,
            last_error      TEXT    NOT NULL DEFAULT '',
            UNIQUE (job_id, node)
        );
        CREATE INDEX accounting_outbox_due ON accounting_outbox (next_attempt_at);
        """,
        # 2: one row per job, node and run (a table rebuild: SQLite cannot change a
        # UNIQUE constraint in place).  Rows from before were each a job's only row on
        # the node, so run 0 keeps them apart; pushing reads the run from the part.
        """
        CREATE TABLE accounting_outbox_2 (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id          TEXT    NOT NULL,
            node            TEXT    NOT NULL,
            run             INTEGER NOT NULL DEFAULT 0,
            cluster         TEXT,
            part            TEXT    NOT NULL,
            created_at      REAL    NOT NULL,
            attempts        INTEGER NOT NULL DEFAULT 0,
            next_attempt_at REAL    NOT NULL,
            last_error      TEXT    NOT NULL DEFAULT '',
            UNIQUE (job_id, node, run)
        );
        INSERT INTO accounting_outbox_2 (id, job_id, node, run, cluster, part, created_at,
            attempts, next_attempt_at, last_error)
            SELECT id, job_id, node, 0, cluster, part, created_at, attempts,
                next_attempt_at, last_error FROM accounting_outbox;
        DROP TABLE accounting_outbox;
        ALTER TABLE accounting_outbox_2 RENAME TO accounting_outbox;
        CREATE INDEX accounting_outbox_due ON accounting_outbox (next_attempt_at);
        """,
        # 3: when the summary was written and verified once (NULL: not yet); the row
        # stays until a second check after the settle time finds it still stored.
        "ALTER TABLE accounting_outbox ADD COLUMN written_at REAL;",
        # 4: which runs of which jobs have had their summary made on this node, so
        # monitord makes the ones an epilog never did (missed.py), and only those.
        """
        CREATE TABLE accounting_made (
            job_id  TEXT    NOT NULL,
            run     INTEGER NOT NULL,
            made_at REAL    NOT NULL,
            PRIMARY KEY (job_id, run)
        );
        INSERT OR IGNORE INTO accounting_made (job_id, run, made_at)
            SELECT job_id, run, created_at FROM accounting_outbox;
        """,
    ),
)


@record(frozen=True, slots=True)
class Pending:
    """A summary waiting in the outbox."""

    id: int
    job_id: str
    node: str
    run: int
    cluster: str | None
    part: dict[str, Any]
    created_at: float
    attempts: int
    next_attempt_at: float
    last_error: str
    written_at: float | None = None


def put(
    store: StateDB,
    job_id: str,
    node: str,
    cluster: str | None,
    part: dict[str, Any],
    now: float | None = None,
) -> None:
    """Put (or replace) this node's part of ``job_id``'s summary for the run the part
    names; due at once."""
    t = time.time() if now is None else now
    text = json.dumps(part, separators=(",", ":"), sort_keys=True)
    run = part.get("run", 0)
    run = run if isinstance(run, int) else 0
    # Durable: the epilog's summary is the only copy once the job's samples are pruned.
    with store.transaction(durable=True) as conn:
        conn.execute(
            """INSERT INTO accounting_made (job_id, run, made_at) VALUES (?, ?, ?)
               ON CONFLICT (job_id, run) DO UPDATE SET made_at = excluded.made_at""",
            (job_id, run, t),
        )
        conn.execute(
            """INSERT INTO accounting_outbox (job_id, node, run, cluster, part, created_at,
                   next_attempt_at) VALUES (?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (job_id, node, run) DO UPDATE SET cluster = excluded.cluster,
                   part = excluded.part, created_at = excluded.created_at, attempts = 0,
                   next_attempt_at = excluded.next_attempt_at, last_error = '',
                   written_at = NULL""",
            (job_id, node, run, cluster, text, t, t),
        )


def _pending(row: Any) -> Pending:
    return Pending(
        id=row["id"],
        job_id=row["job_id"],
        node=row["node"],
        run=row["run"],
        cluster=row["cluster"],
        part=json.loads(row["part"]),
        created_at=row["created_at"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_error=row["last_error"],
        written_at=row["written_at"],
    )


def pending(store: StateDB, due_by: float | None = None, limit: int = 1000) -> list[Pending]:
    """Summaries in the outbox (only those due by ``due_by`` when given), oldest first."""
    sql = "SELECT * FROM accounting_outbox"
    args: list[object] = []
    if due_by is not None:
        sql += " WHERE next_attempt_at <= ?"
        args.append(due_by)
    rows = store.conn.execute(sql + " ORDER BY id LIMIT ?", [*args, limit]).fetchall()
    return [_pending(r) for r in rows]


def count(store: StateDB) -> int:
    return int(store.conn.execute("SELECT COUNT(*) FROM accounting_outbox").fetchone()[0])


def next_due(store: StateDB) -> float | None:
    row = store.conn.execute("SELECT MIN(next_attempt_at) FROM accounting_outbox").fetchone()
    return None if row is None or row[0] is None else float(row[0])


def delete_if_unchanged(store: StateDB, item: Pending) -> bool:
    """Remove ``item`` once stored, unless a newer summary replaced it meanwhile."""
    with store.transaction() as conn:
        cur = conn.execute(
            "DELETE FROM accounting_outbox WHERE id = ? AND created_at = ?",
            (item.id, item.created_at),
        )
    return cur.rowcount > 0


def record_failure(store: StateDB, item: Pending, error: str, retry_at: float) -> None:
    """A push of ``item`` failed: count the attempt and try again at ``retry_at``."""
    with store.transaction() as conn:
        conn.execute(
            """UPDATE accounting_outbox SET attempts = attempts + 1, last_error = ?,
                   next_attempt_at = ? WHERE id = ? AND created_at = ?""",
            (error[:2000], retry_at, item.id, item.created_at),
        )


def defer(store: StateDB, item: Pending, why: str, retry_at: float) -> None:
    """``item``'s job has not ended (yet, or again): look at ``retry_at`` without
    counting an attempt; whatever was written must be written again after the end."""
    with store.transaction() as conn:
        conn.execute(
            """UPDATE accounting_outbox SET last_error = ?, next_attempt_at = ?,
                   written_at = NULL WHERE id = ? AND created_at = ?""",
            (why[:2000], retry_at, item.id, item.created_at),
        )


def mark_written(store: StateDB, item: Pending, written_at: float, check_at: float) -> bool:
    """``item`` was written and read back: check it again at ``check_at``."""
    with store.transaction() as conn:
        cur = conn.execute(
            """UPDATE accounting_outbox SET written_at = ?, next_attempt_at = ?,
                   last_error = '' WHERE id = ? AND created_at = ?""",
            (written_at, check_at, item.id, item.created_at),
        )
    return cur.rowcount > 0


def made(store: StateDB, job_id: str) -> dict[int, float]:
    """Run -> when its summary was made on this node, for ``job_id``."""
    rows = store.conn.execute(
        "SELECT run, made_at FROM accounting_made WHERE job_id = ?", (job_id,)
    ).fetchall()
    return {int(r["run"]): float(r["made_at"]) for r in rows}


def prune_made(store: StateDB, before: float) -> int:
    """Forget summaries made before ``before`` (their jobs' samples are gone by then)."""
    with store.transaction() as conn:
        return int(
            conn.execute("DELETE FROM accounting_made WHERE made_at < ?", (before,)).rowcount
        )
