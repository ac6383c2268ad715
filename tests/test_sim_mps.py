"""The simulated MPS control daemon and the workload as its client: a server's limits
hold whatever the client's environment asks; one user's server at a time."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import needs
import pytest
from polling import poll

import slurmpool
from slurmpool.driver.compute import COMPUTE_EXCLUSIVE_PROCESS
from slurmpool.gpu.select import open_backend
from slurmpool.sim.mps import MpsError, client_limits, parse_mib
from slurmpool.sim.node import create_node
from slurmpool.sim.workload import EXIT_NO_DEVICE, EXIT_OOM

REPO = str(Path(slurmpool.__file__).resolve().parent.parent)


def test_memory_limits_in_mib() -> None:
    assert [parse_mib(v) for v in ("500", "500M", "2G", "1t")] == [500, 500, 2048, 1048576]
    with pytest.raises(MpsError, match="expected a number with M, G or T"):
        parse_mib("2GB")


def test_the_limits_a_client_asks_for_in_its_environment() -> None:
    env = {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "150",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "1=1G,0=3G",
    }
    assert client_limits(env) == (100, 3072)
    assert client_limits({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "x"}) == (None, None)
    assert client_limits({}) == (None, None)


@dataclass
class MpsNode:
    top: Path
    py: str
    gpus: list[str]  # GPU UUIDs, by index
    pipe: Path

    def env(self, **more: str) -> dict[str, str]:
        return {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": REPO,
            "SLURMPOOL_SIM_STATE": str(self.top / "state"),
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe),
            **more,
        }

    def control(self, *lines: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
        argv = [self.py, "-m", "slurmpool.sim.mps"]
        if user is not None:
            argv = [needs.program("runuser"), "-u", user, "--", *argv]
        return subprocess.run(
            argv,
            input="\n".join(lines) + "\n",
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )

    def workload(self, *args: str, user: str | None = None, **env: str) -> list[str]:
        argv = [self.py, "-m", "slurmpool.sim.workload", "--mem-mib", "1000", *args]
        if user is None:
            return argv
        pairs = [f"{k}={v}" for k, v in self.env(**env).items()]
        return [needs.program("runuser"), "-u", user, "--", "env", "-i", *pairs, *argv]

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.workload(*args),
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )

    @property
    def log(self) -> str:
        path = self.top / "log" / "control.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture
def mps_node() -> Iterator[MpsNode]:
    """A simulated node of two whole GPUs, an MPS control daemon serving GPU 1."""
    needs.root("the daemon starts servers as their users")
    py, _path = needs.python_for_jobs()
    top = Path(tempfile.mkdtemp(prefix="slurmpool-mps-"))
    top.chmod(0o755)  # the unprivileged user reaches the state and the pipe directory
    create_node(top / "state", top / "dev", [("T4-16GB", False), ("T4-16GB", False)])
    with open_backend(f"sim:{top / 'state'}") as b:
        gpus = [b.gpu(i).uuid for i in range(2)]
    node = MpsNode(top, py, gpus, top / "pipe")
    start = subprocess.run(
        [py, "-m", "slurmpool.sim.mps", "-d"],
        env=node.env(CUDA_VISIBLE_DEVICES=gpus[1], CUDA_MPS_LOG_DIRECTORY=str(top / "log")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert start.returncode == 0, start.stderr
    try:
        yield node
    finally:
        node.control("quit")
        shutil.rmtree(top)


def _mps_line(text: str) -> tuple[int, int, str]:
    m = re.search(r"mps: server (\d+), active threads (\d+)%, pinned memory limit (.*)", text)
    assert m is not None, text
    return int(m.group(1)), int(m.group(2)), m.group(3)


def test_a_client_gets_its_servers_limits_whatever_its_environment_asks(mps_node: MpsNode) -> None:
    node = mps_node
    set_defaults = node.control(
        "set_default_active_thread_percentage 25", "set_default_device_pinned_mem_limit 0 4G"
    )
    assert set_defaults.returncode == 0, set_defaults.stderr
    greedy = {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=16G",
    }
    out = node.run("--util", "90", "--seconds", "0.1", **greedy)
    assert out.returncode == 0, out.stderr
    server, threads, pinned = _mps_line(out.stdout)
    assert (threads, pinned) == (25, "4096 MiB")
    assert f"on GPU 1 ({node.gpus[1]}), util 25%" in out.stdout  # the daemon's GPU, held to 25%
    assert node.control("get_server_list").stdout.split() == [str(server)]

    over = node.run("--seconds", "0.1", "--mem-mib", "5000", **greedy)
    assert over.returncode == EXIT_OOM
    assert "the MPS pinned device memory limit is 4096 MiB" in over.stderr

    modest = node.run("--seconds", "0.1", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="10")
    assert _mps_line(modest.stdout)[1] == 10  # the environment may lower the limit

    # A running server's new limit holds for the clients that come after.
    assert node.control(f"set_active_thread_percentage {server} 50").returncode == 0
    assert node.control(f"get_active_thread_percentage {server}").stdout.strip() == "50"
    again = node.run("--seconds", "0.1", **greedy)
    assert _mps_line(again.stdout)[:2] == (server, 50)


def test_only_root_changes_a_servers_limits(mps_node: MpsNode) -> None:
    node = mps_node
    assert node.run("--seconds", "0.1").returncode == 0
    [server] = node.control("get_server_list").stdout.split()
    refused = node.control(f"set_active_thread_percentage {server} 100", user="nobody")
    assert refused.returncode == 1
    assert "permission denied" in refused.stderr
    assert node.control("quit", user="nobody").returncode == 1
    assert node.control("get_server_list").stdout.split() == [server]  # still there


def test_a_client_sees_only_the_daemons_gpu(mps_node: MpsNode, tmp_path: Path) -> None:
    node = mps_node
    other = node.run("--seconds", "0.1", CUDA_VISIBLE_DEVICES=node.gpus[0])
    assert other.returncode == EXIT_NO_DEVICE
    assert f"serves {node.gpus[1]}" in other.stderr
    # Without a daemon in its pipe directory a client runs without MPS.
    alone = node.run("--seconds", "0.1", CUDA_MPS_PIPE_DIRECTORY=str(tmp_path))
    assert alone.returncode == 0 and "mps:" not in alone.stdout


def test_another_users_client_waits_for_the_servers_clients(mps_node: MpsNode) -> None:
    node = mps_node
    release = node.top / "release"
    first = subprocess.Popen(
        node.workload("--until-file", str(release)),
        env=node.env(),
        stdout=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    second = None
    try:
        assert first.stdout is not None
        root_server = _mps_line(first.stdout.readline())[0]
        second = subprocess.Popen(
            node.workload("--seconds", "0.1", user="nobody"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        poll("the second user's client to wait", lambda: "waits" in node.log)
        assert second.poll() is None  # held while root's client runs
        release.touch()
        out, err = second.communicate(timeout=60)
        assert second.returncode == 0, err
        nobody_server = _mps_line(out)[0]
        assert nobody_server != root_server
        assert not os.path.exists(f"/proc/{root_server}")  # root's server stopped first
    finally:
        release.touch()
        first.wait(60)
        if second is not None and second.poll() is None:
            second.kill()
            second.wait()


def _exclusive(node: MpsNode, index: int = 1) -> None:
    with open_backend(f"sim:{node.top / 'state'}") as b:
        b.set_compute_mode(index, COMPUTE_EXCLUSIVE_PROCESS)


def _held(node: MpsNode, release: Path, **env: str) -> subprocess.Popen[str]:
    """A workload on GPU 1 that runs until ``release`` exists; returns once it runs."""
    proc = subprocess.Popen(
        node.workload("--until-file", str(release)),
        env=node.env(CUDA_VISIBLE_DEVICES=node.gpus[1], **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "running:" in line or "mps:" in line, proc.stderr.read() if proc.stderr else line
    return proc


def test_the_mps_server_holds_the_exclusive_context(mps_node: MpsNode) -> None:
    """On an EXCLUSIVE_PROCESS GPU the server is the one context: its clients share it, a
    process that steers around the daemon is refused, and stays refused once the
    clients have gone, for the server stays."""
    node = mps_node
    _exclusive(node)
    release = node.top / "release"
    outside = {"CUDA_MPS_PIPE_DIRECTORY": str(node.top / "elsewhere")}
    outside["CUDA_VISIBLE_DEVICES"] = node.gpus[1]
    client = _held(node, release)
    try:
        [server] = node.control("get_server_list").stdout.split()
        with open_backend(f"sim:{node.top / 'state'}") as b:
            pids = {p.pid for p in b.processes(1)}
        assert int(server) in pids and client.pid in pids
        second = node.run("--seconds", "0.1")  # another client of the same server
        assert second.returncode == 0, second.stderr
        around = node.run("--seconds", "0.1", **outside)
        assert around.returncode == EXIT_NO_DEVICE
        held = f"(GPU 1: compute mode EXCLUSIVE_PROCESS, held by MPS server {server})"
        assert f"busy or unavailable {held}" in around.stderr
    finally:
        release.touch()
        client.wait(60)
    later = node.run("--seconds", "0.1", **outside)
    assert later.returncode == EXIT_NO_DEVICE and f"MPS server {server}" in later.stderr


def test_a_context_outside_mps_keeps_the_server_out(mps_node: MpsNode) -> None:
    """A process that took the exclusive context before any server: no server starts, so
    every client fails (what the prolog must never let happen to share holders)."""
    node = mps_node
    _exclusive(node)
    release = node.top / "release"
    squatter = _held(node, release, CUDA_MPS_PIPE_DIRECTORY=str(node.top / "elsewhere"))
    try:
        out = node.run("--seconds", "0.1")
        assert out.returncode == EXIT_NO_DEVICE
        assert "could not create its context" in out.stderr and f"pid {squatter.pid}" in out.stderr
        refused = node.control("start_server -uid 0")
        assert refused.returncode == 1 and "busy or unavailable" in refused.stderr
        assert node.control("get_server_list").stdout.strip() == ""
        assert "failed to start" in node.log
    finally:
        release.touch()
        squatter.wait(60)
    assert node.run("--seconds", "0.1").returncode == 0  # the GPU is free: the server starts
