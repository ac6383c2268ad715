"""Summary math: means over measured samples only, n/a never zero, merging node parts."""

from __future__ import annotations

from pathlib import Path

from slurmpool.accounting import outbox
from slurmpool.accounting.enqueue import build_job_summary, enqueue_job_summary
from slurmpool.accounting.outbox import OUTBOX
from slurmpool.accounting.summary import (
    contains,
    devices,
    fmt_util,
    index_of,
    merge,
    parse_index,
    timeline,
    unpack_series,
    weighted_util,
)
from slurmpool.state.samples import (
    SAMPLES,
    DeviceSample,
    Retention,
    job_samples,
    job_totals,
    prune,
    write_samples,
)
from slurmpool.state.store import NewAllocation, NodeStore


def _mig(t: float, util: float | None, mem: int, job: str = "7") -> DeviceSample:
    return DeviceSample(
        t=t,
        gpu_index=0,
        gi_id=3,
        kind="mig",
        job_id=job,
        user="alice",
        model="A100-SXM4-80GB",
        profile="2g.20gb",
        slices=2,
        total_slices=7,
        util=util,
        util_source="gpm" if util is not None else None,
        mem_used_mib=mem,
        mem_total_mib=20480,
    )


def _gpu(t: float, util: float, mem: int, energy: int) -> DeviceSample:
    return DeviceSample(
        t=t,
        gpu_index=2,
        gi_id=None,
        kind="gpu",
        job_id="7",
        user="alice",
        model="A100-SXM4-80GB",
        util=util,
        util_source="nvml",
        mem_used_mib=mem,
        mem_total_mib=81920,
        energy_mj=energy,
    )


def test_totals_mean_max_and_na(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (SAMPLES, OUTBOX)) as store:
        for i, (u, m) in enumerate([(None, 100), (None, 4000), (None, 3000)]):
            write_samples(
                store,
                [
                    _mig(100.0 + i, u, m),
                    _gpu(100.0 + i, 50 + 10 * i, 5000, 1_000_000 + i * 300_000),
                ],
            )
        write_samples(store, [_mig(103.0, None, 10, job="other")])
        totals = {t.kind: t for t in job_totals(store, "7")}
    mig, gpu = totals["mig"], totals["gpu"]
    assert (mig.n, mig.util_n, mig.util_mean, mig.util_max) == (3, 0, None, None)
    assert mig.mem_max_mib == 4000
    assert (gpu.n, gpu.util_mean, gpu.util_max) == (3, 60.0, 70.0)
    assert gpu.energy_j == 600.0
    assert fmt_util(mig.util_mean) == "n/a" and fmt_util(gpu.util_mean) == "60%"


def test_partial_utilisation_is_averaged_over_measured_samples_only(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (SAMPLES, OUTBOX)) as store:
        write_samples(store, [_mig(1.0, None, 1)])  # first GPM pass: no value yet
        write_samples(store, [_mig(2.0, 60.0, 1)])
        write_samples(store, [_mig(3.0, 62.0, 1)])
        (t,) = job_totals(store, "7")
    assert t.n == 3 and t.util_n == 2 and t.util_mean == 61.0


def test_timeline_packs_na_and_values() -> None:
    samples = [_mig(float(i), None if i < 2 else 60.0, 2048) for i in range(4)]
    tl = timeline(samples, 0.0, 3.0, points=4, mem_total_mib=20480)
    assert unpack_series(tl["util"]) == [None, None, 60, 60]
    assert unpack_series(tl["mem_pct"]) == [10, 10, 10, 10]


def test_enqueue_builds_the_summary_with_carved_and_request(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (SAMPLES, OUTBOX)) as store:
        with store.transaction():
            aid = store.add_intent(
                NewAllocation(
                    "7",
                    "alice",
                    1000,
                    "mig",
                    0,
                    "GPU-0",
                    profile="2g.20gb",
                    placement_start=0,
                    placement_size=2,
                )
            )
            store.mark_active(aid, gi_id=3, ci_id=0, mig_uuid="MIG-x")
        for i in range(5):
            write_samples(store, [_mig(10.0 + i, None, 3000 + i)])
        part = enqueue_job_summary(
            store,
            job_id="7",
            node="sbx1",
            cluster="pool",
            user="alice",
            request={"vgpu": 2},
            end=20.0,
        )
        (pending,) = outbox.pending(store)
        again = build_job_summary(store, job_id="7", user="alice", request={"vgpu": 2}, end=20.0)
    assert pending.part == part == again  # idempotent: an epilog rerun gives the same summary
    assert part["request"] == {"vgpu": 2}
    assert part["carved"] == [
        {
            "gpu": 0,
            "mode": "mig",
            "profile": "2g.20gb",
            "gi": 3,
            "ci": 0,
            "uuid": "MIG-x",
            "placement": [0, 2],
        }
    ]
    (dev,) = part["devices"]
    assert dev["profile"] == "2g.20gb" and dev["util_mean"] is None and dev["samples"] == 5
    assert dev["mem_max_mib"] == 3004 and dev["duration_s"] == 4.0


def test_carved_device_without_samples_is_listed(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (SAMPLES, OUTBOX)) as store:
        with store.transaction():
            aid = store.add_intent(
                NewAllocation("8", "bob", 1001, "mig", 1, "GPU-1", profile="1g.10gb")
            )
            store.mark_active(aid, gi_id=9, ci_id=0)
        part = build_job_summary(store, job_id="8", user="bob")
    (dev,) = part["devices"]
    assert dev["samples"] == 0 and dev["util_mean"] is None and dev["profile"] == "1g.10gb"


def test_merge_replaces_a_nodes_part_never_duplicates() -> None:
    a = merge(None, "5", "pool", "n1", {"devices": []})
    b = merge(a, "5", "pool", "n2", {"devices": []})
    c = merge(b, "5", "pool", "n1", {"devices": [], "x": 1})
    assert sorted(c["nodes"]) == ["n1", "n2"] and c["nodes"]["n1"]["x"] == 1
    other_job = merge({"v": 1, "job": "4", "nodes": {"n9": {}}}, "5", "pool", "n1", {})
    assert list(other_job["nodes"]) == ["n1"]


def test_each_run_of_a_requeued_job_is_its_own_part_named_by_its_node() -> None:
    mig = {"gpu": 0, "kind": "mig", "model": "A100", "profile": "1g.10gb", "slices": 1, "of": 7}
    run0 = {"run": 0, "devices": [{**mig, "util_mean": 10.0}]}
    run1 = {"run": 1, "devices": [{**mig, "util_mean": 30.0}]}
    doc = merge(merge(None, "5", "pool", "n1", run0), "5", "pool", "n1", run1)
    assert doc["nodes"] == {"n1": run0, "n1@1": run1}
    assert contains(doc, "n1", run0) and contains(doc, "n1", run1)
    assert not contains(merge(None, "5", "pool", "n1", run0), "n1", run1)
    assert [(u.node, u.util_mean) for u in devices(doc)] == [("n1", 10.0), ("n1", 30.0)]
    assert [e[0] for e in parse_index(index_of(doc))] == ["n1", "n1"]


def test_slice_weighted_util() -> None:
    doc = {
        "nodes": {
            "n1": {
                "devices": [
                    {"gpu": 0, "kind": "mig", "slices": 2, "of": 7, "util_mean": 70.0},
                    {"gpu": 1, "kind": "mig", "slices": 1, "of": 7, "util_mean": None},
                    {"gpu": 2, "kind": "gpu", "util_mean": 10.0},
                ]
            }
        }
    }
    uses = devices(doc)
    assert [round(u.weight, 4) for u in uses] == [0.2857, 0.1429, 1.0]
    assert round(weighted_util(uses) or 0, 2) == round((70 * 2 / 7 + 10) / (2 / 7 + 1), 2)


def test_retention_bounds_raw_rows_but_keeps_totals(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (SAMPLES, OUTBOX)) as store:
        for i in range(50):
            write_samples(store, [_mig(float(i), 50.0, 1)])
        deleted = prune(store, Retention(max_age_s=1e9, max_rows=10), now=60.0)
        assert deleted == 40 and len(job_samples(store, "7")) == 10
        (t,) = job_totals(store, "7")
        assert t.n == 50  # the summary is still exact
        prune(store, Retention(max_age_s=5.0), now=60.0)
        assert job_samples(store, "7") == []
