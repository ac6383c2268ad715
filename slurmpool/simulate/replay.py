"""The replay: an event-driven run of a trace through one pool, and what it measured.

Scheduler ``fifo``, defined so that results compare with published replays:

* completions come before arrivals at the same second;
* a task that fits when it arrives starts then; one that does not joins a
  FIFO queue;
* after every batch of completions (all those of one second) the queue is
  scanned in order and every task that fits starts;
* a task the ``mig-blind`` pool requeues (Slurm started it on fragmented
  slices) stays in its place in the queue, kept off that node until a task
  there ends (:class:`slurmpool.simulate.pools.MigBlindPool`), and may start
  again ``requeue_delay`` seconds later (:data:`REQUEUE_DELAY_S`, what Slurm
  waits), when the queue is scanned again; with no delay, at the next scan;
* under ``mig`` the prologs of the tasks a scan started publish their nodes'
  counts (:meth:`slurmpool.simulate.pools.Pool.publish`), and slurmctld,
  which queues a scheduling pass on a node update, scans again in the same
  second (a prolog takes no time here), until a scan starts nothing.

Scheduler ``backfill``, as Slurm's backfill does it: at every second
something ends or a requeued task may start again, a pass takes the queued
tasks in order and plans each one on Slurm's counts
(:mod:`slurmpool.simulate.backfill`): it starts now if its need fits beside
what runs and what the tasks before it have reserved, over its whole time
limit; otherwise it reserves its count from the earliest second that holds
it so.  So no task delays the start planned for any task before it ("does not
delay the expected start time of any higher priority job", Slurm's words),
which keeps a multi-GPU task from waiting on every fraction that arrives
after it.  A task that arrives when nothing else changed is planned after
the others, on the pass's plan.  Up to :data:`BF_MAX_JOB_TEST` waiting tasks
are planned in one pass; the rest wait for the next.  Where the counts fit
now but the pool cannot place the task (``mig-blind``: the prolog requeues
it), it reserves nothing and is planned again in the next pass.  Under
``mig``, as under ``fifo``, the prologs of the tasks a pass started publish
their nodes' counts, and a new pass follows in the same second.  A task's time limit is its duration
times ``--limit-factor`` (1: users who know exactly how long they run).
Reservations reach as far ahead as they need: a site sets Slurm's
``bf_window`` to at least its longest time limit, as the slurm.conf manual
advises, or long jobs are never reserved for.

Figures: the mean and 95th-percentile wait (start - arrival), the mean wait of
single- and multi-GPU tasks, the compute slice-hours asked for and allocated
(a 5-slice task holds a 7g instance under ``mig``, a whole GPU under
``whole``), ``util`` (slice-hours asked for over the pool's slice-hours from
the first arrival to the last completion), the fragmentation requeues, and the
energy (:mod:`slurmpool.simulate.energy`).  They are added up as the replay goes
(:mod:`slurmpool.simulate.tally`): a replay of tasks read from an iterator holds the
tasks waiting and running, never those done, so a million tasks replay in the memory
of the queue.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

from slurmpool.simulate.backfill import Timeline
from slurmpool.simulate.energy import Watts, measure_energy, power_for
from slurmpool.simulate.pools import KEPT_OFF, REQUEUED, Hold, NodeShape, Pool, make_pool
from slurmpool.simulate.series import QueueSeries
from slurmpool.simulate.tally import Tally
from slurmpool.simulate.trace import Task

SCHEDULERS = ("fifo", "backfill")
# How long a task the prolog requeued waits before Slurm may start it again: the
# credential lifetime, about 120 s by default (measured on 22.05, 24.11 and 26.05:
# SLURM_FACTS.md, "The wait before a requeued job runs again").
REQUEUE_DELAY_S = 120
# How many waiting tasks one backfill pass plans: Slurm's default bf_max_job_test
# (SchedulerParameters in slurm.conf; 500 in backfill.c).
BF_MAX_JOB_TEST = 500
# Why a task waits, as the replay last saw it (Result.wait_by_reason_s):
NO_ROOM = "no room"  # fifo: it did not fit at the last scan
RESERVED = "reserved"  # backfill: the plan gives it a later start
UNPLANNED = "unplanned"  # backfill: no start in the plan: its counts never reach its need
REQUEUE_HOLD = "requeue hold"  # requeued: Slurm holds it back --requeue-delay seconds
UNTESTED = "untested"  # backfill: past the pass's bf_max_job_test tasks
WAIT_REASONS = (NO_ROOM, RESERVED, UNPLANNED, REQUEUE_HOLD, UNTESTED)


@dataclass(frozen=True, slots=True)
class Result:
    policy: str
    scheduler: str
    tasks: int
    wait_mean_s: float
    wait_p95_s: float
    wait_mean_single_s: float
    wait_mean_multi_s: float
    requested_slice_h: float
    allocated_slice_h: float
    util: float
    frag_requeues: int
    makespan_s: int
    refused: int = 0  # tasks the policy cannot run at all (mig-static: no instance holds them)
    # Energy (energy.py); None where a GPU model's power is unknown.
    energy_kwh: float | None = None
    empty_gpu_h: float | None = None  # GPU-hours no task held any of
    empty_kwh: float | None = None  # what those draw at idle: the most idle capping saves
    # (size, tasks, mean wait s) per request size, and (second, mean queue length) per bin
    waits_by_size: list[tuple[str, int, float]] = field(default_factory=list)
    # The task-seconds of waiting, per reason (WAIT_REASONS): where the wait went.
    wait_by_reason_s: dict[str, int] = field(default_factory=dict)
    queue: list[tuple[int, float]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(slots=True)
class Run:
    """One task's run: when it started, what it held, and when it gave that back."""

    task: Task
    start: int
    hold: Hold
    end: int | None = None  # None while it runs


def replay(
    tasks: Iterable[Task],
    pool: Pool,
    scheduler: str = "fifo",
    limit_factor: float = 1.0,
    requeue_delay: int = REQUEUE_DELAY_S,
    power: Mapping[str, Watts | None] | None = None,
) -> Result:
    """Run ``tasks`` (in arrival order) through ``pool`` and measure the waits and the
    energy (``power`` per GPU model; slurmpool's defaults when None) from the first
    arrival to the last completion; a task the policy cannot run at all is counted as
    refused and left out.  ``tasks`` may be an iterator: the replay keeps none of them
    once it is done."""
    run = _play(tasks, pool, scheduler, limit_factor, requeue_delay)
    return _measure(run, scheduler, power, _window([run]))


# Hears (policy, tasks read, tasks in all or 0 when not known) now and then while a replay
# runs, and (policy, n, n) when it is done.
Progress = Callable[[str, int, int], None]


def _play(
    tasks: Iterable[Task],
    pool: Pool,
    scheduler: str,
    limit_factor: float,
    requeue_delay: int,
    progress: Progress | None = None,
) -> Replay:
    """The replay of ``tasks`` through ``pool``.  A list is checked whole before it is
    replayed (an impossible task fails at once); an iterator as it is read."""
    total = None
    if isinstance(tasks, Sequence):
        for task in tasks:
            pool.check(task)
        total = len(tasks)
    run = Replay(pool, scheduler, limit_factor, requeue_delay)
    if progress is None:
        run.play(tasks, total=total)
    else:
        name = pool.name
        run.play(tasks, lambda done: progress(name, done, total or 0), total)
        read = run.arrived + run.refused
        progress(name, read, read)
    return run


def _window(replays: Sequence[Replay]) -> tuple[int, int]:
    """(first arrival, seconds to the last completion) over ``replays``: the time the pool
    is powered, for the energy."""
    windows = [w for played in replays if (w := played.tally.window()) is not None]
    if not windows:
        return 0, 0
    first = min(w[0] for w in windows)
    return first, max(w[1] for w in windows) - first


class Replay:
    """The replay of one trace through one pool: its :attr:`tally` and the fragmentation
    :attr:`requeues` once :meth:`play` returns, and with ``keep_runs`` every
    :class:`Run` in start order (:attr:`runs`: memory that grows with the trace)."""

    def __init__(
        self,
        pool: Pool,
        scheduler: str = "fifo",
        limit_factor: float = 1.0,
        requeue_delay: int = REQUEUE_DELAY_S,
        keep_runs: bool = False,
    ) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"no scheduler {scheduler!r}; expected one of {', '.join(SCHEDULERS)}")
        if limit_factor < 1:
            raise ValueError(
                f"a time limit factor of {limit_factor:g}: expected 1 or more (a task runs "
                "its whole duration, so its limit is at least that)"
            )
        if requeue_delay < 0:
            raise ValueError(f"a requeue delay of {requeue_delay} s: expected 0 or more")
        self.pool = pool
        self.backfill = scheduler == "backfill"
        self.limit_factor = limit_factor
        self.requeue_delay = requeue_delay
        # Tables keyed by id(task): the generated hash of a Task builds a tuple of its fields,
        # and these are looked up millions of times.
        self.held: dict[int, int] = {}  # a requeued task -> the second it may start again
        self.due: dict[int, list[Task]] = {}  # that second -> the tasks held until then
        self.wakeups: list[int] = []  # those seconds: a heap
        self.order: dict[int, int] = {}  # a waiting task -> its place in the trace
        self.running: list[tuple[int, int, Run]] = []  # (end, sequence, run): a heap
        self.queue: list[Task] = []
        self.tally = Tally(pool.shapes)
        self.keep_runs = keep_runs
        self.runs: list[Run] = []  # with keep_runs
        self.arrived = 0  # tasks read that the pool can run
        self.refused = 0  # and that it cannot (Pool.runs)
        self.requeues = 0
        self.series = QueueSeries(0, 1)  # the queue's length over time, from play()
        # A waiting task -> (why it waits, since when); the task-seconds per reason.
        self.why: dict[int, tuple[str, int]] = {}
        self.waited = dict.fromkeys(WAIT_REASONS, 0)
        # backfill: the plan of the last pass, how many queued tasks it has seen, and
        # how many of them it planned and left waiting (at most BF_MAX_JOB_TEST)
        self.plan: Timeline | None = None
        self.planned = 0
        self.tested = 0

    def play(
        self,
        tasks: Iterable[Task],
        progress: Callable[[int], None] | None = None,
        total: int | None = None,
    ) -> None:
        """Replay ``tasks``, in arrival order; a task the pool cannot run at all is counted
        in :attr:`refused`.  ``progress`` hears how many have been read, now and then
        (``total``: how many there are, when known)."""
        arrivals = self._arrivals(tasks)
        nxt = next(arrivals, None)
        if nxt is not None:
            if isinstance(tasks, Sequence):
                self.series = QueueSeries.over(nxt.arrival, tasks[-1].arrival)
            else:  # an end not known yet: bins that widen as the replay goes
                self.series = QueueSeries(nxt.arrival, 1)
        last = nxt.arrival if nxt is not None else 0
        step, told = max(1, (total or 2_000_000) // 200), 0
        while nxt is not None or self.running or self.wakeups:
            now = self._next(nxt.arrival if nxt is not None else None)
            self.series.add(last, now, len(self.queue))
            last = now
            if progress is not None and self.arrived + self.refused - told >= step:
                told = self.arrived + self.refused
                progress(told)
            due: list[Task] = []
            if self.wakeups and self.wakeups[0] == now:
                heapq.heappop(self.wakeups)
                due = self.due.pop(now)
            ended = False
            while self.running and self.running[0][0] == now:
                done = heapq.heappop(self.running)[2]
                self.pool.release(done.hold)
                self.tally.ended(done.hold, now)
                done.end = now
                ended = True
            if self.backfill:
                arrived = nxt is not None and nxt.arrival == now
                while nxt is not None and nxt.arrival == now:
                    self.queue.append(nxt)
                    nxt = next(arrivals, None)
                if ended or due:
                    self._backfill(now)
                elif arrived:  # nothing else changed: the last pass's plan still holds
                    self._backfill(now, again=False)
                while self.pool.publish():  # the prologs' updates: Slurm schedules again
                    self._backfill(now)
            else:
                if ended:
                    self._scan(now)
                elif due:
                    self._retry(due, now)
                while nxt is not None and nxt.arrival == now:
                    if not isinstance(self._start(nxt, now), Run):
                        self._waits(nxt, NO_ROOM, now)
                        self.queue.append(nxt)
                    nxt = next(arrivals, None)
                while self.pool.publish():
                    self._scan(now)

    def _arrivals(self, tasks: Iterable[Task]) -> Iterator[Task]:
        """The tasks the pool can run, each given its place in the trace; an iterator's
        tasks are checked as they come (a list's were by :func:`replay`)."""
        checked = isinstance(tasks, Sequence)
        previous: Task | None = None
        for task in tasks:
            if previous is not None and task.arrival < previous.arrival:
                raise ValueError(
                    f"task {task.name} arrives at {task.arrival}, before task {previous.name} "
                    f"({previous.arrival}) which comes before it: expected the tasks in "
                    "arrival order"
                )
            previous = task
            if not checked:
                self.pool.check(task)
            if not self.pool.runs(task):
                self.refused += 1
                continue
            self.order[id(task)] = self.arrived
            self.arrived += 1
            yield task

    def _next(self, arrival: int | None) -> int:
        """The second of the next event: a completion, an arrival or a requeued task
        becoming eligible again, whichever is first."""
        return min(
            t
            for t in (
                arrival,
                self.running[0][0] if self.running else None,
                self.wakeups[0] if self.wakeups else None,
            )
            if t is not None
        )

    def _start(
        self, task: Task, now: int, room: Sequence[int] | None = None
    ) -> Run | Literal["requeued", "kept off"] | None:
        """Try to start ``task`` now, within ``room`` (backfill: the counts its plan leaves
        over the task's limit): its :class:`Run`, or what the pool said instead (None: no
        room on any node)."""
        got = self.pool.try_start(task, room)
        if got is None or got == KEPT_OFF:
            return got
        if got == REQUEUED:
            self._requeue(task, now)
            return REQUEUED
        assert isinstance(got, Hold)
        # Done with the task's entries: a later task may be given the same id.
        key = id(task)
        self.held.pop(key, None)
        self.order.pop(key, None)
        why = self.why.pop(key, None)
        if why is not None:
            self.waited[why[0]] += now - why[1]
        run = Run(task, now, got)
        heapq.heappush(self.running, (now + task.duration, self.tally.tasks, run))
        self.tally.started(task, now, got)
        if self.keep_runs:
            self.runs.append(run)
        return run

    def _waits(self, task: Task, reason: str, now: int) -> None:
        """``task`` waits, from ``now``, for ``reason`` (from its arrival if it is new)."""
        key = id(task)
        why = self.why.get(key)
        if why is None:
            self.why[key] = (reason, task.arrival)
        elif why[0] != reason:
            self.waited[why[0]] += now - why[1]
            self.why[key] = (reason, now)

    def _requeue(self, task: Task, now: int) -> None:
        """Count ``task``'s requeue and hold it back ``requeue_delay`` seconds (with no
        delay, to the next scan)."""
        self.requeues += 1
        if not self.requeue_delay:
            self._waits(task, NO_ROOM, now)
            return
        self._waits(task, REQUEUE_HOLD, now)
        again = now + self.requeue_delay
        self.held[id(task)] = again
        if again in self.due:
            self.due[again].append(task)
        else:
            self.due[again] = [task]
            heapq.heappush(self.wakeups, again)

    def _retry(self, due: list[Task], now: int) -> None:
        """Try the requeued tasks that may start again now, in queue order, when nothing
        else changed since the last scan (what did not fit then still does not)."""
        started = set()
        held, order = self.held, self.order
        # In queue order; not those started, or requeued again, since they were held.
        ready = [(order[key], task) for task in due if held.get(key := id(task)) == now]
        ready.sort()
        for _, task in ready:
            if isinstance(self._start(task, now), Run):
                started.add(id(task))
            elif held.get(id(task), 0) <= now:
                self._waits(task, NO_ROOM, now)
        if started:
            self.queue = [t for t in self.queue if id(t) not in started]

    def _scan(self, now: int) -> None:
        """Start every queued task that fits, in order.  A demand that did not fit is not
        tried again in this scan: starting others only takes room away."""
        left: list[Task] = []
        refused: set[tuple[int, int]] = set()
        for task in self.queue:
            key = (task.gpus, task.milli)
            if self.held.get(id(task), 0) > now:
                left.append(task)
                continue
            if key in refused:
                self._waits(task, NO_ROOM, now)
                left.append(task)
                continue
            outcome = self._start(task, now)
            if outcome is None:
                refused.add(key)
            if not isinstance(outcome, Run):
                if self.held.get(id(task), 0) <= now:
                    self._waits(task, NO_ROOM, now)
                left.append(task)
        self.queue = left

    # -- backfill --

    def limit(self, task: Task) -> int:
        """The task's time limit: what a scheduler believes it may run."""
        return math.ceil(task.duration * self.limit_factor)

    def _backfill(self, now: int, again: bool = True) -> None:
        """One pass of the backfill scheduler (the module's docstring says what it does);
        not ``again``, the last pass goes on with the tasks that arrived since."""
        if again or self.plan is None:
            pool, limit_of = self.pool, self.limit
            ends = [(r.start + limit_of(r.task), pool.counted(r.hold)) for _, _, r in self.running]
            self.plan = Timeline(now, pool.counts(), ends)
            self.planned = self.tested = 0
        else:
            self.plan.advance(now)
        plan, seen = self.plan, self.planned
        left = self.queue[:seen]
        for task in self.queue[seen:]:
            if self.held.get(id(task), 0) > now:
                left.append(task)
                continue
            if self.tested == BF_MAX_JOB_TEST:
                self._waits(task, UNTESTED, now)
                left.append(task)
                continue
            limit = self.limit(task)
            needs = self.pool.needs(task)
            first = plan.earliest(needs, limit)
            if first is not None and first[0] == now:
                outcome = self._start(task, now, plan.room(now + limit))
                if isinstance(outcome, Run):
                    plan.take(now, now + limit, self.pool.counted(outcome.hold))
                    continue
                # Slurm's counts fit and the pool would not place it (mig-blind: the
                # prolog requeued it): it reserves nothing and is tried again in the
                # next pass.
                first = None
            self.tested += 1
            left.append(task)
            if first is not None:
                second, need = first
                plan.take(second, second + limit, need)
                self._waits(task, RESERVED, now)
            elif self.held.get(id(task), 0) <= now:
                self._waits(task, UNPLANNED, now)
        self.queue = left
        self.planned = len(left)


def _measure(
    run: Replay,
    scheduler: str,
    power: Mapping[str, Watts | None] | None,
    window: tuple[int, int],
) -> Result:
    pool, tally = run.pool, run.tally
    makespan = _window([run])[1]
    if power is None:
        power = power_for(pool.shapes)
    energy = measure_energy(pool.shapes, tally.occupied_gpu_s, tally.asked_gpu_s, window[1], power)
    return Result(
        policy=pool.name,
        scheduler=scheduler,
        tasks=tally.tasks,
        wait_mean_s=tally.wait_s / tally.tasks if tally.tasks else 0.0,
        wait_p95_s=tally.waits.percentile(95),
        wait_mean_single_s=_share(*tally.single),
        wait_mean_multi_s=_share(*tally.multi),
        requested_slice_h=tally.asked_slice_s / 3600,
        allocated_slice_h=tally.held_slice_s / 3600,
        util=tally.asked_slice_s / (pool.total_slices * makespan) if makespan else 0.0,
        frag_requeues=run.requeues,
        makespan_s=makespan,
        refused=run.refused,
        energy_kwh=energy.energy_kwh if energy else None,
        empty_gpu_h=energy.empty_gpu_h if energy else None,
        empty_kwh=energy.empty_kwh if energy else None,
        waits_by_size=tally.by_size.rows(),
        wait_by_reason_s=dict(run.waited),
        queue=run.series.points(),
    )


def _share(count: int, total: float) -> float:
    return total / count if count else 0.0


def compare(
    tasks: Sequence[Task],
    policies: Sequence[str],
    shapes: Sequence[NodeShape],
    scheduler: str = "fifo",
    limit_factor: float = 1.0,
    requeue_delay: int = REQUEUE_DELAY_S,
    power: Mapping[str, Watts | None] | None = None,
    progress: Progress | None = None,
) -> list[Result]:
    """One :class:`Result` per policy, each from a fresh pool of nodes of ``shapes``.  The
    energy of each is over the same window, to the last completion under any of them: the
    pool is powered until then whatever the policy."""
    played = [
        _play(tasks, make_pool(policy, shapes), scheduler, limit_factor, requeue_delay, progress)
        for policy in policies
    ]
    window = _window(played)
    return [_measure(run, scheduler, power, window) for run in played]
