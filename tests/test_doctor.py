"""doctor on a staged node: a healthy install passes, each breakage is named with its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import needs
import pytest
from click.testing import CliRunner
from slurm_node import NODE_SLURM, SITE_NEEDS

from slurmpool.cli import main
from slurmpool.configgen.nodeconfig import load_node_config
from slurmpool.configgen.render import generate
from slurmpool.doctor import (
    DoctorOptions,
    _gres_conf_entries,
    check_monitord,
    check_slurm_version,
    check_state_dir,
    configured_node_gres,
    expected_node_gres,
    run_doctor,
)
from slurmpool.install import STATE_DIR_MODE, UNIT_NAME, apply, plan_install, target_for_policy
from slurmpool.policy.loader import load_policy
from slurmpool.policy.model import Policy
from slurmpool.records import replace
from slurmpool.sandbox.provision import proc_root_for
from slurmpool.sim.node import create_node
from slurmpool.slurm.includes import MissingInclude
from slurmpool.slurm.runner import Runner

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "sandbox.yaml"
A100 = "A100-SXM4-80GB"


def make_node(node: Path, gpus: list[tuple[str, bool]]) -> Policy:
    policy = load_policy(EXAMPLE, variables={"root": str(node)})
    conf = Path(policy.paths.slurm_config_dir) / "slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text("ClusterName=sandbox\n" + SITE_NEEDS)
    target = target_for_policy(
        policy, systemd_dir=str(node / "systemd"), python=needs.hook_python()
    )
    # install enables slurmpool-monitord, as `systemctl enable` would.
    apply(plan_install(target, generate(policy, installed=NODE_SLURM).files))
    create_node(
        policy.gpu_backend[len("sim:") :],
        policy.paths.devices_root,
        gpus,
        proc_root=proc_root_for(policy.paths.mig_minors),
        node_name="sbx1",
    )
    return policy


def opts(policy: Policy, **kw: object) -> DoctorOptions:
    kw.setdefault("systemd_dir", str(Path(policy.paths.state_dir).parent / "systemd"))
    return DoctorOptions(
        node_config=os.path.join(policy.paths.slurm_config_dir, "node-config.json"),
        node=str(kw.pop("node", "sbx1")),
        **kw,  # type: ignore[arg-type]
    )


def failed(policy: Policy, **kw: object) -> dict[str, str]:
    report = run_doctor(opts(policy, **kw))
    return {f.check: f"{f.message} || {f.fix}" for f in report.problems}


GOOD = [(A100, True), (A100, True), (A100, False)]


def test_healthy_node_passes(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", GOOD)
    report = run_doctor(opts(policy))
    assert report.ok, report.text()
    assert {f.check for f in report.findings} >= {
        "node-config",
        "gpu-backend",
        "gpu-models",
        "mig-mode",
        "hooks",
        "slurm-conf",
        "state-dir",
        "monitord",
    }
    assert report.text().endswith("sbx1: all checks passed")


def test_a_mig_pooled_node_needs_monitord_enabled_or_running(tmp_path: Path) -> None:
    node = tmp_path / "node"
    policy = make_node(node, GOOD)
    [found] = [f for f in run_doctor(opts(policy)).findings if f.check == "monitord"]
    assert found.ok and found.message == "enabled (multi-user.target.wants), not running now"
    (node / "systemd" / "multi-user.target.wants" / UNIT_NAME).unlink()
    problem = failed(policy)["monitord"]
    assert "neither enabled nor running" in problem and "scontrol reconfigure" in problem
    assert problem.endswith(f"|| systemctl enable --now {UNIT_NAME}")
    # Run by something other than systemd: its PID file names a live monitord.
    run_dir = Path(policy.paths.run_dir)
    proc = node / "proc-root"
    (proc / "4242").mkdir(parents=True)
    (proc / "4242" / "cmdline").write_bytes(b"/usr/bin/python3\0-I\0-m\0slurmpool\0monitord\0")
    run_dir.mkdir(exist_ok=True)
    (run_dir / "monitord.pid").write_text("4242\n")
    config = json.loads((Path(policy.paths.slurm_config_dir) / "node-config.json").read_text())
    config["paths"]["proc_root"] = str(proc)
    (Path(policy.paths.slurm_config_dir) / "node-config.json").write_text(json.dumps(config))
    [found] = [f for f in run_doctor(opts(policy)).findings if f.check == "monitord"]
    assert found.ok and found.message == "not enabled in systemd, running (pid 4242)"
    # A PID file left by a monitord that died names no monitord.
    (proc / "4242" / "cmdline").write_bytes(b"/usr/sbin/sshd\0")
    assert "monitord" in failed(policy)


def test_a_node_that_publishes_nothing_has_no_monitord_check(tmp_path: Path) -> None:
    node = tmp_path / "node"
    policy = make_node(node, GOOD)
    (node / "systemd" / "multi-user.target.wants" / UNIT_NAME).unlink()
    config = load_node_config(Path(policy.paths.slurm_config_dir) / "node-config.json")
    cls = config.node_class("sbx1")
    assert cls is not None and cls.publishes_fit
    shared = replace(cls, vgpu_unit="share")
    assert not shared.publishes_fit
    assert list(check_monitord(config, shared, opts(policy))) == []


def test_wrong_mig_mode_says_how_to_fix(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", [(A100, False), (A100, True), (A100, True)])
    problems = failed(policy)
    assert set(problems) == {"mig-mode"}
    assert "GPU 0: MIG off; mode mig needs MIG on" in problems["mig-mode"]
    assert "GPU 2: MIG on; mode passthrough needs MIG off" in problems["mig-mode"]
    assert "nvidia-smi -i N -mig 1" in problems["mig-mode"]


def test_wrong_model_and_count(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", [(A100, True), ("H100-SXM5-80GB", True)])
    problems = failed(policy)
    assert "gpu-models" in problems
    assert "3 GPUs, the node has 2" in problems["gpu-models"]


def test_broken_files(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", GOOD)
    os.chmod(policy.paths.state_dir, 0o755)
    os.chmod(Path(policy.paths.hooks_dir) / "epilog", 0o644)
    (Path(policy.paths.hooks_dir) / "prolog").unlink()
    conf = Path(policy.paths.slurm_config_dir) / "slurm.conf"
    conf.write_text("ClusterName=sandbox\n")
    problems = failed(policy)
    assert set(problems) == {"hooks", "state-dir", "slurm-conf"}
    assert "prolog missing" in problems["hooks"]
    assert "epilog not executable" in problems["hooks"]
    assert "slurmpool install" in problems["hooks"]
    assert f"mode 0755, expected {STATE_DIR_MODE:04o}" in problems["state-dir"]
    assert "does not include" in problems["slurm-conf"]


def test_backend_unreachable(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", GOOD)
    problems = failed(policy, backend_spec=f"sim:{tmp_path}/nothing-here")
    assert "gpu-backend" in problems
    assert "slurmpool sim init" in problems["gpu-backend"]


def test_missing_node_config_and_unknown_node(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", GOOD)
    assert "node-config" in failed(policy, node="gpu99")
    os.unlink(os.path.join(policy.paths.slurm_config_dir, "node-config.json"))
    problems = failed(policy)
    assert set(problems) == {"node-config"}
    assert "slurmpool install" in problems["node-config"]


def test_state_dir_missing_and_not_a_dir(tmp_path: Path) -> None:
    (missing,) = check_state_dir(Path("/"), str(tmp_path / "nope"))
    assert not missing.ok and f"install -d -m {STATE_DIR_MODE:04o}" in (missing.fix or "")
    f = tmp_path / "file"
    f.write_text("")
    (notdir,) = check_state_dir(Path("/"), str(f))
    assert "not a directory" in notdir.message


def test_cli_json_and_exit_status(tmp_path: Path) -> None:
    policy = make_node(tmp_path / "node", GOOD)
    nc = os.path.join(policy.paths.slurm_config_dir, "node-config.json")
    node = ["--node-config", nc, "--node", "sbx1", "--systemd-dir", str(tmp_path / "node/systemd")]
    ok = CliRunner().invoke(main, ["doctor", *node, "--no-slurm", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["ok"] is True
    os.chmod(policy.paths.state_dir, 0o777)
    bad = CliRunner().invoke(main, ["doctor", *node, "--no-slurm"])
    assert bad.exit_code == 1
    assert "[FAIL] state-dir" in bad.stdout
    assert "fix: install -d" in bad.stdout


SANDBOX_FIT = (
    "vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,"
    "vgpufit:next:1,vgpufit:pad:14"
)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("sbx1", "gpu:a100:1,vgpu:14," + SANDBOX_FIT),
        ("sbx2", "gpu:a100:1,vgpu:14," + SANDBOX_FIT),
        ("gpu1", None),
    ],
)
def test_expected_node_gres(node: str, expected: str | None) -> None:
    policy = load_policy(EXAMPLE, variables={"root": "/x"})
    fragment = generate(policy, installed=NODE_SLURM).files["slurmpool.conf"]
    assert expected_node_gres(fragment, node) == expected


def test_a_node_the_site_defines_is_read_where_install_edited_it(tmp_path: Path) -> None:
    """On a merged site the node's line is the site's own, edited in place (its
    original set aside as a comment), in a file slurm.conf includes; slurmpool's
    fragment holds only its fit anchor."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(
        "ClusterName=c\nInclude nodes/%c.conf\nInclude slurmpool.conf #slurmpool-include\n"
    )
    (etc / "nodes").mkdir()
    (etc / "nodes" / "c.conf").write_text(
        "#slurmpool-disabled: NodeName=sbx[1-2] CPUs=16 Gres=gpu:a100:3\n"
        "NodeName=sbx[1-2] CPUs=16 Gres=gpu:a100:1,vgpu:14,mysite:2 #slurmpool-added\n"
    )
    (etc / "slurmpool.conf").write_text("NodeName=vgpufit-sbx Gres=vgpu:14 State=FUTURE\n")
    conf = str(etc / "slurm.conf")
    assert configured_node_gres(Path("/"), conf, "sbx2") == "gpu:a100:1,vgpu:14,mysite:2"
    assert configured_node_gres(Path("/"), conf, "gpu1") is None
    (etc / "nodes" / "c.conf").unlink()
    with pytest.raises(MissingInclude, match=r"line 2 \('Include nodes/%c.conf'\)"):
        configured_node_gres(Path("/"), conf, "sbx2")


def test_gres_conf_entries() -> None:
    text = (
        "# comment\n"
        "NodeName=sbx[1-2] Name=gpu Type=a100 File=/d/nvidia[0-1]\n"
        "NodeName=sbx[1-2] Name=vgpu Count=14\n"
        "NodeName=other Name=gpu Type=h100 File=/d/nvidia0\n"
    )
    assert _gres_conf_entries(text, "sbx1") == {
        ("gpu", "a100"): (2, {"/d/nvidia0", "/d/nvidia1"}),
        ("vgpu", None): (14, set()),
    }


@pytest.mark.parametrize(
    ("said", "ok", "message"),
    [
        ("slurm-wlm 22.05.2", True, "Slurm 22.05.2, as the config was generated for (slurmd -V)"),
        (
            "slurm 24.11.5",
            False,
            "the installed config was generated for Slurm 22.05 (slurmd -V), "
            "this node runs 24.11.5",
        ),
        ("slurmd: error: libslurm", False, "cannot read this node's Slurm version"),
    ],
)
def test_slurm_version_check(tmp_path: Path, said: str, ok: bool, message: str) -> None:
    policy = make_node(tmp_path / "node", [(A100, True)])
    config = load_node_config(os.path.join(policy.paths.slurm_config_dir, "node-config.json"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "slurmd").write_text(f"#!/bin/sh\necho '{said}'\n")
    (bin_dir / "slurmd").chmod(0o755)
    (finding,) = check_slurm_version(config, Runner(search_path=(str(bin_dir),)))
    assert (finding.check, finding.ok) == ("slurm-version", ok)
    assert message in finding.message
    if not ok and "generated for" in message:
        assert "slurmpool install --policy POLICY" in (finding.fix or "")


def test_slurmd_totals_leave_out_the_empty_shard_of_each_other_gpu_type() -> None:
    from slurmpool.doctor import slurmd_gres_totals
    from slurmpool.slurm.parse import parse_slurmd_gres

    # As slurmd -G (22.05) printed examples/shared-pool.yaml's A10 node.
    out = "".join(
        f"slurmd-a10-001: Gres Name={n} Type={t} Count={c} Index={i} ID=1 "
        f"File=/dev/nvidia{i} (null)\n"
        for n, t, c, i in [
            ("shard", "a10_shared", 2, 0),
            ("gpu", "a10_shared", 1, 0),
            ("shard", "a10_shared", 2, 1),
            ("gpu", "a10_shared", 1, 1),
            ("shard", "a10", 0, 2),
            ("gpu", "a10", 1, 2),
        ]
    )
    totals = {k: c for k, (c, _) in slurmd_gres_totals(parse_slurmd_gres(out)).items()}
    assert totals == {("gpu", "a10_shared"): 2, ("gpu", "a10"): 1, ("shard", None): 4}


def _isolation(policy: Policy) -> list[str]:
    report = run_doctor(opts(policy))
    assert report.ok, report.text()
    return [f.message for f in report.findings if f.check == "isolation"]


def test_doctor_prints_the_isolation_of_each_mode(tmp_path: Path) -> None:
    node = tmp_path / "node"
    policy = make_node(node, GOOD)
    etc = Path(policy.paths.slurm_config_dir)
    cgroup_conf = etc / "cgroup.conf"
    cgroup_conf.write_text(cgroup_conf.read_text().replace("autodetect", "cgroup/v1"))
    slurm_conf = etc / "slurm.conf"
    site = slurm_conf.read_text()
    slurm_conf.write_text(site + "TaskPlugin=task/affinity, task/cgroup\n")
    # No devices controller where the policy's job_cgroup_root lies.
    mig, whole = _isolation(policy)
    assert mig.startswith("mig: user (") and "no cgroup v1 devices controller" in mig
    assert whole.startswith("passthrough: job (the device cgroup")
    # The controller there (a stand-in for the machine's): the prolog's fence works.
    devices = node / "cgroup" / "devices"
    devices.mkdir(parents=True)
    (devices / "devices.deny").touch()
    mig, whole = _isolation(policy)
    assert mig.startswith("mig: job (the prolog's device cgroup")
    # Slurm on cgroup v2: nothing can be added to its device program.
    cgroup_conf.write_text(cgroup_conf.read_text().replace("cgroup/v1", "cgroup/v2"))
    mig, _ = _isolation(policy)
    assert mig.startswith("mig: user (") and mig.endswith("Slurm's alone)")
    # No task/cgroup: no device cgroup at all.
    slurm_conf.write_text(site.replace("task/affinity,task/cgroup", "task/affinity"))
    _, whole = _isolation(policy)
    assert whole.startswith("passthrough: none (any job can open every GPU")


def test_doctor_says_when_the_wrappers_and_slurm_conf_disagree_on_site_hooks(
    tmp_path: Path,
) -> None:
    """A node installed apart keeps the site hooks it read; the shared slurm.conf may
    name others since (a controller-side change): doctor says so, a reinstall mends it."""
    policy = make_node(tmp_path / "node", GOOD)
    assert "site-hooks" not in failed(policy)
    conf = Path(policy.paths.slurm_config_dir) / "slurm.conf"
    with conf.open("a") as f:
        f.write("Epilog=/usr/local/sbin/site-epilog\n")
    said = failed(policy)["site-hooks"]
    assert "Epilog: the wrapper runs none, " in said
    assert f"{conf} names /usr/local/sbin/site-epilog" in said
    assert said.endswith("run `slurmpool install --node --policy POLICY` on this node again")
    target = target_for_policy(
        policy, systemd_dir=str(tmp_path / "node" / "systemd"), python=needs.hook_python()
    )
    apply(plan_install(target, generate(policy, installed=NODE_SLURM).files))
    assert "site-hooks" not in failed(policy)
