"""Sandbox pieces that need no Slurm: processes by PID, state file, config text, requirements."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import needs
import pytest
from click.testing import CliRunner

from slurmpool.cli import main
from slurmpool.sandbox import procs
from slurmpool.sandbox.cluster import (
    Sandbox,
    SandboxError,
    SandboxOptions,
    free_port_block,
    host_fences_devices,
    monitord_argv,
    namespace_argv,
    slurmdbd_conf,
    wait_for,
)
from slurmpool.sandbox.hosts import loopback_hosts, machine_names
from slurmpool.sandbox.layout import Layout, SandboxState, load_state
from slurmpool.sandbox.requirements import REQUIRED_PROGRAMS, missing_programs
from slurmpool.sandbox.site import site_slurm_conf
from slurmpool.sandbox.users import login_uid_range, login_users
from slurmpool.slurm.conf import settings
from slurmpool.slurm.runner import Runner


def test_spawn_and_stop_by_pid(tmp_path: Path) -> None:
    d = procs.spawn(
        "sleeper",
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
        tmp_path / "s.log",
        {"PATH": "/usr/bin:/bin"},
    )
    assert procs.is_running(d)
    assert d.start_time is not None
    wait_for("log", lambda: "up" in (tmp_path / "s.log").read_text(), 10)
    report = procs.stop([d], grace_s=5)
    assert report == [f"sleeper (pid {d.pid}): stopped"]
    assert not procs.is_running(d)


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('x', flush=True); time.sleep(60)"
    )
    d = procs.spawn("stubborn", [sys.executable, "-c", code], tmp_path / "s.log", {})
    wait_for("log", lambda: "x" in (tmp_path / "s.log").read_text(), 10)
    report = procs.stop([d], grace_s=0.5)
    assert report == [f"stubborn (pid {d.pid}): killed after 0.5 s"]
    assert not procs.is_running(d)


def test_a_reused_pid_is_not_ours() -> None:
    me = procs.Daemon("me", os.getpid(), procs.process_start_time(os.getpid()), (), "")
    assert procs.is_running(me)
    impostor = procs.Daemon("old", os.getpid(), (me.start_time or 0) + 1, (), "")
    assert not procs.is_running(impostor)
    assert procs.stop([impostor]) == [f"old (pid {os.getpid()}): not running"]


def test_state_round_trip(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    st = SandboxState(
        directory=str(tmp_path),
        cluster="c",
        slurm_conf="/x/slurm.conf",
        policy="p.yaml",
        nodes=["sbx1"],
        partition="pool",
        ports={"slurmctld": 1},
        daemons=[procs.Daemon("munged", 1, 2, ("munged",), "/l")],
        phase="up",
        startup_s=4.2,
    )
    st.save(layout)
    assert load_state(layout) == st
    assert load_state(Layout(tmp_path / "none")) is None


def test_base_conf_is_loopback_with_short_credentials(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    ports = {"slurmctld": 20001, "slurmdbd": 20002, "mariadb": 20003, "slurmd": 20004}
    conf = settings(site_slurm_conf(layout, "sbx", ports, fence_devices=False))
    assert conf["clustername"] == "sbx"
    assert conf["slurmctldhost"] == "localhost(127.0.0.1)"
    assert conf["authinfo"] == f"socket={layout.munge_socket},cred_expire=10"
    assert conf["accountingstoragepass"] == str(layout.munge_socket)
    assert conf["communicationparameters"] == "NoCtldInAddrAny,NoInAddrAny"
    assert conf["slurmdspooldir"].endswith("/%n")
    assert conf["slurmduser"] == "root" and conf["slurmuser"] == "root"
    as_slurm = settings(
        site_slurm_conf(layout, "sbx", ports, fence_devices=False, slurm_user="slurm")
    )
    assert as_slurm["slurmuser"] == "slurm" and as_slurm["slurmduser"] == "root"
    assert settings(slurmdbd_conf(layout, ports, "pw", "slurm"))["slurmuser"] == "slurm"
    assert conf["proctracktype"] == "proctrack/linuxproc"
    assert conf["taskplugin"] == "task/none"
    assert conf["selecttype"] == "select/cons_tres"
    assert conf["slurmdparameters"] == "config_overrides"
    assert conf["prolog"] == str(layout.site_dir / "prolog.sh")
    fenced = settings(site_slurm_conf(layout, "sbx", ports, fence_devices=True))
    assert (fenced["proctracktype"], fenced["taskplugin"]) == ("proctrack/cgroup", "task/cgroup")
    dbd = settings(slurmdbd_conf(layout, ports, "pw"))
    assert dbd["dbdaddr"] == "127.0.0.1" and dbd["storagehost"] == "127.0.0.1"
    assert dbd["storageport"] == "20003" and dbd["authinfo"] == f"socket={layout.munge_socket}"


def test_devices_are_fenced_where_the_cgroup_v1_devices_controller_is(tmp_path: Path) -> None:
    assert not host_fences_devices(tmp_path)
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "devices.deny").touch()
    assert host_fences_devices(tmp_path)


def test_namespace_argv_keeps_arguments_as_data(tmp_path: Path) -> None:
    r = Runner(search_path=["/usr/bin", "/bin"])
    argv = namespace_argv(r, [(tmp_path / "a b", tmp_path / "c")], ["slurmd", "-N", "x; rm -rf /"])
    assert argv[:5] == [r.which("unshare"), "--mount", "--propagation", "private", "--"]
    assert argv[-6:] == [
        str(tmp_path / "a b"),
        str(tmp_path / "c"),
        "--",
        "slurmd",
        "-N",
        "x; rm -rf /",
    ]


def test_free_port_block_is_free_and_consecutive() -> None:
    ports = free_port_block(5)
    assert ports == list(range(ports[0], ports[0] + 5))
    # Below the kernel's ephemeral range, which outgoing connections take ports from.
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert ports[-1] < int(f.read().split()[0])
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_missing_programs_name_the_packages(tmp_path: Path) -> None:
    missing = missing_programs(Runner(search_path=[str(tmp_path)]))
    assert set(missing.programs) == set(REQUIRED_PROGRAMS)
    msg = missing.message()
    assert "apt-get install" in msg
    for pkg in ("slurmctld", "slurmd", "slurm-client", "slurmdbd", "munge", "mariadb-server"):
        assert pkg in msg.split("apt-get install", 1)[1].split()
    with pytest.raises(SandboxError, match="apt-get install"):
        Sandbox(tmp_path / "sbx", Runner(search_path=[str(tmp_path)])).up(
            SandboxOptions(directory=tmp_path / "sbx")
        )


def test_wait_for_reports_a_dead_daemon() -> None:
    with pytest.raises(SandboxError, match="the daemon exited"):
        wait_for("x", lambda: False, 5, alive=lambda: False)
    with pytest.raises(SandboxError, match=r"not ready after 0\.2 s"):
        wait_for("x", lambda: False, 0.2)


def test_cli_without_a_sandbox(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["sandbox", "status", "--dir", str(tmp_path / "none")])
    assert res.exit_code == 1 and "no sandbox in" in res.output
    res = runner.invoke(main, ["sandbox", "env", "--dir", str(tmp_path / "none")])
    assert res.exit_code == 1 and "slurmpool sandbox up" in res.output
    res = runner.invoke(main, ["sandbox", "down", "--dir", str(tmp_path / "none")])
    assert res.exit_code == 0 and "no sandbox" in res.output
    res = runner.invoke(
        main, ["sandbox", "status"], env={"SLURMPOOL_SANDBOX_DIR": str(tmp_path / "e")}
    )
    assert str(tmp_path / "e") in res.output


def test_monitord_runs_as_the_installed_unit_on_its_own_port() -> None:
    argv = monitord_argv(
        "/opt/slurmpool/bin/python",
        None,
        node_config="/sbx/etc/node-config.json",
        node="sbx2",
        port=20001,
        interval_s=0.5,
        settle_s=25,
        repair_s=2,
    )
    assert argv[:6] == [
        "/opt/slurmpool/bin/python",
        "-I",
        "-m",
        "slurmpool",
        "monitord",
        "--node-config",
    ]
    assert argv[argv.index("--node") + 1] == "sbx2"
    assert argv[argv.index("--port") + 1] == "20001"
    assert argv[argv.index("--address") + 1] == "127.0.0.1"
    assert argv[argv.index("--interval") + 1] == "0.5"
    assert argv[argv.index("--settle") + 1] == "25"
    assert argv[argv.index("--repair-interval") + 1] == "2"
    # slurmpool from source: PYTHONPATH kept, so no -I (which would drop it).
    src = monitord_argv(
        "/usr/bin/python3",
        "/src:/sbx/pylib",
        node_config="c",
        node="n",
        port=1,
        interval_s=2,
        settle_s=90,
    )
    assert src[:3] == ["/usr/bin/env", "PYTHONPATH=/src:/sbx/pylib", "/usr/bin/python3"]
    assert "-I" not in src


def test_daemons_see_the_machine_names_on_loopback() -> None:
    debian = (
        "127.0.0.1\tlocalhost\n"
        "127.0.1.1\tvm.example.org vm\n"
        "# The following lines are desirable for IPv6 capable hosts\n"
        "::1     localhost ip6-localhost ip6-loopback\n"
        "10.1.2.3 login1 VM  # the LAN name\n"
    )
    text = loopback_hosts(debian, ["vm.example.org", "vm"])
    lines = text.splitlines()
    assert lines[0] == "127.0.0.1 localhost vm.example.org vm"
    # The names leave every other line (case-insensitively); other entries and comments stay.
    assert "127.0.1.1" not in text
    assert "::1 ip6-localhost ip6-loopback" in lines
    assert "10.1.2.3 login1  # the LAN name" in lines
    assert "# The following lines are desirable for IPv6 capable hosts" in lines
    assert loopback_hosts("", ["vm"]) == "127.0.0.1 localhost vm\n"


def test_every_slurm_daemon_gets_the_loopback_hosts_file(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    hosts = (layout.etc_hosts, Path("/etc/hosts"))
    assert layout.daemon_binds == [hosts]
    assert hosts in layout.host_binds("sbx1")
    assert (tmp_path / "hosts" / "sbx1" / "state", layout.node_root / "state") in (
        layout.host_binds("sbx1")
    )


def test_machine_names_include_the_short_name() -> None:
    names = machine_names()
    assert names[0] == os.uname().nodename
    assert names[-1] == os.uname().nodename.split(".")[0]


def test_a_start_failure_shows_the_daemons_own_log(tmp_path: Path) -> None:
    sandbox = Sandbox(tmp_path / "sbx", Runner())
    env = {"PATH": "/usr/bin:/bin"}
    dead = procs.spawn(
        "slurmd-sbx1",
        ["/bin/sh", "-c", "echo 'fatal: no such port' >&2; exit 1"],
        tmp_path / "dead.log",
        env,
    )
    wait_for("exit", lambda: not procs.is_running(dead), 10)
    message = str(sandbox._fail("slurmd -N sbx1", dead))
    assert message.startswith(f"slurmd -N sbx1 failed to start (pid {dead.pid}")
    assert "fatal: no such port" in message
    alive = procs.spawn("slurmdbd", ["sleep", "60"], tmp_path / "alive.log", env)
    try:
        message = str(sandbox._fail("slurmdbd", alive, probe="sacctmgr: connection refused"))
    finally:
        procs.stop([alive], grace_s=5)
    assert message.startswith(f"slurmdbd started (pid {alive.pid}) but did not become ready")
    assert "sacctmgr: connection refused" in message


def test_login_users_are_root_and_the_people_range() -> None:
    defs = "# comment\nUID_MIN\t\t\t 2000\nUID_MAX  3000 # people\nSYS_UID_MAX 999\n"
    assert login_uid_range(defs) == (2000, 3000)
    assert login_uid_range("UID_MIN lots\n") == (1000, 60000)
    entries = [("root", 0), ("daemon", 1), ("zoe", 2500), ("al", 2000), ("nobody", 65534)]
    entries += [("al", 2000), ("big", 3001)]
    assert login_users(entries, (2000, 3000)) == ["root", "al", "zoe"]


def test_add_user_refuses_a_user_that_does_not_exist(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["sandbox", "add-user", "--dir", str(tmp_path), "root", "sp-no-such-user"]
    )
    assert res.exit_code == 1
    assert "no such Unix user: sp-no-such-user" in res.output


def test_what_a_namespace_leader_leaves_behind_is_found_by_namespace(tmp_path: Path) -> None:
    needs.root("a private mount namespace")
    unshare = needs.program("unshare")
    # Like slurmd and its slurmstepd: the leader starts a process that outlives it.
    leader = procs.spawn(
        "slurmd-x",
        [
            unshare,
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            "sleep 300 & echo $! > left.pid; exec sleep 300",
        ],
        tmp_path / "leader.log",
        {"PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    wait_for(
        "child",
        lambda: (
            (tmp_path / "left.pid").is_file() and (tmp_path / "left.pid").read_text().strip() != ""
        ),
        10,
    )
    left_pid = int((tmp_path / "left.pid").read_text())
    fd = procs.hold_mount_namespace(leader)
    assert fd is not None
    try:
        procs.stop([leader], grace_s=5)
        left = procs.processes_in([fd])
        assert [d.pid for d in left] == [left_pid]
        assert left[0].argv == ("sleep", "300")
        # This process, outside that namespace, is never among them.
        assert os.getpid() not in [d.pid for d in left]
        assert procs.stop(left, grace_s=5) == [f"sleep (pid {left_pid}): stopped"]
        assert procs.processes_in([fd]) == []
    finally:
        os.close(fd)
    assert procs.hold_mount_namespace(leader) is None


def test_down_removes_the_nodes_empty_cgroups(tmp_path: Path) -> None:
    from slurmpool.sandbox.cluster import remove_node_cgroups

    job = tmp_path / "devices" / "slurm_sbx1" / "uid_0" / "job_3"
    job.mkdir(parents=True)
    (tmp_path / "memory" / "slurm_sbx2").mkdir(parents=True)
    other = tmp_path / "devices" / "slurm_prod1"
    other.mkdir()
    assert remove_node_cgroups(["sbx1", "sbx2"], tmp_path) == []
    assert not (tmp_path / "devices" / "slurm_sbx1").exists()
    assert not (tmp_path / "memory" / "slurm_sbx2").exists()
    assert other.is_dir()  # another slurmd's
