"""MIG placement engine: pure functions over a board's geometry, no I/O.

A placement is ``(start, size)`` in memory slices, exactly as NVML's
``nvmlGpuInstancePlacement_t``.  Creating a GPU instance fails when its memory
slices overlap an existing instance's; together with each profile's list of
legal placements (from the catalogue) that is the whole rule.  Occupancy of a
board is therefore a bitmask of memory slices (8 bits on A100/H100, 4 on A30),
which keeps every decision a handful of integer operations and lets the
engine memoise per ``(profile, occupancy)``: there are at most 256 occupancy
states per board.
"""

from __future__ import annotations

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from typing import Any, TypeVar

    from slurmpool.catalogue import GpuInstanceProfile, GpuModel

    K = TypeVar("K")


@record(frozen=True, slots=True, order=True)
class Placement:
    start: int
    size: int

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start

    def overlaps(self, other: Placement) -> bool:
        return bool(self.mask & other.mask)

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@record(frozen=True, slots=True)
class PlacedInstance:
    """An instance already on a GPU: its profile name and placement."""

    profile: str
    placement: Placement


def _by_name(p: GpuInstanceProfile) -> Any:
    return p.name


def occupancy(instances: Iterable[PlacedInstance]) -> int:
    mask = 0
    for inst in instances:
        mask |= inst.placement.mask
    return mask


class PlacementEngine:
    """Placement decisions for one GPU model.

    Scoring (used by :meth:`choose` and :meth:`plan`): for each candidate
    placement of the requested profile, compute the board's *capacity vector*
    after placing it: for every standard profile, largest first (7g, 4g, 3g,
    2g, 1g), how many instances of that profile could still be created.  The
    candidate with the lexicographically largest vector wins, so the engine
    first preserves the ability to create the biggest instance, then the next
    biggest, and so on.  Ties go to the highest start, which packs small
    instances towards the top of the board and keeps slot 0 (the only home of
    4g and 7g) free.  On an empty A100 a 1g therefore lands in slot 6, where it
    blocks only 7g, instead of slot 0, where first-fit puts it and blocks 4g,
    one 3g and one 2g.
    """

    def __init__(self, model: GpuModel) -> None:
        geo = model.require_mig()
        self.model = model
        self.memory_slices = geo.memory_slices
        self.profiles: dict[str, GpuInstanceProfile] = {p.name: p for p in geo.gi_profiles}
        self._placements: dict[str, tuple[Placement, ...]] = {
            p.name: tuple(Placement(s, n) for s, n in p.placements) for p in geo.gi_profiles
        }
        self._masks: dict[str, tuple[tuple[int, Placement], ...]] = {
            name: tuple((pl.mask, pl) for pl in pls) for name, pls in self._placements.items()
        }
        # Largest first: the order of the capacity vector.
        self._ranked = [
            self._masks[p.name]
            for p in sorted(geo.standard_profiles(), key=lambda p: (-p.slices, -p.memory_slices))
        ]
        self._best: dict[tuple[str, int], tuple[Placement, tuple[int, ...]] | None] = {}
        # (key, instances) -> room (see room()).
        self._room_by: dict[tuple[Callable[..., Any], frozenset[PlacedInstance]], dict[Any, int]]
        self._room_by = {}

    # -- lookups -------------------------------------------------------------

    def profile(self, name: str) -> GpuInstanceProfile:
        p = self.profiles.get(name)
        if p is None:
            return self.model.gi_profile(name)  # accepts "3g"; raises UnknownProfileError
        return p

    def placements(self, profile: str) -> tuple[Placement, ...]:
        """Every legal placement of ``profile`` on an empty board."""
        return self._placements[self.profile(profile).name]

    def free_placements(
        self, profile: str, instances: Sequence[PlacedInstance] = ()
    ) -> list[Placement]:
        """Placements of ``profile`` that do not overlap ``instances``.

        Empty when the profile is already at its per-GPU ``max_count``.
        """
        p = self.profile(profile)
        if self._at_max(p, instances):
            return []
        occ = occupancy(instances)
        return [pl for m, pl in self._masks[p.name] if not m & occ]

    def capacity(self, instances: Sequence[PlacedInstance] = ()) -> dict[str, int]:
        """How many more instances of each standard profile fit, one profile at a time."""
        occ = occupancy(instances)
        geo = self.model.require_mig()
        return {
            p.name: sum(1 for m, _ in self._masks[p.name] if not m & occ)
            for p in geo.standard_profiles()
        }

    def room(
        self,
        instances: Sequence[PlacedInstance] = (),
        key: Callable[[GpuInstanceProfile], K] = _by_name,
    ) -> dict[K, int]:
        """:meth:`capacity`, each bounded by what the profile's per-GPU maximum leaves,
        summed by ``key(profile)`` (its name, or e.g. its slices).  Remembered per set of
        instances: a board has few such sets, and a replay asks for the same ones again
        and again."""
        memo = (key, frozenset(instances))
        room = self._room_by.get(memo)
        if room is None:
            if len(self._room_by) >= _ROOM_MEMO:
                self._room_by.clear()
            room = {}
            for name, n in self.capacity(instances).items():
                p = self.profiles[name]
                used = sum(1 for i in instances if i.profile == name)
                k = key(p)
                room[k] = room.get(k, 0) + min(n, max(0, p.max_count - used))
            self._room_by[memo] = room
        return room

    # -- decisions -------------------------------------------------------------

    def choose(self, profile: str, instances: Sequence[PlacedInstance] = ()) -> Placement | None:
        """The fragmentation-aware placement for a new ``profile`` instance, or None."""
        p = self.profile(profile)
        if self._at_max(p, instances):
            return None
        return self._choose_mask(p.name, occupancy(instances))

    def first_fit(self, profile: str, instances: Sequence[PlacedInstance] = ()) -> Placement | None:
        """The lowest free placement: the naive policy the engine is measured against."""
        free = self.free_placements(profile, instances)
        return free[0] if free else None

    def score_after(self, occ: int) -> tuple[int, ...]:
        """The capacity vector (largest profile first) of a board with occupancy ``occ``."""
        return tuple(sum(1 for m, _ in ranked if not m & occ) for ranked in self._ranked)

    def plan(self, profiles: Sequence[str]) -> list[Placement] | None:
        """Placements that let all ``profiles`` coexist on one empty GPU, or None.

        Searches exhaustively (largest first, best-scored candidates first), so
        a layout that fits is always found; the result is in input order.
        """
        resolved = [self.profile(name) for name in profiles]
        for p in resolved:
            if sum(1 for q in resolved if q.name == p.name) > p.max_count:
                return None
        order = sorted(range(len(resolved)), key=lambda i: -resolved[i].memory_slices)
        result: list[Placement | None] = [None] * len(resolved)

        def search(k: int, occ: int) -> bool:
            if k == len(order):
                return True
            i = order[k]
            candidates = [(m, pl) for m, pl in self._masks[resolved[i].name] if not m & occ]
            candidates.sort(key=lambda c: (self.score_after(occ | c[0]), c[1].start), reverse=True)
            for m, pl in candidates:
                result[i] = pl
                if search(k + 1, occ | m):
                    return True
            return False

        if not search(0, 0):
            return None
        return [pl for pl in result if pl is not None]

    def explain_misfit(self, profiles: Sequence[str]) -> str:
        """Why ``profiles`` cannot coexist on one GPU, in words."""
        resolved = [self.profile(name) for name in profiles]
        for p in resolved:
            n = sum(1 for q in resolved if q.name == p.name)
            if n > p.max_count:
                return f"{self.model.name} allows at most {p.max_count} x {p.name}, asked for {n}"
        need = sum(p.memory_slices for p in resolved)
        if need > self.memory_slices:
            return f"they need {need} memory slices and {self.model.name} has {self.memory_slices}"
        compute = sum(p.slices for p in resolved)
        total = self.model.require_mig().compute_slices
        if compute > total:
            return f"they need {compute} compute slices and {self.model.name} has {total}"
        starts = {
            p.name: ",".join(str(pl.start) for pl in self.placements(p.name)) for p in resolved
        }
        return "their placements overlap: " + ", ".join(
            f"{name} can only start at {{{s}}}" for name, s in starts.items()
        )

    # -- internals -------------------------------------------------------------

    def _at_max(self, p: GpuInstanceProfile, instances: Sequence[PlacedInstance]) -> bool:
        return sum(1 for i in instances if i.profile == p.name) >= p.max_count

    def _choose_mask(self, name: str, occ: int) -> Placement | None:
        decided = self._decide(name, occ)
        return None if decided is None else decided[0]

    def _decide(self, name: str, occ: int) -> tuple[Placement, tuple[int, ...]] | None:
        """Best placement of ``name`` on occupancy ``occ`` and the capacity it costs (memoised)."""
        key = (name, occ)
        try:
            return self._best[key]
        except KeyError:
            pass
        before = self.score_after(occ)
        best: tuple[Placement, tuple[int, ...]] | None = None
        best_score: tuple[tuple[int, ...], int] | None = None
        for m, pl in self._masks[name]:
            if m & occ:
                continue
            after = self.score_after(occ | m)
            score = (after, pl.start)
            if best_score is None or score > best_score:
                loss = tuple(b - a for b, a in zip(before, after, strict=True))
                best, best_score = (pl, loss), score
        self._best[key] = best
        return best


_ENGINES: dict[tuple[str, str], PlacementEngine] = {}


# How many sets of instances an engine remembers the room of (PlacementEngine.room).
_ROOM_MEMO = 4096


def engine_for(model: GpuModel) -> PlacementEngine:
    """A shared engine per model (its memo tables persist across calls)."""
    key = (model.name, model.path)
    eng = _ENGINES.get(key)
    if eng is None:
        eng = _ENGINES[key] = PlacementEngine(model)
    return eng


@record(frozen=True, slots=True)
class GpuOccupancy:
    """One MIG GPU of a node, as the node-level chooser sees it."""

    index: int
    model: GpuModel
    instances: tuple[PlacedInstance, ...] = ()


@record(frozen=True, slots=True)
class NodeChoice:
    gpu_index: int
    placement: Placement


def choose_gpu(gpus: Sequence[GpuOccupancy], profile: str) -> NodeChoice | None:
    """Which GPU of a node takes a new ``profile`` instance, and where.

    Best fit: among GPUs that can take it, pick the one whose capacity vector
    (see :class:`PlacementEngine`) loses least, compared largest profile
    first.  A 1g goes to an already-carved GPU rather than breaking an empty
    one that could still hold a 7g.  Ties go to the lowest GPU index.
    """
    best: NodeChoice | None = None
    best_key: tuple[tuple[int, ...], int] | None = None
    for gpu in gpus:
        eng = engine_for(gpu.model)
        p = eng.profile(profile)
        if eng._at_max(p, gpu.instances):
            continue
        decided = eng._decide(p.name, occupancy(gpu.instances))
        if decided is None:
            continue
        pl, loss = decided
        key = (loss, gpu.index)
        if best_key is None or key < best_key:
            best, best_key = NodeChoice(gpu.index, pl), key
    return best


def free_capacity(
    gpus: Sequence[GpuOccupancy], key: Callable[[GpuInstanceProfile], K] = _by_name
) -> dict[K, int]:
    """How many more instances of each standard profile the node could take (one profile at
    a time, summed over GPUs), keyed by ``key(profile)``: its name, or e.g. its slices."""
    total: dict[K, int] = {}
    model: GpuModel | None = None
    for g in gpus:
        if g.model is not model:
            model, eng = g.model, engine_for(g.model)
        for k, n in eng.room(g.instances, key).items():
            total[k] = total.get(k, 0) + n
    return total
