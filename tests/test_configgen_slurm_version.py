"""generate-config and install write config for the installed Slurm, detected,
unless the policy's slurm_version says otherwise (staging)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from slurm_node import NODE_SLURM, SITE_NEEDS, programs_on_path

from slurmpool.cli import main
from slurmpool.configgen.inventory import ConfigError
from slurmpool.configgen.render import generate
from slurmpool.policy.loader import load_policy, parse_policy
from slurmpool.slurm.version import InstalledSlurm, SlurmVersion

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "examples" / "sandbox.yaml"
MIXED = ROOT / "examples" / "mixed-cluster.yaml"
SLURM_24_11 = InstalledSlurm(SlurmVersion(24, 11, 5), "slurmd -V")


def generate_config(policy: Path, out: Path) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["generate-config", "--policy", str(policy), "--var", "root=/r", "--out", str(out)]
    )
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("said", "shown", "extra"),
    [("slurm-wlm 22.05.8", "22.05.8", "false"), ("slurm 24.11.5", "24.11.5", "true")],
)
def test_generates_for_the_installed_slurm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str, shown: str, extra: str
) -> None:
    programs_on_path(tmp_path / "bin", monkeypatch, slurmd=f"echo '{said}'")
    code, output = generate_config(SANDBOX, tmp_path / "out")
    assert code == 0, output
    config = json.loads((tmp_path / "out" / "node-config.json").read_text())
    assert (config["slurm_version"], config["slurm_detected_by"]) == (shown, "slurmd -V")
    assert f"# For Slurm {shown} (slurmd -V)." in (tmp_path / "out" / "slurmpool.conf").read_text()
    # job_submit.lua keeps the vgpu token in Extra only where Extra exists (23.02+).
    assert f"local HAS_EXTRA = {extra}" in (tmp_path / "out" / "job_submit.lua").read_text()


def test_a_policy_slurm_version_overrides_the_installed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    programs_on_path(tmp_path / "bin", monkeypatch, slurmd="echo 'slurm 24.11.5'")
    code, output = generate_config(MIXED, tmp_path / "out")
    assert code == 0, output
    config = json.loads((tmp_path / "out" / "node-config.json").read_text())
    assert (config["slurm_version"], config["slurm_detected_by"]) == (
        "23.02",
        "policy slurm_version",
    )


def test_no_slurm_and_no_slurm_version_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    programs_on_path(
        tmp_path / "bin",
        monkeypatch,
        slurmd="echo 'slurmd: error: cannot load libslurm' >&2; exit 127",
        scontrol="echo 'scontrol: fatal: Unable to process configuration file' >&2; exit 1",
    )
    code, output = generate_config(SANDBOX, tmp_path / "out")
    assert code == 2
    assert "cannot tell which Slurm to generate for" in output
    assert "slurmd -V: exited with status 127: slurmd: error: cannot load libslurm" in output
    assert "Unable to process configuration file" in output
    assert "set slurm_version in the policy" in output
    assert not (tmp_path / "out").exists()


def test_generate_needs_a_slurm_to_generate_for() -> None:
    policy = load_policy(SANDBOX, variables={"root": "/r"})
    with pytest.raises(ConfigError, match="no Slurm version to generate for"):
        generate(policy)


POLICY = """\
version: v1
cluster: c
cgroup_plugin: disabled
node_groups:
  - name: g
    nodes: n[1-2]
    cpus: 8
    real_memory_mib: 1000
    gpus:
      - {model: A100-SXM4-80GB, count: 1, mode: mig}
partitions:
  - {name: p, node_groups: [g], default: true}
"""


def test_cgroup_plugin_disabled_needs_24_11() -> None:
    policy = parse_policy(POLICY)
    with pytest.raises(ConfigError, match=r"'disabled' needs Slurm 24\.11 or newer.*22\.05"):
        generate(policy, installed=NODE_SLURM)
    cgroup = generate(policy, installed=SLURM_24_11).files["cgroup.conf"]
    assert "CgroupPlugin=disabled" in cgroup.splitlines()


def test_install_on_a_staged_root_says_which_slurm_it_generated_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    programs_on_path(tmp_path / "bin", monkeypatch, slurmd="echo 'slurm 26.05.5'")
    staged = tmp_path / "staged"
    (staged / "node" / "etc" / "slurm").mkdir(parents=True)
    (staged / "node" / "etc" / "slurm" / "slurm.conf").write_text("ClusterName=c\n" + SITE_NEEDS)
    result = CliRunner().invoke(
        main,
        [
            "install",
            "--policy",
            str(SANDBOX),
            "--var",
            "root=/node",
            "--systemd-dir",
            "/systemd",
            "--python",
            "/usr/bin/python3",
            "--root",
            str(staged),
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "staged root: generated for this machine's Slurm 26.05 (slurmd -V)" in result.output
    assert '"slurm_version": "26.05.5"' in result.output
