"""The pooling hooks against the simulator, run as slurmd runs them (separate processes,
only the environment Slurm gives): allocation, exports, release, idempotence, crashes at
each step, concurrency, requeue, shared shares, passthrough checks."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest
from pooling_env import A100, EMPTY_NODE_GRES, NODE, ListLog, Pool, make_pool

from slurmpool.pooling import caps
from slurmpool.pooling.reconcile import reconcile
from slurmpool.sim.processes import attach_process
from slurmpool.slurm.allocation import SQUEUE_FORMAT
from slurmpool.slurm.nodegres import READ_FORMAT
from slurmpool.state.db import store_path
from slurmpool.state.store import ACTIVE, INTENT, RELEASED, RELEASING, NodeStore

needs.root("the hooks chown device files")


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return make_pool(tmp_path)


def exports_of(stdout: str) -> dict[str, str]:
    out = {}
    for line in stdout.splitlines():
        assert line.startswith("export ")
        name, _, value = line[len("export ") :].partition("=")
        out[name] = value
    return out


def _with_accounting(pool: Pool) -> None:
    config = json.loads(pool.config_path.read_text())
    pool.config_path.write_text(json.dumps({**config, "accounting": True}))


def test_the_epilog_summarises_and_releases_on_one_connection(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With accounting on, the epilog queues the GPU summary and releases the
    instance through the one store connection the hook run opens."""
    import sqlite3

    from slurmpool.accounting import outbox
    from slurmpool.hooks.__main__ import main

    _with_accounting(pool)
    env = pool.env("31", vgpu=2)
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    opened: list[str] = []
    real_connect = sqlite3.connect

    def connect(path: str, *args: object, **kw: object) -> sqlite3.Connection:
        opened.append(path)
        return real_connect(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect", connect)
    rc = main(["epilog", "--node-config", str(pool.config_path)], env, use_syslog=False)
    monkeypatch.undo()
    assert rc == 0
    assert len(opened) == 1
    with pool.store() as store:
        assert [a.state for a in store.for_job("31", include_released=True)] == [RELEASED]
    with NodeStore(opened[0], (outbox.OUTBOX,)) as store:
        assert [p.job_id for p in outbox.pending(store)] == ["31"]


def test_the_epilog_summary_names_the_jobs_cluster_user_and_run(pool: Pool) -> None:
    from slurmpool.accounting import outbox
    from slurmpool.accounting.outbox import OUTBOX

    _with_accounting(pool)
    env = pool.env("32", vgpu=1, SLURM_JOB_RESTART_COUNT="2")
    assert pool.hook("prolog", env)[0] == 0
    rc, _, err = pool.hook("epilog", env)
    assert rc == 0, err
    assert "gpu-summary-queued" in err
    with NodeStore(store_path(pool.state_dir, NODE), (OUTBOX,)) as store:
        [item] = outbox.pending(store)
    assert (item.job_id, item.node, item.cluster) == ("32", NODE, "t")
    assert (item.part["user"], item.part["run"]) == ("alice", 2)


def test_each_run_of_a_requeued_job_is_summarised_apart(pool: Pool) -> None:
    """After `scontrol requeue`, the epilog of the run that ended already sees the next
    run's restart count (measured on 22.05): the run is the one its prolog recorded, and
    each run's summary holds that run's instance only."""
    from slurmpool.accounting import outbox
    from slurmpool.accounting.outbox import OUTBOX
    from slurmpool.state import samples

    _with_accounting(pool)
    first = pool.env("34", vgpu=2)  # run 0's prolog: no restart yet
    assert pool.hook("prolog", first)[0] == 0
    assert pool.hook("epilog", {**first, "SLURM_JOB_RESTART_COUNT": "1"})[0] == 0
    second = pool.env("34", vgpu=1, SLURM_JOB_RESTART_COUNT="1")
    assert pool.hook("prolog", second)[0] == 0
    with pool.store() as store:
        assert samples.job_totals(store, "34") == []  # run 0's were handed to its summary
    assert pool.hook("epilog", second)[0] == 0
    with NodeStore(store_path(pool.state_dir, NODE), (OUTBOX,)) as store:
        items = outbox.pending(store)
    assert [(i.run, i.part["run"]) for i in items] == [(0, 0), (1, 1)]
    assert [[c["profile"] for c in i.part["carved"]] for i in items] == [["2g.20gb"], ["1g.10gb"]]
    assert [i.part["request"]["vgpu"] for i in items] == [2, 1]


def test_a_failed_summary_never_stops_the_release(
    pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary is best effort: when it fails, the epilog logs it, gives the
    instance back all the same and exits 0."""
    import io

    from slurmpool.accounting import enqueue
    from slurmpool.hooks.__main__ import main

    _with_accounting(pool)
    env = pool.env("33", vgpu=2)
    assert pool.hook("prolog", env)[0] == 0

    def broken(*_a: object, **_kw: object) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(enqueue, "enqueue_run", broken)
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    rc = main(["epilog", "--node-config", str(pool.config_path)], env, use_syslog=False)
    monkeypatch.undo()
    assert rc == 0
    assert "gpu-summary-failed" in err.getvalue() and "disk full" in err.getvalue()
    assert pool.instances() == []
    with pool.store() as store:
        assert [a.state for a in store.for_job("33", include_released=True)] == [RELEASED]


def test_an_epilog_without_the_jobs_uid_gives_back_nothing_and_passes(pool: Pool) -> None:
    env = pool.env("34", vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    rc, _, err = pool.hook("epilog", {k: v for k, v in env.items() if k != "SLURM_JOB_UID"})
    assert rc == 0, err
    assert "no-job" in err
    with pool.store() as store:
        assert [a.state for a in store.for_job("34")] == [ACTIVE]


def test_vgpu2_carves_a_2g_for_the_job_and_the_epilog_destroys_it(pool: Pool) -> None:
    env = pool.env("100", vgpu=2)
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    [(_gpu, profile, start, size, uuid)] = pool.instances()
    assert profile == "2g.20gb" and uuid and uuid.startswith("MIG-")
    with pool.store() as store:
        [a] = store.for_job("100")
    assert (a.state, a.mig_uuid, a.uid, a.profile) == (ACTIVE, uuid, 1000, "2g.20gb")
    assert (a.placement_start, a.placement_size) == (start, size)
    for minor in a.cap_minors:
        assert caps.owner(pool.dev, minor) == (1000, 0o400)
    # One bounded read of the allocation; then the node tells slurmctld what it can
    # carve now, its other GRES restated as they were.
    assert pool.calls == [
        f"squeue -h -j 100 -O {SQUEUE_FORMAT}",
        f"sinfo -h -N -n {NODE} -O {READ_FORMAT}",
        f"update NodeName={NODE} Gres={pool.node_gres()}",
    ]
    # s2: the job's 2g plus five more; s1: two 1g places fewer; one 3g and one 7g fewer.
    assert pool.node_gres() == (
        "gpu:a100:1,vgpu:14,vgpufit:s1:12,vgpufit:s2:6,vgpufit:s3:3,vgpufit:s4:2,vgpufit:s7:1,"
        "vgpufit:next:2,vgpufit:pad:17"
    )
    rc, out, err = pool.hook("task-prolog", env)
    assert rc == 0, err
    got = exports_of(out)
    assert got["CUDA_VISIBLE_DEVICES"] == uuid
    assert got["SLURMPOOL_PROFILE"] == "2g.20gb"
    assert got["SLURMPOOL_GPU_UUID"].startswith("GPU-")
    assert got["SLURMPOOL_SIM_STATE"] == str(pool.sim_dir)  # a simulated node says where
    for _ in range(2):  # the epilog twice: no error, no change the second time
        rc, _, err = pool.hook("epilog", env)
        assert rc == 0, err
        assert pool.instances() == []
    assert "action=nothing-to-release" in err
    assert pool.node_gres() == EMPTY_NODE_GRES  # published back, once
    assert len([c for c in pool.calls if c.startswith("update NodeName=")]) == 2
    for minor in a.cap_minors:
        assert caps.owner(pool.dev, minor) == (0, 0o400)
    with pool.store() as store:
        assert store.get(a.id).state == RELEASED
    rc, out, _ = pool.hook("task-prolog", env)
    assert (rc, out) == (0, "")


def test_the_count_is_the_allocation_whatever_extra_says(pool: Pool) -> None:
    pool.set_allocation("101", vgpu=3)
    env = pool.env("101", SLURM_JOB_EXTRA="somebody's own $(extra)")
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert [i[1] for i in pool.instances()] == ["3g.40gb"]
    assert pool.slurm_calls() == [f"squeue -h -j 101 -O {SQUEUE_FORMAT}"]
    assert "forgery-attempt" not in err


@pytest.mark.parametrize(
    ("allocated", "extra", "want"),
    [
        (1, "slurmpool:vgpu=7", ["1g.10gb"]),
        (1, " SlurmPool : VGPU = 14", ["1g.10gb"]),
        (0, "slurmpool:vgpu=7", []),  # a CPU-only job claiming a 7g
    ],
)
def test_forged_extra_gets_the_allocation_and_is_logged(
    pool: Pool, allocated: int, extra: str, want: list[str]
) -> None:
    pool.set_allocation("105", vgpu=allocated)
    rc, _, err = pool.hook("prolog", pool.env("105", SLURM_JOB_EXTRA=extra))
    assert rc == 0, err
    assert [i[1] for i in pool.instances()] == want
    [line] = [x for x in err.splitlines() if "action=forgery-attempt" in x]
    assert f"claimed={7 if '7' in extra else 14} allocated={allocated}" in line
    assert "user=alice" in line


RECORDED_2411 = Path(__file__).resolve().parent / "data" / "slurm-24.11" / "hostile"


@pytest.mark.parametrize(("case", "want"), [("name-tres", ["1g.10gb"]), ("cpu-only", [])])
def test_on_newer_slurm_the_prolog_reads_scontrol_json(
    tmp_path: Path, case: str, want: list[str]
) -> None:
    # What 24.11's scontrol printed to a real prolog for a job whose name forges
    # "TresPerNode=gres:vgpu:7", moved to this pool's node and job id.
    pool = make_pool(tmp_path, slurm_version="24.11")
    doc = json.loads((RECORDED_2411 / f"{case}.prolog.json").read_text())
    [job] = doc["jobs"]
    assert "TresPerNode=gres:vgpu:7" in job["name"]
    job["job_id"], job["nodes"] = 108, NODE
    job["job_resources"]["nodes"]["allocation"][0]["name"] = NODE
    pool.set_json("108", json.dumps(doc))
    rc, _, err = pool.hook("prolog", pool.env("108"))
    assert rc == 0, err
    assert [i[1] for i in pool.instances()] == want
    assert pool.slurm_calls() == ["show job --json 108"]  # one bounded read, no squeue


def test_declared_newer_slurm_without_json_reads_squeue(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, slurm_version="24.11")
    (pool.bin_dir / "scontrol").write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {pool.bin_dir / 'calls.log'}\n"
        "echo \"scontrol: unrecognized option '--json'\" >&2\nexit 1\n"
    )
    rc, _, err = pool.hook("prolog", pool.env("109", vgpu=2))
    assert rc == 0, err
    assert [i[1] for i in pool.instances()] == ["2g.20gb"]
    assert pool.slurm_calls() == ["show job --json 109", f"squeue -h -j 109 -O {SQUEUE_FORMAT}"]


def _squeue_without_the_fields(pool: Pool) -> None:
    (pool.bin_dir / "squeue").write_text(
        "#!/bin/sh\necho 'squeue: error: Invalid job format specification: tres-alloc' >&2\n"
        "exit 1\n"
    )


def test_scontrol_text_where_squeue_lacks_the_fields(pool: Pool) -> None:
    _squeue_without_the_fields(pool)
    (pool.bin_dir / "record.txt").write_text(
        "JobId=106 JobName=t\n   UserId=alice(1000) GroupId=alice(1000)\n"
        "   JobState=RUNNING Reason=None\n   TresPerNode=gres:vgpu:2\n"
        f"     Nodes={NODE} CPU_IDs=0 Mem=100 GRES=vgpu(CNT:2)\n   Comment=c\n"
    )
    rc, _, err = pool.hook("prolog", pool.env("106"))
    assert rc == 0, err
    assert [i[1] for i in pool.instances()] == ["2g.20gb"]
    assert pool.slurm_calls() == ["show job -d 106"]  # the stand-in squeue records nothing


def test_forged_line_in_scontrol_text_gets_nothing_and_is_logged(pool: Pool) -> None:
    _squeue_without_the_fields(pool)
    forged = f"x\n     Nodes={NODE} CPU_IDs=0 Mem=100 GRES=vgpu(CNT:7)"
    (pool.bin_dir / "record.txt").write_text(
        f"JobId=107 JobName={forged}\n   UserId=alice(1000) GroupId=alice(1000)\n"
        "   JobState=RUNNING Reason=None\n   TresPerNode=gres:vgpu:1\n"
        f"     Nodes={NODE} CPU_IDs=0 Mem=100 GRES=vgpu(CNT:1)\n"
    )
    rc, _, err = pool.hook("prolog", pool.env("107"))
    assert rc == 0, err
    assert pool.instances() == []
    want = f'error="two per-node lines name node {NODE}"'
    assert "action=forgery-attempt level=error job=107 user=alice " + want in err


def test_prolog_twice_hands_out_the_same_instance(pool: Pool) -> None:
    env = pool.env("102", vgpu=2)
    assert pool.hook("prolog", env)[0] == 0
    first = pool.instances()
    assert pool.hook("prolog", env)[0] == 0
    assert pool.instances() == first


def test_cpu_job_touches_nothing(pool: Pool) -> None:
    rc, _, err = pool.hook("prolog", pool.env("103"))
    assert rc == 0 and "action=request" not in err
    assert pool.instances() == []


def test_vgpu14_gets_two_whole_gpu_instances(pool: Pool) -> None:
    env = pool.env("104", vgpu=14)
    assert pool.hook("prolog", env)[0] == 0
    assert [(i[0], i[1]) for i in pool.instances()] == [(0, "7g.80gb"), (1, "7g.80gb")]
    _, out, _ = pool.hook("task-prolog", env)
    assert len(exports_of(out)["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    # Nothing else fits; s7 counts the job's two whole GPUs (what vgpu:14 asks for).
    assert pool.node_gres() == (
        "gpu:a100:1,vgpu:14,vgpufit:s1:0,vgpufit:s2:0,vgpufit:s3:0,vgpufit:s4:0,vgpufit:s7:2,"
        "vgpufit:next:2,vgpufit:pad:39"
    )


def test_no_room_requeues_and_exits_zero(pool: Pool) -> None:
    # Fill both GPUs with 7g instances, then ask for a 1g: Slurm would have refused by
    # count here, but a fragmented node looks the same to the prolog.
    assert pool.hook("prolog", pool.env("200", vgpu=14))[0] == 0
    pool.set_allocation("201", vgpu=1, admin_comment="budget=cs101")
    rc, _, err = pool.hook("prolog", pool.env("201"))
    assert rc == 0, err
    assert "action=requeue " in err
    update = next(c for c in pool.slurm_calls() if c.startswith("update"))
    assert update.startswith("update jobid=201 AdminComment=budget=cs101 | slurmpool: requeued 1x")
    assert "requeue 201" in pool.calls
    with pool.store() as store:
        assert store.requeue_count() == 1
        assert store.for_job("201") == []
    assert len(pool.instances()) == 2  # nothing of the requeued job is left
    # Job 200 holds the slices: 201 is kept off the node until 200's epilog frees them.
    assert pool.slurm_calls()[-1] == f"update jobid=201 ExcNodeList={NODE}"
    assert "action=excluded " in err
    with pool.store() as store:
        assert store.exclusions() == ["201"]
    pool.set_exclusions("201", "PENDING", f"login1,{NODE}")  # what slurmctld now holds
    rc, _, err = pool.hook("epilog", pool.env("200", vgpu=14))
    assert rc == 0, err
    assert pool.slurm_calls()[-1] == "update jobid=201 ExcNodeList=login1"
    assert "action=readmitted " in err


def test_unservable_request_is_held_not_drained(pool: Pool) -> None:
    rc, _, err = pool.hook("prolog", pool.env("202", vgpu=9))
    assert rc == 0, err
    assert "requeuehold 202" in pool.calls
    assert not any("ExcNodeList" in c for c in pool.calls)  # held, not kept off


@pytest.mark.parametrize("point", ["before-create-gi", "after-create-gi", "after-create-ci"])
def test_prolog_killed_at_each_step_is_reconciled(pool: Pool, point: str) -> None:
    # A running neighbour that must survive the cleanup untouched.
    assert pool.hook("prolog", pool.env("300", vgpu=1))[0] == 0
    neighbour = pool.instances()
    pool.fault(point)
    rc, _, _ = pool.hook("prolog", pool.env("301", vgpu=2))
    assert rc == -9  # SIGKILL
    with pool.store() as store:
        [left] = store.for_job("301")
        assert left.state == INTENT
    # The next hook run on the node (another job's prolog) reconciles.
    assert pool.hook("prolog", pool.env("302", vgpu=1))[0] == 0
    with pool.store() as store:
        assert store.get(left.id).state == RELEASED
        live = {a.job_id for a in store.live()}
    assert live == {"300", "302"}
    profiles = sorted(i[1] for i in pool.instances())
    assert profiles == ["1g.10gb", "1g.10gb"]  # the 2g is gone
    assert neighbour[0] in pool.instances()
    for minor in range(3, 3 + 9 * 15 * 2):  # every GI/CI file of GPUs 0-1 not in use
        path = Path(caps.cap_path(pool.dev, minor))
        if path.exists() and caps.owner(pool.dev, minor)[0] not in (0, 1000):
            pytest.fail(f"{path} left with another owner")
    # The crashed job's epilog later: no error.
    assert pool.hook("epilog", pool.env("301"))[0] == 0


@pytest.mark.parametrize("point", ["before-destroy-ci", "after-destroy-gi"])
def test_epilog_killed_half_way_is_finished_by_the_next_run(pool: Pool, point: str) -> None:
    env = pool.env("400", vgpu=2)
    assert pool.hook("prolog", env)[0] == 0
    pool.fault(point)
    assert pool.hook("epilog", env)[0] == -9
    with pool.store() as store:
        [a] = store.for_job("400")
        assert a.state == RELEASING
    assert pool.hook("epilog", env)[0] == 0
    assert pool.instances() == []
    with pool.store() as store:
        assert store.get(a.id).state == RELEASED
    for minor in a.cap_minors:
        assert caps.owner(pool.dev, minor) == (0, 0o400)


def test_orphan_instance_is_destroyed_only_when_idle(pool: Pool) -> None:
    from slurmpool.placement import Placement

    with pool.backend() as b:
        orphan = b.create_instance(0, "1g.10gb", Placement(0, 1))
        busy = b.create_instance(1, "1g.10gb", Placement(0, 1))
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        attach_process(pool.sim_dir, 1, busy.gi_id, busy.ci_id, pid=worker.pid, used_mib=10, util=1)
        log = ListLog()
        node = pool.node(log)
        reconcile(node)
        node.close()
        left = [(i[0], i[2]) for i in pool.instances()]
        assert left == [(1, 0)]  # the idle orphan went, the busy one stays
        assert "orphan-destroyed" in log.actions() and "orphan-busy" in log.actions()
        assert orphan.uuid not in {i[4] for i in pool.instances()}
    finally:
        worker.kill()
        worker.wait()


def test_stray_process_on_an_instance_is_stopped_by_the_epilog(pool: Pool) -> None:
    env = pool.env("500", vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    with pool.store() as store:
        [a] = store.for_job("500")
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        attach_process(
            pool.sim_dir, a.gpu_index, a.gi_id, a.ci_id, pid=stray.pid, used_mib=10, util=5
        )
        rc, _, err = pool.hook("epilog", env)
        assert rc == 0, err
        assert stray.wait(10) is not None
        assert pool.instances() == []
    finally:
        if stray.poll() is None:
            stray.kill()


def test_concurrent_prologs_never_share_slices(pool: Pool) -> None:
    # A long budget lets each hook wait its turn on the node lock (40 s) even on a
    # loaded machine.  A hook that still finds the node busy requeues its job (the
    # designed outcome), and what it had begun is undone by the next hook's reconcile.
    # Either way no slice is shared.
    jobs = [str(600 + i) for i in range(14)]
    procs = {j: pool.start_hook("prolog", pool.env(j, vgpu=1), budget_s=120) for j in jobs}
    errs = {}
    for j, p in procs.items():
        _, errs[j] = p.communicate(timeout=150)
        assert p.returncode == 0, errs[j]
    requeued = {j for j in jobs if f"requeue {j}" in pool.calls}
    for j in requeued:
        assert "action=node-busy level=warning" in errs[j], errs[j]
    node = pool.node(ListLog())
    reconcile(node)
    node.close()
    insts = pool.instances()
    assert len({(g, s) for g, _, s, _, _ in insts}) == len(insts) == len(jobs) - len(requeued)
    with pool.store() as store:
        live = store.live()
        assert {a.job_id for a in live} == set(jobs) - requeued
        assert all(a.state == ACTIVE for a in live)
        assert {a.mig_uuid for a in live} == {uuid for *_, uuid in insts}
    assert len(requeued) < len(jobs)


def test_hostile_environment_values_change_nothing(pool: Pool, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    env = pool.env(
        "700",
        user=f"a'b\"; $(touch {marker})\nx",
        SLURM_JOB_EXTRA=f"slurmpool:vgpu=1`touch {marker}`",
        SLURM_JOB_PARTITION=f"p$(touch {marker})",
    )
    pool.set_allocation("700", vgpu=1)
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert not marker.exists()
    assert [i[1] for i in pool.instances()] == ["1g.10gb"]
    for line in err.splitlines():
        assert "\n" not in line and not line.startswith("x")
    rc, _, _ = pool.hook("prolog", pool.env("1; touch x", SLURM_JOB_EXTRA="slurmpool:vgpu=1"))
    assert rc != 0  # not a job id slurmd would give: refused, nothing carved
    assert len(pool.instances()) == 1


def test_slurm_unreachable_is_not_a_broken_node(pool: Pool) -> None:
    for name in ("squeue", "scontrol"):
        (pool.bin_dir / name).write_text("#!/bin/sh\necho 'slurmctld down' >&2\nexit 1\n")
    rc, _, err = pool.hook("prolog", pool.env("801"))
    assert rc == 0 and "action=request-unknown level=error" in err
    assert pool.instances() == []


def test_nvml_unreachable_is_a_broken_node(pool: Pool) -> None:
    (pool.sim_dir / "state.json").rename(pool.sim_dir / "state.json.gone")
    rc, _, err = pool.hook("prolog", pool.env("800", vgpu=2))
    assert rc == 1
    assert "action=broken-node level=error" in err


# -- shared ------------------------------------------------------------------------


@pytest.fixture
def shared_pool(tmp_path: Path) -> Iterator[Pool]:
    """Two L40S shared in 4 with MPS, one whole; the MPS daemons the hooks start are
    stopped afterwards even when a test fails before its epilogs."""
    from slurmpool.sim.mps import request

    model = "L40S-48GB"
    pool = make_pool(
        tmp_path,
        gpus=[
            (model, "shared", {"shares": 4, "mps": True}),
            (model, "shared", {"shares": 4, "mps": True}),
            (model, "passthrough", {}),
        ],
        vgpu_unit="share",
        units_per_gpu=4,
    )
    try:
        yield pool
    finally:
        for pid_file in (pool.root / "run" / "mps").glob("gpu*/nvidia-cuda-mps-control.pid"):
            with contextlib.suppress(OSError):
                request(str(pid_file.parent), "quit")


def _shard_env(pool: Pool, job_id: str, shards: int, job_gpus: str) -> dict[str, str]:
    """A shard job's prolog environment: slurmd names the shards' GPU in SLURM_JOB_GPUS."""
    env = pool.env(job_id, SLURM_JOB_GPUS=job_gpus, SLURM_JOB_EXTRA=f"slurmpool:vgpu={shards}")
    pool.set_allocation(job_id, shards, gres="shard")
    return env


def test_shared_shares_on_the_gpu_slurm_chose_with_mps_limits(shared_pool: Pool) -> None:
    pool = shared_pool
    envs = [_shard_env(pool, "900", 3, "0"), _shard_env(pool, "901", 2, "1")]
    envs.append(_shard_env(pool, "902", 1, "1"))
    for env in envs:
        rc, _, err = pool.hook("prolog", env)
        assert rc == 0, err
    with pool.store() as store:
        placed = {a.job_id: (a.mode, a.gpu_index, a.shares) for a in store.live()}
    assert placed == {"900": ("shared", 0, 3), "901": ("shared", 1, 2), "902": ("shared", 1, 1)}
    from slurmpool.pooling.status import node_status

    node = pool.node(ListLog())
    data = node_status(node)
    node.close()
    assert [g.get("free_shares") for g in data["gpus"]] == [1, 1, None]
    _, out, _ = pool.hook("task-prolog", envs[0])
    got = exports_of(out)
    with pool.backend() as b:
        assert got["CUDA_VISIBLE_DEVICES"] == b.gpu(0).uuid
    assert got["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "75"
    assert got["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"].startswith("0=")
    # The limits the environment cannot raise: the user's MPS server on each GPU,
    # held to the user's shares there (3 of 4 on GPU 0; 2 + 1 of 4 on GPU 1).
    pipes = [pool.root / "run" / "mps" / f"gpu{i}" for i in (0, 1)]
    assert got["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes[0])
    servers = [_mps(pipe, "get_server_list").split() for pipe in pipes]
    assert [len(s) for s in servers] == [1, 1]
    for pipe, [server] in zip(pipes, servers, strict=True):
        assert _mps(pipe, f"get_active_thread_percentage {server}") == "75"
        assert _owner(int(server)) == 1000
    assert _mps(pipes[0], f"get_device_pinned_mem_limit {servers[0][0]} 0") == "36864M"
    assert pool.hook("epilog", envs[1])[0] == 0  # GPU 1 keeps the user's one share
    assert _mps(pipes[1], f"get_active_thread_percentage {servers[1][0]}") == "25"
    for env in (envs[0], envs[2]):
        assert pool.hook("epilog", env)[0] == 0
    with pool.store() as store:
        assert store.live() == []
    assert not any((pipe / "nvidia-cuda-mps-control.pid").exists() for pipe in pipes)
    assert not any(os.path.exists(f"/proc/{s[0]}") for s in servers)  # servers stopped


def test_another_users_mps_job_waits_its_turn_held_to_one_share(
    shared_pool: Pool, tmp_path: Path
) -> None:
    """MPS runs one user's server at a time: while root's client runs on GPU 0, bob's
    job starts no server; the one that starts for him later has one share's limits.
    (Root's, so that the client reaches pytest's private directory.)"""
    pool = shared_pool
    first = pool.env("930", uid=0, user="root", SLURM_JOB_GPUS="0")
    pool.set_allocation("930", 2, gres="shard")
    assert pool.hook("prolog", first)[0] == 0
    pipe = pool.root / "run" / "mps" / "gpu0"
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURMPOOL_SIM_STATE": str(pool.sim_dir),
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
    }
    release = tmp_path / "release"
    client = subprocess.Popen(
        [sys.executable, "-m", "slurmpool.sim.workload", "--until-file", str(release)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert client.stdout is not None
        assert "active threads 50%" in client.stdout.readline()  # root: 2 of 4 shares
        bob = pool.env("931", uid=1000, user="bob", SLURM_JOB_GPUS="0")
        pool.set_allocation("931", 1, gres="shard")
        rc, _, err = pool.hook("prolog", bob)
        assert rc == 0, err
        assert "action=mps" in err and "waits: server" in err and "of uid 0 has clients" in err
        [server] = _mps(pipe, "get_server_list").split()
        assert _owner(int(server)) == 0  # still root's
        assert _mps(pipe, "get_default_active_thread_percentage") == "25"
    finally:
        release.touch()
        client.wait(60)
    for job in (first, bob):
        assert pool.hook("epilog", job)[0] == 0
    assert not (pipe / "nvidia-cuda-mps-control.pid").exists()


def _mps(pipe: Path, line: str) -> str:
    from slurmpool.sim.mps import request

    ok, answer = request(str(pipe), line)
    assert ok, answer
    return answer


def test_only_the_share_holders_reach_the_gpus_daemon(shared_pool: Pool) -> None:
    """The pipe directory is root's with an ACL naming the users with a share of the GPU;
    it follows their shares as jobs come and go."""
    from slurmpool.pooling.acl import traversers

    pool = shared_pool
    alice = pool.env("950", uid=1000, user="alice", SLURM_JOB_GPUS="0")
    pool.set_allocation("950", 1, gres="shard")
    carol = pool.env("951", uid=1001, user="carol", SLURM_JOB_GPUS="0")
    pool.set_allocation("951", 1, gres="shard")
    pipe = str(pool.run_dir / "mps" / "gpu0")
    assert pool.hook("prolog", alice)[0] == 0
    assert traversers(pipe) == {1000}
    assert stat.S_IMODE(os.stat(pipe).st_mode) == 0o710 and os.stat(pipe).st_uid == 0
    assert pool.hook("prolog", carol)[0] == 0
    assert traversers(pipe) == {1000, 1001}
    assert pool.hook("epilog", alice)[0] == 0
    assert traversers(pipe) == {1001}
    assert pool.hook("epilog", carol)[0] == 0
    assert not os.path.exists(os.path.join(pipe, "nvidia-cuda-mps-control.pid"))


def _owner(pid: int) -> int:
    return os.stat(f"/proc/{pid}").st_uid


def _workload_env(pool: Pool, pipe: Path | None) -> dict[str, str]:
    """A CUDA program's environment on GPU 0: a client of ``pipe``'s daemon, or (None)
    one that steers around it."""
    with pool.backend() as b:
        uuid = b.gpu(0).uuid
    outside = pool.root / "no-daemon-here"
    return {
        "PATH": "/usr/bin:/bin",
        "SLURMPOOL_SIM_STATE": str(pool.sim_dir),
        "CUDA_VISIBLE_DEVICES": uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe or outside),
    }


def _held_workload(env: dict[str, str], release: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "slurmpool.sim.workload", "--until-file", str(release)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, proc.stderr.read() if proc.stderr else ""
    return proc


def _brief_workload(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "slurmpool.sim.workload", "--seconds", "0.1"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_an_mps_gpu_is_exclusive_while_its_daemon_serves_it(shared_pool: Pool) -> None:
    """The prolog puts the GPU in EXCLUSIVE_PROCESS before it starts the daemon: a CUDA
    process that steers around the daemon is refused (the server holds the one
    context), its clients are not; the last epilog gives back the site's mode."""
    from slurmpool.driver.compute import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS

    pool = shared_pool
    with pool.backend() as b:
        assert b.compute_mode(0) == COMPUTE_DEFAULT
    env = pool.env("940", uid=0, user="root", SLURM_JOB_GPUS="0")
    pool.set_allocation("940", 2, gres="shard")
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert "compute mode DEFAULT -> EXCLUSIVE_PROCESS" in err
    with pool.backend() as b:
        assert b.compute_mode(0) == COMPUTE_EXCLUSIVE_PROCESS
    pipe = pool.run_dir / "mps" / "gpu0"
    [server] = _mps(pipe, "get_server_list").split()
    around = _brief_workload(_workload_env(pool, None))
    assert around.returncode == 1
    assert f"EXCLUSIVE_PROCESS, held by MPS server {server}" in around.stderr
    client = _brief_workload(_workload_env(pool, pipe))
    assert client.returncode == 0, client.stderr
    assert f"mps: server {server}" in client.stdout
    rc, _, err = pool.hook("epilog", env)
    assert rc == 0, err
    assert "compute mode back to DEFAULT" in err
    with pool.backend() as b:
        assert b.compute_mode(0) == COMPUTE_DEFAULT


def test_a_context_taken_before_the_server_does_not_lock_the_share_holders_out(
    shared_pool: Pool, tmp_path: Path
) -> None:
    """A process that holds the GPU outside MPS when a share job starts (it took the
    one context while no server ran) would keep every server out: the prolog stops it,
    says so, and the job's clients run."""
    pool = shared_pool
    release = tmp_path / "release"
    squatter = _held_workload(_workload_env(pool, None), release)
    try:
        env = pool.env("941", uid=0, user="root", SLURM_JOB_GPUS="0")
        pool.set_allocation("941", 1, gres="shard")
        rc, _, err = pool.hook("prolog", env)
        assert rc == 0, err
        assert "action=outside-mps" in err and f"pids={squatter.pid}" in err
        assert squatter.wait(60) != 0  # stopped
        client = _brief_workload(_workload_env(pool, pool.run_dir / "mps" / "gpu0"))
        assert client.returncode == 0, client.stderr
        assert pool.hook("epilog", env)[0] == 0
    finally:
        release.touch()
        if squatter.poll() is None:
            squatter.kill()
        squatter.wait(60)


def test_a_daemon_that_refuses_requeues_the_job_and_never_drains(shared_pool: Pool) -> None:
    pool = shared_pool
    program = pool.bin_dir / "nvidia-cuda-mps-control"
    program.write_text("#!/bin/sh\necho 'the server of user 1001 has clients' >&2\nexit 1\n")
    env = pool.env("942", SLURM_JOB_GPUS="0")
    pool.set_allocation("942", 1, gres="shard")
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert "action=requeue " in err and "MPS daemon busy" in err
    assert "requeue 942" in pool.calls
    assert pool.slurm_calls()[-1] == f"update jobid=942 ExcNodeList={NODE}"
    with pool.store() as store:
        assert store.live() == []  # the share went back with the job


def test_reconcile_stands_down_what_a_crashed_epilog_left(shared_pool: Pool) -> None:
    """The epilog died after the job's share went back: the daemon still runs and the
    GPU is still exclusive.  The next share job's prolog stops the one and gives back
    the other."""
    from slurmpool.driver.compute import COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS

    pool = shared_pool
    env = pool.env("943", SLURM_JOB_GPUS="0")
    pool.set_allocation("943", 1, gres="shard")
    assert pool.hook("prolog", env)[0] == 0
    with pool.store() as store, store.transaction():
        for a in store.live():
            store.set_state(a.id, RELEASED, note="released by an epilog that then died")
    pipe = pool.run_dir / "mps" / "gpu0"
    assert (pipe / "nvidia-cuda-mps-control.pid").exists()
    other = pool.env("944", SLURM_JOB_GPUS="1")
    pool.set_allocation("944", 1, gres="shard")
    rc, _, err = pool.hook("prolog", other)
    assert rc == 0, err
    assert "GPU 0: daemon stopped" in err and "GPU 0: compute mode back to DEFAULT" in err
    assert not (pipe / "nvidia-cuda-mps-control.pid").exists()
    with pool.backend() as b:
        assert (b.compute_mode(0), b.compute_mode(1)) == (
            COMPUTE_DEFAULT,
            COMPUTE_EXCLUSIVE_PROCESS,
        )
    assert pool.hook("epilog", other)[0] == 0


def test_a_shared_gpu_given_whole_is_a_whole_gpu(shared_pool: Pool) -> None:
    pool = shared_pool
    env = pool.env("910", SLURM_JOB_GPUS="1,2")  # gpu:2, one of them a shared GPU
    pool.set_allocation("910")
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    with pool.store() as store:
        got = sorted((a.mode, a.gpu_index, a.shares) for a in store.for_job("910"))
    assert got == [("passthrough", 1, None), ("passthrough", 2, None)]
    assert pool.hook("epilog", env)[0] == 0


@pytest.mark.parametrize(("job_gpus", "why"), [("0,1", "names shared GPUs 0, 1"), ("", "none")])
def test_shards_without_one_gpu_named_are_held(shared_pool: Pool, job_gpus: str, why: str) -> None:
    pool = shared_pool
    env = _shard_env(pool, "920", 2, job_gpus)
    if not job_gpus:
        del env["SLURM_JOB_GPUS"]
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    assert "requeuehold 920" in pool.calls
    assert why in err
    with pool.store() as store:
        assert store.for_job("920") == []


# -- passthrough ------------------------------------------------------------------------


def test_passthrough_gpu_with_a_stray_process(pool: Pool) -> None:
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        attach_process(pool.sim_dir, 2, pid=stray.pid, used_mib=10, util=5)
        env = pool.env("1000", SLURM_JOB_GPUS="0", CUDA_VISIBLE_DEVICES="0")
        pool.set_allocation("1000")
        rc, _, err = pool.hook("prolog", env)
        assert rc == 0, err
        assert stray.wait(10) is not None  # killed (the default policy)
        _, out, _ = pool.hook("task-prolog", env)
        with pool.backend() as b:
            assert exports_of(out)["CUDA_VISIBLE_DEVICES"] == b.gpu(2).uuid
        with pool.store() as store:
            [a] = store.for_job("1000")
        assert a.mode == "passthrough" and a.details["health"]["nvml"] == "ok"
        assert a.details["health"]["ecc"] == "not available"  # the simulator has no counters
        assert pool.hook("epilog", env)[0] == 0
    finally:
        if stray.poll() is None:
            stray.kill()


def test_passthrough_refuse_policy_requeues(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, pooling={"stray_processes": "refuse"})
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        attach_process(pool.sim_dir, 2, pid=stray.pid, used_mib=10, util=5)
        pool.set_allocation("1001")
        rc, _, err = pool.hook("prolog", pool.env("1001", SLURM_JOB_GPUS="0"))
        assert rc == 0, err
        assert "requeue 1001" in pool.calls
        assert not any("ExcNodeList" in c for c in pool.calls)  # busy, not fragmented
        assert stray.poll() is None
    finally:
        stray.kill()
        stray.wait()


def test_passthrough_gpu_with_mig_on_is_a_broken_node(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, gpus=[(A100, "passthrough", {})])
    with pool.backend() as b:
        b.set_mig_mode(0, True)
    from slurmpool.sim.node import reset_gpu

    reset_gpu(pool.sim_dir, 0)
    pool.set_allocation("1002")
    rc, _, err = pool.hook("prolog", pool.env("1002", SLURM_JOB_GPUS="0"))
    assert rc == 1 and "MIG enabled" in err


def test_status_shows_instances_free_capacity_and_requeues(pool: Pool) -> None:
    from slurmpool.pooling.status import node_status, render_text

    assert pool.hook("prolog", pool.env("1100", vgpu=2))[0] == 0
    with pool.store() as store, store.transaction():
        store.record_requeue("1101", "no room")
    node = pool.node(ListLog())
    data = node_status(node)
    node.close()
    assert data["requeue_count"] == 1
    gpu0 = data["gpus"][0]
    [inst] = gpu0["instances"]
    assert (inst["job"], inst["user"], inst["profile"]) == ("1100", "alice", "2g.20gb")
    assert data["free"]["7g.80gb"] == 1
    assert data["gpus"][2]["mode"] == "passthrough"
    assert "job 1100 (alice)" in render_text(data)
    assert NODE in render_text(data)


def test_task_prolog_stays_off_the_gpu_and_the_store() -> None:
    code = (
        "import sys, slurmpool.hooks.__main__ as m; "
        "bad = [n for n in sys.modules if n.startswith(('pynvml', 'sqlite3', 'click', "
        "'jinja2', 'yaml', 'slurmpool.gpu', 'slurmpool.sim', 'slurmpool.state'))]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_hook_time_bound_is_below_the_wrapper_timeout(pool: Pool) -> None:
    node = pool.node(ListLog())
    assert node.deadline.left() <= 30
    start = time.monotonic()
    assert pool.hook("epilog", pool.env("1200"))[0] == 0
    assert time.monotonic() - start < 10


# -- planted links and FIFOs ------------------------------------------------------------


def _elsewhere(tmp_path: Path) -> Path:
    """A directory outside the pool with one file: nothing the hooks do may change it."""
    d = tmp_path / "elsewhere"
    d.mkdir()
    for name in ELSEWHERE:  # named as what the hooks write, remove and list
        (d / name).write_text("precious\n")
    return d


ELSEWHERE = ("51", "51.env", "victim")


def _untouched(elsewhere: Path) -> None:
    assert sorted(p.name for p in elsewhere.iterdir()) == list(ELSEWHERE)
    assert all((elsewhere / n).read_text() == "precious\n" for n in ELSEWHERE)


def test_planted_links_and_fifos_redirect_no_hook_write(pool: Pool, tmp_path: Path) -> None:
    """A link or FIFO at every path the hooks write (the hook log, the store's WAL, the
    job files' and ended marks' directories, a job file's temporary): each hook finishes
    (no FIFO blocks it), drains nothing, and writes only where it means to."""
    elsewhere = _elsewhere(tmp_path)
    log = pool.state_dir / "hooks.log"
    os.mkfifo(log)
    Path(store_path(str(pool.state_dir), NODE) + "-wal").symlink_to(elsewhere / "victim")
    pool.run_dir.mkdir()
    (pool.run_dir / "jobs").symlink_to(elsewhere)
    (pool.run_dir / "ended").symlink_to(elsewhere)
    env = pool.env("51", vgpu=2)
    with_log = ("--log-file", str(log))
    rc, _, err = pool.hook("prolog", env, None, *with_log)
    assert rc == 0, err
    rc, out, err = pool.hook("task-prolog", env, None, *with_log)
    assert rc == 0, err
    assert "CUDA_VISIBLE_DEVICES" in exports_of(out)
    assert (pool.run_dir / "jobs" / "51.env").is_file()
    rc, _, err = pool.hook("epilog", env, None, *with_log)
    assert rc == 0, err
    _untouched(elsewhere)
    assert not any("drain" in call.lower() for call in pool.calls)
    assert not (pool.run_dir / "jobs").is_symlink()
    assert log.is_file() and "job=51" in log.read_text()


def test_a_planted_mps_pipe_directory_leads_root_nowhere(shared_pool: Pool, tmp_path: Path) -> None:
    """The MPS pipe directory as a link elsewhere: the prolog starts the GPU's daemon in
    a directory of its own, not where the link led."""
    pool = shared_pool
    elsewhere = _elsewhere(tmp_path)
    (pool.run_dir / "mps").mkdir(parents=True)
    (pool.run_dir / "mps" / "gpu0").symlink_to(elsewhere)
    env = _shard_env(pool, "960", 1, "0")
    rc, _, err = pool.hook("prolog", env)
    assert rc == 0, err
    pipe = pool.run_dir / "mps" / "gpu0"
    assert not pipe.is_symlink() and (pipe / "nvidia-cuda-mps-control.pid").exists()
    assert pool.hook("epilog", env)[0] == 0
    _untouched(elsewhere)
