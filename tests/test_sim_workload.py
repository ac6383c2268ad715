"""The simulated CUDA workload: device selection, permissions, registration, OOM."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest

import slurmpool
from slurmpool.driver.compute import COMPUTE_EXCLUSIVE_PROCESS, COMPUTE_PROHIBITED
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
from slurmpool.sim.devices import cap_path
from slurmpool.sim.node import create_node
from slurmpool.sim.processes import (
    attach_process,
    detach_process,
)
from slurmpool.sim.state import SimDeviceBusy, StateStore
from slurmpool.sim.workload import EXIT_NO_DEVICE, EXIT_OOM, EXIT_PERMISSION, visible_devices

REPO = str(Path(slurmpool.__file__).resolve().parent.parent)


def _env(state: str | Path, cvd: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update({"SLURMPOOL_SIM_STATE": str(state), "PYTHONPATH": REPO, **extra})
    if cvd is not None:
        env["CUDA_VISIBLE_DEVICES"] = cvd
    return env


def _workload(*args: str) -> list[str]:
    return [sys.executable, "-m", "slurmpool.sim.workload", *args]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, NvmlBackend]]:
    create_node(
        tmp_path / "state",
        tmp_path / "dev",
        [("A100-SXM4-80GB", True), ("A100-SXM4-40GB", False), ("H100-SXM5-80GB", True)],
    )
    with open_backend(f"sim:{tmp_path / 'state'}") as b:
        yield tmp_path / "state", b


# -- CUDA_VISIBLE_DEVICES -------------------------------------------------------------


def test_visible_devices_parsing(node: tuple[Path, NvmlBackend]) -> None:
    state_dir, b = node
    a = b.create_instance(0, "1g.10gb", Placement(6, 1))
    c = b.create_instance(0, "3g.40gb", Placement(0, 4))
    st = StateStore(state_dir).read()
    gpu1 = b.gpu(1).uuid
    gpu2 = b.gpu(2).uuid

    def uuids(value: str | None) -> list[str]:
        return [d.uuid for d in visible_devices(value, st)]

    assert uuids(None) == [c.uuid, a.uuid, gpu1]  # MIG devices by GI id; GPU 2 has none
    assert uuids("1") == [gpu1]
    assert uuids("0") == [c.uuid, a.uuid]  # a MIG-enabled GPU stands for its MIG devices
    assert uuids(gpu1) == [gpu1]
    assert uuids(gpu1[:12]) == [gpu1]  # unique prefix
    assert uuids(f"{a.uuid},1") == [a.uuid, gpu1]
    assert uuids(f"MIG-{b.gpu(0).uuid}/{a.gi_id}/{a.ci_id}") == [a.uuid]  # legacy form
    assert uuids("1,bogus,0") == [gpu1]  # parsing stops at the first invalid entry
    assert uuids("7") == []
    assert uuids("") == []
    assert uuids("2") == []
    assert uuids(f"{gpu2}") == []
    assert visible_devices(a.uuid, st)[0].gi_id == a.gi_id


# -- running it -----------------------------------------------------------------------


def test_runs_registers_and_deregisters(node: tuple[Path, NvmlBackend]) -> None:
    state_dir, b = node
    inst = b.create_instance(0, "2g.20gb", Placement(0, 2))
    assert inst.uuid is not None
    p = subprocess.Popen(
        _workload("--util", "60", "--mem-mib", "4000", "--seconds", "0"),
        env=_env(state_dir, inst.uuid),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline()
        assert "running" in line and inst.uuid in line
        [proc] = b.processes(0, inst.gi_id)
        assert (proc.pid, proc.used_memory_mib, proc.gi_id, proc.ci_id) == (
            p.pid,
            4000,
            inst.gi_id,
            0,
        )
        assert inst.gi_id == 3  # a quarter of the board: swizzId 3..6
        assert b.instance_memory(0, inst.gi_id).used_mib == 4000
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=20) == 128 + signal.SIGTERM
    finally:
        p.kill()
        p.wait()
    assert b.processes(0) == []


def test_sigkill_deregisters_by_dead_pid_pruning(node: tuple[Path, NvmlBackend]) -> None:
    state_dir, b = node
    p = subprocess.Popen(
        _workload("--util", "30", "--mem-mib", "100", "--seconds", "0"),
        env=_env(state_dir, "1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert "running" in p.stdout.readline()
    assert [x.pid for x in b.processes(1)] == [p.pid]
    assert b.utilization(1) == 30
    p.kill()
    p.wait()
    assert b.processes(1) == []
    assert b.utilization(1) == 0


def test_finishes_after_seconds(node: tuple[Path, NvmlBackend]) -> None:
    state_dir, b = node
    out = subprocess.run(
        _workload("--seconds", "0.1"), env=_env(state_dir, "1"), capture_output=True, timeout=30
    )
    assert out.returncode == 0
    assert b.processes(1) == []


def test_runs_until_its_release_file_exists(node: tuple[Path, NvmlBackend], tmp_path: Path) -> None:
    state_dir, b = node
    release = tmp_path / "release"
    p = subprocess.Popen(
        _workload("--until-file", str(release), "--seconds", "0.01"),
        env=_env(state_dir, "1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert "running" in p.stdout.readline()  # attached: it now waits for the file alone
    assert p.poll() is None and [x.pid for x in b.processes(1)] == [p.pid]
    release.touch()
    assert p.wait(timeout=30) == 0
    assert b.processes(1) == []


def test_memory_beyond_device_is_refused_like_cuda_oom(node: tuple[Path, NvmlBackend]) -> None:
    state_dir, b = node
    out = subprocess.run(
        _workload("--mem-mib", "50000", "--seconds", "0.1"),
        env=_env(state_dir, "1"),  # a 40 GB board
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == EXIT_OOM
    assert "out of memory" in out.stderr and "40960 MiB" in out.stderr
    inst = b.create_instance(0, "1g.10gb", Placement(3, 1))
    out = subprocess.run(
        _workload("--mem-mib", "11000", "--seconds", "0.1"),
        env=_env(state_dir, inst.uuid),  # an instance's memory, not the board's
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == EXIT_OOM


def _set_compute_mode(state_dir: Path, index: int, mode: int) -> None:
    with StateStore(state_dir).transaction() as st:
        st["gpus"][index]["compute_mode"] = mode


def test_an_exclusive_process_gpu_refuses_a_second_context(
    node: tuple[Path, NvmlBackend], tmp_path: Path
) -> None:
    """EXCLUSIVE_PROCESS: a second CUDA process on the GPU fails as CUDA's "busy or
    unavailable" while the first holds it, and runs once it is gone."""
    state_dir, b = node
    _set_compute_mode(state_dir, 1, COMPUTE_EXCLUSIVE_PROCESS)

    def run_briefly() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _workload("--mem-mib", "100", "--seconds", "0.1"),
            env=_env(state_dir, "1"),
            capture_output=True,
            text=True,
            timeout=30,
        )

    release = tmp_path / "release"
    first = subprocess.Popen(
        _workload("--mem-mib", "100", "--until-file", str(release)),
        env=_env(state_dir, "1"),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and "running" in first.stdout.readline()
        second = run_briefly()
        assert second.returncode == EXIT_NO_DEVICE
        assert "all CUDA-capable devices are busy or unavailable" in second.stderr
        assert f"held by pid {first.pid}" in second.stderr
        assert [p.pid for p in b.processes(1)] == [first.pid]
    finally:
        release.touch()
        first.wait(timeout=30)
    again = run_briefly()
    assert again.returncode == 0, again.stderr


def test_contexts_under_each_compute_mode(node: tuple[Path, NvmlBackend], tmp_path: Path) -> None:
    """The clients of an MPS server share its one context, so EXCLUSIVE_PROCESS admits
    any number of them and no process outside MPS beside them (nor them beside one),
    nor a second server's clients; PROHIBITED admits none; a MIG device counts its
    own contexts."""
    state_dir, b = node
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    server, a, c, d = (p.pid for p in sleepers)
    try:

        def attach(pid: int, gpu: int = 1, gi: int | None = None, *, ctx: int | None) -> None:
            ci = None if gi is None else 0
            attach_process(state_dir, gpu, gi, ci, pid=pid, used_mib=10, util=1, context=ctx)

        _set_compute_mode(state_dir, 1, COMPUTE_EXCLUSIVE_PROCESS)
        attach(server, ctx=server)
        attach(a, ctx=server)
        attach(c, ctx=server)
        with pytest.raises(SimDeviceBusy, match=f"held by MPS server {server}"):
            attach(d, ctx=None)
        with pytest.raises(SimDeviceBusy, match=f"held by MPS server {server}"):
            attach(d, ctx=d)  # a second MPS server (a job's own daemon) is refused too
        for pid in (server, a, c):
            detach_process(state_dir, pid)
        attach(d, ctx=None)
        with pytest.raises(SimDeviceBusy, match=f"held by pid {d}"):
            attach(server, ctx=server)  # a context outside MPS keeps the server out
        detach_process(state_dir, d)

        _set_compute_mode(state_dir, 1, COMPUTE_PROHIBITED)
        with pytest.raises(SimDeviceBusy, match="PROHIBITED"):
            attach(server, ctx=server)

        one = b.create_instance(0, "1g.10gb", Placement(0, 1))
        two = b.create_instance(0, "1g.10gb", Placement(1, 1))
        _set_compute_mode(state_dir, 0, COMPUTE_EXCLUSIVE_PROCESS)
        attach(a, 0, one.gi_id, ctx=None)
        attach(c, 0, two.gi_id, ctx=None)
        with pytest.raises(SimDeviceBusy):
            attach(d, 0, one.gi_id, ctx=None)
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


@pytest.mark.parametrize("cvd", ["", "9", "2", "MIG-nonexistent"], ids=str)
def test_no_device(node: tuple[Path, NvmlBackend], cvd: str) -> None:
    state_dir, _b = node
    out = subprocess.run(_workload(), env=_env(state_dir, cvd), capture_output=True, text=True)
    assert out.returncode == EXIT_NO_DEVICE
    assert "no CUDA-capable device" in out.stderr


def test_missing_state_dir_is_a_usage_error(tmp_path: Path) -> None:
    env = _env("", "0")
    del env["SLURMPOOL_SIM_STATE"]
    out = subprocess.run(_workload(), env=env, capture_output=True, text=True)
    assert out.returncode == 2 and "SLURMPOOL_SIM_STATE" in out.stderr


def test_unreadable_gpu_node_is_refused_for_this_user(node: tuple[Path, NvmlBackend]) -> None:
    # As root os.access always grants read/write, so only the MIG path is checked by nobody below.
    state_dir, _b = node
    if os.geteuid() == 0:
        pytest.skip("root can open any device node; see the runuser tests")
    dev = Path(StateStore(state_dir).read()["device_root"]) / "nvidia1"
    dev.chmod(0o600)
    out = subprocess.run(_workload(), env=_env(state_dir, "1"), capture_output=True, text=True)
    assert out.returncode == EXIT_PERMISSION


# -- permissions, as an unprivileged user -----------------------------------------------


@contextlib.contextmanager
def _shared(modify_device_files: bool) -> Iterator[tuple[Path, NvmlBackend, str]]:
    py, _path = needs.python_for_jobs()  # _env() puts the source on PYTHONPATH
    top = Path(tempfile.mkdtemp(prefix="slurmpool-sim-"))
    try:
        top.chmod(0o755)  # pytest's tmp_path is private to root
        create_node(
            top / "state",
            top / "dev",
            [("A100-SXM4-80GB", True), ("T4-16GB", False)],
            modify_device_files=modify_device_files,
        )
        with open_backend(f"sim:{top / 'state'}") as b:
            yield top / "state", b, py
    finally:
        shutil.rmtree(top)


@pytest.fixture
def shared_node() -> Iterator[tuple[Path, NvmlBackend, str]]:
    """A node whose driver leaves device nodes alone (NVreg_ModifyDeviceFiles=0)."""
    with _shared(modify_device_files=False) as node:
        yield node


@pytest.fixture
def default_driver_node() -> Iterator[tuple[Path, NvmlBackend, str]]:
    """A node whose driver has its default NVreg_ModifyDeviceFiles=1."""
    with _shared(modify_device_files=True) as node:
        yield node


def _as_nobody(py: str, state: Path, cvd: str) -> subprocess.CompletedProcess[str]:
    env = _env(state, cvd)
    cmd = ["runuser", "-u", "nobody", "--", "env"]
    cmd += [f"{k}={env[k]}" for k in ("PYTHONPATH", "SLURMPOOL_SIM_STATE", "CUDA_VISIBLE_DEVICES")]
    cmd += [py, "-m", "slurmpool.sim.workload", "--seconds", "0.1", "--mem-mib", "10"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/")


def test_nobody_can_use_a_gpu_whose_node_is_world_accessible(
    shared_node: tuple[Path, NvmlBackend, str],
) -> None:
    state, _b, py = shared_node
    out = _as_nobody(py, state, "1")
    assert out.returncode == 0, out.stderr


def test_nobody_is_refused_a_gpu_whose_node_they_cannot_open(
    shared_node: tuple[Path, NvmlBackend, str],
) -> None:
    state, _b, py = shared_node
    dev = Path(StateStore(state).read()["device_root"])
    (dev / "nvidia1").chmod(0o600)
    out = _as_nobody(py, state, "1")
    assert out.returncode == EXIT_PERMISSION
    assert f"cannot open {dev / 'nvidia1'}" in out.stderr


def test_mig_capabilities_decide_who_may_use_an_instance(
    shared_node: tuple[Path, NvmlBackend, str],
) -> None:
    state, b, py = shared_node
    inst = b.create_instance(0, "3g.40gb", Placement(4, 4))
    assert inst.uuid is not None
    dev = Path(StateStore(state).read()["device_root"])
    assert inst.gi_minor is not None and inst.ci_minor is not None
    gi_node, ci_node = cap_path(dev, inst.gi_minor), cap_path(dev, inst.ci_minor)

    out = _as_nobody(py, state, inst.uuid)  # default 0400 root: refused
    assert out.returncode == EXIT_PERMISSION
    assert f"cannot read {gi_node} (GPU instance capability" in out.stderr

    nobody = 65534
    os.chown(gi_node, nobody, -1)
    out = _as_nobody(py, state, inst.uuid)
    assert out.returncode == EXIT_PERMISSION
    assert f"cannot read {ci_node} (compute instance capability" in out.stderr

    os.chown(ci_node, nobody, -1)
    out = _as_nobody(py, state, inst.uuid)
    assert out.returncode == 0, out.stderr
    assert b.processes(0) == []  # deregistered on exit


def test_the_drivers_default_lets_any_user_reset_a_capability_node(
    default_driver_node: tuple[Path, NvmlBackend, str],
) -> None:
    """With NVreg_ModifyDeviceFiles=1 libcuda runs the setuid nvidia-modprobe -f,
    which makes the capability node root's at the advertised 0444: the node's
    owner and mode keep no one out, only a device cgroup could."""
    state, b, py = default_driver_node
    inst = b.create_instance(0, "3g.40gb", Placement(4, 4))
    assert inst.uuid is not None and inst.gi_minor is not None and inst.ci_minor is not None
    dev = Path(StateStore(state).read()["device_root"])
    for minor in (inst.gi_minor, inst.ci_minor):
        st = cap_path(dev, minor).stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o400)  # root's alone

    out = _as_nobody(py, state, inst.uuid)
    assert out.returncode == 0, out.stderr
    assert b.processes(0) == []


def test_an_open_the_cgroup_lets_through_is_not_a_denial(tmp_path: Path) -> None:
    # A regular file stands in for a node without root; a mknod'd node has no driver
    # behind it (ENXIO).  Only EPERM, the device cgroup's answer, is the cgroup's
    # refusal: the sandbox's integration tests see that one under ConstrainDevices.
    from slurmpool.sim.devices import NVIDIA_MAJOR, make_node
    from slurmpool.sim.workload import open_refusal

    node = tmp_path / "nvidia0"
    make_node(node, NVIDIA_MAJOR, 0, 0o666)
    assert open_refusal(node, os.O_RDWR) is None
    assert open_refusal(tmp_path / "nvidia9", os.O_RDWR) == "permission"  # no such node
