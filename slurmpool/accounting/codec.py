"""The AdminComment encoding of a job's GPU summary.

One whitespace-free word::

    sp1:<index>:<payload>

- ``sp1:`` is the format version;
- ``<payload>`` is base32hex (RFC 4648 "extended hex", ``0-9a-v``, unpadded,
  lowercase) of the zlib-compressed JSON summary: the whole truth, read by
  ``jobstats`` and ``accounting decode``;
- ``<index>`` is the few numbers a pool report needs per device, in clear,
  so a report over millions of jobs does not decompress and parse JSON for
  each (see :mod:`.summary` for its fields).  It may be empty.

Slurm 22.05's ``sacctmgr`` lowercases the whole value it stores and turns
double quotes into backticks (SLURM_FACTS.md).  The word is written
lowercase and holds neither quotes nor upper-case letters, so what comes
back from ``sacct`` decodes to exactly what was written; decoding still
casefolds, in case a newer Slurm keeps the case.  Base32hex is also
Python's ``int(text, 32)``: unpacking is one C call.

An AdminComment may hold a site's own text and slurmpool's requeue note; the
summary is its last part (:mod:`slurmpool.slurm.admin_comment`).

Standard library only: the epilog encodes.
"""

from __future__ import annotations

import base64
import json
import re
import zlib

from slurmpool.slurm.admin_comment import AdminComment

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PREFIX = "sp1:"
_OTHER_VERSION = re.compile(r"^sp([0-9]+):", re.I)
_INDEX_UNSAFE = re.compile(r"[^a-z0-9.,;/_+\-]")


class AdminCommentError(ValueError):
    """An AdminComment is not a summary this slurmpool can read (the message says why)."""


def clean_index(index: str) -> str:
    """``index`` lowercased, with anything outside ``[a-z0-9.,;/_+-]`` replaced by ``_``."""
    return _INDEX_UNSAFE.sub("_", index.lower())


def pack(data: bytes) -> str:
    """Unpadded lowercase base32hex of ``data``."""
    return base64.b32hexencode(data).decode("ascii").rstrip("=").lower()


def unpack(body: str) -> bytes:
    """The bytes of unpadded base32hex ``body`` (any case); ValueError if it is not that."""
    n = len(body)
    nbytes = n * 5 // 8
    if n * 5 - nbytes * 8 >= 5:  # 1, 3 or 6 trailing characters cannot end a base32 text
        raise ValueError(f"{n} characters is not a whole number of bytes")
    if not body.isalnum():
        raise ValueError("characters outside 0-9, a-v")
    value = int(body, 32) if body else 0
    return (value >> (n * 5 - nbytes * 8)).to_bytes(nbytes, "big")


def encode(summary: dict[str, Any], index: str = "") -> str:
    """The ``sp1:<index>:<payload>`` word of ``summary`` (see the module docstring)."""
    raw = json.dumps(summary, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    return f"{PREFIX}{clean_index(index)}:{pack(zlib.compress(raw.encode('ascii'), 9))}"


def find_token(admin_comment: str | None) -> str | None:
    """The ``sp1:`` summary word of an AdminComment, or None when it holds none
    (the summary part, :mod:`slurmpool.slurm.admin_comment`)."""
    word = AdminComment.parse(admin_comment).summary
    return word if word is not None and word[:4].casefold() == PREFIX else None


def split_token(token: str) -> tuple[str, str]:
    """``(index, payload)`` of an ``sp1:`` word; AdminCommentError when it has no payload."""
    body = token[len(PREFIX) :]
    index, sep, payload = body.rpartition(":")
    if not sep:
        raise AdminCommentError(
            f"AdminComment summary {token[:40]!r} has no ':<payload>' after the index"
        )
    return index, payload


def _missing(text: str) -> AdminCommentError:
    for word in (text or "").split():
        m = _OTHER_VERSION.match(word)
        if m:
            return AdminCommentError(
                f"AdminComment holds a version {m.group(1)} summary ({word[:12]!r}...); "
                f"this slurmpool reads {PREFIX!r}; upgrade slurmpool"
            )
    shown = (text or "")[:60]
    return AdminCommentError(
        f"AdminComment {shown!r} holds no slurmpool summary (expected a word starting "
        f"with {PREFIX!r})"
    )


def index_of(text: str) -> str | None:
    """The clear-text index of the summary in ``text``; None when it holds no summary."""
    token = find_token(text)
    if token is None:
        return None
    body = token[len(PREFIX) :]
    index, sep, _payload = body.rpartition(":")
    return index.casefold() if sep else None


def decode(text: str) -> dict[str, Any]:
    """The summary in ``text`` (an AdminComment or its ``sp1:`` word).

    Raises :class:`AdminCommentError` naming what is wrong: no ``sp1:`` word,
    another version, damaged base32, data that does not decompress, or JSON
    that is not an object.
    """
    token = find_token(text)
    if token is None:
        raise _missing(text)
    _index, payload = split_token(token)
    try:
        packed = unpack(payload.casefold())
    except (ValueError, OverflowError) as e:
        raise AdminCommentError(
            f"AdminComment summary is not valid base32hex ({e}); it may have been cut short"
        ) from None
    try:
        raw = zlib.decompress(packed)
    except zlib.error as e:
        raise AdminCommentError(
            f"AdminComment summary does not decompress ({e}); it may have been cut short"
        ) from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise AdminCommentError(f"AdminComment summary is not JSON: {e}") from None
    if not isinstance(data, dict):
        raise AdminCommentError(
            f"AdminComment summary is a JSON {type(data).__name__}, expected an object"
        )
    return data
