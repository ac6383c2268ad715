"""The simulated driver's crash points: planted by a test, struck by whoever calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slurmpool.sim.faults import POINTS, FaultError, plant, planted


def test_unknown_points_and_counts_are_refused(tmp_path: Path) -> None:
    with pytest.raises(FaultError, match="unknown fault point 'after-grant'; expected one of"):
        plant(tmp_path, "after-grant")
    with pytest.raises(FaultError, match="nth: expected a count of 1 or more, got 0"):
        plant(tmp_path, "after-create-ci", nth=0)
    assert planted(tmp_path) == []


def _call(state_dir: Path, when: str, function: str) -> int:
    code = (
        "import sys; from slurmpool.sim.faults import strike; "
        f"strike({str(state_dir)!r}, {when!r}, {function!r}); sys.exit(7)"
    )
    return subprocess.run([sys.executable, "-c", code], check=False).returncode


def test_the_nth_call_is_killed_once(tmp_path: Path) -> None:
    when, function = POINTS["before-create-gi"]
    plant(tmp_path, "before-create-gi", nth=2)
    assert _call(tmp_path, "after", function) == 7  # another point: untouched
    assert _call(tmp_path, when, function) == 7  # the first call goes through
    assert _call(tmp_path, when, function) == -9  # the second is killed
    assert planted(tmp_path) == []
    assert _call(tmp_path, when, function) == 7  # one shot
