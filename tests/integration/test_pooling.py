"""Per-job GPU pooling on the real Slurm sandbox: real sbatch, the hooks `install` put in
place, simulated GPUs per node.

Each test waits for the GPUs it uses to be empty first and leaves them empty.  Jobs run
the simulator's test workload, which behaves like a CUDA program: it picks its device
from CUDA_VISIBLE_DEVICES and refuses a MIG device whose capability files its user
cannot read.
"""

from __future__ import annotations

import json
import pwd
import random
import sys
import urllib.request
from pathlib import Path
from typing import Any

import needs
from polling import poll

from slurmpool.fit import FIT_GRES
from slurmpool.hostlist import expand
from slurmpool.sandbox.cluster import host_fences_devices
from slurmpool.sim.faults import plant
from slurmpool.slurm.gres import type_counts
from slurmpool.slurm.parse import parse_jobs, parse_nodes

from .conftest import Cluster

# Requeued jobs wait about cred_expire (10 s) plus the next main scheduling pass
# (sched_interval=5 in the sandbox): ~21 s measured; the bound only a failure reaches.
REQUEUE_WAIT_S = 180


def sim_state(cluster: Cluster, node: str) -> dict[str, Any]:
    path = cluster.sandbox.layout.host_dir(node) / "sim" / "state.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def instances(cluster: Cluster, node: str) -> list[dict[str, Any]]:
    """Every MIG instance the node's simulated driver holds, flattened."""
    out = []
    for gpu in sim_state(cluster, node)["gpus"]:
        for gi in gpu["gis"]:
            out.append(
                {
                    "gpu": gpu["index"],
                    "gi": gi["id"],
                    "profile": gi["profile"],
                    "start": gi["start"],
                    "uuids": [c["uuid"] for c in gi["cis"]],
                }
            )
    return out


def by_uuid(cluster: Cluster, node: str) -> dict[str, dict[str, Any]]:
    return {u: i for i in instances(cluster, node) for u in i["uuids"]}


def workload(seconds: float = 0, until: Path | None = None) -> str:
    """The simulator's workload: ``seconds`` long (0: until cancelled), or held until the
    test creates ``until``.  No --state: the task prolog exports where the node's
    simulated GPUs are, as a job on a real node needs no flag to find its GPUs."""
    length = f"--until-file {until}" if until is not None else f"--seconds {seconds}"
    py = needs.python_for_jobs_shell()
    return f"{py} -m slurmpool.sim.workload {length} --mem-mib 100"


def held(until: Path) -> str:
    """Shell that waits until the test creates ``until`` (a job held on a file)."""
    return f"until [ -e {until} ]; do sleep 0.1; done"


def job_info(cluster: Cluster, job: int) -> Any:
    res = cluster.slurm.run("scontrol", "show", "job", "-d", str(job), timeout=15)
    return parse_jobs(res.stdout)[0]


def excluded(cluster: Cluster, job: int) -> list[str]:
    """The nodes in the job's ExcNodeList."""
    res = cluster.slurm.run("squeue", "-h", "-j", str(job), "-o", "%x", timeout=15)
    text = res.stdout.strip()
    return [] if text in ("", "(null)") else expand(text)


def node_info(cluster: Cluster, node: str) -> Any:
    res = cluster.slurm.run("scontrol", "show", "node", node, timeout=15)
    return parse_nodes(res.stdout)[0]


# What generate-config writes for a sandbox node (two MIG A100s), and its hooks publish
# whenever the node's MIG GPUs are empty.
EMPTY_FIT = {"s1": 14, "s2": 6, "s3": 4, "s4": 2, "s7": 2, "next": 1, "pad": 14}


def fit_counts(cluster: Cluster, node: str) -> dict[str, int]:
    """The node's vgpufit counts as slurmctld has them."""
    return type_counts(node_info(cluster, node).gres, FIT_GRES)


def status(cluster: Cluster, node: str) -> dict[str, Any]:
    etc = Path(cluster.state.slurm_conf).parent
    res = cluster.on_node(
        node,
        [
            sys.executable,
            "-m",
            "slurmpool",
            "status",
            "--json",
            "--node",
            node,
            "--node-config",
            str(etc / "node-config.json"),
        ],
    )
    assert res.returncode == 0, res.stdout + res.stderr
    data: dict[str, Any] = json.loads(res.stdout)
    return data


def wait_empty(cluster: Cluster, node: str, timeout_s: float = 60) -> None:
    poll(f"{node} to hold no MIG instance", lambda: not instances(cluster, node), timeout_s)


def cancel(cluster: Cluster, jobs: list[int]) -> None:
    if jobs:
        cluster.slurm.run("scancel", *map(str, jobs), check=False, timeout=15)


def submit_on(cluster: Cluster, node: str, gres: str, out: Path, script: str, user: str) -> int:
    """``sbatch GRES -w NODE -o OUT --wrap SCRIPT`` as ``user``; the job id."""
    return cluster.submit(gres, "-w", node, "-o", str(out), "--wrap", script, user=user)


def first_line(path: Path) -> str:
    try:
        return path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return ""


def hook_lines(cluster: Cluster, node: str, job: int | str) -> list[str]:
    return [line for line in cluster.host_hook_log(node).splitlines() if f" job={job} " in line]


# -- mig ---------------------------------------------------------------------------


def submit_vgpu2(cluster: Cluster, node: str, tag: str) -> tuple[int, Path, Path]:
    """Once ``node`` holds no instance, a vgpu:2 job of sp-alice's there that prints its
    device and profile, then works until its release file appears: (job, out, release)."""
    wait_empty(cluster, node)
    out = cluster.workdir / f"{tag}.out"
    release = cluster.release_file(tag)
    script = f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {workload(until=release)}"
    return submit_on(cluster, node, "--gres=vgpu:2", out, script, user="sp-alice"), out, release


def test_vgpu2_gets_a_2g_instance_that_lives_as_long_as_the_job(cluster: Cluster) -> None:
    node = "sbx1"
    job, out, release = submit_vgpu2(cluster, node, "vgpu2")
    try:
        line = poll("the job to print its device", lambda: first_line(out), 60)
        uuid, profile = line.split()
        assert uuid.startswith("MIG-") and profile == "2g.20gb"
        during = by_uuid(cluster, node)
        assert during[uuid]["profile"] == "2g.20gb"
        # The workload really runs on that instance.
        poll("the workload to start", lambda: "running: pid" in out.read_text(), 60)
        assert f"({uuid})" in out.read_text()
        # slurmctld was told what the node can carve beside it (the prolog sent it
        # before the job started): the job's 2g and five more, two 1g places fewer; its
        # one job and one more.
        assert fit_counts(cluster, node) == {
            "s1": 12,
            "s2": 6,
            "s3": 3,
            "s4": 2,
            "s7": 1,
            "next": 2,
            "pad": 17,
        }
    finally:
        release.touch()
    assert cluster.wait(job) == "COMPLETED"
    poll("the instance to be destroyed", lambda: uuid not in by_uuid(cluster, node), 30)
    assert "DRAIN" not in node_info(cluster, node).flags
    poll(
        "the epilog to publish an empty node's counts",
        lambda: fit_counts(cluster, node) == EMPTY_FIT,
        30,
        seen=lambda: str(fit_counts(cluster, node)),
    )
    info = node_info(cluster, node)
    assert [g.count for g in info.gres if g.name == "vgpu"] == [14]  # what accounting counts


def fit_repairs(cluster: Cluster, node: str) -> float:
    """How many times the node's monitord sent slurmctld counts it had lost."""
    url = f"{cluster.sandbox.monitord_url(node)}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    [line] = [ln for ln in text.splitlines() if ln.startswith("slurmpool_fit_repairs_total ")]
    return float(line.split()[1])


def test_monitord_publishes_again_after_a_slurmd_or_slurmctld_restart(cluster: Cluster) -> None:
    # A slurmctld restart puts gres.conf's counts, an empty node's, back in slurmctld
    # (measured by tests/data/probe-count-gres.sh) and runs no hook: monitord's repair
    # sends the node's own again.  A slurmd restart while the job runs registers the
    # same vgpufit total (vgpufit:pad keeps it), so the node stays usable, not INVAL,
    # and slurmctld has the node's counts after it, kept or repaired.
    node = "sbx1"
    job, out, release = submit_vgpu2(cluster, node, "repair")
    held = {"s1": 12, "s2": 6, "s3": 3, "s4": 2, "s7": 1, "next": 2, "pad": 17}
    try:
        poll("the job to print its device", lambda: first_line(out), 60)
        assert fit_counts(cluster, node) == held
        for daemon in (f"slurmd-{node}", "slurmctld"):
            before = fit_repairs(cluster, node)
            cluster.sandbox.restart(daemon)

            def in_step(before: float = before, daemon: str = daemon) -> bool:
                repaired = daemon != "slurmctld" or fit_repairs(cluster, node) > before
                return repaired and fit_counts(cluster, node) == held

            poll(
                f"slurmctld to have {node}'s counts after the {daemon} restart",
                in_step,
                60,
                seen=lambda: f"{fit_counts(cluster, node)}, repairs {fit_repairs(cluster, node)}",
            )
            info = node_info(cluster, node)
            assert info.state not in {"DOWN", "INVAL"}, info
            assert not {"DRAIN", "INVAL", "INVALID_REG"} & set(info.flags), info
    finally:
        release.touch()
    assert cluster.wait(job) == "COMPLETED"
    poll(
        "the epilog to publish an empty node's counts",
        lambda: fit_counts(cluster, node) == EMPTY_FIT,
        30,
        seen=lambda: str(fit_counts(cluster, node)),
    )


def _fill_with_1g(
    cluster: Cluster, node: str, n: int, tag: str
) -> tuple[list[int], dict[int, Path]]:
    jobs, outs = [], {}
    for i in range(n):
        out = cluster.workdir / f"{tag}-{i}.out"
        out.unlink(missing_ok=True)
        job = submit_on(
            cluster,
            node,
            "--gres=vgpu:1",
            out,
            f"echo $CUDA_VISIBLE_DEVICES; {workload(0)}",
            user="sp-alice" if i % 2 == 0 else "sp-bob",
        )
        jobs.append(job)
        outs[job] = out
    return jobs, outs


def _leave_slots_0_and_4(
    cluster: Cluster, node: str, jobs: list[int], outs: dict[int, Path]
) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """Of the 14 vgpu:1 jobs :func:`_fill_with_1g` put on ``node``, keep those in slots 0
    and 4 of each GPU and cancel the rest: 10 free units and no place for a 4g.  The
    jobs kept, and the node's instances by UUID while all 14 ran."""
    poll(
        "14 jobs to print a device",
        lambda: all(first_line(p).startswith("MIG-") for p in outs.values()),
        60,
    )
    held = by_uuid(cluster, node)
    keep = [j for j in jobs if held[first_line(outs[j])]["start"] in (0, 4)]
    assert len(keep) == 4  # slots 0 and 4 on both GPUs
    cancel(cluster, [j for j in jobs if j not in keep])
    poll("only slots 0 and 4 to stay carved", lambda: len(instances(cluster, node)) == 4, 60)
    return keep, held


def test_fourteen_1g_jobs_run_at_once_and_a_fifteenth_waits(cluster: Cluster) -> None:
    # The node has two MIG A100s: Slurm counts vgpu:14.  "Seven on one A100, an eighth
    # waits" is shown per GPU: fourteen vgpu:1 jobs all run at once, seven distinct 1g
    # instances on each GPU, and a fifteenth stays PENDING: the node has a CPU for every
    # vgpu unit (16), so the only thing it waits for is a slice.
    node = "sbx2"
    wait_empty(cluster, node)
    jobs, outs = _fill_with_1g(cluster, node, 14, "fill")
    extra_out = cluster.workdir / "fifteenth.out"
    fifteenth = cluster.submit(
        "--gres=vgpu:1", "-w", node, "-o", str(extra_out), "--wrap", "true", user="sp-bob"
    )
    try:
        poll(
            "14 jobs to print a device",
            lambda: all(first_line(p).startswith("MIG-") for p in outs.values()),
            60,
        )
        uuids = {first_line(p) for p in outs.values()}
        assert len(uuids) == 14
        held = by_uuid(cluster, node)
        assert uuids <= set(held)
        per_gpu = [sum(1 for u in uuids if held[u]["gpu"] == g) for g in (0, 1)]
        assert per_gpu == [7, 7]
        assert all(held[u]["profile"] == "1g.10gb" for u in uuids)
        states = {j: job_info(cluster, j).state for j in jobs}
        assert set(states.values()) == {"RUNNING"}, states

        # Once the scheduler has looked at it, it waits for Resources (22.05's parser keeps
        # the rest of the Reason line: "Resources Dependency=(null)").
        def looked_at() -> Any:
            j = job_info(cluster, fifteenth)
            return j if j.state != "PENDING" or (j.reason or "").startswith("Resources") else None

        pending = poll("the scheduler to look at the fifteenth job", looked_at, 60)
        assert pending.state == "PENDING", pending
        assert pending.restarts == 0  # it was never started and requeued: it waited
    finally:
        cancel(cluster, [*jobs, fifteenth])
    for j in jobs:
        cluster.wait(j, 60)
    wait_empty(cluster, node)


def test_fragmented_node_requeues_a_4g_then_runs_it_once_there_is_room(
    cluster: Cluster,
) -> None:
    node = "sbx2"
    wait_empty(cluster, node)
    before = status(cluster, node)["requeue_count"]
    jobs, outs = _fill_with_1g(cluster, node, 14, "frag")
    big: int | None = None
    try:
        keep, held = _leave_slots_0_and_4(cluster, node, jobs, outs)
        # Slurm sees 10 free vgpu and starts the job; no GPU has 4 contiguous slices.
        # The user keeps the job off the other node herself, which stays so.
        big_out = cluster.workdir / "big.out"
        big = cluster.submit(
            "--gres=vgpu:4",
            "-w",
            node,
            "-x",
            "sbx1",
            "-o",
            str(big_out),
            "--wrap",
            f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {workload(1)}",
            user="sp-alice",
        )
        info = poll(
            "the 4g job to be requeued",
            # A requeued job passes through COMPLETING on its way back to PENDING.
            lambda: (j := job_info(cluster, big)).restarts >= 1 and j.state == "PENDING" and j,
            60,
        )
        assert info.state == "PENDING"
        assert info.admin_comment is not None and "slurmpool: requeued" in info.admin_comment
        assert "DRAIN" not in node_info(cluster, node).flags
        assert any("action=requeue " in line for line in hook_lines(cluster, node, big))
        assert status(cluster, node)["requeue_count"] > before
        # Kept off the node until it frees slices: it is not tried there again meanwhile.
        poll(
            "the node in the job's ExcNodeList",
            lambda: excluded(cluster, big) == ["sbx1", "sbx2"],
            30,
        )
        assert any("action=excluded " in line for line in hook_lines(cluster, node, big))
        # Room appears: free slot 0 on one GPU.  Its epilog takes the node out again.
        cancel(cluster, [j for j in keep if held[first_line(outs[j])]["start"] == 0][:1])
        poll(
            "the 4g job to run",
            lambda: job_info(cluster, big).state != "PENDING",
            REQUEUE_WAIT_S,
        )
        assert excluded(cluster, big) == ["sbx1"]
        assert job_info(cluster, big).restarts == 1  # never tried on the node meanwhile
        assert cluster.wait(big, REQUEUE_WAIT_S) == "COMPLETED"
        uuid, profile = first_line(big_out).split()
        assert profile == "4g.40gb" and uuid.startswith("MIG-")
        assert "running: pid" in big_out.read_text()
        assert "DRAIN" not in node_info(cluster, node).flags
    finally:
        cancel(cluster, [*jobs, *([big] if big else [])])
    for j in jobs:
        cluster.wait(j, 60)
    wait_empty(cluster, node)


def test_a_vgpu7_job_no_node_can_carve_is_accepted_and_runs_once_one_can(
    cluster: Cluster,
) -> None:
    """A 4g on each GPU of both nodes leaves no 7g anywhere: each node counts no s7.  A
    vgpu:7 job (which asks vgpufit:s7:1) is still accepted, the fit anchor counting one,
    and waits without being started; once a 4g ends it runs, never requeued."""
    for node in ("sbx1", "sbx2"):
        wait_empty(cluster, node)
    fours: dict[int, str] = {}
    seven: int | None = None
    try:
        for node in ("sbx1", "sbx1", "sbx2", "sbx2"):
            job = cluster.submit(
                "--gres=vgpu:4",
                "-w",
                node,
                "-o",
                "/dev/null",
                "--wrap",
                workload(3600),
                user="sp-bob",
            )
            fours[job] = node
        poll(
            "four 4g instances",
            lambda: sum(len(instances(cluster, n)) for n in ("sbx1", "sbx2")) == 4,
            60,
        )
        for node in ("sbx1", "sbx2"):
            poll(
                f"{node} to count no 7g",
                lambda n=node: fit_counts(cluster, n).get("s7", 0) == 0,
                30,
                seen=lambda n=node: str(fit_counts(cluster, n)),
            )
        out = cluster.workdir / "seven.out"
        seven = cluster.submit(
            "--gres=vgpu:7",
            "-o",
            str(out),
            "--wrap",
            f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {workload(1)}",
            user="sp-alice",
        )

        def looked_at() -> Any:
            j = job_info(cluster, seven)
            return j if j.state != "PENDING" or (j.reason or "") not in ("", "None") else None

        pending = poll("the scheduler to look at the vgpu:7 job", looked_at, 60)
        assert (pending.state, pending.restarts) == ("PENDING", 0), pending
        # A 4g on sbx1 ends: its GPU is whole again, and sbx1's epilog says so.
        done = next(j for j, n in fours.items() if n == "sbx1")
        cancel(cluster, [done])
        assert cluster.wait(seven, REQUEUE_WAIT_S) == "COMPLETED"
        info = job_info(cluster, seven)
        assert info.restarts == 0
        assert first_line(out).split()[1].startswith("7g.")
        assert not any("action=requeue " in ln for ln in hook_lines(cluster, "sbx1", seven))
    finally:
        cancel(cluster, [*fours, *([seven] if seven else [])])
    for node in ("sbx1", "sbx2"):
        wait_empty(cluster, node)


def sacct_runs(cluster: Cluster, job: int) -> list[str]:
    """The state of each run of ``job`` that accounting holds (``sacct -D``: a requeued
    run is a row of its own), once its last run is COMPLETED there."""

    def rows() -> list[str] | None:
        res = cluster.slurm.run(
            "sacct", "-n", "-X", "-D", "-P", "-j", str(job), "-o", "State", check=False, timeout=15
        )
        states = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()]
        return states if states and states[-1] == "COMPLETED" else None

    return poll(f"accounting to hold job {job} completed", rows, 60)


def test_a_node_whose_units_are_in_pieces_gets_no_4g_job(cluster: Cluster) -> None:
    """1g instances at slots 0 and 4 of both of sbx2's GPUs leave it 10 free units but
    no place for a 4g.  A vgpu:4 job starts on sbx1 while sbx1 can carve one, waits while
    neither node can, and starts on sbx2 once a slot 0 there is free: never requeued (the
    store and ``sacct -D`` agree)."""
    node = "sbx2"
    for n in ("sbx1", node):
        wait_empty(cluster, n)
    before = status(cluster, node)["requeue_count"]
    jobs, outs = _fill_with_1g(cluster, node, 14, "pieces")
    fours: list[int] = []
    releases: list[Path] = []
    try:
        keep, held = _leave_slots_0_and_4(cluster, node, jobs, outs)
        poll(
            f"{node} to count no 4g",
            lambda: fit_counts(cluster, node).get("s4", 0) == 0,
            30,
            seen=lambda: str(fit_counts(cluster, node)),
        )
        # sbx1 can carve two 4g (one per GPU): two vgpu:4 jobs start there.
        for i in range(3):
            release = cluster.release_file(f"pieces-4g-{i}")
            releases.append(release)
            fours.append(
                cluster.submit(
                    "--gres=vgpu:4",
                    "-o",
                    str(cluster.workdir / f"pieces-4g-{i}.out"),
                    "--wrap",
                    f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {workload(until=release)}",
                    user="sp-alice" if i % 2 == 0 else "sp-bob",
                )
            )
            if i < 2:
                info = poll(
                    f"4g job {i} to run",
                    lambda j=fours[-1]: (x := job_info(cluster, j)).state == "RUNNING" and x,
                    60,
                )
                assert info.node_list == "sbx1", info
        third = fours[2]

        def looked_at() -> Any:
            j = job_info(cluster, third)
            return j if j.state != "PENDING" or (j.reason or "") not in ("", "None") else None

        # Neither node can carve a 4g: the third waits, never started.
        pending = poll("the scheduler to look at the third 4g job", looked_at, 60)
        assert (pending.state, pending.restarts) == ("PENDING", 0), pending
        # Room appears on sbx2: slot 0 of one GPU.  Its epilog publishes a 4g.
        cancel(cluster, [j for j in keep if held[first_line(outs[j])]["start"] == 0][:1])
        info = poll(
            "the third 4g job to run",
            lambda: (x := job_info(cluster, third)).state == "RUNNING" and x,
            60,
        )
        assert (info.node_list, info.restarts) == (node, 0), info
        for release in releases:
            release.touch()
        for j in fours:
            assert cluster.wait(j, 60) == "COMPLETED"
        assert sacct_runs(cluster, third) == ["COMPLETED"]
        assert status(cluster, node)["requeue_count"] == before
        assert not any("action=requeue " in ln for ln in hook_lines(cluster, node, third))
        assert "DRAIN" not in node_info(cluster, node).flags
    finally:
        for release in releases:
            release.touch()
        cancel(cluster, [*jobs, *fours])
    for n in ("sbx1", node):
        wait_empty(cluster, n)


# The burst: sizes and users drawn once from this seed.
BURST_SEED = 20261207
BURST_JOBS = 36


def test_a_burst_of_mixed_jobs_from_two_users_runs_with_at_most_one_requeue(
    cluster: Cluster,
) -> None:
    """36 vgpu:1 to vgpu:4 jobs of two users, released in one call so that Slurm starts
    as many as it can at once, all complete; Slurm starts no more of a size on a node
    than the node can carve, and one job at a time on a node that has not published
    what the last one took, so at most one run is requeued in all, and no node drains."""
    nodes = ("sbx1", "sbx2")
    for n in nodes:
        wait_empty(cluster, n)
    before = sum(status(cluster, n)["requeue_count"] for n in nodes)
    rng = random.Random(BURST_SEED)
    jobs = [
        cluster.submit(
            f"--gres=vgpu:{rng.randint(1, 4)}",
            "--hold",
            "-o",
            "/dev/null",
            "--wrap",
            workload(rng.choice((1, 2, 3))),
            user=("sp-alice", "sp-bob")[i % 2],
        )
        for i in range(BURST_JOBS)
    ]
    try:
        cluster.slurm.run("scontrol", "release", ",".join(map(str, jobs)), timeout=15)
        for j in jobs:
            assert cluster.wait(j, 300) == "COMPLETED", job_info(cluster, j)
        restarts = {j: r for j in jobs if (r := job_info(cluster, j).restarts)}
        print(f"burst of {BURST_JOBS}: requeued runs {restarts or 'none'}")
        assert sum(restarts.values()) <= 1, restarts
        assert sum(status(cluster, n)["requeue_count"] for n in nodes) - before <= 1
        for n in nodes:
            assert "DRAIN" not in node_info(cluster, n).flags
    finally:
        cancel(cluster, jobs)
    for n in nodes:
        wait_empty(cluster, n)


def test_another_user_cannot_use_a_neighbours_mig_instance(cluster: Cluster) -> None:
    node = "sbx1"
    wait_empty(cluster, node)
    alice_out = cluster.workdir / "alice.out"
    alice = submit_on(
        cluster,
        node,
        "--gres=vgpu:1",
        alice_out,
        f"echo $CUDA_VISIBLE_DEVICES; {workload(0)}",
        user="sp-alice",
    )
    try:
        neighbour = poll("alice's device", lambda: first_line(alice_out), 30)
        assert neighbour.startswith("MIG-")
        bob_out = cluster.workdir / "bob.out"
        bob = submit_on(
            cluster,
            node,
            "--gres=vgpu:1",
            bob_out,
            f"{workload(1)}; echo own=$?; CUDA_VISIBLE_DEVICES={neighbour} {workload(1)}; "
            "echo neighbour=$?",
            user="sp-bob",
        )
        assert cluster.wait(bob, 60) == "COMPLETED"
        text = bob_out.read_text()
        assert "own=0" in text  # bob's own instance works
        assert "neighbour=3" in text  # EXIT_PERMISSION
        assert "cannot read" in text and neighbour in text
    finally:
        cancel(cluster, [alice])
    cluster.wait(alice, 60)
    wait_empty(cluster, node)


def test_a_users_second_job_and_her_first_jobs_instance(cluster: Cluster) -> None:
    """Two jobs of one user; the second points CUDA at the first's MIG instance (she
    owns both instances' capability files).

    Where the node has the cgroup v1 devices controller (the sandbox's slurmd then
    uses task/cgroup), the prolog fenced the second job's cgroup: the device cgroup
    refuses the first's capability devices.  Elsewhere the workload runs there, and
    the first job's epilog finds the process's job by its cgroup, leaves it alone,
    and the instance goes once the second job ends.
    """
    node = "sbx1"
    wait_empty(cluster, node)
    first_out, second_out = cluster.workdir / "first.out", cluster.workdir / "second.out"
    release_first, release_second = cluster.release_file("first"), cluster.release_file("2nd")
    first = submit_on(
        cluster,
        node,
        "--gres=vgpu:1",
        first_out,
        f"echo $CUDA_VISIBLE_DEVICES; {held(release_first)}",
        user="sp-alice",
    )
    second = None
    try:
        uuid = poll("the first job's instance", lambda: first_line(first_out), 30)
        assert uuid.startswith("MIG-")
        second = submit_on(
            cluster,
            node,
            "--gres=vgpu:1",
            second_out,
            f"{workload(1)}; echo own=$?; "
            f"CUDA_VISIBLE_DEVICES={uuid} {workload(until=release_second)}; echo first=$?",
            user="sp-alice",
        )
        if host_fences_devices():
            assert cluster.wait(second, 60) == "COMPLETED"
            text = second_out.read_text()
            assert "own=0" in text  # her second job's own instance works
            assert "first=3" in text  # EXIT_PERMISSION
            assert "device cgroup does not allow" in text and uuid in text
            assert any("action=fenced" in ln for ln in hook_lines(cluster, node, second))
        else:
            releases = (release_first, release_second)
            _spared_by_the_first_jobs_epilog(cluster, node, (first, second), releases, uuid)
    finally:
        release_first.touch()
        release_second.touch()
        cancel(cluster, [j for j in (first, second) if j is not None])
    cluster.wait(first, 60)
    wait_empty(cluster, node)


def _spared_by_the_first_jobs_epilog(
    cluster: Cluster, node: str, jobs: tuple[int, int], releases: tuple[Path, Path], uuid: str
) -> None:
    first, second = jobs
    out = cluster.workdir / "second.out"
    poll("the second job on the first's instance", lambda: _text(out).count("running: pid") == 2)
    releases[0].touch()
    assert cluster.wait(first, 60) == "COMPLETED"
    lines = poll(
        "the first job's epilog to see the second job's process",
        lambda: [ln for ln in hook_lines(cluster, node, first) if "foreign-process" in ln],
        60,
    )
    assert f"jobs={second}" in lines[0]
    assert uuid in by_uuid(cluster, node)  # not destroyed under the second job
    assert "first=" not in _text(out)  # its workload still runs
    releases[1].touch()
    assert cluster.wait(second, 60) == "COMPLETED"
    assert "first=0" in out.read_text()
    poll("the first job's instance to go", lambda: uuid not in by_uuid(cluster, node), 60)
    assert any("no-longer-held" in ln for ln in hook_lines(cluster, node, second))


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _run_hook(cluster: Cluster, node: str, hook: str, env: dict[str, str]) -> Any:
    wrapper = str(cluster.sandbox.layout.node_root / "hooks" / hook)
    full = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMD_NODENAME": node, **env}
    return cluster.on_node(
        node, ["/usr/bin/env", "-i", *[f"{k}={v}" for k, v in full.items()], wrapper]
    )


def test_a_prolog_killed_half_way_is_undone_and_the_job_runs_after_requeue(
    cluster: Cluster,
) -> None:
    """The simulated driver kills the prolog right after creating the job's instance
    (a crash test point the hooks never consult).  The wrapper sees the prolog die by a
    signal and runs it again to undo and requeue; the job then runs on a whole
    allocation, a running neighbour keeps its instance, and the node is not drained."""
    node = "sbx1"
    wait_empty(cluster, node)
    alice_out = cluster.workdir / "bystander.out"
    bystander = submit_on(
        cluster,
        node,
        "--gres=vgpu:1",
        alice_out,
        f"echo $CUDA_VISIBLE_DEVICES; {workload(0)}",
        user="sp-alice",
    )
    job: int | None = None
    try:
        theirs = poll("the bystander's device", lambda: first_line(alice_out), 30)
        plant(cluster.sandbox.layout.host_dir(node) / "sim", "after-create-ci")
        out = cluster.workdir / "killed.out"
        job = submit_on(
            cluster,
            node,
            "--gres=vgpu:2",
            out,
            f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {workload(1)}",
            user="sp-bob",
        )
        assert cluster.wait(job, REQUEUE_WAIT_S) == "COMPLETED"
        info = job_info(cluster, job)
        assert info.restarts == 1
        assert info.admin_comment is not None
        assert "slurmpool: requeued 1x: the prolog was killed half-way" in info.admin_comment
        uuid, profile = first_line(out).split()
        assert profile == "2g.20gb" and uuid.startswith("MIG-")
        assert "running: pid" in out.read_text()
        lines = hook_lines(cluster, node, job)
        assert any("action=prolog-killed " in line for line in lines)
        assert any("action=requeue " in line for line in lines)
        assert "DRAIN" not in node_info(cluster, node).flags
        assert theirs in by_uuid(cluster, node)  # the neighbour's instance, untouched
        assert not [i for i in instances(cluster, node) if i["profile"] == "2g.20gb"]
        # The job's epilog again, twice: no error, no change.
        env = {
            "SLURM_JOB_ID": str(job),
            "SLURM_JOB_UID": str(pwd.getpwnam("sp-bob").pw_uid),
            "SLURM_JOB_USER": "sp-bob",
            "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
        }
        snapshot = instances(cluster, node)
        for _ in range(2):
            res = _run_hook(cluster, node, "epilog", env)
            assert res.returncode == 0, res.stdout + res.stderr
            assert instances(cluster, node) == snapshot
    finally:
        cancel(cluster, [bystander, *([job] if job else [])])
    cluster.wait(bystander, 60)
    wait_empty(cluster, node)
    assert "DRAIN" not in node_info(cluster, node).flags


# -- whole GPUs ------------------------------------------------------------------------


def test_gpu1_gets_the_passthrough_gpu_alone(cluster: Cluster) -> None:
    node = "sbx1"
    out = cluster.workdir / "gpu1.out"
    job = submit_on(
        cluster,
        node,
        "--gres=gpu:1",
        out,
        f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_MODE; {workload(1)}",
        user="sp-alice",
    )
    assert cluster.wait(job, 60) == "COMPLETED"
    whole = sim_state(cluster, node)["gpus"][2]["uuid"]
    assert first_line(out) == f"{whole} passthrough"
    assert f"on GPU 2 ({whole})" in out.read_text()


def test_vgpu14_gets_two_whole_gpu_instances(cluster: Cluster) -> None:
    node = "sbx1"
    wait_empty(cluster, node)
    out = cluster.workdir / "vgpu14.out"
    release = cluster.release_file("vgpu14")
    job = submit_on(
        cluster,
        node,
        "--gres=vgpu:14",
        out,
        f"echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE; {held(release)}",
        user="sp-bob",
    )
    try:
        line = poll("the job to print its devices", lambda: first_line(out), 60)
        devices, profiles = line.split()
        uuids = devices.split(",")
        assert len(uuids) == 2 and profiles == "7g.80gb,7g.80gb"
        carved = by_uuid(cluster, node)
        assert sorted(carved[u]["gpu"] for u in uuids) == [0, 1]
        assert all(carved[u]["profile"] == "7g.80gb" for u in uuids)
    finally:
        release.touch()
    assert cluster.wait(job, 60) == "COMPLETED"
    wait_empty(cluster, node)


# -- hostile input -----------------------------------------------------------------------


def test_hostile_job_name_and_comment_change_nothing(cluster: Cluster, tmp_path: Path) -> None:
    node = "sbx1"
    marker = tmp_path / "pwned"
    hostile = (
        f"x'\"; $(touch {marker}) `touch {marker}` ]]--[[ os.execute('touch {marker}') "
        f"%s\nslurmpool:vgpu=14 | touch {marker} & export CUDA_VISIBLE_DEVICES=0"
    )
    out = cluster.workdir / "hostile.out"
    job = cluster.submit(
        "--gres=vgpu:1",
        "-w",
        node,
        "-J",
        hostile,
        f"--comment={hostile}",
        "-o",
        str(out),
        "--wrap",
        "echo $CUDA_VISIBLE_DEVICES $SLURMPOOL_PROFILE",
        user="sp-bob",
    )
    assert cluster.wait(job, 60) == "COMPLETED"
    assert not marker.exists()
    uuid, profile = first_line(out).split()
    assert uuid.startswith("MIG-") and profile == "1g.10gb"  # vgpu:1, not 14
    for line in hook_lines(cluster, node, job):
        assert "touch" not in line and "execute" not in line
    assert "DRAIN" not in node_info(cluster, node).flags
    wait_empty(cluster, node)
