"""Each job reaches only its own GPU: shared GPUs fenced by Slurm itself.

A sandbox of its own from ``examples/sandbox-shared.yaml`` (two A100s shared in 4
shares, one whole A100, per node).  A vgpu request there becomes Slurm shards of
one File-backed GPU, and task/cgroup's ConstrainDevices lets the job's processes
open that GPU's device node only: opening another gives EPERM (the device
cgroup's answer); opening its own gives ENXIO (a simulated node has no driver
behind it).  The simulator's workload opens its device the same way, so a job that
points CUDA_VISIBLE_DEVICES at a neighbour's GPU is refused as a CUDA program is.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import needs
import pytest
from polling import poll

from slurmpool.sandbox.cluster import Sandbox, host_fences_devices

from .conftest import Cluster
from .test_pooling import (
    cancel,
    first_line,
    held,
    hook_lines,
    node_info,
    submit_on,
    workload,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.own_sandbox,
    pytest.mark.sandbox_policy(ROOT / "examples" / "sandbox-shared.yaml"),
]

# Every /dev/nvidiaN of the node, opened as the job's user: "nvidia0=EPERM ...".
PROBE = (
    "import errno, glob, os, sys\n"
    "out = []\n"
    "for p in sorted(glob.glob(sys.argv[1] + '/nvidia[0-9]*')):\n"
    "    try:\n"
    "        os.close(os.open(p, os.O_RDWR | os.O_NONBLOCK))\n"
    "        r = 'OPEN'\n"
    "    except OSError as e:\n"
    "        r = errno.errorcode[e.errno]\n"
    "    out.append(os.path.basename(p) + '=' + r)\n"
    "print('probe', *out)\n"
)


def _probe(cluster: Cluster, devices: str) -> str:
    script = cluster.workdir / "probe.py"
    if not script.exists():
        script.write_text(PROBE)
        script.chmod(0o644)
    return f"{needs.python_for_jobs_shell()} {script} {devices}"


def _opened(text: str) -> dict[str, str]:
    line = next((ln for ln in text.splitlines() if ln.startswith("probe ")), "")
    return dict(item.split("=", 1) for item in line.split()[1:])


def _output(path: Path, what: str) -> str:
    def ready() -> str:
        text = path.read_text() if path.exists() else ""
        return text if what in text else ""

    text: str = poll(f"{what!r} in {path.name}", ready, 60)
    return text


def test_shared_and_whole_gpu_jobs_open_only_their_own_gpu(own_sandbox: Sandbox) -> None:
    if not host_fences_devices():
        needs.missing("the cgroup v1 devices controller (Slurm's ConstrainDevices)")
    cluster = Cluster.of_own_sandbox(own_sandbox, "work")
    workdir = cluster.workdir
    devices = own_sandbox.policy_as_installed(cluster.state).paths.devices_root
    node = "sbx1"
    release = cluster.release_file("isolation")
    report = "echo uuid=$SLURMPOOL_GPU_UUID shares=$SLURMPOOL_SHARES"
    jobs: list[int] = []
    try:
        alice_out = workdir / "alice.out"
        jobs.append(
            submit_on(
                cluster,
                node,
                "--gres=vgpu:2",
                alice_out,
                f"{_probe(cluster, devices)}; {report}; {workload(until=release)}",
                user="sp-alice",
            )
        )
        alice = _output(alice_out, "running: pid")
        alice_uuid = re.search(r"uuid=(\S+)", alice)
        assert alice_uuid is not None and "shares=2/4" in alice, alice

        # 2 of alice's GPU's 4 shards are free: Slurm puts vgpu:3 on the other GPU.
        bob_out = workdir / "bob.out"
        jobs.append(
            submit_on(
                cluster,
                node,
                "--gres=vgpu:3",
                bob_out,
                f"{_probe(cluster, devices)}; {report}; {workload(1)}; echo own=$?; "
                # Without MPS (its daemon serves bob's GPU alone): plain CUDA's open.
                f"CUDA_VISIBLE_DEVICES={alice_uuid.group(1)} env -u CUDA_MPS_PIPE_DIRECTORY "
                f"{workload(1)}; echo neighbour=$?",
                user="sp-bob",
            )
        )
        # Both shared GPUs hold shards: a whole-GPU job gets the third GPU.
        whole_out = workdir / "whole.out"
        jobs.append(
            submit_on(
                cluster,
                node,
                "--gres=gpu:1",
                whole_out,
                f"{_probe(cluster, devices)}; {report}",
                user="sp-bob",
            )
        )
        assert cluster.wait(jobs[1], 60) == "COMPLETED"
        assert cluster.wait(jobs[2], 60) == "COMPLETED"
        bob = bob_out.read_text()
        whole = whole_out.read_text()

        opened = {who: _opened(text) for who, text in (("alice", alice), ("bob", bob))}
        opened["whole"] = _opened(whole)
        own = {}
        for who, result in opened.items():
            assert sorted(result) == ["nvidia0", "nvidia1", "nvidia2"], (who, result)
            allowed = [dev for dev, r in result.items() if r == "ENXIO"]
            assert len(allowed) == 1, (who, result)
            assert all(r == "EPERM" for dev, r in result.items() if dev not in allowed), result
            own[who] = allowed[0]
        assert own["whole"] == "nvidia2"  # the GPUs with shards in use are not given whole
        assert {own["alice"], own["bob"]} == {"nvidia0", "nvidia1"}

        assert "shares=3/4" in bob and "own=0" in bob  # bob's own share works
        assert "neighbour=3" in bob  # EXIT_PERMISSION: the device cgroup refused
        assert f"does not allow {devices}/{own['alice']}" in bob
    finally:
        release.touch()
        cancel(cluster, jobs[2:])
    assert cluster.wait(jobs[0], 60) == "COMPLETED"

    # doctor says the same of this node.
    findings = json.loads(cluster.doctor(node).stdout)["findings"]
    isolation = [f["message"] for f in findings if f["check"] == "isolation"]
    assert isolation[0].startswith("shared: gpu (the device cgroup: a job opens only the GPU")
    assert isolation[1].startswith("passthrough: job (")


def test_a_share_is_held_to_its_mps_limits_whatever_its_environment_asks(
    own_sandbox: Sandbox,
) -> None:
    """The GPUs of this sandbox are shared with ``mps: true``: the prolog starts the GPU's
    MPS control daemon (the simulator's) and holds the job's user's server to the
    job's share, 1 of 4.  The job asks for every thread and all memory in its own
    environment and still gets a quarter."""
    cluster = Cluster.of_own_sandbox(own_sandbox, "work-mps")
    workdir = cluster.workdir
    py = needs.python_for_jobs_shell()
    greedy = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G"
    run = f"{greedy} {py} -m slurmpool.sim.workload --seconds 0.5 --util 90"
    out = workdir / "mps.out"
    job = submit_on(
        cluster,
        "sbx1",
        "--gres=vgpu:1",
        out,
        f"echo limits=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; {run} --mem-mib 1000; "
        f"echo within=$?; {run} --mem-mib 30000; echo over=$?",
        user="sp-alice",
    )
    assert cluster.wait(job, 60) == "COMPLETED"
    text = out.read_text()
    assert "limits=25" in text  # what the task prolog exported (advice only)
    assert "active threads 25%, pinned memory limit 20480 MiB" in text, text
    assert "util 25%" in text and "within=0" in text
    assert "over=4" in text and "MPS pinned device memory limit is 20480 MiB" in text
    lines = [ln for ln in hook_lines(cluster, "sbx1", job) if "action=mps" in ln]
    assert any("25% threads, 20480 MiB pinned (1/4)" in ln for ln in lines), lines


def test_a_share_that_steers_around_its_mps_daemon_gets_no_gpu(own_sandbox: Sandbox) -> None:
    """Finding: MPS limits bind only the daemon's clients.  A job that points
    CUDA_MPS_PIPE_DIRECTORY elsewhere (or unsets it) asks for a CUDA context of its own,
    with no limit: the prolog put the GPU in EXCLUSIVE_PROCESS, where the MPS server's
    context is the only one, so the driver refuses it (exit 1, "busy or
    unavailable"), while the job's client of the daemon runs; the node stays up."""
    cluster = Cluster.of_own_sandbox(own_sandbox, "work-mps-around")
    py = needs.python_for_jobs_shell()
    run = f"{py} -m slurmpool.sim.workload --seconds 0.5"
    out = cluster.workdir / "around.out"
    job = submit_on(
        cluster,
        "sbx1",
        "--gres=vgpu:1",
        out,
        f"{run} --mem-mib 1000; echo client=$?; "
        f"CUDA_MPS_PIPE_DIRECTORY=/nonexistent/mps {run} --mem-mib 70000; echo elsewhere=$?; "
        f"env -u CUDA_MPS_PIPE_DIRECTORY {run} --mem-mib 70000; echo unset=$?",
        user="sp-alice",
    )
    assert cluster.wait(job, 60) == "COMPLETED"
    text = out.read_text()
    assert "client=0" in text and "active threads 25%" in text, text
    assert "elsewhere=1" in text and "unset=1" in text, text
    assert text.count("compute mode EXCLUSIVE_PROCESS, held by MPS server") == 2, text
    lines = [ln for ln in hook_lines(cluster, "sbx1", job) if "action=mps" in ln]
    assert any("-> EXCLUSIVE_PROCESS" in ln for ln in lines), lines
    assert "DRAIN" not in node_info(cluster, "sbx1").flags


def test_another_users_cpu_job_cannot_reach_a_gpus_mps_daemon(own_sandbox: Sandbox) -> None:
    """Finding: the pipe directories were world-traversable, and another user's CPU-only
    job connected to a GPU's control pipe (it could hold the daemon for its own user).
    Now the directory lets through only the users holding a share of that GPU."""
    cluster = Cluster.of_own_sandbox(own_sandbox, "work-mps-pipe")
    release = cluster.release_file("alice-share")
    alice_out, bob_out = cluster.workdir / "alice.out", cluster.workdir / "bob.out"
    alice = submit_on(
        cluster,
        "sbx1",
        "--gres=vgpu:1",
        alice_out,
        f"echo $CUDA_MPS_PIPE_DIRECTORY; {held(release)}",
        user="sp-alice",
    )
    try:
        pipe = poll("alice's pipe directory", lambda: first_line(alice_out), 60)
        assert pipe.startswith("/"), pipe
        py = needs.python_for_jobs_shell()
        connect = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            "try:\n    s.connect(sys.argv[1]); print('bob=connected')\n"
            "except OSError as e:\n    print('bob=' + type(e).__name__)\n"
        )
        script = cluster.workdir / "connect.py"
        script.write_text(connect)
        script.chmod(0o644)
        bob = cluster.submit(
            "-w",
            "sbx1",
            "-o",
            str(bob_out),
            "--wrap",
            f"{py} {script} {pipe}/control",
            user="sp-bob",
        )
        assert cluster.wait(bob, 60) == "COMPLETED"
        assert "bob=PermissionError" in bob_out.read_text()
    finally:
        release.touch()
    assert cluster.wait(alice, 60) == "COMPLETED"
    assert "DRAIN" not in node_info(cluster, "sbx1").flags
