"""The pool policy: the examples, the typed result, variables and the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.cli import main
from slurmpool.policy.errors import PolicyError
from slurmpool.policy.loader import load_policy, parse_policy

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))
SANDBOX_VARS = {"root": "/sandbox-root"}


def test_there_are_at_least_four_examples() -> None:
    names = {p.stem for p in EXAMPLES}
    assert "sandbox" in names and len(names) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_validate(path: Path) -> None:
    policy = load_policy(path, variables=SANDBOX_VARS)
    assert policy.version == "v1"
    assert policy.node_groups and policy.partitions


def test_sandbox_policy_shape() -> None:
    policy = load_policy(
        Path(__file__).resolve().parents[1] / "examples" / "sandbox.yaml", variables=SANDBOX_VARS
    )
    (group,) = policy.node_groups
    assert group.hostlist.expand() == ["sbx1", "sbx2"]
    assert [(g.index, g.model, g.mode) for g in group.gpus] == [
        (0, "A100-SXM4-80GB", "mig"),
        (1, "A100-SXM4-80GB", "mig"),
        (2, "A100-SXM4-80GB", "passthrough"),
    ]
    assert group.vgpu_unit == "compute-slice" and group.units_per_gpu == 7
    assert group.vgpu_count == 14
    assert len(policy.partitions) == 1 and policy.partitions[0].default
    assert policy.paths.devices_root == "/sandbox-root/dev"
    assert policy.gpu_backend == "sim:/sandbox-root/sim"


BASE = """\
version: v1
cluster: c
node_groups:
  - name: g
    nodes: n[1-4]
    cpus: 8
    real_memory_mib: 1000
    gpus:
{gpus}
partitions:
  - name: p
    node_groups: [g]
    default: true
"""


def policy_with(gpus: str) -> str:
    return BASE.format(gpus="\n".join("      " + line for line in gpus.strip().splitlines()))


def test_defaults_and_index_assignment() -> None:
    policy = parse_policy(
        policy_with(
            """
- {model: a100-80gb, count: 2, mode: mig}
- {model: NVIDIA A100-SXM4-80GB, index: 0, mode: passthrough, vfio: true}
- {model: A100-SXM4-80GB, index: 3, mode: mig-static, layout: [3g, 4g]}
"""
        )
    )
    g = policy.node_groups[0]
    assert [(s.index, s.mode) for s in g.gpus] == [
        (0, "passthrough"),
        (1, "mig"),
        (2, "mig"),
        (3, "mig-static"),
    ]
    assert g.gpus[0].vfio and g.gpus[0].slurm_type == "a100"
    assert g.gpus[3].layout == ("3g.40gb", "4g.40gb")
    assert policy.gpu_backend == "nvml" and policy.accounting
    assert policy.paths.devices_root == "/dev"
    assert policy.hooks.prolog_timeout_s == 30


def test_shared_pool() -> None:
    policy = parse_policy(
        policy_with("- {model: L40S, count: 3, mode: shared, shares: 4, mps: true}")
    )
    g = policy.node_groups[0]
    assert g.vgpu_unit == "share" and g.units_per_gpu == 4 and g.vgpu_count == 12
    assert all(s.mps for s in g.gpus)


def test_cli_validate_ok() -> None:
    path = str(EXAMPLES[0])
    result = CliRunner().invoke(main, ["policy", "validate", path, "--var", "root=/x"])
    assert result.exit_code == 0, result.output
    assert "valid policy v1" in result.output


def test_cli_validate_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\ncluster: c\nnode_groups: []\npartitions: []\nextra: 1\n")
    result = CliRunner().invoke(main, ["policy", "validate", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:5: extra: unknown field" in result.output
    assert "node_groups: expected at least 1 item" in result.output


@pytest.mark.parametrize(
    "command",
    [
        ["policy", "validate", "{policy}"],
        ["generate-config", "--policy", "{policy}", "--out", "{tmp}/out"],
        ["install", "--policy", "{policy}", "--root", "{tmp}", "--dry-run"],
        ["uninstall", "--policy", "{policy}", "--root", "{tmp}", "--dry-run"],
        ["doctor", "--policy", "{policy}", "--root", "{tmp}"],
    ],
    ids=lambda c: c[0],
)
def test_every_command_reads_var_the_same_way(command: list[str], tmp_path: Path) -> None:
    """One --var: the same option and the same error everywhere, before anything runs."""
    args = [a.format(policy=EXAMPLES[0], tmp=tmp_path) for a in command]
    result = CliRunner().invoke(main, [*args, "--var", "novalue"])
    assert result.exit_code == 2
    assert "Invalid value for '--var': expected NAME=VALUE, got 'novalue'" in result.output
    assert list(tmp_path.iterdir()) == []


def test_cli_schema_is_json() -> None:
    import json

    result = CliRunner().invoke(main, ["policy", "schema"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "node_groups" in schema["properties"]


def test_policy_error_is_a_list() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("version: v1\ncluster: 'a b'\nbogus: 1\n", "f.yaml")
    assert len(info.value.issues) >= 3  # cluster, bogus, missing node_groups, partitions
