"""Golden files: the generated config of every example policy.

Refresh after an intended change with:

    SLURMPOOL_UPDATE_GOLDEN=1 python -m pytest tests/test_configgen_golden.py

then review the diff of tests/golden/.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slurm_node import NODE_SLURM

from slurmpool.configgen.render import generate
from slurmpool.policy.loader import load_policy

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "golden"
# The sandbox example's ${root}, fixed so its golden files are stable.
VARIABLES = {"root": "/sandbox-root"}
UPDATE = os.environ.get("SLURMPOOL_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_golden(path: Path) -> None:
    files = generate(load_policy(path, variables=VARIABLES), installed=NODE_SLURM).files
    directory = GOLDEN / path.stem
    if UPDATE:
        directory.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    expected = {p.name: p.read_text() for p in directory.iterdir()} if directory.is_dir() else {}
    assert expected, f"no golden files in {directory}; run with SLURMPOOL_UPDATE_GOLDEN=1"
    assert sorted(files) == sorted(expected)
    for name, text in files.items():
        assert text == expected[name], f"{path.stem}/{name} differs from its golden file"


def test_output_is_deterministic() -> None:
    policy = load_policy(ROOT / "examples" / "mixed-cluster.yaml")
    assert generate(policy).files == generate(policy).files
