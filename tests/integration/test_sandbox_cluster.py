"""The sandbox is a real cluster: nodes registered with the generated GRES, jobs complete."""

from __future__ import annotations

import json
import pwd
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from polling import poll

from slurmpool.doctor import configured_node_gres
from slurmpool.sandbox.cluster import (
    SandboxError,
    SandboxOptions,
    SandboxRunning,
    host_fences_devices,
)
from slurmpool.sandbox.site import SITE_FEATURE
from slurmpool.slurm.gres import gres_totals, parse_gres
from slurmpool.slurm.parse import parse_nodes

from .conftest import Cluster, make_unix_users


def test_started_quickly(cluster: Cluster) -> None:
    assert cluster.state.startup_s is not None
    assert cluster.state.startup_s < 60


def test_nodes_register_with_the_generated_gres(cluster: Cluster) -> None:
    """The site's own NodeName line, edited by install, gives each node slurmpool's GRES."""
    nodes = parse_nodes(cluster.slurm.run("scontrol", "show", "node").stdout)
    assert sorted(n.name for n in nodes) == ["sbx1", "sbx2"]
    for node in nodes:
        want = configured_node_gres(Path("/"), cluster.state.slurm_conf, node.name)
        assert want == (
            "gpu:a100:1,vgpu:14,vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,"
            "vgpufit:next:1,vgpufit:pad:14"
        )
        assert gres_totals(list(node.gres)) == gres_totals(parse_gres(want))
        assert node.state in ("IDLE", "MIXED", "ALLOCATED") and "DRAIN" not in node.flags
        assert node.record["NodeAddr"] == "127.0.0.1"


def test_every_daemon_listens_on_loopback_only(cluster: Cluster) -> None:
    # "slurmd" is only the default SlurmdPort; every node has its own Port=.
    ports = {p for name, p in cluster.state.ports.items() if name != "slurmd"}
    seen = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state != "0A":  # LISTEN
                continue
            addr, port_hex = local.rsplit(":", 1)
            port = int(port_hex, 16)
            if port in ports:
                seen.add(port)
                assert addr in ("0100007F", "00000000000000000000000001000000"), (port, addr)
    assert seen == ports


@pytest.mark.parametrize("gres", ["gpu:1", "vgpu:2"])
def test_jobs_run_and_complete(cluster: Cluster, gres: str) -> None:
    out = cluster.workdir / f"job-{gres.replace(':', '-')}.out"
    job = cluster.submit(
        f"--gres={gres}",
        "-o",
        str(out),
        "--wrap",
        "echo user=$(id -un) gpus=$CUDA_VISIBLE_DEVICES",
        user="sp-alice",
    )
    assert cluster.wait(job) == "COMPLETED"
    assert out.read_text().startswith("user=sp-alice")
    node = cluster.job(job)["NodeList"]
    log = cluster.host_hook_log(node)
    assert f"hook=prolog action=job-start level=info job={job} " in log
    assert f"hook=epilog action=job-end level=info job={job} " in log
    assert "user=sp-alice" in log
    # The site's own prolog still runs, through slurmpool's wrapper.
    site_log = (cluster.sandbox.layout.site_dir / "prolog.log").read_text()
    assert f"site-prolog job={job} node={node}" in site_log
    sacct = cluster.slurm.run(
        "sacct", "-n", "-X", "-P", "-j", str(job), "-o", "State,Account,AllocTRES", timeout=15
    ).stdout
    # sp-alice existed before up: up gave her an association in the default account.
    assert sacct.startswith("COMPLETED|sandbox|")
    assert f"gres/{gres.split(':')[0]}={gres.split(':')[1]}" in sacct


def _sandbox_users(cluster: Cluster) -> list[str]:
    return cluster.slurm.run(
        "sacctmgr", "-n", "-P", "show", "assoc", "where", "account=sandbox", "format=User"
    ).stdout.split()


def test_adding_users_that_have_their_association_changes_nothing(cluster: Cluster) -> None:
    # sacctmgr refuses a request that adds nothing on 24.11 and later (22.05 accepts it):
    # add-user asks only for the associations that are missing.
    before = _sandbox_users(cluster)
    assert {"root", "sp-alice", "sp-bob"} <= set(before)
    cluster.sandbox.add_user("sp-alice", "root", "sp-alice")
    assert _sandbox_users(cluster) == before


def test_a_removed_users_uid_can_go_to_a_new_user(cluster: Cluster) -> None:
    # Measured on 24.11: while an association of a deleted Unix user remains, a new user
    # given the same uid cannot be added ("Request didn't affect anything").
    make_unix_users(["sp-gone"])
    uid = pwd.getpwnam("sp-gone").pw_uid
    cluster.sandbox.add_user("sp-gone")
    cluster.sandbox.remove_user("sp-gone")
    subprocess.run(["userdel", "--remove", "sp-gone"], check=True, capture_output=True)
    subprocess.run(["useradd", "--uid", str(uid), "sp-next"], check=True, capture_output=True)
    try:
        cluster.sandbox.add_user("sp-next")
        users = _sandbox_users(cluster)
        assert "sp-next" in users and "sp-gone" not in users
    finally:
        cluster.sandbox.remove_user("sp-next")
        subprocess.run(["userdel", "--remove", "sp-next"], check=False, capture_output=True)


def test_doctor_passes_on_each_node(cluster: Cluster) -> None:
    for node in cluster.state.nodes:
        res = cluster.doctor(node)
        report = json.loads(res.stdout)
        assert res.returncode == 0, res.stdout + res.stderr
        checks = {f["check"] for f in report["findings"]}
        assert {
            "gpu-backend",
            "mig-mode",
            "slurm-node",
            "slurm-version",
            "slurmd-gres",
            "hooks",
            "state-dir",
        } <= checks
        # The sandbox generated its config for the Slurm it runs, detected.
        version = next(f for f in report["findings"] if f["check"] == "slurm-version")
        assert "as the config was generated for (slurmd -V)" in version["message"]
        # What isolates jobs here: the case test_pooling's second-job test checks.
        isolation = [f["message"] for f in report["findings"] if f["check"] == "isolation"]
        assert [m.split(":")[0] for m in isolation] == ["mig", "passthrough"]
        if host_fences_devices():
            assert isolation[0].startswith("mig: job (the prolog's device cgroup"), isolation
            assert isolation[1].startswith("passthrough: job ("), isolation
        else:
            assert isolation[0].startswith("mig: user ("), isolation
            assert isolation[1].startswith("passthrough: none ("), isolation


def test_doctor_outside_the_node_namespace_finds_the_device_problem(cluster: Cluster) -> None:
    from slurmpool.doctor import DoctorOptions, run_doctor

    etc = Path(cluster.state.slurm_conf).parent
    report = run_doctor(
        DoctorOptions(
            node_config=str(etc / "node-config.json"),
            node="sbx1",
            runner=cluster.slurm,
            slurm_conf=cluster.state.slurm_conf,
        )
    )
    problems = {f.check: f for f in report.problems}
    assert "slurmd-gres" in problems
    assert "can't stat gres.conf file" in problems["slurmd-gres"].message
    assert problems["slurmd-gres"].fix


def test_second_up_refuses(cluster: Cluster) -> None:
    with pytest.raises(SandboxRunning, match="already running"):
        cluster.sandbox.up(SandboxOptions(directory=cluster.sandbox.layout.root))
    assert isinstance(SandboxRunning("x"), SandboxError)


def test_env_lines(cluster: Cluster) -> None:
    lines = cluster.sandbox.env_lines()
    assert f"export SLURM_CONF={cluster.state.slurm_conf}" in lines
    # Jobs submitted by hand after `eval "$(slurmpool sandbox env)"` name the account
    # the site's job_submit.lua wants.
    assert "export SBATCH_ACCOUNT=sandbox" in lines


def test_each_node_runs_its_monitord(cluster: Cluster) -> None:
    """The sandbox starts monitord on every node, as the installed unit would, each in
    its node's view: it reports that node's three simulated GPUs under its name (the
    accounting tests read each job's samples from its own node's monitord).  The GPUs'
    UUIDs are unique across the cluster, as real ones are."""
    uuids = []
    for node in cluster.state.nodes:
        url = f"{cluster.sandbox.monitord_url(node)}/metrics"

        def gpu_lines(url: str = url) -> list[str]:
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            return [ln for ln in text.splitlines() if ln.startswith("slurmpool_gpu_mig_enabled{")]

        # Served from monitord's first sampling pass on.
        lines = poll(f"{node}'s monitord to sample its GPUs", gpu_lines, 30)
        assert len(lines) == 3 and all(f'node="{node}"' in ln for ln in lines), lines
        assert sorted(ln.rsplit(" ", 1)[1] for ln in lines) == ["0.0", "1.0", "1.0"]
        uuids += [ln.split('uuid="', 1)[1].split('"', 1)[0] for ln in lines]
    assert len(set(uuids)) == len(uuids) == 3 * len(cluster.state.nodes), uuids


def _sandbox_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    directory = str(cluster.sandbox.layout.root)
    return subprocess.run(
        [sys.executable, "-m", "slurmpool", "sandbox", args[0], "--dir", directory, *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=cluster.slurm.child_env(),
    )


def _exec(cluster: Cluster, node: str, *command: str) -> subprocess.CompletedProcess[str]:
    return _sandbox_cli(cluster, "exec", node, "--", *command)


def test_sandbox_exec_runs_node_side_commands_in_the_nodes_view(cluster: Cluster) -> None:
    for node in cluster.state.nodes:
        res = _exec(cluster, node, "slurmpool", "status", "--json")
        assert res.returncode == 0, res.stderr
        status = json.loads(res.stdout)
        assert status["node"] == node and len(status["gpus"]) == 3
        res = _exec(cluster, node, "slurmpool", "accounting", "status", "--json")
        assert res.returncode == 0, res.stderr
        assert isinstance(json.loads(res.stdout), list)
    # The command sees its node name and its exit status is the exec's.
    res = _exec(cluster, "sbx2", "sh", "-c", 'echo "$SLURMD_NODENAME"; exit 3')
    assert (res.returncode, res.stdout) == (3, "sbx2\n")
    res = _exec(cluster, "sbx9", "true")
    assert res.returncode == 1 and "no node 'sbx9'" in res.stderr


def test_restart_starts_daemons_anew_and_waits_until_they_serve(cluster: Cluster) -> None:
    def sbx1() -> dict[str, str]:
        return parse_nodes(cluster.slurm.run("scontrol", "show", "node", "sbx1").stdout)[
            0
        ].record.as_dict()

    cluster.slurm.run(
        "scontrol", "update", "NodeName=sbx1", "AvailableFeatures=spA", "ActiveFeatures=spA"
    )
    before = sbx1()
    pids = {d.name: d.pid for d in cluster.sandbox.running()}
    # Twice in a row: the second slurmd starts within the second of the first.
    res = _sandbox_cli(cluster, "restart", "slurmd-sbx1", "slurmd-sbx1", "slurmctld")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("restarted slurmd-sbx1 (pid ") == 2
    after = {d.name: d.pid for d in cluster.sandbox.running()}
    assert after.keys() == pids.keys()
    # (in any order: the state lists daemons in the order they were last started)
    assert sorted(n for n in pids if pids[n] != after[n]) == ["slurmctld", "slurmd-sbx1"]
    # Back as it was, with the new slurmd registered; a restarted slurmctld reads node
    # features from slurm.conf again (tests/data/probe-node-features.sh).
    node = sbx1()
    assert node["SlurmdStartTime"] != before["SlurmdStartTime"]
    assert node["ActiveFeatures"] == SITE_FEATURE and node["State"] == "IDLE"
    job = cluster.submit("-w", "sbx1", "--wrap", "true")
    assert cluster.wait(job) == "COMPLETED"
    res = _sandbox_cli(cluster, "restart", "slurmd-sbx9")
    assert res.returncode == 1 and "no daemon 'slurmd-sbx9'" in res.stderr


def test_slurmdbd_starts_without_errors(cluster: Cluster) -> None:
    # MariaDB set up as slurmdbd asks (no "Database settings not recommended values"),
    # its database made before it starts: nothing to complain about at start.
    log = cluster.sandbox.layout.log("slurmdbd").read_text()
    start = log[: log.index(" started")] if " started" in log else log
    errors = [line for line in start.splitlines() if "error" in line.lower()]
    assert " started" in log and errors == [], "\n".join(errors)
