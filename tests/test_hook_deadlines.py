"""Every wait in a hook takes its bound from the hook's deadline (issue: hooks never
drain a node for an expected condition).

Bounds are checked as the values handed to the waits (the lock's busy timeout, the
Slurm call's timeout), not as elapsed wall time.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from slurmpool.pooling.deadline import EXIT_RESERVE_S, LOCK_SHARE, Deadline
from slurmpool.pooling.slurmjob import MIN_CALL_S, REQUEUE_RESERVE_S, SlurmJobs
from slurmpool.slurm.runner import Runner, SlurmCommandTimeout
from slurmpool.state.db import StoreBusy
from slurmpool.state.store import NodeStore, open_node_store


def _spent(seconds: float, spent: float) -> Deadline:
    """A deadline of ``seconds`` with ``spent`` of them already gone."""
    d = Deadline(seconds)
    d.start -= spent
    return d


def test_within_keeps_the_reserve_and_never_goes_negative() -> None:
    d = _spent(30, 20)  # about 10 s left
    assert 5.9 < d.within(100, reserve=4) <= 6
    assert d.within(2, reserve=4) == 2
    assert d.within(100, reserve=12) == 0
    assert _spent(30, 40).within(5) == 0


def test_lock_wait_is_a_share_of_the_budget_within_what_is_left() -> None:
    assert Deadline(27).lock_wait() == pytest.approx(27 * LOCK_SHARE, abs=0.05)
    late = _spent(27, 21)  # 6 s left: the reserve bounds the wait, not the share
    assert late.lock_wait() == pytest.approx(6 - EXIT_RESERVE_S, abs=0.05)
    assert _spent(27, 25).lock_wait() == 0


# -- the node lock -------------------------------------------------------------------


def test_a_held_lock_is_a_busy_store_after_the_allowed_wait(tmp_path: Path) -> None:
    store = open_node_store(tmp_path, "n1", lock_wait=lambda: 0.3)
    holder = open_node_store(tmp_path, "n1")
    holder.conn.execute("BEGIN IMMEDIATE")
    try:
        with (
            pytest.raises(StoreBusy, match=r"locked by another process .* 0\.3 s"),
            store.transaction(),
        ):
            pass
        store.close()
    finally:
        holder.conn.execute("ROLLBACK")
        holder.close()


def test_the_lock_wait_is_asked_at_each_transaction(tmp_path: Path) -> None:
    wait = [5.0]
    store = open_node_store(tmp_path, "n1", lock_wait=lambda: wait[0])
    seen = []
    for wait[0] in (2.5, 0.75):
        with store.transaction() as conn:
            seen.append(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    store.close()
    assert seen == [2500, 750]


def test_a_store_locked_while_opening_is_busy_not_corrupt(tmp_path: Path) -> None:
    NodeStore(tmp_path / "n.sqlite").close()
    holder = sqlite3.connect(tmp_path / "n.sqlite", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreBusy):
            NodeStore(tmp_path / "n.sqlite", lock_wait=lambda: 0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# -- Slurm calls -------------------------------------------------------------------------


@pytest.fixture
def slow_slurm(tmp_path: Path) -> tuple[Runner, Path]:
    """squeue and scontrol that record each start and then hang."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    for name in ("squeue", "scontrol"):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexec /bin/sleep 60\n')
        path.chmod(0o755)
    return Runner(search_path=[str(bin_dir)]), calls


def _timed_out_after(e: SlurmCommandTimeout) -> float:
    m = re.search(r"timed out after ([0-9.e-]+) s", str(e))
    assert m, str(e)
    return float(m.group(1))


def test_reading_the_allocation_stops_short_of_the_exit_reserve(
    slow_slurm: tuple[Runner, Path],
) -> None:
    runner, calls = slow_slurm
    jobs = SlurmJobs(runner, timeout_s=10, deadline=Deadline(EXIT_RESERVE_S + 1.0))
    with pytest.raises(SlurmCommandTimeout) as info:
        jobs.allocation("42")
    assert 0.5 < _timed_out_after(info.value) <= 1.0
    assert calls.read_text().startswith("squeue -h -j 42")


def test_the_requeue_may_use_the_reserve_the_comment_calls_keep(
    slow_slurm: tuple[Runner, Path],
) -> None:
    runner, _ = slow_slurm
    jobs = SlurmJobs(runner, timeout_s=10, deadline=Deadline(REQUEUE_RESERVE_S + 1.0))
    with pytest.raises(SlurmCommandTimeout) as info:
        jobs.set_admin_comment("42", "x")
    assert _timed_out_after(info.value) <= 1.0
    jobs = SlurmJobs(runner, timeout_s=10, deadline=Deadline(1.0))
    with pytest.raises(SlurmCommandTimeout) as info:
        jobs.requeue("42")
    assert 0.5 < _timed_out_after(info.value) <= 1.0


def test_a_call_without_time_left_is_not_started(slow_slurm: tuple[Runner, Path]) -> None:
    runner, calls = slow_slurm
    jobs = SlurmJobs(runner, timeout_s=10, deadline=Deadline(MIN_CALL_S / 2))
    with pytest.raises(SlurmCommandTimeout, match=r"scontrol requeue 42: not started: .* left"):
        jobs.requeue("42")
    assert not calls.exists()


def test_without_a_deadline_each_call_gets_its_timeout(slow_slurm: tuple[Runner, Path]) -> None:
    runner, _ = slow_slurm
    with pytest.raises(SlurmCommandTimeout) as info:
        SlurmJobs(runner, timeout_s=0.3).requeue("42")
    assert _timed_out_after(info.value) == 0.3


# -- the wrapper's budget ---------------------------------------------------------------


def _wrapper(
    tmp_path: Path, hook: str, budget_s: int, site_body: str | None, python_body: str = ""
) -> Path:
    """The installed wrapper for ``hook`` with a ``budget_s`` s budget; its interpreter
    is a stand-in that records the arguments slurmpool's hook would get, then runs
    ``python_body``."""
    from dataclasses import replace

    from slurmpool.hookpath import HookImportPath
    from slurmpool.install import HOOKS, render_wrapper, target_for_policy
    from slurmpool.policy.loader import load_policy

    examples = Path(__file__).resolve().parent.parent / "examples"
    policy = load_policy(examples / "sandbox.yaml", variables={"root": str(tmp_path / "node")})
    python = tmp_path / "python"
    ours = tmp_path / "ours"  # one line per run
    python.write_text(
        f"#!/bin/sh\necho \"$@\" | tr '\\n' ' ' >> {ours}\necho >> {ours}\n{python_body}"
    )
    python.chmod(0o755)
    target = replace(
        target_for_policy(policy, systemd_dir=str(tmp_path / "systemd"), python=str(python)),
        hook_timeouts={hook: budget_s},
    )
    site_hooks = []
    if site_body is not None:
        site = tmp_path / "site-hook"
        site.write_text("#!/bin/sh\n" + site_body)
        site.chmod(0o755)
        site_hooks.append(str(site))
    spec = next(h for h in HOOKS if h.name == hook)
    wrapper = tmp_path / hook
    wrapper.write_text(
        render_wrapper(spec, site_hooks, target, HookImportPath(str(python), (), (), (), {}))
    )
    wrapper.chmod(0o755)
    return wrapper


def _budget_given(tmp_path: Path) -> int:
    m = re.search(r"--budget-s (\d+)", (tmp_path / "ours").read_text())
    assert m
    return int(m.group(1))


def test_without_site_hooks_slurmpool_gets_the_whole_budget(tmp_path: Path) -> None:
    wrapper = _wrapper(tmp_path, "prolog", 30, None)
    assert "date" not in wrapper.read_text()  # no clock read on the common path
    assert subprocess.run([str(wrapper)], env={}, timeout=30).returncode == 0
    assert _budget_given(tmp_path) == 30


def test_a_site_prolog_shares_the_budget(tmp_path: Path) -> None:
    wrapper = _wrapper(tmp_path, "prolog", 30, "sleep 2\n")
    assert subprocess.run([str(wrapper)], env={}, timeout=60).returncode == 0
    assert 10 <= _budget_given(tmp_path) <= 28


def test_a_hanging_site_prolog_is_stopped_at_the_budget(tmp_path: Path) -> None:
    """Site first: it gets what is left less slurmpool's floor (at least the floor)."""
    wrapper = _wrapper(tmp_path, "prolog", 3, "exec sleep 120\n")
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=60)
    assert res.returncode == 124  # timeout's status: the site's hook failed, as before
    assert "site Prolog failed with status 124" in res.stderr
    assert not (tmp_path / "ours").exists()


def test_an_epilog_keeps_time_for_the_site_hook_after_it(tmp_path: Path) -> None:
    """slurmpool first: it gets the budget less the floor the site's epilog keeps."""
    text = _wrapper(tmp_path, "epilog", 60, "true\n").read_text()
    assert "budget_for 10\n" in text.split("run_slurmpool() {", 1)[1]
    # A budget under the floor: each step gets the whole budget, and no more.
    wrapper = _wrapper(tmp_path, "epilog", 4, "exec sleep 120\n")
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=60)
    assert _budget_given(tmp_path) == 4
    assert res.returncode == 124  # the site's epilog, stopped once its share was spent


def test_budget_argument() -> None:
    from slurmpool.hooks.__main__ import UsageError, parse_args

    assert parse_args(["prolog", "--budget-s", "17"]).budget_s == 17.0
    assert parse_args(["prolog"]).budget_s is None
    for bad in ("0", "-3", "1.5", "x"):
        with pytest.raises(UsageError, match="--budget-s: expected a whole number"):
            parse_args(["prolog", "--budget-s", bad])


def test_a_prolog_killed_by_a_signal_gets_a_short_second_run(tmp_path: Path) -> None:
    """The second run (--after-kill) undoes and requeues; the wrapper returns its status."""
    runs = tmp_path / "ours"
    body = f'[ "$(wc -l < {runs})" -eq 1 ] && kill -9 $$\nexit 0\n'
    wrapper = _wrapper(tmp_path, "prolog", 30, None, body)
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "the hook died with status 137; undoing and requeueing" in res.stderr
    first, second = (line.strip() for line in runs.read_text().splitlines())
    assert "--after-kill" not in first and first.endswith("--budget-s 30")
    assert second.endswith("--budget-s 10 --after-kill")


def test_a_prolog_that_timed_out_is_not_run_again(tmp_path: Path) -> None:
    wrapper = _wrapper(tmp_path, "prolog", 30, None, "exit 124\n")
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 124
    assert len((tmp_path / "ours").read_text().splitlines()) == 1


def test_a_killed_epilog_is_run_again_once_without_after_kill(tmp_path: Path) -> None:
    """The second run finishes the release (tests/test_pooling_hooks.py shows it does);
    its status is the wrapper's, so a second failure still drains the node."""
    runs = tmp_path / "ours"
    body = f'[ "$(wc -l < {runs})" -eq 1 ] && kill -9 $$\nexit 0\n'
    wrapper = _wrapper(tmp_path, "epilog", 30, None, body)
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "the hook died with status 137; running it again" in res.stderr
    first, second = (line.strip() for line in runs.read_text().splitlines())
    assert first.endswith("--budget-s 30") and second.endswith("--budget-s 10")
    (tmp_path / "again").mkdir()
    always = _wrapper(tmp_path / "again", "epilog", 30, None, "kill -9 $$\n")
    res = subprocess.run([str(always)], env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 137
    assert len((tmp_path / "again" / "ours").read_text().splitlines()) == 2


@pytest.mark.parametrize("hook", ["task-prolog", "epilog-slurmctld"])
def test_other_hooks_are_not_run_again(tmp_path: Path, hook: str) -> None:
    wrapper = _wrapper(tmp_path, hook, 30, None, "kill -9 $$\n")
    res = subprocess.run([str(wrapper)], env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 137
    assert len((tmp_path / "ours").read_text().splitlines()) == 1
