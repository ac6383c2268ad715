"""GPU utilisation into Slurm accounting, end to end on the sandbox cluster.

monitord runs per node inside that node's mount namespace (as slurmd does),
on loopback ports, sampling every 0.5 s and pushing the outbox; it is
stopped by PID.  Jobs run the simulator's workload at 60% utilisation.

Where utilisation exists: the sandbox's GPUs are simulated A100s.  A MIG
instance on an A100 (Ampere, no GPM) has no utilisation at all, so a
``vgpu:2`` job's summary must say "n/a" with real memory; the node's whole
(non-MIG, passthrough) A100, GPU 2, reports NVML utilisation, so a
``gpu:1`` job's mean must be near 60.  (Hopper GPM per instance is covered
by tests/test_monitor.py on a simulated H100.)
"""

from __future__ import annotations

import csv
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import needs
import pytest
from polling import poll

from slurmpool.accounting.codec import decode, find_token
from slurmpool.sandbox.cluster import SandboxOptions

from .acct import (
    admin_comment,
    login_users,
    outbox_items,
    run_cli,
    start_slurmdbd,
    stop_slurmdbd,
    wait_until_accounted,
)
from .conftest import Cluster

USERS = ("sp-acct-ann", "sp-acct-ben")  # this module's own users: per-user totals are exact
NODES = ("sbx1", "sbx2")
SETTLE_S = SandboxOptions().accounting_settle_s  # what the sandbox's monitord waits


@dataclass
class Monitord:
    node: str
    url: str

    def metrics(self) -> str:
        return urllib.request.urlopen(f"{self.url}/metrics", timeout=5).read().decode()


class Monitors:
    """The monitord the sandbox runs on every node, as the installed unit would."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @property
    def running(self) -> dict[str, Monitord]:
        return {n: Monitord(n, self.cluster.sandbox.monitord_url(n)) for n in NODES}

    def restart(self, node: str) -> None:
        """Stop the node's monitord by PID and start it again (waits until it serves)."""
        self.cluster.sandbox.restart(f"monitord-{node}")


@pytest.fixture(scope="module")
def users(cluster: Cluster) -> Iterator[tuple[str, ...]]:
    with login_users(cluster, USERS) as names:
        yield names


@pytest.fixture(scope="module")
def monitors(cluster: Cluster) -> Monitors:
    return Monitors(cluster)


def workload(release: Path, util: int = 60, mem: int = 4000) -> str:
    """The simulator's workload, held until the test creates ``release`` (it finds the
    node's simulated GPUs through what the task prolog exports)."""
    return (
        f"{needs.python_for_jobs_shell()} -m slurmpool.sim.workload "
        f"--util {util} --mem-mib {mem} --until-file {release}"
    )


def submit(cluster: Cluster, user: str, gres: str, node: str, release: Path, **kw: Any) -> int:
    out = cluster.workdir / f"acct-{user}-{gres.replace(':', '')}-{time.monotonic_ns()}.out"
    return cluster.submit(
        f"--gres={gres}",
        "-w",
        node,
        "-o",
        str(out),
        "--wrap",
        workload(release, **kw),
        user=user,
    )


def live_part(mon: Monitord, job: int) -> dict[str, Any] | None:
    """The job's summary so far from its node's monitord (None before its first sample)."""
    try:
        with urllib.request.urlopen(f"{mon.url}/jobs/{job}", timeout=5) as resp:
            part: dict[str, Any] = json.loads(resp.read().decode())["part"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise
    return part


def sampled(
    mon: Monitord, job: int, n: int, mem_mib: int, util_at_least: float | None = None
) -> Any:
    """The job's live device summary once monitord holds ``n`` samples of it and has seen
    the workload attached (``mem_mib`` in use; with ``util_at_least``, a mean that high)."""
    part = live_part(mon, job)
    devs = (part or {}).get("devices") or []
    if not devs or devs[0]["samples"] < n or devs[0]["mem_max_mib"] != mem_mib:
        return None
    if util_at_least is not None and (devs[0]["util_mean"] or 0) < util_at_least:
        return None
    return devs[0]


def stored_summary(cluster: Cluster, job: int, timeout_s: float = 45) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        text = admin_comment(cluster, job)
        return decode(text) if text and find_token(text) else None

    doc: dict[str, Any] = poll(f"job {job}'s summary in AdminComment", ready, timeout_s)
    return doc


# -- the tests, in the order they run --------------------------------------------------------

JOBS: dict[str, int] = {}  # name -> job id, for the report at the end
UTIL: dict[str, float] = {}  # name -> mean utilisation in its summary


def test_summaries_of_a_vgpu2_and_a_gpu1_job_reach_admin_comment(
    cluster: Cluster, monitors: Monitors, users: tuple[str, ...]
) -> None:
    ann, ben = users
    release = cluster.release_file("summaries")
    try:
        JOBS["mig"] = mig = submit(cluster, ann, "vgpu:2", "sbx1", release)
        JOBS["whole"] = whole = submit(cluster, ben, "gpu:1", "sbx1", release)
        mon = monitors.running["sbx1"]
        poll("6 samples of the vgpu:2 job", lambda: sampled(mon, mig, 6, 4000), 60)
        # The whole GPU's mean counts the idle samples before the workload attached.
        seen = poll(
            "the gpu:1 job's workload sampled", lambda: sampled(mon, whole, 8, 4000, 50), 60
        )
    finally:
        release.touch()
    assert cluster.wait(mig) == "COMPLETED" and cluster.wait(whole) == "COMPLETED"

    doc = stored_summary(cluster, mig)
    assert doc["job"] == str(mig) and list(doc["nodes"]) == ["sbx1"]
    part = doc["nodes"]["sbx1"]
    (carved,) = part["carved"]
    assert carved["mode"] == "mig" and carved["profile"] == "2g.20gb"
    assert carved["uuid"].startswith("MIG-") and len(carved["placement"]) == 2
    (dev,) = part["devices"]
    assert dev["kind"] == "mig" and dev["profile"] == "2g.20gb" and dev["model"] == "A100-SXM4-80GB"
    assert (dev["slices"], dev["of"]) == (2, 7)
    assert dev["util_mean"] is None and dev["util_max"] is None  # Ampere MIG: "n/a", not 0
    assert dev["mem_max_mib"] == 4000 and dev["mem_total_mib"] > 4000  # real memory
    assert dev["samples"] >= 4 and dev["duration_s"] >= 2

    doc = stored_summary(cluster, whole)
    (dev,) = doc["nodes"]["sbx1"]["devices"]
    assert dev["kind"] == "gpu" and dev["gpu"] == 2  # the passthrough A100 reports utilisation
    assert dev["util_source"] == "nvml"
    # The job holds the GPU for a moment before its workload starts (interpreter start-up)
    # and after it ends: those samples are honestly idle, so the mean is below 60, and it
    # keeps every busy sample monitord had seen before the release.
    assert dev["util_max"] == 60.0 and dev["samples"] >= seen["samples"]
    assert dev["util_mean"] <= 60
    busy_seen = seen["util_mean"] * seen["samples"]
    assert dev["util_mean"] * dev["samples"] >= busy_seen - 0.1 * dev["samples"]
    UTIL["whole"] = dev["util_mean"]
    assert dev["mem_max_mib"] == 4000 and dev["energy_j"] and dev["energy_j"] > 0
    assert doc["nodes"]["sbx1"]["request"]["gpu"] == 1

    # What 22.05 did to the stored text: lowercased; it still decodes.
    text = admin_comment(cluster, mig)
    assert text is not None and text == text.lower() and text.count("sp1:") == 1


def test_running_job_metrics_and_jobstats_then_finished_jobstats(
    cluster: Cluster, monitors: Monitors, users: tuple[str, ...]
) -> None:
    ann, _ben = users
    release = cluster.release_file("running")
    JOBS["running"] = job = submit(cluster, ann, "vgpu:1", "sbx2", release, mem=2000)
    try:
        _look_at_a_running_job(cluster, monitors.running["sbx2"], ann, job)
    finally:
        release.touch()
    assert cluster.wait(job) == "COMPLETED"
    stored_summary(cluster, job)
    res = run_cli(cluster, "jobstats", str(job))
    assert res.returncode == 0, res.stderr
    assert f"job {job} ({ann}, account sandbox): COMPLETED" in res.stdout
    assert "asked for: vgpu:1; got: vgpu:1" in res.stdout
    assert "1g.10gb" in res.stdout and "mean n/a" in res.stdout
    assert "peak 2.0 GiB" in res.stdout


def _look_at_a_running_job(cluster: Cluster, mon: Monitord, ann: str, job: int) -> None:
    label = f'job="{job}"'

    mem_value = f" {2000 * 1024 * 1024:.1f}"  # once the workload has attached

    def series() -> list[str] | None:
        found = [ln for ln in mon.metrics().splitlines() if label in ln]
        mem = [ln for ln in found if ln.startswith("slurmpool_mig_memory_used_bytes{")]
        return found if mem and (mem[0].endswith(mem_value) or "2.097152e+09" in mem[0]) else None

    lines = poll("the job's memory in /metrics", series, 30)
    mem = [ln for ln in lines if ln.startswith("slurmpool_mig_memory_used_bytes{")]
    assert f'user="{ann}"' in mem[0] and 'account="sandbox"' in mem[0]
    assert any(ln.startswith("slurmpool_job_gpu_memory_used_bytes{") for ln in lines)
    avail = [ln for ln in lines if ln.startswith("slurmpool_mig_utilization_available{")]
    assert avail and avail[0].endswith(" 0.0")  # measured as "not available", not zero
    assert not any(ln.startswith("slurmpool_mig_sm_utilization_percent{") for ln in lines)

    res = run_cli(cluster, "jobstats", str(job), "--json", "--monitor-url", mon.url)
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    assert view["running"] is True and view["state"] == "RUNNING"
    assert view["devices"][0]["profile"] == "1g.10gb" and view["devices"][0]["samples"] > 0
    assert view["devices"][0]["util_available"] is False


def _flush(cluster: Cluster, node: str) -> dict[str, Any]:
    res = run_cli(
        cluster,
        "accounting",
        "flush",
        "--json",
        "--node-config",
        str(Path(cluster.state.slurm_conf).parent / "node-config.json"),
        "--node",
        node,
        "--settle",
        f"{SETTLE_S:g}",
        node=node,
    )
    assert res.stdout, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def test_summary_survives_slurmdbd_down_at_job_end_and_a_late_record_from_slurmctld(
    cluster: Cluster, monitors: Monitors, users: tuple[str, ...]
) -> None:
    """slurmdbd is down while the job ends, and slurmctld holds an AdminComment for the
    job (set with scontrol, as a requeue note is): slurmctld's job-complete record
    reaches the database only after slurmdbd is back, and would replace a summary
    written before it landed.  The summary waits for it, and both stay."""
    _ann, ben = users
    release = cluster.release_file("outage")
    JOBS["outage"] = job = submit(cluster, ben, "vgpu:2", "sbx2", release, mem=3000)
    try:
        poll("the job to run", lambda: cluster.job(job)["JobState"] == "RUNNING", 60)
        # The workload attached: the job's memory peak is in the samples before it ends.
        poll(
            "the job's workload sampled",
            lambda: sampled(monitors.running["sbx2"], job, 2, 3000),
            60,
        )
    except BaseException:
        release.touch()
        raise
    dbd = stop_slurmdbd(cluster)
    try:
        cluster.slurm.run(
            "scontrol", "update", f"jobid={job}", "AdminComment=site-note 7", timeout=15
        )
        release.touch()  # the job ends while slurmdbd is down
        assert cluster.wait(job) == "COMPLETED"
        pending = poll(
            "a failed push in sbx2's outbox",
            lambda: [
                i
                for i in outbox_items(cluster, "sbx2")
                if i["job"] == str(job) and i["attempts"] > 0
            ],
            30,
        )
        assert "slurmdbd is not reachable" in pending[0]["last_error"]
        monitors.restart("sbx2")  # the outbox is on disk, not in monitord
        assert [i["job"] for i in outbox_items(cluster, "sbx2")].count(str(job)) == 1
    finally:
        start_slurmdbd(cluster, dbd)
    # By hand, not waiting for the backoff: the push waits until sacct shows the End.
    flushed = poll(
        "a flush that stores the summary",
        lambda: (out := _flush(cluster, "sbx2"))["stored"] and out,
        90,
        interval_s=2,
    )
    wait_until_accounted(cluster, [job])  # the summary went in only after the End
    doc = stored_summary(cluster, job, timeout_s=60)
    (dev,) = doc["nodes"]["sbx2"]["devices"]
    assert dev["profile"] == "2g.20gb" and dev["mem_max_mib"] == 3000, flushed
    # monitord checks it again after the settle time and only then lets it go
    poll(
        "the outbox to empty",
        lambda: not any(i["job"] == str(job) for i in outbox_items(cluster, "sbx2")),
        SETTLE_S + 60,
    )
    text = admin_comment(cluster, job)
    assert text is not None and text.startswith("site-note 7 | sp1:"), text
    assert text.count("sp1:") == 1  # stored once
    assert decode(text)["nodes"]["sbx2"]["devices"] == doc["nodes"]["sbx2"]["devices"]


def _elapsed(cluster: Cluster, job: int) -> int:
    out = cluster.slurm.run(
        "sacct", "-n", "-X", "-P", "-j", str(job), "-o", "ElapsedRaw", timeout=15
    ).stdout
    return int(out.split()[0])


def test_report_over_these_jobs(
    cluster: Cluster, monitors: Monitors, users: tuple[str, ...], tmp_path: Path
) -> None:
    ann, ben = users
    assert set(JOBS) == {"mig", "whole", "running", "outage"}, "run the whole module"
    wait_until_accounted(cluster, list(JOBS.values()))
    png, page = tmp_path / "heat.png", tmp_path / "report.html"
    res = run_cli(
        cluster,
        "report",
        "--since",
        "-2h",
        "--until",
        "now",
        "--json",
        "--html",
        str(page),
        "--heatmap",
        str(png),
    )
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    hours = {j: _elapsed(cluster, JOBS[j]) / 3600 for j in JOBS}
    want_ann = 2 / 7 * hours["mig"] + 1 / 7 * hours["running"]
    want_ben = 1.0 * hours["whole"] + 2 / 7 * hours["outage"]
    users_out = data["groups"]["user"]
    assert users_out[ann]["gpu_hours_allocated"] == pytest.approx(want_ann, abs=1e-3)
    assert users_out[ben]["gpu_hours_allocated"] == pytest.approx(want_ben, abs=1e-3)
    sacct = cluster.slurm.run(
        "sacct",
        "-a",
        "-X",
        "-D",
        "-n",
        "-P",
        "-S",
        "now-2hours",
        "-o",
        "JobIDRaw,User,State,Start,ElapsedRaw,AllocTRES",
    ).stdout
    assert users_out[ann]["jobs"] == 2 and users_out[ben]["jobs"] == 2, (JOBS, sacct, data)
    # Only the whole GPU measured utilisation: ben's busy hours are 60% of that job.
    busy = UTIL["whole"] / 100 * hours["whole"]
    assert users_out[ben]["gpu_hours_busy"] == pytest.approx(busy, abs=1e-4)
    assert (
        users_out[ann]["gpu_hours_measured"] == 0 and users_out[ann]["utilization_percent"] is None
    )
    assert data["groups"]["profile"]["2g.20gb"]["jobs"] >= 2
    assert "sbx1/gpu2" in data["heatmap"]["rows"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and ann in html and "<svg" in html
    table = run_cli(cluster, "report", "--since", "-2h")
    assert table.returncode == 0 and ann in table.stdout and "by profile" in table.stdout


def test_jobs_csv_over_these_jobs_replays_in_the_simulator(
    cluster: Cluster, users: tuple[str, ...], tmp_path: Path
) -> None:
    """``report --jobs-csv`` over the real sacct: a row per job with what it asked for and
    what was carved, which ``simulate --trace`` reads."""
    ann, ben = users
    assert set(JOBS) == {"mig", "whole", "running", "outage"}, "run the whole module"
    wait_until_accounted(cluster, list(JOBS.values()))
    out = tmp_path / "jobs.csv"
    res = run_cli(cluster, "report", "--since", "-2h", "--jobs-csv", str(out))
    assert res.returncode == 0, res.stderr
    with open(out, newline="") as f:
        rows = {r["job_id"]: r for r in csv.DictReader(f)}
    mig, whole = rows[str(JOBS["mig"])], rows[str(JOBS["whole"])]
    assert (mig["user"], mig["request"], mig["carved"]) == (ann, "vgpu=2", "2g.20gb"), mig
    assert (mig["num_gpu"], mig["gpu_milli"]) == ("1", "285")  # 2 of 7 slices
    assert (whole["user"], whole["request"], whole["carved"]) == (ben, "gpu=1", "gpu"), whole
    assert (whole["num_gpu"], whole["gpu_milli"]) == ("1", "1000")
    assert float(whole["util_mean"]) == pytest.approx(UTIL["whole"], abs=0.05)
    for name, job in JOBS.items():
        row = rows[str(job)]
        assert int(row["elapsed_s"]) == _elapsed(cluster, job), (name, row)
        assert int(row["wait_s"]) >= 0 and row["submit"] <= row["start"] <= row["end"], row
    sim = run_cli(
        cluster,
        "simulate",
        "--trace",
        str(out),
        "--nodes",
        "2",
        "--gpus-per-node",
        "3",
        "--model",
        "A100-SXM4-80GB",
        "--compare",
        "whole,fluid",
        "--json",
    )
    assert sim.returncode == 0, sim.stderr
    results = json.loads(sim.stdout)["results"]
    assert [r["tasks"] for r in results] == [len(rows)] * 2
