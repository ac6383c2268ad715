from __future__ import annotations

import pytest

from slurmpool.slurm import SlurmVersion, SlurmVersionError, parse_version


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
