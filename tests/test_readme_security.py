"""The README's isolation table says what doctor says: each cell's level is the one
:func:`slurmpool.isolation.isolation` gives that mode on a node of that column's set-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpool.isolation import GPU, JOB, NONE, USER, NodeFences, isolation
from slurmpool.modes import GpuMode

README = Path(__file__).resolve().parent.parent / "README.md"
LEVELS = {JOB, GPU, USER, NONE}

# Each column of the table, and the node set-ups it stands for.
COLUMNS: dict[str, list[NodeFences]] = {
    "task/cgroup, ConstrainDevices, cgroup v1": [NodeFences(True, True, "v1", True)],
    "same on cgroup v2": [NodeFences(True, True, "v2", False)],
    "no task/cgroup or ConstrainDevices": [
        NodeFences(False, True, "v1", True),
        NodeFences(True, False, "v1", True),
        NodeFences(False, False, "v2", False),
    ],
}


def isolation_table() -> list[dict[str, str]]:
    """The rows of the table whose header starts with ``| mode | task/cgroup``."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| mode | task/cgroup"))
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)))
    return rows


def level_of(cell: str) -> str:
    """The level a cell states: its first word, in backticks."""
    word = cell.split("`")[1]
    assert word in LEVELS, f"{cell!r} does not start with a level"
    return word


def test_the_table_has_every_mode_and_every_column() -> None:
    rows = isolation_table()
    assert sorted(r["mode"] for r in rows) == sorted(f"`{m}`" for m in GpuMode)
    assert list(rows[0])[1:] == list(COLUMNS)


@pytest.mark.parametrize("column", list(COLUMNS))
@pytest.mark.parametrize("mps", [False, True])
def test_each_cell_states_the_level_doctor_reports(column: str, mps: bool) -> None:
    for row in isolation_table():
        mode = GpuMode(row["mode"].strip("`"))
        for fences in COLUMNS[column]:
            assert level_of(row[column]) == isolation(mode, fences, mps).level, (mode, fences)
