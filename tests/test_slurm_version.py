from __future__ import annotations

from pathlib import Path

import pytest

from slurmpool.slurm.runner import Runner
from slurmpool.slurm.version import (
    InstalledSlurm,
    SlurmVersion,
    SlurmVersionError,
    installed_version,
    parse_version,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("slurm-wlm 22.05.8\n", SlurmVersion(22, 5, 8)),
        ("slurm 23.02.1", SlurmVersion(23, 2, 1)),
        ("slurm 24.11.5-1", SlurmVersion(24, 11, 5)),
        ("slurm 25.05", SlurmVersion(25, 5, 0)),
    ],
)
def test_parse(text: str, expected: SlurmVersion) -> None:
    assert parse_version(text) == expected


def test_bad_version_says_what_was_expected() -> None:
    with pytest.raises(SlurmVersionError, match=r"expected e\.g\."):
        parse_version("command not found")


@pytest.mark.parametrize(
    ("version", "json", "extra"),
    [
        (SlurmVersion(22, 5, 8), False, False),
        (SlurmVersion(23, 2, 0), True, True),
        (SlurmVersion(24, 11, 5), True, True),
    ],
)
def test_feature_gates(version: SlurmVersion, json: bool, extra: bool) -> None:
    assert version.features.scontrol_json is json
    assert version.features.job_extra is extra
    assert version.supports("scontrol_json") is json


def test_unknown_feature() -> None:
    with pytest.raises(KeyError, match="known"):
        SlurmVersion(22, 5).supports("teleport")


def test_str_and_order() -> None:
    assert str(SlurmVersion(22, 5, 8)) == "22.05.8"
    assert SlurmVersion(22, 5, 8) < SlurmVersion(23, 2, 0)


def _programs(tmp_path: Path, **scripts: str) -> Runner:
    """A Runner that finds only the given programs (shell bodies) in ``tmp_path``."""
    for name, body in scripts.items():
        path = tmp_path / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return Runner(search_path=(str(tmp_path),))


def test_installed_version_asks_slurmd_first(tmp_path: Path) -> None:
    runner = _programs(tmp_path, slurmd="echo 'slurm 24.11.5'", scontrol="echo 'slurm 22.05.8'")
    assert installed_version(runner) == InstalledSlurm(SlurmVersion(24, 11, 5), "slurmd -V")


def test_installed_version_on_a_login_host_asks_scontrol(tmp_path: Path) -> None:
    runner = _programs(tmp_path, scontrol="echo 'slurm 26.05.5'")
    assert installed_version(runner) == InstalledSlurm(SlurmVersion(26, 5, 5), "scontrol -V")


def test_no_installed_slurm_names_what_each_program_said(tmp_path: Path) -> None:
    runner = _programs(tmp_path, scontrol="echo 'scontrol: fatal: no slurm.conf' >&2; exit 1")
    with pytest.raises(SlurmVersionError) as err:
        installed_version(runner)
    text = str(err.value)
    assert "slurmd: not found in" in text
    assert "exited with status 1: scontrol: fatal: no slurm.conf" in text


@pytest.mark.parametrize(
    ("version", "shown", "release"),
    [(SlurmVersion(24, 11, 5), "24.11.5", "24.11"), (SlurmVersion(23, 2, 0), "23.02", "23.02")],
)
def test_version_text(version: SlurmVersion, shown: str, release: str) -> None:
    assert (version.shown, version.release) == (shown, release)
