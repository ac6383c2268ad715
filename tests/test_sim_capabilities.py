"""The simulated driver's /proc/driver/nvidia files (params, capability access
files) and its ``nvidia-modprobe -f`` stand-in; the parsers slurmpool reads them with."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest
from click.testing import CliRunner

from slurmpool.cli import main
from slurmpool.driver.procfs import (
    CapabilityAccess,
    access_path,
    capabilities_dir,
    modify_device_files,
    params_path,
    parse_access,
)
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
from slurmpool.sim.capabilities import reset_node
from slurmpool.sim.devices import cap_path, ci_minor, gi_minor
from slurmpool.sim.node import create_node, reset_gpu

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to root needs root")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, NvmlBackend]]:
    create_node(
        tmp_path / "state", tmp_path / "dev", [("A100-SXM4-80GB", True), ("T4-16GB", False)]
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        yield tmp_path, b


def _files(proc: Path) -> set[str]:
    base = Path(capabilities_dir(str(proc)))
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}


@pytest.mark.parametrize("modify", [True, False])
def test_params_carry_modify_device_files(tmp_path: Path, modify: bool) -> None:
    create_node(
        tmp_path / "state", tmp_path / "dev", ["A100-SXM4-80GB:mig"], modify_device_files=modify
    )
    text = Path(params_path(str(tmp_path / "state" / "proc"))).read_text()
    assert f"ModifyDeviceFiles: {int(modify)}\n" in text
    assert modify_device_files(text) is modify
    config = Path(capabilities_dir(str(tmp_path / "state" / "proc")), "mig", "config")
    assert parse_access(config.read_text()) == CapabilityAccess(1, 0o400, modify)


def test_access_files_follow_the_instances(node: tuple[Path, NvmlBackend]) -> None:
    top, b = node
    proc = top / "state" / "proc"
    assert _files(proc) == {"mig/config", "mig/monitor"}
    monitor = Path(capabilities_dir(str(proc)), "mig", "monitor").read_text()
    assert monitor == "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n"

    inst = b.create_instance(0, "3g.40gb", Placement(4, 4))
    gi = f"gpu0/mig/gi{inst.gi_id}"
    assert _files(proc) == {"mig/config", "mig/monitor", f"{gi}/access", f"{gi}/ci0/access"}
    gi_access = Path(access_path(str(proc), 0, inst.gi_id))
    assert parse_access(gi_access.read_text()) == CapabilityAccess(
        gi_minor(0, inst.gi_id), 0o444, True
    )
    ci_access = Path(access_path(str(proc), 0, inst.gi_id, 0))
    assert parse_access(ci_access.read_text()).minor == ci_minor(0, inst.gi_id, 0)
    assert stat.S_IMODE(gi_access.stat().st_mode) == 0o444

    assert b.destroy_instance(0, inst.gi_id)
    assert _files(proc) == {"mig/config", "mig/monitor"}
    assert list(Path(capabilities_dir(str(proc)), "gpu0", "mig").iterdir()) == []

    b.create_instance(0, "1g.10gb", Placement(0, 1))
    assert len(_files(proc)) == 4
    reset_gpu(top / "state", 0)  # instances do not survive a reset; nor do their files
    assert _files(proc) == {"mig/config", "mig/monitor"}


@ROOT_ONLY
def test_modprobe_resets_a_handed_over_node_to_root_0444(node: tuple[Path, NvmlBackend]) -> None:
    top, b = node
    inst = b.create_instance(0, "3g.40gb", Placement(4, 4))
    assert inst.gi_minor is not None
    gi_node = cap_path(top / "dev", inst.gi_minor)
    os.chown(gi_node, 65534, 65534)  # what the prolog does for a job's user
    access = access_path(str(top / "state" / "proc"), 0, inst.gi_id)

    assert reset_node(access, top / "dev") == "reset"
    st = gi_node.lstat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o444)
    assert reset_node(access, top / "dev") == "unchanged"

    out = CliRunner().invoke(main, ["sim", "modprobe", "--state", str(top / "state"), "-f", access])
    assert (out.exit_code, out.output) == (0, "unchanged\n")


def test_modprobe_leaves_nodes_alone_where_the_driver_may_not_modify_them(tmp_path: Path) -> None:
    create_node(
        tmp_path / "state", tmp_path / "dev", ["A100-SXM4-80GB:mig"], modify_device_files=False
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        inst = b.create_instance(0, "7g.80gb", Placement(0, 8))
    assert inst.gi_minor is not None
    before = cap_path(tmp_path / "dev", inst.gi_minor).lstat()
    access = access_path(str(tmp_path / "state" / "proc"), 0, inst.gi_id)
    assert reset_node(access, tmp_path / "dev") == "not-modifiable"
    assert cap_path(tmp_path / "dev", inst.gi_minor).lstat() == before


def test_modprobe_of_a_capability_that_does_not_exist(node: tuple[Path, NvmlBackend]) -> None:
    top, _b = node
    access = access_path(str(top / "state" / "proc"), 0, 3)
    with pytest.raises(FileNotFoundError):
        reset_node(access, top / "dev")
    out = CliRunner().invoke(main, ["sim", "modprobe", "--state", str(top / "state"), "-f", access])
    assert out.exit_code != 0 and access in out.output


@ROOT_ONLY
def test_only_root_may_reset_a_node() -> None:
    """The real helper is setuid root; the simulator's is not, and says so."""
    py, _path = needs.python_for_jobs()
    top = Path(tempfile.mkdtemp(prefix="slurmpool-sim-"))
    try:
        top.chmod(0o755)
        create_node(top / "state", top / "dev", ["A100-SXM4-80GB:mig"])
        with open_backend(f"sim:{top / 'state'}") as b:
            inst = b.create_instance(0, "7g.80gb", Placement(0, 8))
        access = access_path(str(top / "state" / "proc"), 0, inst.gi_id)
        code = (
            "import sys; from slurmpool.sim.capabilities import reset_node\n"
            "try:\n    reset_node(sys.argv[1], sys.argv[2])\n"
            "except PermissionError as e:\n    print(e); sys.exit(9)\n"
        )
        src = str(Path(__file__).resolve().parent.parent)
        cmd = ["runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={src}", py, "-c", code]
        out = subprocess.run(
            [*cmd, access, str(top / "dev")],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert out.returncode == 9, out.stderr
        assert "only root may reset" in out.stdout
    finally:
        shutil.rmtree(top)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("DeviceFileMinor: 12\nDeviceFileMode: 292\n", "no DeviceFileModify line"),
        ("DeviceFileMinor: twelve\nDeviceFileMode: 292\nDeviceFileModify: 1\n", "'twelve'"),
        ("DeviceFileMinor 12\n", "line 1: expected 'Name: value'"),
    ],
    ids=["missing", "not-a-number", "no-colon"],
)
def test_access_parser_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_access(text, "gi1/access")


def test_params_parser_needs_modify_device_files() -> None:
    assert modify_device_files("ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 0\n") is False
    with pytest.raises(ValueError, match="params: no ModifyDeviceFiles line"):
        modify_device_files("DeviceFileMode: 438\n")
