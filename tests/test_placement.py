"""The MIG placement engine, table-driven against NVIDIA's documented layouts."""

from __future__ import annotations

import itertools

import pytest

from slurmpool.catalogue import Catalogue, UnknownProfileError
from slurmpool.placement import (
    GpuOccupancy,
    PlacedInstance,
    Placement,
    choose_gpu,
    engine_for,
    occupancy,
)

# Layouts NVIDIA lists for A100 (MIG user guide, "Supported MIG Profiles" /
# A100 configurations), by profile size.
A100_DOCUMENTED = [
    ["7g"],
    ["4g", "2g", "1g"],
    ["4g", "1g", "1g", "1g"],
    ["4g", "3g"],
    ["3g", "3g"],
    ["3g", "2g", "1g"],
    ["3g", "1g", "1g", "1g"],
    ["2g", "2g", "3g"],
    ["2g", "1g", "1g", "3g"],
    ["1g", "1g", "2g", "3g"],
    ["1g", "1g", "1g", "1g", "3g"],
    ["2g", "2g", "2g", "1g"],
    ["2g", "1g", "1g", "2g", "1g"],
    ["1g", "1g", "2g", "2g", "1g"],
    ["2g", "2g", "1g", "1g", "1g"],
    ["1g"] * 7,
    ["2g", "1g", "1g", "1g", "1g", "1g"],
    ["1g", "1g", "2g", "1g", "1g", "1g"],
    ["4g", "1g", "2g"],
]

REJECTED = [
    (["4g", "4g"], "at most 1 x 4g.40gb"),
    (["4g", "3g", "1g"], "memory slices"),
    (["3g", "3g", "1g"], "memory slices"),
    (["7g", "1g"], "memory slices"),
    (["1g"] * 8, "at most 7"),
    (["1g.10gb+me", "1g.10gb+me"], "at most 1"),
]


@pytest.fixture(scope="module")
def a100(catalogue: Catalogue):
    return engine_for(catalogue.get("A100-SXM4-80GB"))


@pytest.mark.parametrize("layout", A100_DOCUMENTED, ids=lambda x: "+".join(x))
def test_documented_a100_layouts_fit(a100, layout: list[str]) -> None:
    placements = a100.plan(layout)
    assert placements is not None
    assert len(placements) == len(layout)
    occ = 0
    for name, pl in zip(layout, placements, strict=True):
        assert pl in a100.placements(name)
        assert not occ & pl.mask, "plan returned overlapping placements"
        occ |= pl.mask


@pytest.mark.parametrize(
    "layout, reason", REJECTED, ids=lambda x: "+".join(x) if isinstance(x, list) else x
)
def test_impossible_layouts_rejected(a100, layout: list[str], reason: str) -> None:
    assert a100.plan(layout) is None
    assert reason in a100.explain_misfit(layout)


def test_no_1g_in_slot_7(a100) -> None:
    assert Placement(7, 1) not in a100.placements("1g")
    # With slots 0..6 taken the last memory slice is free, yet no 1g can use it.
    taken = tuple(PlacedInstance("1g.10gb", Placement(i, 1)) for i in range(7))
    assert a100.free_placements("1g", taken) == []
    assert occupancy(taken) == 0b0111_1111


def test_enumerated_maximal_layouts_match_nvidia_count(catalogue: Catalogue) -> None:
    """NVIDIA publishes 19 possible A100 configurations of the standard profiles."""
    eng = engine_for(catalogue.get("A100-SXM4-40GB"))
    pls = [
        (p.name, pl.mask)
        for p in catalogue.get("A100-SXM4-40GB").require_mig().standard_profiles()
        for pl in eng.placements(p.name)
    ]
    layouts: set[tuple[tuple[str, int], ...]] = set()

    def walk(i: int, occ: int, chosen: list[tuple[str, int]]) -> None:
        if all(m & occ for _, m in pls):
            layouts.add(tuple(sorted(chosen)))
            return
        for j in range(i, len(pls)):
            if not pls[j][1] & occ:
                walk(j + 1, occ | pls[j][1], [*chosen, pls[j]])

    walk(0, 0, [])
    assert len(layouts) == 19
    for layout in layouts:
        assert eng.plan([name for name, _ in layout]) is not None


@pytest.mark.parametrize(
    "layout, fits",
    [
        (["4g"], True),
        (["2g", "2g"], True),
        (["2g", "1g", "1g"], True),
        (["1g"] * 4, True),
        (["1g"] * 5, False),
        (["4g", "1g"], False),
        (["2g", "2g", "1g"], False),
    ],
    ids=lambda x: "+".join(x) if isinstance(x, list) else str(x),
)
def test_a30_four_slice_geometry(catalogue: Catalogue, layout: list[str], fits: bool) -> None:
    eng = engine_for(catalogue.get("A30-24GB"))
    assert (eng.plan(layout) is not None) is fits


def test_choose_keeps_large_profiles_possible(a100) -> None:
    assert a100.choose("1g") == Placement(6, 1)
    assert a100.first_fit("1g") == Placement(0, 1)
    used = (PlacedInstance("1g.10gb", Placement(6, 1)),)
    # A 2g next to the 1g keeps 4g and one 3g available.
    assert a100.choose("2g", used) == Placement(4, 2)


def _run_sequence(eng, requests: list[str], policy: str) -> list[Placement | None]:
    placed: list[PlacedInstance] = []
    out: list[Placement | None] = []
    for name in requests:
        prof = eng.profile(name).name
        pl = eng.choose(prof, placed) if policy == "engine" else eng.first_fit(prof, placed)
        out.append(pl)
        if pl is not None:
            placed.append(PlacedInstance(prof, pl))
    return out


@pytest.mark.parametrize(
    "requests",
    [["1g", "4g"], ["1g", "2g", "4g"], ["1g", "1g", "4g", "1g"]],
    ids=lambda x: "+".join(x),
)
def test_engine_beats_first_fit(a100, requests: list[str]) -> None:
    first = _run_sequence(a100, requests, "first-fit")
    ours = _run_sequence(a100, requests, "engine")
    assert None in first, "first-fit should block the large request in this sequence"
    assert None not in ours


def test_max_count_respected(a100) -> None:
    me = (PlacedInstance("1g.10gb+me", Placement(6, 1)),)
    assert a100.choose("1g.10gb+me", me) is None
    assert a100.free_placements("1g.10gb+me", me) == []


def test_capacity(a100) -> None:
    cap = a100.capacity((PlacedInstance("3g.40gb", Placement(4, 4)),))
    assert cap == {"1g.10gb": 4, "2g.20gb": 2, "3g.40gb": 1, "4g.40gb": 1, "7g.80gb": 0}


def test_unknown_profile(a100) -> None:
    with pytest.raises(UnknownProfileError, match=r"valid profiles: 1g\.10gb"):
        a100.profile("5g")


def test_choose_gpu_packs_partly_used_gpu(catalogue: Catalogue) -> None:
    model = catalogue.get("A100-SXM4-80GB")
    empty = GpuOccupancy(0, model)
    used = GpuOccupancy(1, model, (PlacedInstance("1g.10gb", Placement(6, 1)),))
    choice = choose_gpu([empty, used], "1g.10gb")
    assert choice is not None and choice.gpu_index == 1
    # A 7g only fits the empty GPU.
    choice = choose_gpu([empty, used], "7g.80gb")
    assert choice is not None and (choice.gpu_index, choice.placement) == (0, Placement(0, 8))
    full = GpuOccupancy(2, model, (PlacedInstance("7g.80gb", Placement(0, 8)),))
    assert choose_gpu([full], "1g.10gb") is None


def test_seven_1g_on_one_gpu_then_none(catalogue: Catalogue) -> None:
    model = catalogue.get("A100-SXM4-80GB")
    gpu = GpuOccupancy(0, model)
    for _ in range(7):
        c = choose_gpu([gpu], "1g.10gb")
        assert c is not None
        gpu = GpuOccupancy(0, model, (*gpu.instances, PlacedInstance("1g.10gb", c.placement)))
    assert choose_gpu([gpu], "1g.10gb") is None
    starts = sorted(i.placement.start for i in gpu.instances)
    assert starts == list(range(7))


def test_choose_agrees_with_exhaustive_best(a100) -> None:
    """For every reachable occupancy, choose() returns a placement with the best capacity."""
    for bits in range(256):
        for name in ("1g.10gb", "2g.20gb", "3g.40gb"):
            free = [pl for pl in a100.placements(name) if not pl.mask & bits]
            pl = a100._choose_mask(name, bits)
            if not free:
                assert pl is None
                continue
            best = max(a100.score_after(bits | f.mask) for f in free)
            assert pl is not None and a100.score_after(bits | pl.mask) == best


def test_plan_is_order_independent(a100) -> None:
    for perm in set(itertools.permutations(["1g", "2g", "4g"])):
        assert a100.plan(list(perm)) is not None
