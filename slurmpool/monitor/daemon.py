"""The ``slurmpool monitord`` loop: sample, store, export, push the outbox.

One thread samples every ``interval_s`` (attribution from the node store's
live allocations, accounts from squeue), writes the pass to the store and
hands it to the metrics collector; retention runs every ``prune_every_s``.
A second thread pushes due outbox summaries to accounting with backoff, so
a slow or dead slurmdbd never delays sampling.  On a node that publishes what it
can carve, a third repairs what slurmctld has of it, at start and every
``repair_every_s`` (:mod:`slurmpool.monitor.repair`).  :meth:`Monitor.run` returns
when the ``stop`` event is set (the CLI sets it on SIGTERM/SIGINT).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmpool.accounting import outbox
from slurmpool.accounting.enqueue import build_job_summary
from slurmpool.accounting.missed import make_missed
from slurmpool.accounting.push import (
    REWRITTEN,
    SETTLE_S,
    SETTLED,
    WAITING,
    Backoff,
    PushResult,
    push_pending,
)
from slurmpool.monitor.attribution import AccountResolver, Attribution, from_allocations
from slurmpool.monitor.exporter import MetricsServer, SnapshotCollector, make_registry
from slurmpool.monitor.sampler import Sampler, Snapshot
from slurmpool.slurm.runner import Runner
from slurmpool.state import samples as sample_store
from slurmpool.state.db import create_private
from slurmpool.state.store import NodeStore

# What monitord keeps in the node's store: samples, and the outbox it pushes from.
COMPONENTS = (sample_store.SAMPLES, outbox.OUTBOX)
DEFAULT_INTERVAL_S = 10.0
DEFAULT_PORT = 9810
DEFAULT_ADDRESS = "127.0.0.1"


@dataclass(frozen=True)
class MonitorSettings:
    """How monitord runs.  ``port=None`` serves no metrics; ``port=0`` picks a free port."""

    interval_s: float = DEFAULT_INTERVAL_S
    address: str = DEFAULT_ADDRESS
    port: int | None = DEFAULT_PORT
    retention: sample_store.Retention = field(default_factory=sample_store.Retention)
    prune_every_s: float = 300.0
    push: bool = True
    push_poll_s: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    settle_s: float = SETTLE_S
    # How often the pusher looks for jobs whose epilog made no summary (None: never,
    # as where the policy turns accounting off and no epilog summarises either).
    missed_every_s: float | None = 60.0
    # Seconds between repairs of the node's published fit counts (with a repair given).
    repair_every_s: float = 30.0


Log = Callable[[str], None]


class Monitor:
    """monitord for one node (see the module docstring)."""

    def __init__(
        self,
        *,
        node: str,
        store_path: str | Path,
        sampler: Sampler,
        settings: MonitorSettings,
        runner: Runner | None = None,
        log: Log | None = None,
        clock: Callable[[], float] = time.time,
        repair: Callable[[], str] | None = None,
    ) -> None:
        self.node = node
        self.store_path = Path(store_path)
        self.sampler = sampler
        self.settings = settings
        self.runner = runner
        self.log: Log = log or (lambda _m: None)
        self.clock = clock
        self.repair = repair
        self.collector = SnapshotCollector()
        self.accounts = AccountResolver(runner)
        self.server: MetricsServer | None = None
        create_private(str(self.store_path))  # readable by root only, as the hooks make it
        # Used by the thread that calls pass_once/run (SQLite connections are per thread).
        self._store = NodeStore(self.store_path, COMPONENTS)
        self._last_prune = 0.0
        self._last_missed = float("-inf")

    # -- one pass ---------------------------------------------------------------

    def attribution(self) -> Attribution:
        att = from_allocations(self._store.live())
        accounts = self.accounts.accounts(att.job_ids())
        if accounts:
            att.instances = {
                k: dataclasses.replace(v, account=accounts.get(v.job_id))
                for k, v in att.instances.items()
            }
            att.gpus = {
                k: [dataclasses.replace(v, account=accounts.get(v.job_id)) for v in refs]
                for k, refs in att.gpus.items()
            }
        return att

    def pass_once(self) -> Snapshot:
        """Sample, store and publish one pass."""
        snap = self.sampler.sample(self.attribution())
        sample_store.write_samples(self._store, snap.samples)
        st = self.collector.stats
        st.passes += 1
        st.last_pass_s = snap.duration_s
        st.cpu_s = time.process_time()
        st.outbox_pending = outbox.count(self._store)
        if snap.errors:
            st.errors += 1
            for e in snap.errors:
                self.log(f"sampling error: {e}")
        self.collector.snapshot = snap
        now = self.clock()
        if now - self._last_prune >= self.settings.prune_every_s:
            self._last_prune = now
            sample_store.prune(self._store, self.settings.retention, now)
            outbox.prune_made(self._store, now - self.settings.retention.totals_age_s)
        return snap

    def push_once(self, due_only: bool = True) -> list[PushResult]:
        """Push the due outbox summaries (from this thread's own store connection)."""
        if self.runner is None:
            return []
        with NodeStore(self.store_path, COMPONENTS) as store:
            now = self.clock()
            every = self.settings.missed_every_s
            if every is not None and now - self._last_missed >= every:
                self._last_missed = now
                for m in make_missed(store, self.runner, node=self.node, cluster=None, now=now):
                    self.log(
                        f"accounting: made the summary of job {m.job_id} (run {m.run}) "
                        "that no epilog made, from its samples"
                    )
            results = push_pending(
                store,
                self.runner,
                now=self.clock,
                backoff=self.settings.backoff,
                settle_s=self.settings.settle_s,
                due_only=due_only,
            )
            self.collector.stats.outbox_pending = outbox.count(store)
        for r in results:
            what = f"summary of job {r.job_id} (node {r.node})"
            if r.outcome == SETTLED:
                self.log(f"accounting: {what} found stored at its second check")
            elif r.stored:
                self.collector.stats.pushed += 1
                again = " again (another writer had replaced it)" if r.outcome == REWRITTEN else ""
                self.log(f"accounting: stored {what}{again}")
            elif r.outcome == WAITING:
                self.log(f"accounting: {what} waits: {r.error}")
            else:
                self.collector.stats.push_failures += 1
                self.log(f"accounting: {what} not stored yet: {r.error}")
        return results

    def repair_once(self) -> str | None:
        """One repair of the node's published fit counts (None: this node has none)."""
        if self.repair is None:
            return None
        from slurmpool.monitor.repair import FAILED, SENT

        try:
            outcome = self.repair()
        except Exception as e:  # a lost GPU, a broken store: said, and tried again
            self.log(f"fit: repair error: {type(e).__name__}: {e}")
            outcome = FAILED
        st = self.collector.stats
        if outcome == SENT:
            st.fit_repairs += 1
        elif outcome == FAILED:
            st.fit_repair_failures += 1
        return outcome

    def job_view(self, job_id: str) -> dict[str, Any] | None:
        with NodeStore(self.store_path, COMPONENTS) as store:
            if not sample_store.job_totals(store, job_id):
                return None
            part = build_job_summary(store, job_id=job_id, user=None)
        return {"job": job_id, "node": self.node, "running": True, "part": part}

    # -- the loops ----------------------------------------------------------------

    def start_server(self) -> MetricsServer | None:
        if self.settings.port is None:
            return None
        registry = make_registry(self.collector)
        self.server = MetricsServer(
            registry, self.settings.address, self.settings.port, self.job_view
        )
        self.server.start()
        self.log(f"metrics on http://{self.settings.address}:{self.server.port}/metrics")
        return self.server

    def _push_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            wait = self.settings.push_poll_s
            try:
                self.push_once()
                with NodeStore(self.store_path, COMPONENTS) as store:
                    due = outbox.next_due(store)
                if due is not None:
                    wait = min(wait, max(0.05, due - self.clock()))
            except Exception as e:  # never let the pusher die: said, and tried again
                self.log(f"accounting push error: {type(e).__name__}: {e}")
            stop.wait(wait)

    def _repair_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.repair_once()
            stop.wait(self.settings.repair_every_s)

    def run(self, stop: threading.Event) -> None:
        """Sample every interval until ``stop`` is set; push the outbox and repair the
        published fit counts alongside."""
        helpers: list[threading.Thread] = []
        if self.settings.push and self.runner is not None:
            helpers.append(
                threading.Thread(target=self._push_loop, args=(stop,), name="push", daemon=True)
            )
        if self.repair is not None:
            helpers.append(
                threading.Thread(target=self._repair_loop, args=(stop,), name="repair", daemon=True)
            )
        for t in helpers:
            t.start()
        self.sampler.prime()
        stop.wait(min(self.settings.interval_s, 0.2))
        next_t = time.monotonic()
        try:
            while not stop.is_set():
                try:
                    self.pass_once()
                except Exception as e:
                    self.collector.stats.errors += 1
                    self.log(f"sampling pass failed: {type(e).__name__}: {e}")
                next_t += self.settings.interval_s
                delay = next_t - time.monotonic()
                if delay < 0:  # fell behind: do not try to catch up
                    next_t = time.monotonic()
                    delay = 0.0
                stop.wait(delay)
        finally:
            for t in helpers:
                t.join(timeout=35)
            self.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        self.sampler.close()
        self._store.close()
