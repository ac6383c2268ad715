"""generate-config: gres.conf rules, inventories, the node config and the CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import needs
import pytest
from click.testing import CliRunner
from slurm_node import NODE_SLURM

from slurmpool.catalogue import default_catalogue
from slurmpool.cli import main
from slurmpool.configgen.inventory import ConfigError, parse_inventory
from slurmpool.configgen.nodeconfig import load_node_config, parse_node_config
from slurmpool.configgen.plan import cap_minors, gi_id_for
from slurmpool.configgen.render import generate
from slurmpool.policy.loader import load_policy, parse_policy

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "examples" / "mixed-cluster.yaml"
SANDBOX = ROOT / "examples" / "sandbox.yaml"


def inventory(host: str, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"schema": 1, "hostname": host, "gpus": gpus}


def gpu(index: int, **kw: Any) -> dict[str, Any]:
    base = {
        "index": index,
        "uuid": f"GPU-{index}",
        "name": "NVIDIA A100-SXM4-80GB",
        "model": "A100-SXM4-80GB",
        "memory_mib": 81920,
        "mig_capable": True,
        "mig_enabled": False,
        "minor": index,
        "pci_bus_id": f"0000:{index:02x}:00.0",
        "numa_node": 0,
        "cpu_affinity": "0-15",
        "instances": [],
    }
    return {**base, **kw}


def test_every_gpu_appears_once() -> None:
    files = generate(load_policy(MIXED)).files
    gres = files["gres.conf"]
    serve = [ln for ln in gres.splitlines() if ln.startswith("NodeName=srv")]
    # pooled GPUs 0-4 are only a count; mig-static 5 and 6 and whole GPU 7 have files
    assert "NodeName=srv[01-16],srv-spare1 Name=vgpu Count=35" in serve
    devices = {re.search(r"/dev/nvidia(\d+)", ln).group(1) for ln in serve if "File" in ln}  # type: ignore[union-attr]
    assert devices == {"5", "6", "7"}
    whole = [ln for ln in serve if " File=" in ln]
    assert whole == ["NodeName=srv[01-16],srv-spare1 Name=gpu Type=a100 File=/dev/nvidia7"]
    assert "Type=a100_3g.40gb MultipleFiles=/dev/nvidia5,/dev/nvidia-caps/nvidia-cap" in gres


def test_slurm_fragment() -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    text = generate(policy, installed=NODE_SLURM).files["slurmpool.conf"]
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert "GresTypes=gpu,vgpu,vgpufit" in lines
    # The fit counts steer Slurm's choice of node; accounting keeps counting vgpu.
    assert "AccountingStorageTRES=gres/gpu,gres/vgpu" in lines
    assert "PrologFlags=Alloc" in lines
    assert "JobSubmitPlugins=lua" in lines
    for key, name in [
        ("Prolog", "prolog"),
        ("TaskProlog", "task-prolog"),
        ("Epilog", "epilog"),
        ("EpilogSlurmctld", "epilog-slurmctld"),
    ]:
        assert f"{key}=/r/hooks/{name}" in lines
    assert (
        "NodeName=sbx[1-2] CPUs=16 RealMemory=4000 Gres=gpu:a100:1,vgpu:14,vgpufit:s1:14,"
        "vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,vgpufit:next:1,vgpufit:pad:14 "
        "NodeAddr=127.0.0.1 Port=[17001-17002] State=UNKNOWN"
    ) in lines
    # The fit anchor: the class's shape when empty, without host or state, FUTURE.
    assert (
        "NodeName=vgpufit-sbx CPUs=16 RealMemory=4000 Gres=gpu:a100:1,vgpu:14,vgpufit:s1:14,"
        "vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,vgpufit:next:1,vgpufit:pad:14 "
        "State=FUTURE"
    ) in lines
    assert (
        "PartitionName=pool Nodes=sbx[1-2],vgpufit-sbx Default=YES MaxTime=INFINITE State=UP"
    ) in lines


def test_fit_anchors_follow_mig_pooled_groups() -> None:
    """Each MIG-pooled group has one anchor, in every partition the group is in; it
    keeps the options that shape a job's request; other groups have none."""
    text = generate(
        load_policy(ROOT / "examples" / "mig-inference.yaml"), installed=NODE_SLURM
    ).files["slurmpool.conf"]
    lines = text.splitlines()
    anchors = [ln for ln in lines if ln.startswith("NodeName=vgpufit-")]
    assert [a.split()[0] for a in anchors] == ["NodeName=vgpufit-h100", "NodeName=vgpufit-a100"]
    assert (
        "Sockets=2 CoresPerSocket=56 ThreadsPerCore=1 Feature=h100,mig State=FUTURE" in anchors[0]
    )
    assert any(
        ln.startswith("PartitionName=inference-h100 Nodes=inf-h[001-048],vgpufit-h100 ")
        for ln in lines
    )
    mixed = generate(
        load_policy(ROOT / "examples" / "mixed-cluster.yaml"), installed=NODE_SLURM
    ).files["slurmpool.conf"]
    assert [ln.split()[0] for ln in mixed.splitlines() if "State=FUTURE" in ln] == [
        "NodeName=vgpufit-serve"
    ]
    assert "PartitionName=train Nodes=trn[001-128] Default=NO" in mixed
    shared = generate(load_policy(ROOT / "examples" / "shared-pool.yaml"), installed=NODE_SLURM)
    assert "FUTURE" not in shared.files["slurmpool.conf"]


def test_fit_anchor_name_taken_by_a_node() -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    taken = dataclasses.replace(
        policy,
        node_groups=(dataclasses.replace(policy.node_groups[0], nodes="sbx[1-2],vgpufit-sbx"),),
    )
    with pytest.raises(ConfigError, match=r"has a node named vgpufit-sbx.*fit anchor of group sbx"):
        generate(taken, installed=NODE_SLURM)


def test_no_accounting_no_tres() -> None:
    policy = load_policy(ROOT / "examples" / "shared-pool.yaml")
    files = generate(policy, installed=NODE_SLURM).files
    assert "AccountingStorageTRES" not in files["slurmpool.conf"]
    assert "ConstrainDevices=yes" in files["cgroup.conf"]


def test_output_grows_with_classes_not_nodes() -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    big = dataclasses.replace(
        policy,
        node_groups=(dataclasses.replace(policy.node_groups[0], nodes="sbx[1-20000]"),),
    )
    small_files = generate(policy, installed=NODE_SLURM).files
    big_files = generate(big, installed=NODE_SLURM).files
    for name in ("slurmpool.conf", "gres.conf", "node-config.json"):
        assert abs(len(big_files[name]) - len(small_files[name])) < 200


def test_inventory_gives_minors_and_cores(catalogue: Any) -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    inv = parse_inventory(
        inventory("sbx1", [gpu(0), gpu(1), gpu(2, minor=5, cpu_affinity="16-31")]),
        "sbx1.json",
        catalogue,
    )
    gres = generate(policy, [inv], installed=NODE_SLURM).files["gres.conf"]
    assert "Name=gpu Type=a100 File=/r/dev/nvidia5 Cores=16-31" in gres
    config = json.loads(generate(policy, [inv], installed=NODE_SLURM).files["node-config.json"])
    assert config["node_classes"][0]["gpus"][2]["minor"] == 5


@pytest.mark.parametrize(
    ("host", "gpus", "fragment"),
    [
        ("other1", [gpu(0), gpu(1), gpu(2)], "in no node group"),
        ("sbx1", [gpu(0), gpu(1)], "has no GPU 2"),
        ("sbx1", [gpu(0), gpu(1), gpu(2, name="NVIDIA H100 80GB HBM3", model="")], "declares"),
    ],
    ids=["unknown-host", "missing-gpu", "wrong-model"],
)
def test_inventory_mismatch(host: str, gpus: list[dict[str, Any]], fragment: str) -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    inv = parse_inventory(inventory(host, gpus), "inv.json", default_catalogue())
    with pytest.raises(ConfigError, match=fragment):
        generate(policy, [inv], installed=NODE_SLURM)


def test_inconsistent_inventories_of_one_group() -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    cat = default_catalogue()
    a = parse_inventory(inventory("sbx1", [gpu(0), gpu(1), gpu(2)]), "a.json", cat)
    b = parse_inventory(inventory("sbx2", [gpu(0), gpu(1), gpu(2, minor=9)]), "b.json", cat)
    with pytest.raises(ConfigError, match="split the group"):
        generate(policy, [a, b], installed=NODE_SLURM)


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"schema": 2, "hostname": "a", "gpus": []},
        {"schema": 1, "hostname": "a b", "gpus": []},
        {"schema": 1, "hostname": "a", "gpus": [gpu(0, cpu_affinity="0-3; rm")]},
        {"schema": 1, "hostname": "a", "gpus": [gpu(0, minor=-1)]},
    ],
    ids=["not-object", "schema", "hostname", "affinity", "minor"],
)
def test_inventory_rejects(data: Any) -> None:
    with pytest.raises(ConfigError):
        parse_inventory(data, "x.json", default_catalogue())


def test_static_layout_minors_from_inventory() -> None:
    text = MIXED.read_text()
    policy = load_policy(MIXED)
    instances = [
        {"profile": "3g.40gb", "gi_id": 2, "ci_id": 0},
        {"profile": "2g.20gb", "gi_id": 4, "ci_id": 0},
        {"profile": "1g.10gb", "gi_id": 7, "ci_id": 0, "gi_minor": 1000, "ci_minor": 1001},
        {"profile": "1g.10gb", "gi_id": 8, "ci_id": 0},
    ]
    gpus = [gpu(i, cpu_affinity=None) for i in range(5)]
    gpus += [gpu(5, instances=instances), gpu(6, instances=instances), gpu(7)]
    inv = parse_inventory(inventory("srv03", gpus), "srv03.json", default_catalogue())
    gres = generate(policy, [inv], installed=NODE_SLURM).files["gres.conf"]
    gi, ci = cap_minors(5, 2, 0)
    assert f"nvidia5,/dev/nvidia-caps/nvidia-cap{gi},/dev/nvidia-caps/nvidia-cap{ci}" in gres
    assert "nvidia-cap1000,/dev/nvidia-caps/nvidia-cap1001" in gres
    assert "(cap minors inventory)" in gres
    wrong = [dict(i, profile="7g.80gb") for i in instances[:1]]
    gpus[5] = gpu(5, instances=wrong)
    inv = parse_inventory(inventory("srv03", gpus), "srv03.json", default_catalogue())
    with pytest.raises(ConfigError, match="apply the layout"):
        generate(policy, [inv], installed=NODE_SLURM)
    half = [dict(instances[0], ci_id=None), *instances[1:]]
    gpus[5] = gpu(5, instances=half)
    inv = parse_inventory(inventory("srv03", gpus), "srv03.json", default_catalogue())
    with pytest.raises(ConfigError, match="has no compute instance"):
        generate(policy, [inv], installed=NODE_SLURM)
    assert text  # the policy file itself is untouched


def test_mig_minor_formula() -> None:
    assert cap_minors(0, 1, 0) == (12, 13)
    assert cap_minors(1, 0, 0) == (138, 139)
    # ids by size then position: full 0, halves 1-2, quarters 3-6, eighths 7-14
    assert [gi_id_for(s, 4, 8) for s in (0, 4)] == [1, 2]
    assert [gi_id_for(s, 1, 8) for s in range(7)] == list(range(7, 14))
    assert gi_id_for(0, 8, 8) == 0 and gi_id_for(2, 2, 8) == 4


def test_node_config_round_trip(tmp_path: Path) -> None:
    policy = load_policy(MIXED)
    generate(policy, installed=NODE_SLURM).write(tmp_path)
    config = load_node_config(tmp_path / "node-config.json")
    serve = config.node_class("srv-spare1")
    assert serve is not None and serve.name == "serve"
    assert config.node_class("srv07") is serve
    assert config.node_class("trn128") is not None and config.node_class("trn129") is None
    assert serve.vgpu_unit == "compute-slice" and serve.units_per_gpu == 7
    assert [g.index for g in serve.pooled_gpus] == [0, 1, 2, 3, 4]
    assert config.profile_for("A100-SXM4-80GB", 5) == "7g.80gb"
    assert config.profile_for("A100-SXM4-80GB", 3) == "3g.40gb"
    assert config.paths["hooks_dir"] == "/opt/slurmpool/hooks"
    assert config.hooks["prolog_timeout_s"] == 45
    with pytest.raises(ValueError):
        parse_node_config({"schema": 99})


def test_node_config_loader_is_light() -> None:
    code = (
        "import sys, slurmpool.configgen.nodeconfig\n"
        "bad = [m for m in ('yaml', 'jinja2', 'click', 'slurmpool.policy', 'slurmpool.catalogue')"
        " if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


def test_cli_generate(tmp_path: Path) -> None:
    inv = tmp_path / "sbx1.json"
    inv.write_text(json.dumps(inventory("sbx1", [gpu(0), gpu(1), gpu(2)])))
    out = tmp_path / "out"
    args = ["generate-config", "--policy", str(SANDBOX), "--var", "root=/r", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--inventory", str(inv)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "cgroup.conf",
        "gres.conf",
        "job_submit.lua",
        "node-config.json",
        "slurmpool.conf",
    ]


def test_cli_generate_reports_policy_errors(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main, ["generate-config", "--policy", str(SANDBOX), "--out", str(out)]
    )
    assert result.exit_code == 2
    assert "undefined variable ${root}" in result.output
    assert not out.exists()


def test_slurmd_parses_generated_gres_conf(tmp_path: Path, munge_socket: Path) -> None:
    """Parse-back: the real slurmd -G reads the generated gres.conf of the sandbox policy."""
    slurmd = needs.program("slurmd", "/usr/sbin/slurmd")
    needs.root("mknod for device files")
    policy = load_policy(SANDBOX, variables={"root": str(tmp_path / "root")})
    conf = tmp_path / "etc"
    generate(policy, installed=NODE_SLURM).write(conf)
    dev = tmp_path / "root" / "dev"
    dev.mkdir(parents=True)
    for minor in range(3):
        os.mknod(dev / f"nvidia{minor}", 0o600 | 0o020000, os.makedev(195, minor))
    (conf / "slurm.conf").write_text(
        "ClusterName=sandbox\nSlurmctldHost=localhost\nAuthType=auth/munge\nSlurmUser=root\n"
        f"AuthInfo=socket={munge_socket}\n"
        f"StateSaveLocation={tmp_path}/ctld\nSlurmdSpoolDir={tmp_path}/d%n\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSlurmdParameters=config_overrides\n"
        f"Include {conf}/slurmpool.conf\n"
    )
    proc = subprocess.run(
        [slurmd, "-G", "-f", str(conf / "slurm.conf"), "-N", "sbx1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Name=vgpu Type=(null) Count=14" in out
    assert "Name=gpu Type=a100 Count=1 Index=2" in out


def test_hostile_policy_strings_cannot_reach_output() -> None:
    # Validation is the guard; a hostile value never gets as far as generate().
    from slurmpool.policy.errors import PolicyError

    text = SANDBOX.read_text().replace("name: pool", "name: 'pool\nPartitionName=evil'")
    with pytest.raises(PolicyError):
        parse_policy(text, variables={"root": "/r"})
