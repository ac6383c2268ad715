"""The Slurm sandbox for the integration tests: up once per session, down at the end.

Without the Slurm/munge/MariaDB binaries (or without root) every test here
is skipped with the reason; with ``SLURMPOOL_REQUIRE_SLURM=1`` (or
``SLURMPOOL_STRICT_TESTS=1``) they fail instead.
Run: ``SLURMPOOL_REQUIRE_SLURM=1 python -m pytest tests/integration``.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from polling import poll

from slurmpool.sandbox.cluster import ACCOUNT, Sandbox, SandboxOptions
from slurmpool.sandbox.layout import SandboxState
from slurmpool.sandbox.requirements import missing_programs
from slurmpool.slurm.parse import parse_jobs
from slurmpool.slurm.runner import CommandResult, Runner

from .hygiene import restore

HERE = Path(__file__).resolve().parent
# SLURMPOOL_STRICT_TESTS=1 (tests/needs.py) requires every test to run, these too.
REQUIRE = "1" in (
    os.environ.get("SLURMPOOL_REQUIRE_SLURM"),
    os.environ.get("SLURMPOOL_STRICT_TESTS"),
)
USERS = ("sp-alice", "sp-bob")
TERMINAL = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
}


def _why_not() -> str | None:
    runner = Runner(env=dict(os.environ))
    missing = missing_programs(runner)
    if missing:
        return missing.message()
    if os.geteuid() != 0:
        return "the Slurm sandbox needs root (daemons, mount namespaces, mknod)"
    return None


REASON = _why_not()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
            if REASON is not None and not REQUIRE:
                item.add_marker(pytest.mark.skip(reason=f"Slurm sandbox unavailable: {REASON}"))
    # A test with a sandbox of its own runs before the shared one is up: one at a time.
    items.sort(key=lambda item: item.get_closest_marker("own_sandbox") is None)


@dataclass
class Cluster:
    sandbox: Sandbox
    state: SandboxState
    slurm: Runner
    workdir: Path

    def sbatch(
        self, *args: str, user: str | None = None, check: bool = True, account: bool = True
    ) -> CommandResult:
        """``sbatch --parsable ARGS`` as ``user``; ``account``: charged to the sandbox's
        account, which the site's job_submit.lua wants every job to name."""
        return self.slurm.run(
            "sbatch",
            "--parsable",
            *([f"--account={ACCOUNT}"] if account else []),
            *args,
            as_user=user,
            check=check,
            cwd=str(self.workdir),
            timeout=30,
        )

    def submit(self, *args: str, user: str | None = None) -> int:
        out = self.sbatch(*args, user=user).stdout.strip()
        return int(out.split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        res = self.slurm.run("scontrol", "show", "job", "-d", str(job_id), timeout=15)
        (job,) = parse_jobs(res.stdout)
        return job.record.as_dict()

    def wait(self, job_id: int, timeout_s: float = 60) -> str:
        """Wait until the job ends; return its final state."""

        def state() -> str:
            res = self.slurm.run("scontrol", "show", "job", str(job_id), check=False, timeout=15)
            jobs = parse_jobs(res.stdout) if res.ok else []
            return jobs[0].state if jobs else "unknown"

        final: str = poll(
            f"job {job_id} to end", lambda: (s := state()) in TERMINAL and s, timeout_s, seen=state
        )
        return final

    def release_file(self, name: str) -> Path:
        """A file not there yet: a job whose workload runs ``--until-file`` on it is held
        until the test creates it, so no outcome depends on a job outliving N seconds."""
        return self.workdir / f"release-{name}-{time.monotonic_ns()}"

    def on_node(self, node: str, argv: Sequence[str], timeout: float = 60) -> CommandResult:
        full = self.sandbox.on_node(node, argv)
        env = self.slurm.child_env()
        proc = subprocess.run(
            full, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
        return CommandResult(tuple(full), proc.returncode, proc.stdout, proc.stderr)

    def doctor(self, node: str) -> CommandResult:
        """``slurmpool doctor --json`` on ``node``, as the node sees the world."""
        config = Path(self.state.slurm_conf).parent / "node-config.json"
        argv = [sys.executable, "-m", "slurmpool", "doctor", "--node-config", str(config)]
        return self.on_node(node, [*argv, "--node", node, "--json"])

    @classmethod
    def of_own_sandbox(cls, sandbox: Sandbox, workdir_name: str) -> Cluster:
        """A Cluster over a test's own sandbox, with a fresh work directory every user
        may write in."""
        st = sandbox.state()
        assert st is not None
        workdir = sandbox.layout.root / workdir_name
        workdir.mkdir()
        workdir.chmod(0o1777)
        return cls(sandbox, st, sandbox.slurm(), workdir)

    def host_hook_log(self, node: str) -> str:
        path = self.sandbox.layout.host_dir(node) / "state" / "hooks.log"
        return path.read_text() if path.exists() else ""


def make_unix_users(names: Sequence[str]) -> list[str]:
    """Create those of ``names`` that do not exist; returns the ones created."""
    created = []
    for user in names:
        try:
            pwd.getpwnam(user)
        except KeyError:
            subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", user], check=True)
            created.append(user)
    return created


def _ensure_users() -> list[str]:
    return make_unix_users(USERS)


def _keep_logs(sandbox: Sandbox, nodes: Sequence[str], dest: Path) -> None:
    """Copy the daemons' logs and each node's hook log to ``dest`` (before ``down``
    removes them), so a failed CI run can be read without running it again."""
    dest.mkdir(parents=True, exist_ok=True)
    logs = sandbox.layout.log_dir
    for path in sorted(logs.glob("*")) if logs.is_dir() else []:
        if path.is_file():
            shutil.copyfile(path, dest / path.name)
    for node in nodes:
        hooks = sandbox.layout.host_dir(node) / "state" / "hooks.log"
        if hooks.is_file():
            shutil.copyfile(hooks, dest / f"hooks-{node}.log")


_shared_up = False


def _new_sandbox(prefix: str) -> tuple[Sandbox, SandboxOptions]:
    """A sandbox not up yet in a fresh /tmp directory, and the options to bring it up."""
    if REASON is not None:
        pytest.fail(f"integration tests required but the sandbox cannot run: {REASON}")
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.rmdir(directory)
    runner = Runner(env={"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")})
    options = SandboxOptions(
        directory=directory, python=sys.executable, timeout_s=90, monitor_interval_s=0.5
    )
    return Sandbox(directory, runner), options


@pytest.fixture
def own_sandbox(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox of the test's own (marked ``own_sandbox``; ``sandbox_policy(path)``
    names another policy than the bundled one, ``sandbox_configless`` runs it
    configless), up, and down afterwards unless the test has taken it down itself."""
    assert not _shared_up, "an own_sandbox test ran after the shared sandbox came up"
    sandbox, options = _new_sandbox("slurmpool-own-")
    policy = request.node.get_closest_marker("sandbox_policy")
    if policy is not None:
        options = dataclasses.replace(options, policy=Path(policy.args[0]))
    if request.node.get_closest_marker("sandbox_configless") is not None:
        options = dataclasses.replace(options, configless=True)
    created = _ensure_users()
    try:
        sandbox.up(options)
        yield sandbox
    finally:
        if sandbox.state() is not None:
            sandbox.down()
        for user in created:
            subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    global _shared_up
    sandbox, options = _new_sandbox("slurmpool-it-")
    _shared_up = True
    created = _ensure_users()
    try:
        # The users exist before up: up gives every login user an association.
        state = sandbox.up(options)
        workdir = sandbox.layout.root / "work"
        workdir.mkdir()
        os.chmod(workdir, 0o1777)
        yield Cluster(sandbox, state, sandbox.slurm(), workdir)
    finally:
        keep = os.environ.get("SLURMPOOL_IT_LOG_DIR")
        recorded = sandbox.state()
        if keep and request.session.testsfailed and recorded is not None:
            _keep_logs(sandbox, recorded.nodes, Path(keep))
        sandbox.down()
        for user in created:
            subprocess.run(["userdel", "--remove", user], check=False, capture_output=True)


@pytest.fixture(autouse=True)
def _sandbox_restored(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, whether it passed or failed: no fault file, job, MIG instance or
    drained node of its left for the next one; a test that left any fails, by name."""
    if request.node.get_closest_marker("own_sandbox") is not None:
        yield
        return
    cluster = request.getfixturevalue("cluster")
    yield
    found = restore(cluster)
    if found:
        pytest.fail(
            f"{request.node.nodeid} left the shared sandbox dirty (restored now): "
            f"{found.describe()}",
            pytrace=False,
        )
