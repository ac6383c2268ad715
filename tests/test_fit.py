"""What a MIG-pooled node publishes to Slurm: its vgpufit counts (slurmpool.fit)."""

from __future__ import annotations

import pytest

from slurmpool.catalogue import Catalogue
from slurmpool.fit import (
    carvable,
    fit_request,
    fit_sizes,
    fit_slices,
    fit_type,
    next_count,
    published_counts,
)
from slurmpool.placement import GpuOccupancy, PlacedInstance, Placement

# vgpu:n -> compute slices of the profile it gets on one GPU (the node config's table).
A100 = {1: 1, 2: 2, 3: 3, 4: 4, 5: 7, 6: 7, 7: 7}
A30 = {1: 1, 2: 2, 3: 4, 4: 4}


def test_types_name_the_size_with_a_letter_first() -> None:
    assert fit_type(4) == "s4" and fit_slices("s4") == 4
    assert [fit_slices(t) for t in ("x4", "s", "4", "s4g")] == [None] * 4


def test_sizes_are_the_profiles_requests_round_to() -> None:
    assert fit_sizes(7, A100.get) == (1, 2, 3, 4, 7)
    assert fit_sizes(4, A30.get) == (1, 2, 4)


@pytest.mark.parametrize(
    "count, want",
    [(1, (1, 1)), (4, (4, 1)), (5, (7, 1)), (7, (7, 1)), (14, (7, 2)), (21, (7, 3))],
)
def test_a_vgpu_request_asks_instances_of_its_rounded_size(
    count: int, want: tuple[int, int]
) -> None:
    assert fit_request(count, 7, A100.get) == want


@pytest.mark.parametrize("count", [0, 8, 9, 13])
def test_a_request_the_node_cannot_serve_asks_nothing(count: int) -> None:
    assert fit_request(count, 7, A100.get) is None


def _gpu(cat: Catalogue, index: int, *placed: tuple[str, int]) -> GpuOccupancy:
    model = cat.get("A100-SXM4-80GB")
    instances = []
    for profile, start in placed:
        size = model.gi_profile(profile).memory_slices
        instances.append(PlacedInstance(model.gi_profile(profile).name, Placement(start, size)))
    return GpuOccupancy(index, model, tuple(instances))


def test_two_empty_a100s_count_every_size(catalogue: Catalogue) -> None:
    gpus = [_gpu(catalogue, 0), _gpu(catalogue, 1)]
    assert carvable(gpus, (1, 2, 3, 4, 7)) == {1: 14, 2: 6, 3: 4, 4: 2, 7: 2}


def test_free_units_in_pieces_count_no_4g(catalogue: Catalogue) -> None:
    # GPU 0: 1g in slots 0-2, so four units are free (3-6) but 4g only starts at 0;
    # GPU 1: one 7g.  Slurm sees 4 vgpu free; the node counts no 4g and no 7g.
    gpus = [_gpu(catalogue, 0, ("1g", 0), ("1g", 1), ("1g", 2)), _gpu(catalogue, 1, ("7g", 0))]
    assert carvable(gpus, (1, 2, 3, 4, 7)) == {1: 4, 2: 1, 3: 1, 4: 0, 7: 0}


def test_a_size_the_node_has_no_profile_for_counts_zero(catalogue: Catalogue) -> None:
    assert carvable([_gpu(catalogue, 0)], (5,)) == {5: 0}


def test_published_counts_add_what_slurm_has_allocated() -> None:
    # A 7g job runs (Slurm's GresUsed s7:1) and a 3g one holds slices no type counts.
    allocated = {7: 1, 3: 1}
    free = {1: 4, 3: 0, 7: 0}
    assert published_counts(allocated, free) == {1: 4, 3: 1, 7: 1}


def test_next_counts_a_nodes_jobs_and_one_more() -> None:
    # Slurm subtracts the jobs it started on the node: one free while every job it
    # started there is counted, none while one is not yet.
    assert [next_count(n) for n in (0, 1, 5)] == [1, 2, 6]
