"""Simulated node creation: mig-minors, device nodes and modes, the ``sim`` CLI."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.cli import main
from slurmpool.driver.mig_minors import parse_mig_minors
from slurmpool.gpu.backend import GpuBackendError, MigMinorLookup
from slurmpool.sim.devices import ci_minor, gi_minor, mig_minors_text
from slurmpool.sim.node import SimGpuSpec, create_node, node_summary, open_node
from slurmpool.sim.state import SimError


def test_minor_formula_matches_observed_values() -> None:
    # Slurm's documented example: 3g.40gb on GPU 0 as GI 2 -> caps 21 and 22 ...
    assert gi_minor(0, 2) == 21
    assert ci_minor(0, 2, 0) == 22
    # ... and values seen on GPU 1.
    assert gi_minor(1, 1) == 147
    assert ci_minor(1, 1, 0) == 148


def test_mig_minors_lists_every_possible_instance_like_the_real_file() -> None:
    text = mig_minors_text()
    lines = text.splitlines()
    assert lines[:4] == ["config 1", "monitor 2", "gpu0/gi0/access 3", "gpu0/gi0/ci0/access 4"]
    assert "gpu0/gi14/ci7/access 137" in lines
    assert "gpu31/gi14/ci7/access 4322" in lines
    assert len(lines) == 2 + 32 * 15 * 9
    parsed = parse_mig_minors(text)
    assert (parsed.config, parsed.monitor) == (1, 2)
    assert parsed.gi_minor(3, 7) == gi_minor(3, 7)
    assert parsed.ci_minor(3, 7, 2) == ci_minor(3, 7, 2)


@pytest.mark.parametrize(
    "text",
    ["config", "config one", "gpu0/gi0/access 3 4"],
    ids=["missing-minor", "non-numeric", "extra-field"],
)
def test_mig_minors_parser_rejects_malformed_lines(text: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_mig_minors(text)


def test_mig_minors_parser_ignores_unknown_names() -> None:
    assert parse_mig_minors("fabric-mgmt 9\ngpu0/gi1/access 12\n").gi_minor(0, 1) == 12


def test_mig_minor_lookup_agrees_with_the_parser() -> None:
    text = mig_minors_text()
    parsed, lookup = parse_mig_minors(text), MigMinorLookup(text)
    for gpu, gi, ci in [(0, 0, 0), (3, 7, 2), (31, 14, 7), (0, 13, 0)]:
        assert lookup.gi_minor(gpu, gi) == parsed.gi_minor(gpu, gi) == gi_minor(gpu, gi)
        assert lookup.ci_minor(gpu, gi, ci) == parsed.ci_minor(gpu, gi, ci) == ci_minor(gpu, gi, ci)
    assert lookup.gi_minor(32, 0) is None and lookup.ci_minor(0, 15, 0) is None
    # gpu1 must not match gpu10's lines; the last of duplicate lines wins, as in the parser.
    text = "gpu10/gi1/access 7\ngpu1/gi1/access 5\ngpu1/gi1/access 6\n"
    assert MigMinorLookup(text).gi_minor(1, 1) == parse_mig_minors(text).gi_minor(1, 1) == 6
    assert MigMinorLookup(text).gi_minor(10, 1) == 7


def test_mig_minor_lookup_names_a_malformed_line_it_needs() -> None:
    lookup = MigMinorLookup("config 1\ngpu0/gi1/access 9\ngpu0/gi2/access x\n", "/proc/mm")
    assert lookup.gi_minor(0, 1) == 9  # a bad line elsewhere does not stop a lookup
    with pytest.raises(GpuBackendError, match=r"/proc/mm: line 3: .*'gpu0/gi2/access x'"):
        lookup.gi_minor(0, 2)


def test_create_node_writes_device_nodes_with_modes(tmp_path: Path) -> None:
    node = create_node(
        tmp_path / "s", tmp_path / "dev", [("A100-SXM4-80GB", True), ("T4-16GB", False)]
    )
    dev = node.device_root
    assert node.mig_minors_path == tmp_path / "s" / "proc" / "driver" / "nvidia-caps" / "mig-minors"
    assert node.mig_minors_path.read_text() == mig_minors_text()
    gpu0 = os.stat(dev / "nvidia0")
    cap = os.stat(dev / "nvidia-caps" / f"nvidia-cap{gi_minor(0, 7)}")
    assert stat.S_IMODE(gpu0.st_mode) == 0o666
    assert stat.S_IMODE(cap.st_mode) == 0o400
    assert stat.S_IMODE(os.stat(dev / "nvidia-caps" / "nvidia-cap2").st_mode) == 0o444
    assert (dev / "nvidiactl").exists() and (dev / "nvidia1").exists()
    assert (dev / "nvidia-caps" / f"nvidia-cap{ci_minor(1, 14, 7)}").exists()
    assert not (dev / "nvidia2").exists()
    if os.geteuid() == 0:
        assert stat.S_ISCHR(gpu0.st_mode)
        assert (os.major(gpu0.st_rdev), os.minor(gpu0.st_rdev)) == (195, 0)
        assert stat.S_ISCHR(cap.st_mode)
        assert os.minor(cap.st_rdev) == gi_minor(0, 7)
    else:
        assert stat.S_ISREG(gpu0.st_mode)


def test_create_node_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    create_node(tmp_path / "s", tmp_path / "d", ["A100-SXM4-80GB"])
    with pytest.raises(SimError, match="already exists"):
        create_node(tmp_path / "s", tmp_path / "d", ["A100-SXM4-80GB"])
    cap = tmp_path / "d" / "nvidia-caps" / "nvidia-cap12"
    cap.chmod(0o444)
    create_node(tmp_path / "s", tmp_path / "d", ["A100-SXM4-80GB"], force=True)
    assert stat.S_IMODE(cap.stat().st_mode) == 0o400  # re-created like a driver reload


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        ([], "at least one GPU"),
        ([("T4-16GB", True)], "does not support MIG"),
        (["A100:maybe"], "expected MODEL or MODEL:mig"),
    ],
    ids=["no-gpus", "mig-on-t4", "bad-flag"],
)
def test_create_node_errors(tmp_path: Path, gpus: list, message: str) -> None:
    with pytest.raises(SimError, match=message):
        create_node(tmp_path / "s", tmp_path / "d", gpus)


def test_gpu_spec_parse() -> None:
    assert SimGpuSpec.parse("A100-SXM4-80GB:mig") == SimGpuSpec("A100-SXM4-80GB", True)
    assert SimGpuSpec.parse("T4-16GB") == SimGpuSpec("T4-16GB", False)


def test_open_node_and_summary(tmp_path: Path) -> None:
    created = create_node(tmp_path / "s", tmp_path / "d", ["H100-SXM5-80GB:mig"])
    assert open_node(tmp_path / "s") == created
    summary = node_summary(tmp_path / "s")
    assert summary["gpus"][0]["mig_current"] is True
    assert summary["gpus"][0]["cpus"] == "0-15"


def test_cli_sim_init_show_reset(tmp_path: Path) -> None:
    runner = CliRunner()
    state, dev = str(tmp_path / "s"), str(tmp_path / "d")
    gpus = ["--gpu", "A100-SXM4-80GB:mig", "--gpu", "A100-SXM4-80GB"]
    r = runner.invoke(main, ["sim", "init", "--state", state, "--device-root", dev, *gpus])
    assert r.exit_code == 0, r.output
    assert f"sim:{Path(state).absolute()}" in r.output
    r = runner.invoke(main, ["sim", "init", "--state", state, "--device-root", dev, "--gpu", "T4"])
    assert r.exit_code == 2 and "--force" in r.output
    r = runner.invoke(main, ["sim", "show", "--state", state, "--json"])
    assert r.exit_code == 0
    data = json.loads(r.output)
    assert [g["mig_current"] for g in data["gpus"]] == [True, False]
    r = runner.invoke(main, ["sim", "show", "--state", state])
    assert "GPU 1  A100-SXM4-80GB" in r.output
    r = runner.invoke(main, ["sim", "reset", "--state", state, "--gpu", "0"])
    assert r.exit_code == 0 and "reset GPU(s) 0" in r.output
    r = runner.invoke(
        main, ["sim", "init", "--state", state, "--device-root", dev, "--gpu", "X1", "--force"]
    )
    assert r.exit_code == 2 and "unknown GPU model" in r.output


def test_cli_sim_show_missing_node(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["sim", "show", "--state", str(tmp_path / "none")])
    assert r.exit_code == 2
    assert "sim init" in r.output
