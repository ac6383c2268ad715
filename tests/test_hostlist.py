"""Hostlist expressions: expansion, compression, membership and overlap."""

from __future__ import annotations

import time

import pytest

from slurmpool.hostlist import HostList, HostlistError, compress, expand, overlap


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("n1", ["n1"]),
        ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[001-002,070]", ["gpu001", "gpu002", "gpu070"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("gpu[1-2],login1", ["gpu1", "gpu2", "login1"]),
        ("n[1-3]x", ["n1x", "n2x", "n3x"]),
        ("n[3,1-2,2]", ["n1", "n2", "n3"]),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand(expr) == names


@pytest.mark.parametrize(
    "expr",
    ["", "n[1-", "n]", "n[[1]]", "n[a-b]", "n[3-1]", "n[01-9,001]", "bad name", "n[1-2],,x", 'n"1'],
)
def test_expand_rejects(expr: str) -> None:
    with pytest.raises(HostlistError):
        HostList(expr)


@pytest.mark.parametrize(
    "expr",
    ["gpu[001-064,070]", "n[1-3,5,7-9]", "n[9-11]", "a[1-2]b[3-4]", "x,y,gpu[01-02]", "n[98-101]"],
)
def test_compress_round_trips(expr: str) -> None:
    names = expand(expr)
    assert expand(compress(names)) == names


def test_compress_is_compact_and_deterministic() -> None:
    assert compress(["gpu003", "gpu001", "gpu002", "gpu070"]) == "gpu[001-003,070]"
    assert compress(["n10", "n9", "n11", "login"]) == "login,n[9-11]"
    assert compress(["gpu099", "gpu100"]) == "gpu[099-100]"
    assert compress(["solo5"]) == "solo5"


def test_membership_respects_padding() -> None:
    hl = HostList("gpu[001-064]")
    assert "gpu001" in hl and "gpu064" in hl
    assert "gpu1" not in hl and "gpu065" not in hl and "gpu0001" not in hl
    assert "n01" not in HostList("n[1-9]")


@pytest.mark.parametrize(
    ("a", "b", "common"),
    [
        ("gpu[001-064]", "gpu[065-128]", None),
        ("gpu[001-064]", "gpu[064-128]", "gpu064"),
        ("n[1-20]", "n1[0-5]", "n10"),
        ("n[1-9]", "n[01-09]", None),
        ("a,b,c", "c", "c"),
        ("x[1-5]", "y[1-5]", None),
        ("n[1-3,10-12]", "n[4-9,12]", "n12"),
    ],
)
def test_overlap(a: str, b: str, common: str | None) -> None:
    assert overlap(a, b) == common


def test_overlap_of_huge_ranges_does_not_expand() -> None:
    start = time.perf_counter()
    assert overlap("n[0000001-9000000]", "n[9000001-9999999]") is None
    assert overlap("n[0000001-9000000]", "n[8999999-9999999]") == "n8999999"
    assert time.perf_counter() - start < 0.5
