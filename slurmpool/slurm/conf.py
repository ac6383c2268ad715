"""Reading ``slurm.conf`` lines: which line sets which key.

Slurm keys are case-insensitive, ``#`` starts a comment, and a line holds
one ``Key=Value`` setting (or several for ``NodeName=``/``PartitionName=``
lines, where the first key names the line).  Only what install and doctor
need is modelled; nothing here rewrites a file.
"""

from __future__ import annotations

import re

from slurmpool.records import record

_PAIR = re.compile(r'(?P<key>[A-Za-z]+)=(?P<value>"[^"]*"|\S+)')


@record(frozen=True, slots=True)
class ConfLine:
    index: int  # 0-based line number
    text: str  # the line without its newline
    key: str | None  # first key, as written; None for blank/comment lines
    value: str | None  # value of the first key (up to the next whitespace for multi-key lines)

    def is_key(self, key: str) -> bool:
        return self.key is not None and self.key.lower() == key.lower()


def strip_comment(line: str) -> str:
    r"""The line without its ``#`` comment (``\#`` is a literal hash)."""
    out = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line) and line[i + 1] == "#":
            out.append("#")
            i += 2
            continue
        if ch == "#":
            break
        out.append(ch)
        i += 1
    return "".join(out).strip()


def scan_conf(text: str) -> list[ConfLine]:
    lines = []
    for i, raw in enumerate(text.splitlines()):
        body = strip_comment(raw)
        key: str | None = None
        value: str | None = None
        if body:
            first, _, rest = body.partition(" ")
            if "=" in first:
                key, _, value = first.partition("=")
                if key.lower() not in ("nodename", "partitionname", "nodeset", "frontendname"):
                    # A scalar setting: the value is everything after '='.
                    value = body.split("=", 1)[1].strip()
            elif first.lower() == "include":
                key, value = first, rest.strip()
        lines.append(ConfLine(i, raw, key, _unquote(value) if value is not None else None))
    return lines


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def params(body: str) -> list[tuple[str, str]]:
    """The ``Key=Value`` pairs of a line without its comment (``NodeName=`` lines,
    gres.conf lines), in order, keys as written; a quoted value keeps its quotes."""
    return [(m["key"], m["value"]) for m in _PAIR.finditer(body)]


def settings(text: str) -> dict[str, str]:
    """Scalar settings by lower-case key (the last one wins, as in Slurm)."""
    out: dict[str, str] = {}
    for line in scan_conf(text):
        if line.key is not None and line.value is not None:
            out[line.key.lower()] = line.value
    return out


def find_lines(text: str, key: str) -> list[ConfLine]:
    return [line for line in scan_conf(text) if line.is_key(key)]
