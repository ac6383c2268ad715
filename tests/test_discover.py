"""Node discovery: the inventory library and ``slurmpool discover``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmpool.cli import main
from slurmpool.discover import discover, render_text
from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
from slurmpool.sim.node import SimGpuSpec, create_node

GPU_KEYS = {
    "index",
    "uuid",
    "name",
    "model",
    "memory_mib",
    "mig_capable",
    "mig_enabled",
    "mig_pending",
    "minor",
    "pci_bus_id",
    "pci_device_id",
    "numa_node",
    "cpu_affinity",
    "instances",
}
INSTANCE_KEYS = {
    "profile",
    "placement",
    "gi_id",
    "ci_id",
    "uuid",
    "gi_minor",
    "ci_minor",
    "memory_mib",
}


@pytest.fixture
def state(tmp_path: Path) -> str:
    create_node(
        tmp_path / "state",
        tmp_path / "dev",
        [
            ("A100-SXM4-80GB", True),
            ("H100-SXM5-80GB", False),
            SimGpuSpec("T4-16GB", nvml_name="NVIDIA Mystery 9000", pci_device_id=0x99990000),
        ],
        node_name="cn01",
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        b.create_instance(0, "3g.40gb", Placement(4, 4))
        b.create_instance(0, "1g.10gb", Placement(3, 1))
    return str(tmp_path / "state")


def test_discover_library(state: str) -> None:
    with open_backend(f"sim:{state}") as b:
        inv = discover(b, hostname="cn01")
    assert {"schema", "hostname", "backend", "driver_version", "gpus"} <= set(inv)
    assert (inv["schema"], inv["hostname"], inv["backend"]) == (1, "cn01", f"sim:{state}")
    assert inv["driver_version"] == "550.54.15"
    g0, g1, g2 = inv["gpus"]
    assert set(g0) == GPU_KEYS
    assert g0["model"] == "A100-SXM4-80GB"
    assert (g0["mig_capable"], g0["mig_enabled"], g0["mig_pending"]) == (True, True, True)
    assert g0["pci_device_id"] == "0x20B210DE"
    assert g0["pci_bus_id"] == "00000000:07:00.0"
    assert (g0["minor"], g0["numa_node"], g0["cpu_affinity"]) == (0, 0, "0-15")
    assert g2["numa_node"] == 1 and g2["cpu_affinity"] == "16-31"
    first, second = g0["instances"]
    assert set(first) == INSTANCE_KEYS
    assert (first["profile"], first["placement"], first["gi_id"], first["ci_id"]) == (
        "3g.40gb",
        [4, 4],
        1,
        0,
    )
    assert (first["gi_minor"], first["ci_minor"]) == (12, 13)
    assert first["uuid"].startswith("MIG-")
    assert (second["profile"], second["gi_id"]) == ("1g.10gb", 7)
    assert g1["instances"] == [] and g1["mig_enabled"] is False
    assert g2["model"] is None and g2["mig_capable"] is False
    assert any("GPU 2 (NVIDIA Mystery 9000" in w for w in inv["warnings"])
    text = render_text(inv)
    assert "GPU 2  NVIDIA Mystery 9000 (not in catalogue)" in text
    assert "3g.40gb      placement 4:4  GI 1 CI 0" in text


def test_cli_json(state: str) -> None:
    r = CliRunner().invoke(main, ["discover", "--json", "--backend", f"sim:{state}"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [g["index"] for g in data["gpus"]] == [0, 1, 2]
    assert "warning: GPU 2" in r.stderr and "not in the GPU catalogue" in r.stderr


def test_cli_backend_from_environment(state: str) -> None:
    r = CliRunner().invoke(main, ["discover"], env={"SLURMPOOL_GPU_BACKEND": f"sim:{state}"})
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("node ") and "A100-SXM4-80GB" in r.stdout


def test_cli_no_gpu_or_driver(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["discover", "--backend", f"sim:{tmp_path / 'none'}"])
    assert r.exit_code == 1
    assert "no simulated node" in r.stderr
    assert "use --backend sim:DIR for the simulator" in r.stderr


def test_cli_real_nvml_without_driver() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("a real NVIDIA driver is present")
    except pynvml.NVMLError:
        pass
    r = CliRunner().invoke(main, ["discover", "--backend", "nvml"], env={})
    assert r.exit_code == 1
    assert r.stderr.startswith("error: no NVIDIA driver/GPU found: ")
    assert "use --backend sim:DIR for the simulator" in r.stderr


def test_cli_unknown_backend_is_a_usage_error() -> None:
    r = CliRunner().invoke(main, ["discover", "--backend", "rocm"])
    assert r.exit_code == 2
    assert "unknown GPU backend 'rocm'" in r.stderr


def test_cli_help() -> None:
    r = CliRunner().invoke(main, ["discover", "--help"])
    assert r.exit_code == 0 and "SLURMPOOL_GPU_BACKEND" in r.output
