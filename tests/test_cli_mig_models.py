"""``slurmpool models`` and ``slurmpool mig check|plan`` through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmpool.cli import COMMANDS, main


@pytest.fixture()
def run():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, list(args), catch_exceptions=False)

    return invoke


def test_models_table(run) -> None:
    r = run("models")
    assert r.exit_code == 0
    assert "A100-SXM4-80GB" in r.output and "3g.40gb" in r.output
    assert "L40S-48GB" in r.output


def test_models_json(run) -> None:
    r = run("models", "--json")
    data = json.loads(r.output)
    by_name = {m["name"]: m for m in data}
    assert by_name["A30-24GB"]["memory_slices"] == 4
    assert by_name["A10-24GB"]["mig_capable"] is False


def test_mig_check_fits(run) -> None:
    r = run("mig", "check", "--model", "A100-SXM4-80GB", "4g.40gb", "3g.40gb")
    assert r.exit_code == 0
    assert r.output.startswith("fits on A100-SXM4-80GB")


@pytest.mark.parametrize(
    "profiles", [["4g", "4g"], ["3g", "3g", "1g"], ["7g", "1g"]], ids=lambda p: "+".join(p)
)
def test_mig_check_rejects_with_reason(run, profiles: list[str]) -> None:
    r = run("mig", "check", "--model", "NVIDIA A100-SXM4-80GB", *profiles)
    assert r.exit_code == 1
    assert "does not fit" in r.output and ":" in r.output


def test_mig_check_unknown_model(run) -> None:
    r = run("mig", "check", "--model", "B999", "1g")
    assert r.exit_code == 2
    assert "unknown GPU model 'B999'" in r.output and "A100-SXM4-80GB" in r.output


def test_mig_check_unknown_profile(run) -> None:
    r = run("mig", "check", "--model", "A30-24GB", "3g.20gb")
    assert r.exit_code == 2
    assert "valid profiles: 1g.6gb" in r.output


def test_mig_check_non_mig_model(run) -> None:
    r = run("mig", "check", "--model", "L40S", "1g")
    assert r.exit_code == 2
    assert "does not support MIG" in r.output


def test_mig_plan_json(run) -> None:
    r = run("mig", "plan", "--model", "A100-SXM4-80GB", "3g", "2g", "1g", "1g", "--json")
    assert r.exit_code == 0
    plan = json.loads(r.output)
    assert plan["fits"] is True
    spans = [(i["start"], i["size"]) for i in plan["instances"]]
    assert [i["profile"] for i in plan["instances"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert len({s for s, _ in spans}) == 4
    assert sum(n for _, n in spans) == 8


def test_mig_plan_text_and_failure(run) -> None:
    r = run("mig", "plan", "-m", "A30", "2g", "1g", "1g")
    assert r.exit_code == 0 and "start=" in r.output
    r = run("mig", "plan", "-m", "A30", "4g", "1g", "--json")
    assert r.exit_code == 1 and json.loads(r.output)["fits"] is False


def test_every_command_has_help(run) -> None:
    for name in COMMANDS:
        r = run(name, "--help")
        assert r.exit_code == 0, name
        assert "Usage:" in r.output
