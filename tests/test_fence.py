"""The per-job devices cgroup that denies other jobs' MIG capability devices.

The pure parts (which minors, which rules, which cgroup) everywhere; the hooks
against the machine's own cgroup v1 devices controller where it has one: a
process put in the job's cgroup opens its own capability nodes (ENXIO: the
simulated node has no driver behind it) and is refused every other (EPERM).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import needs
import pytest
from pooling_env import Pool, make_pool

from slurmpool.driver.mig_minors import parse_mig_minors
from slurmpool.pooling import fence
from slurmpool.sim.devices import CAPS_MAJOR, ci_minor, gi_minor, mig_minors_text
from slurmpool.state.store import ACTIVE, RELEASED

DEVICES = Path("/sys/fs/cgroup/devices")


def test_capability_minors_are_every_gi_and_ci_of_the_named_gpus() -> None:
    table = parse_mig_minors(mig_minors_text(4))
    got = fence.capability_minors(table, [1, 3])
    assert len(got) == 2 * 15 * 9  # 15 GPU instances, each with 8 compute instances
    assert gi_minor(1, 0) in got and ci_minor(3, 14, 7) in got
    assert gi_minor(0, 0) not in got and gi_minor(2, 5) not in got
    assert table.config not in got and table.monitor not in got


def test_rules_are_one_char_device_minor_each() -> None:
    assert fence.deny_rules(511, [67, 3]) == ["c 511:3 rwm", "c 511:67 rwm"]


def test_the_job_cgroup_names_the_node_uid_and_job() -> None:
    got = fence.job_cgroup("/sys/fs/cgroup/devices/slurm_%n", "n1", 1000, "42")
    assert got == "/sys/fs/cgroup/devices/slurm_n1/uid_1000/job_42"
    with pytest.raises(fence.FenceError, match="not a number"):
        fence.job_cgroup("/cg/slurm", "n1", 1000, "42/../../x")


def test_the_controller_is_where_devices_deny_is(tmp_path: Path) -> None:
    template = str(tmp_path / "devices" / "slurm_%n")
    assert not fence.controller_mounted(template, "n1")
    (tmp_path / "devices").mkdir()
    (tmp_path / "devices" / "devices.deny").touch()
    assert fence.controller_mounted(template, "n1")


def test_apply_writes_each_rule_apart_and_remove_spares_a_used_cgroup(tmp_path: Path) -> None:
    cgroup = tmp_path / "slurm" / "uid_1" / "job_2"
    cgroup.mkdir(parents=True)
    (cgroup / "devices.deny").touch()
    assert fence.apply(str(cgroup), ["c 511:3 rwm", "c 511:4 rwm"]) == 2
    assert (cgroup / "devices.deny").read_text() == "c 511:3 rwmc 511:4 rwm"
    assert fence.remove(str(cgroup)) is False  # not empty: in use
    (cgroup / "devices.deny").unlink()
    assert fence.remove(str(cgroup)) is True
    assert fence.remove(str(cgroup)) is False  # gone already


def test_a_cgroup_that_cannot_be_made_is_an_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / "slurm").write_text("")  # a file where the directory should be
    with pytest.raises(fence.FenceError, match=r"devices\.deny"):
        fence.apply(str(tmp_path / "slurm" / "uid_1" / "job_2"), ["c 511:3 rwm"])


# -- the hooks, against the machine's devices controller ------------------------

OPENER = """
import errno, os, sys
with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
out = {}
for path in sys.argv[2:]:
    try:
        os.close(os.open(path, os.O_RDONLY))
        out[path] = "OPEN"
    except OSError as e:
        out[path] = errno.errorcode[e.errno]
print(__import__("json").dumps(out))
"""


def _opened_in(cgroup: str, paths: list[Path]) -> dict[str, str]:
    """Open each path from a process in ``cgroup``; errno name (or OPEN) per path."""
    proc = subprocess.run(
        [sys.executable, "-c", OPENER, cgroup, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    got: dict[str, str] = json.loads(proc.stdout)
    return {Path(p).name: r for p, r in got.items()}


@pytest.fixture
def fenced_pool(tmp_path: Path) -> Iterator[Pool]:
    """A pool whose job cgroups live in a cgroup of the machine's devices controller."""
    needs.root("the prolog writes cgroups and makes device nodes")
    if not (DEVICES / "devices.deny").exists():
        needs.missing("the cgroup v1 devices controller")
    top = DEVICES / f"slurmpool-test-{uuid.uuid4().hex[:8]}"
    pool = make_pool(tmp_path, extra_paths={"job_cgroup_root": str(top)})
    try:
        yield pool
    finally:
        # Deepest first: a cgroup directory goes only once its children are gone.
        for d in sorted(top.glob("**/"), key=lambda p: len(p.parts), reverse=True):
            if d.is_dir():
                os.rmdir(d)


def test_a_job_opens_only_its_own_capabilities_and_a_cpu_job_none(fenced_pool: Pool) -> None:
    pool = fenced_pool
    top = json.loads(pool.config_path.read_text())["paths"]["job_cgroup_root"]
    rc, _, err = pool.hook("prolog", pool.env("100", vgpu=2))
    assert rc == 0, err
    with pool.store() as store:
        [a] = store.for_job("100")
    assert a.state == ACTIVE
    gi, ci = a.cap_minors
    assert f"action=fenced level=info job=100 denied={2 * 135 - 2}" in err
    # Alice's second job, CPU only: her capability files, but not her cgroup's.
    rc, _, err = pool.hook("prolog", pool.env("101"))
    assert rc == 0, err

    caps = pool.dev / "nvidia-caps"
    other_gpu = gi_minor(1, 0)
    probe = [caps / f"nvidia-cap{m}" for m in (gi, ci, other_gpu)]
    first = _opened_in(f"{top}/uid_1000/job_100", probe)
    assert first == {f"nvidia-cap{gi}": "ENXIO", f"nvidia-cap{ci}": "ENXIO"} | {
        f"nvidia-cap{other_gpu}": "EPERM"
    }
    second = _opened_in(f"{top}/uid_1000/job_101", probe)
    assert set(second.values()) == {"EPERM"}, second
    # The monitor capability and the GPU nodes are not the fence's to close.
    assert _opened_in(f"{top}/uid_1000/job_101", [caps / "nvidia-cap2"]) == {"nvidia-cap2": "ENXIO"}
    assert os.major(os.stat(caps / f"nvidia-cap{gi}").st_rdev) == CAPS_MAJOR

    # The epilog of a job whose cgroup slurmstepd never used removes it.
    rc, _, err = pool.hook("epilog", pool.env("101"))
    assert rc == 0 and "action=fence-removed level=info job=101" in err
    assert not os.path.exists(f"{top}/uid_1000/job_101")


def test_a_cgroup_the_prolog_cannot_write_drains_and_gives_everything_back(
    tmp_path: Path,
) -> None:
    needs.root("the prolog chowns device files")
    devices = tmp_path / "cgroup" / "devices"
    devices.mkdir(parents=True)
    (devices / "devices.deny").touch()  # looks like the controller
    (devices / "slurm").write_text("")  # but the job's cgroup cannot be made
    pool = make_pool(tmp_path / "node", extra_paths={"job_cgroup_root": str(devices / "slurm")})
    rc, _, err = pool.hook("prolog", pool.env("100", vgpu=2))
    assert rc == 1
    assert "cannot fence job 100's MIG capabilities" in err
    assert pool.instances() == []
    with pool.store() as store:
        [a] = store.for_job("100", include_released=True)
    assert a.state == RELEASED and "devices cgroup not written" in a.note


def test_the_epilog_spares_a_process_of_another_job_on_the_instance(fenced_pool: Pool) -> None:
    """Where a process of another job got onto the instance anyway (a node without the
    fence, or one the fence came too late for), the job cgroup says whose it is."""
    from slurmpool.sim.processes import attach_process

    pool = fenced_pool
    top = json.loads(pool.config_path.read_text())["paths"]["job_cgroup_root"]
    env = pool.env("100", vgpu=1)
    assert pool.hook("prolog", env)[0] == 0
    assert pool.hook("prolog", pool.env("200"))[0] == 0  # makes job 200's cgroup
    with pool.store() as store:
        [a] = store.for_job("100")
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(120)"],
        stdin=subprocess.PIPE,
    )
    try:
        Path(top, "uid_1000", "job_200", "cgroup.procs").write_text(str(other.pid))
        attach_process(
            pool.sim_dir, a.gpu_index, a.gi_id, a.ci_id, pid=other.pid, used_mib=10, util=5
        )
        rc, _, err = pool.hook("epilog", env)
        assert rc == 0, err
        assert "action=foreign-process level=warning job=100" in err
        assert other.poll() is None  # not the epilog's to stop
        assert len(pool.instances()) == 1  # nor its instance to destroy yet
    finally:
        other.kill()
        other.wait(10)
