"""The sp1: AdminComment encoding survives what Slurm 22.05 does to strings."""

from __future__ import annotations

import pytest

from slurmpool.accounting import codec
from slurmpool.accounting.summary import index_of, job_document, parse_index

DOC = job_document(
    "42",
    "pool",
    {
        "sbx1": {
            "user": 'o"brien; rm -rf /',
            "devices": [
                {
                    "gpu": 0,
                    "gi": 3,
                    "kind": "mig",
                    "model": "A100-SXM4-80GB",
                    "profile": "2g.20gb",
                    "slices": 2,
                    "of": 7,
                    "util_mean": None,
                },
                {
                    "gpu": 2,
                    "gi": None,
                    "kind": "gpu",
                    "model": "H100-SXM5-80GB",
                    "profile": None,
                    "util_mean": 61.25,
                },
            ],
            "carved": [],
        }
    },
)


def _as_sacctmgr_stores(text: str) -> str:
    """What 22.05's sacctmgr does to an AdminComment (SLURM_FACTS.md)."""
    return text.lower().replace('"', "`")


def test_round_trip() -> None:
    token = codec.encode(DOC, index_of(DOC))
    assert token.startswith("sp1:")
    assert codec.decode(token) == DOC


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(_as_sacctmgr_stores, id="lowercased-and-backticks"),
        pytest.param(str.upper, id="uppercased"),
        pytest.param(lambda t: f"site `note` {t}", id="after-site-words"),
        pytest.param(lambda t: f"  {t}\n", id="whitespace"),
    ],
)
def test_survives_slurm_mangling(mangle: object) -> None:
    token = codec.encode(DOC, index_of(DOC))
    assert callable(mangle)
    stored = mangle(token)
    assert codec.decode(stored) == DOC
    assert token == token.lower() and '"' not in token and " " not in token


def test_index_is_readable_without_decoding() -> None:
    token = _as_sacctmgr_stores(codec.encode(DOC, index_of(DOC)))
    entries = parse_index(codec.index_of(token) or "")
    assert entries == [
        ("sbx1", "0", "mig", "a100-sxm4-80gb", "2g.20gb", 2 / 7, None),
        ("sbx1", "2", "gpu", "h100-sxm5-80gb", "-", 1.0, 61.2),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "holds no slurmpool summary", id="empty"),
        pytest.param("just a site note", "holds no slurmpool summary", id="other-text"),
        pytest.param("sp2:x:abc", "version 2 summary", id="newer-version"),
        pytest.param("sp1:abc", "no ':<payload>'", id="no-payload"),
        pytest.param("sp1::zzzz", "not valid base32hex", id="bad-alphabet"),
        pytest.param("sp1::abcdefgh", "does not decompress", id="not-zlib"),
    ],
)
def test_malformed_admin_comment_errors(text: str, message: str) -> None:
    with pytest.raises(codec.AdminCommentError, match=message):
        codec.decode(text)


def test_truncated_summary_is_an_error() -> None:
    token = codec.encode(DOC)
    with pytest.raises(codec.AdminCommentError, match="cut short"):
        codec.decode(token[:-7])
