"""Aggregating job records into a pool report (pure; memory independent of the job count).

For each record: the part of the job inside ``[since, until)`` in hours,
times each device's weight (a MIG instance counts slices/7 of a GPU, a
share its shares of the GPU, a whole GPU 1) is its allocated GPU-hours.  Devices with a
measured utilisation add ``weight * hours`` to "measured" GPU-hours and
``weight * hours * util`` to busy GPU-hours, so utilisation is
busy / measured: devices that cannot report utilisation (MIG on Ampere)
never count as idle.  Jobs without a slurmpool summary are weighted from
AllocTRES (``gres/gpu=N`` whole GPUs, ``gres/vgpu=N`` or ``gres/shard=N`` as
``N / vgpu_units``).
Summaries are read from the clear-text index of their AdminComment word
(:mod:`slurmpool.accounting.codec`), not decompressed.  The heatmap spreads
each device's mean utilisation evenly over the hours of the job.

Everything kept is per user/account/partition/model/profile, per heatmap
cell and a fixed-size heap of top wasters: it does not grow with the
number of records.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from slurmpool.accounting.codec import PREFIX, index_of
from slurmpool.accounting.summary import IndexEntry, parse_index
from slurmpool.report.sacct import FIELDS, JobRecord

DIMENSIONS = ("user", "account", "partition", "model", "profile")
UNKNOWN = "(unknown)"
NOT_STARTED = frozenset({"Unknown", "None", ""})


class Bucket:
    """Totals of one group (a user, an account, ...)."""

    __slots__ = ("alloc_h", "busy_h", "jobs", "measured_h", "requeues")

    def __init__(self) -> None:
        self.alloc_h = 0.0
        self.measured_h = 0.0
        self.busy_h = 0.0
        self.jobs = 0
        self.requeues = 0

    @property
    def util(self) -> float | None:
        """Busy / measured GPU-hours in percent; None when nothing was measured."""
        return 100.0 * self.busy_h / self.measured_h if self.measured_h > 0 else None

    @property
    def idle_h(self) -> float:
        return max(0.0, self.measured_h - self.busy_h)

    def to_json(self) -> dict[str, object]:
        util = self.util
        return {
            "gpu_hours_allocated": round(self.alloc_h, 4),
            "gpu_hours_measured": round(self.measured_h, 4),
            "gpu_hours_busy": round(self.busy_h, 4),
            "utilization_percent": None if util is None else round(util, 1),
            "gpu_hours_idle": round(self.idle_h, 4),
            "jobs": self.jobs,
            "requeues": self.requeues,
        }


@dataclass(frozen=True, slots=True)
class Waster:
    job_id: str
    user: str
    account: str
    idle_h: float
    alloc_h: float
    util: float | None


@dataclass
class PoolReport:
    since: float
    until: float
    total: Bucket
    groups: dict[str, dict[str, Bucket]]
    top_jobs: list[Waster]
    heatmap_rows: list[str]
    heatmap_hours: list[float]  # epoch of each hour column
    heatmap: list[list[float | None]]  # utilisation percent per row and hour, None: no data
    records: int = 0
    skipped: int = 0
    bad_comments: int = 0
    malformed: int = 0
    errors: list[str] = field(default_factory=list)

    def top_users(self, n: int = 10) -> list[tuple[str, Bucket]]:
        users = self.groups.get("user", {})
        ranked = sorted(users.items(), key=lambda kv: kv[1].idle_h, reverse=True)
        return [(u, b) for u, b in ranked[:n] if b.idle_h > 0]


class _Hour:
    """Local-time parsing of sacct's ``YYYY-MM-DDTHH:MM:SS``, cached per hour."""

    def __init__(self) -> None:
        self._cache: dict[str, float] = {}

    def epoch(self, text: str) -> float | None:
        head = text[:13]
        base = self._cache.get(head)
        if base is None:
            try:
                base = datetime.fromisoformat(head + ":00:00").timestamp()
            except ValueError:
                return None
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[head] = base
        try:
            return base + int(text[14:16]) * 60 + int(text[17:19])
        except ValueError:
            return None


def summary_devices(comment: str) -> list[IndexEntry] | None:
    """The devices of the slurmpool summary in a job's AdminComment, from its clear-text
    index (None: the comment has no summary).  ValueError when it cannot be read."""
    if PREFIX not in comment:
        return None
    index = index_of(comment)
    if index is None:
        raise ValueError("no ':<payload>' after the index")
    return parse_index(index)


def tres_count(tres: str, key: str) -> int:
    """The count of ``key`` (``gres/gpu=``) in a TRES string, 0 when absent."""
    i = tres.find(key)
    if i < 0:
        return 0
    j = tres.find(",", i)
    value = tres[i + len(key) : j if j >= 0 else len(tres)]
    return int(value) if value.isdigit() else 0


class Aggregator:
    """Feed :meth:`add` with records, then take :meth:`result`.

    ``heatmap_by`` is ``"gpu"`` (rows ``node/gpuN``), ``"node"`` or None.
    """

    def __init__(
        self,
        since: float,
        until: float,
        *,
        vgpu_units: int = 7,
        top: int = 10,
        heatmap_by: str | None = "gpu",
    ) -> None:
        if until <= since:
            raise ValueError("the report's --until must be after --since")
        self.since = since
        self.until = until
        self.vgpu_units = max(1, vgpu_units)
        self.top = top
        self.heatmap_by = heatmap_by
        self.total = Bucket()
        self.groups: dict[str, dict[str, Bucket]] = {d: {} for d in DIMENSIONS}
        self._heap: list[tuple[float, str, Waster]] = []
        # Per heatmap row: (covered device-seconds, busy device-seconds) per hour.
        self._cells: dict[str, array[float]] = {}
        self._first_hour = int(since // 3600)
        self._nhours = max(1, math.ceil(until / 3600.0) - self._first_hour)
        self.malformed = 0
        self._hour = _Hour()
        self.records = 0
        self.skipped = 0
        self.bad_comments = 0
        self.errors: list[str] = []

    def _bucket(self, dim: str, key: str) -> Bucket:
        table = self.groups[dim]
        b = table.get(key)
        if b is None:
            b = table[key] = Bucket()
        return b

    def _devices(self, job_id: str, comment: str) -> list[IndexEntry] | None:
        """Devices of a job from its summary's clear-text index (None: no usable summary)."""
        try:
            entries = summary_devices(comment)
        except ValueError as e:
            self.bad_comments += 1
            if len(self.errors) < 20:
                self.errors.append(f"job {job_id}: unreadable AdminComment summary: {e}")
            return None
        return entries or None

    def add(self, rec: JobRecord) -> None:
        """Count one record."""
        self._add(
            rec.job_id,
            rec.user,
            rec.account,
            rec.partition,
            rec.nodes,
            rec.state,
            rec.start,
            rec.elapsed_s,
            rec.alloc_tres,
            rec.admin_comment,
        )

    def add_lines(self, lines: Iterable[str]) -> None:
        """Count the records of raw ``sacct -n -P -o FIELDS`` lines (the fast path)."""
        n = len(FIELDS)
        add = self._add
        for lineno, line in enumerate(lines, 1):
            p = line.rstrip("\n").split("|", n - 1)
            if len(p) != n:
                if line.strip():
                    self.malformed += 1
                    if len(self.errors) < 20:
                        self.errors.append(
                            f"sacct line {lineno}: expected {n} '|'-separated fields, "
                            f"got {len(p)}: {line[:60]!r}"
                        )
                continue
            e = p[7]
            add(
                p[0],
                p[1],
                p[2],
                p[3],
                p[4],
                p[5].split(" ", 1)[0],
                p[6],
                int(e) if e.isdigit() else 0,
                p[8],
                p[10],
            )

    def _add(
        self,
        job_id: str,
        user: str,
        account: str,
        partition: str,
        nodes: str,
        state: str,
        start_text: str,
        elapsed_s: int,
        tres: str,
        comment: str,
    ) -> None:
        self.records += 1
        if start_text in NOT_STARTED:
            self.skipped += 1
            return
        start = self._hour.epoch(start_text)
        if start is None:
            self.skipped += 1
            return
        end = start + elapsed_s
        s = start if start > self.since else self.since
        e = end if end < self.until else self.until
        if e < s or (e == s and not self.since <= start < self.until):
            self.skipped += 1
            return
        hours = (e - s) / 3600.0
        devices = self._devices(job_id, comment) if comment else None
        if devices is None:
            gpus = tres_count(tres, "gres/gpu=")
            # Shares of a shared GPU are allocated as shards (job_submit.lua).
            vgpus = tres_count(tres, "gres/vgpu=") + tres_count(tres, "gres/shard=")
            if not gpus and not vgpus:
                self.skipped += 1  # not a GPU job
                return
            devices = []
            row = nodes or UNKNOWN
            if gpus:
                devices.append((row, "", "gpu", UNKNOWN, "gpu", float(gpus), None))
            if vgpus:
                devices.append((row, "", "vgpu", UNKNOWN, "vgpu", vgpus / self.vgpu_units, None))
        requeued = state == "REQUEUED"
        alloc = measured = busy = 0.0
        groups = self.groups
        models, profiles = groups["model"], groups["profile"]
        heat = self.heatmap_by is not None
        by_gpu = self.heatmap_by == "gpu"
        seen: set[str] = set()
        for node, gpu, _kind, model, profile, weight, util in devices:
            a = weight * hours
            if util is not None:
                m = a
                b = a * util / 100.0
            else:
                m = b = 0.0
            alloc += a
            measured += m
            busy += b
            for table, key in ((models, model.upper()), (profiles, profile)):
                bk = table.get(key)
                if bk is None:
                    bk = table[key] = Bucket()
                bk.alloc_h += a
                bk.measured_h += m
                bk.busy_h += b
                tag = ("m:" if table is models else "p:") + key
                if tag not in seen:
                    seen.add(tag)
                    if requeued:
                        bk.requeues += 1
                    else:
                        bk.jobs += 1
            if heat and util is not None:
                self._heat(f"{node}/gpu{gpu}" if by_gpu and gpu else node, s, e, weight, util)
        for bk in (
            self.total,
            self._bucket("user", user or UNKNOWN),
            self._bucket("account", account or UNKNOWN),
            self._bucket("partition", partition or UNKNOWN),
        ):
            bk.alloc_h += alloc
            bk.measured_h += measured
            bk.busy_h += busy
            if requeued:
                bk.requeues += 1
            else:
                bk.jobs += 1
        idle = measured - busy
        if idle > 0 and self.top > 0:
            heap = self._heap
            if len(heap) < self.top or idle > heap[0][0]:
                w = Waster(
                    job_id,
                    user,
                    account,
                    idle,
                    alloc,
                    100.0 * busy / measured if measured else None,
                )
                if len(heap) < self.top:
                    heapq.heappush(heap, (idle, job_id, w))
                else:
                    heapq.heapreplace(heap, (idle, job_id, w))

    def _heat(self, row: str, s: float, e: float, weight: float, util: float) -> None:
        cells = self._cells.get(row)
        if cells is None:
            cells = self._cells[row] = array("d", bytes(16 * self._nhours))
        first = self._first_hour
        h = int(s // 3600)
        last = min(int(e // 3600), first + self._nhours - 1)
        frac = util / 100.0
        while h <= last:
            lo = h * 3600.0
            hi = lo + 3600.0
            span = ((e if e < hi else hi) - (s if s > lo else lo)) * weight
            if span > 0:
                i = 2 * (h - first)
                cells[i] += span
                cells[i + 1] += span * frac
            h += 1

    def add_all(self, records: Iterable[JobRecord]) -> PoolReport:
        for rec in records:
            self.add(rec)
        return self.result()

    def result(self) -> PoolReport:
        first = self._first_hour
        rows = sorted(self._cells)
        grid: list[list[float | None]] = []
        for r in rows:
            cells = self._cells[r]
            grid.append(
                [
                    100.0 * cells[2 * i + 1] / cells[2 * i] if cells[2 * i] > 0 else None
                    for i in range(self._nhours)
                ]
            )
        top = [w for _i, _j, w in sorted(self._heap, reverse=True)]
        return PoolReport(
            since=self.since,
            until=self.until,
            total=self.total,
            groups=self.groups,
            top_jobs=top,
            heatmap_rows=rows,
            heatmap_hours=[(first + i) * 3600.0 for i in range(self._nhours)],
            heatmap=grid,
            records=self.records,
            skipped=self.skipped,
            bad_comments=self.bad_comments,
            malformed=self.malformed,
            errors=list(self.errors),
        )


def gpu_hours(hours: float) -> str:
    """GPU-hours for people: two decimals, or two significant digits below 0.01 so that
    a short job (a test, the sandbox's demo) shows what it used instead of 0.00."""
    if 0 < abs(hours) < 0.01:
        return f"{hours:.2g}"
    return f"{hours:.2f}"
