"""A node's state database: one SQLite file (WAL) per node, shared by components.

Each component (the hooks' allocations, monitord's samples, the accounting
outbox) owns its tables and declares them as a :class:`Component`: a name and
its migrations.  Whoever opens the database names the components it uses, and
only their migrations run; each component's version lives in
``schema_versions``, so components evolve independently.  Nothing registers
itself on import: what a process opens is what it asked for.

Standard library only: the job hooks open this on every job start.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from typing import TypeVar

    _DB = TypeVar("_DB", bound="StateDB")


class StateStoreError(RuntimeError):
    """The state store is unusable (corrupt, newer schema, unwritable)."""


class StoreBusy(StateStoreError):
    """The store's write lock was not free within the wait allowed: another process
    holds it.  The node is busy, not broken."""


@record(frozen=True, slots=True)
class Component:
    """Tables one part of slurmpool owns in the node's database.

    Each migration takes the component from version i to i + 1 (``;``-separated
    statements); never edit one once released, append a new one.
    """

    name: str
    migrations: tuple[str, ...]

    @property
    def version(self) -> int:
        """The version this code migrates the component to."""
        return len(self.migrations)


def store_path(state_dir: str | os.PathLike[str], node: str) -> str:
    """Where a node's store lives under the installed state dir: ``<state_dir>/<node>.sqlite``."""
    if not node or "/" in node or node.startswith("."):
        raise StateStoreError(f"node name {node!r} cannot name a state file")
    return os.path.join(os.fspath(state_dir), f"{node}.sqlite")


def create_private(path: str) -> None:
    """Create ``path`` readable by root only (0600) if it does not exist: SQLite gives
    the -wal and -shm files the database file's mode.  SQLite opens all three by name,
    so a link or FIFO in their place is removed first (:mod:`slurmpool.safefs`).  A
    database that is there is not opened: that would drop the locks of this process's
    open connections to it (:func:`~slurmpool.safefs.ensure_own_file`)."""
    from slurmpool.safefs import clear_squatter, ensure_own_file

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    for name in (f"{path}-wal", f"{path}-shm"):
        clear_squatter(name)
    ensure_own_file(path, 0o600)


class StateDB:
    """The database at ``path``, opened (created if missing) with ``components``
    migrated to this code's versions.

    A write transaction waits for the lock at most ``timeout_s``, or, with
    ``lock_wait``, what it returns when the transaction begins (a hook's
    shrinking budget); then it raises :class:`StoreBusy`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        components: Sequence[Component],
        timeout_s: float = 30.0,
        lock_wait: Callable[[], float] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.components = tuple(components)
        names = [c.name for c in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"components named twice: {names}")
        self._lock_wait = lock_wait
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        if lock_wait is not None:
            timeout_s = lock_wait()
        try:
            # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE).
            self.conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA synchronous=NORMAL")
            self.conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except StoreBusy:
            self.conn.close()
            raise
        except sqlite3.OperationalError as e:
            if _is_busy(e):
                busy = self._busy()  # reads the connection's wait: before closing it
                self.conn.close()
                raise busy from None
            raise StateStoreError(f"{self.path}: {e}") from e
        except sqlite3.DatabaseError as e:
            raise StateStoreError(f"{self.path}: {e}") from e

    def close(self) -> None:
        self.conn.close()

    def __enter__(self: _DB) -> _DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken before any read that a decision depends on.

        ``durable``: the commit is on disk when this returns, power loss included
        (``synchronous=FULL`` for this transaction; NORMAL may lose the last
        commits to a power cut, never to a crash, and costs no fsync per commit).
        """
        if self._lock_wait is not None:
            self.conn.execute(f"PRAGMA busy_timeout = {int(self._lock_wait() * 1000)}")
        if durable:  # outside the transaction: SQLite ignores it inside one
            self.conn.execute("PRAGMA synchronous=FULL")
        try:
            try:
                self.conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as e:
                if not _is_busy(e):
                    raise StateStoreError(f"{self.path}: {e}") from e
                raise self._busy() from None
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            else:
                self.conn.execute("COMMIT")
        finally:
            if durable:
                self.conn.execute("PRAGMA synchronous=NORMAL")

    def _busy(self) -> StoreBusy:
        wait_ms = self.conn.execute("PRAGMA busy_timeout").fetchone()[0]
        return StoreBusy(
            f"{self.path}: locked by another process for longer than the "
            f"{wait_ms / 1000:.1f} s this one may wait"
        )

    def schema_version(self, name: str) -> int:
        """The version of component ``name`` in the file (0: never created)."""
        row = self.conn.execute(
            "SELECT version FROM schema_versions WHERE component = ?", (name,)
        ).fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        with self.transaction():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_versions "
                "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            for component in self.components:
                current = self.schema_version(component.name)
                if current > component.version:
                    raise StateStoreError(
                        f"{self.path}: schema version {current} of {component.name!r} is newer "
                        f"than this slurmpool understands ({component.version}); "
                        "upgrade slurmpool"
                    )
                if current == component.version:
                    continue
                for migration in component.migrations[current:]:
                    for statement in split_sql(migration):
                        self.conn.execute(statement)
                self.conn.execute(
                    "INSERT OR REPLACE INTO schema_versions (component, version) VALUES (?, ?)",
                    (component.name, component.version),
                )


def _is_busy(e: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY / SQLITE_LOCKED: another connection holds the lock."""
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)
    return "locked" in str(e) or "busy" in str(e)


def split_sql(script: str) -> list[str]:
    """The statements of a migration: executescript() would COMMIT the migration's
    BEGIN IMMEDIATE, so they run one by one."""
    return [s.strip() for s in script.split(";") if s.strip()]
