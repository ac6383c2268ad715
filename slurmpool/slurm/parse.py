"""Pure parsers for the text Slurm commands print.

``scontrol show node|job`` prints records of ``Key=Value`` pairs, several per
line, continuation lines indented.  Values may contain spaces (``OS=Linux
6.1 #1 SMP``, ``Reason=...``, a job name).  A whitespace-separated token that
looks like ``Key=`` starts a new pair; any other token continues the value
before it.  Keys that Slurm prints last on their line and that hold
free-form text (``JobName``, ``OS``, ``Reason``, paths) take the rest of the
line.  A line that is neither indented nor starts a record continues the
previous value (a job name containing a newline).

Tested on recorded output under ``tests/data/slurm-<version>/``.
"""

from __future__ import annotations

import re

from slurmpool.records import field, record
from slurmpool.slurm.gres import Gres as Gres  # re-exported: callers find them here too
from slurmpool.slurm.gres import gres_totals as gres_totals
from slurmpool.slurm.gres import parse_gres as parse_gres

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

_KEY_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_:/.\-]*)=(.*)$", re.S)

# Keys whose value is the rest of the line in multi-line output: free text, last
# on its line.  A job's Reason is not (``Reason=Resources Dependency=(null)``); a
# node's is.  SubmitLine (26.05) is the user's whole command line.
NODE_TEXT_KEYS = frozenset({"OS", "Reason", "Comment", "Extra"})
JOB_TEXT_KEYS = frozenset(
    {
        "JobName",
        "Command",
        "SubmitLine",
        "WorkDir",
        "StdErr",
        "StdIn",
        "StdOut",
        "Comment",
        "AdminComment",
        "SystemComment",
        "Extra",
    }
)
_TEXT_KEYS = {"NodeName": NODE_TEXT_KEYS, "JobId": JOB_TEXT_KEYS}


@record(frozen=True, slots=True)
class Record:
    """One ``scontrol show`` record: ordered pairs, repeated keys kept."""

    pairs: tuple[tuple[str, str], ...]

    def get(self, key: str, default: str | None = None) -> str | None:
        for k, v in self.pairs:
            if k == key:
                return v
        return default

    def all(self, key: str) -> list[str]:
        return [v for k, v in self.pairs if k == key]

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return any(k == key for k, _ in self.pairs)

    def as_dict(self) -> dict[str, str]:
        """First value of every key."""
        out: dict[str, str] = {}
        for k, v in self.pairs:
            out.setdefault(k, v)
        return out


def _line_pairs(
    line: str, rest_of_line: frozenset[str] = frozenset()
) -> Iterator[tuple[str | None, str]]:
    """Split one line into (key, value) pieces; key None continues the previous value.
    A key in ``rest_of_line`` takes the rest of the line."""
    tokens = line.split()
    i = 0
    while i < len(tokens):
        m = _KEY_RE.match(tokens[i])
        if m is None:
            yield None, tokens[i]
            i += 1
            continue
        key, value = m.group(1), m.group(2)
        if key in rest_of_line:
            # Keep the original spacing of the rest of the line.
            start = line.index(tokens[i]) + len(key) + 1
            yield key, line[start:].rstrip("\n")
            return
        i += 1
        while i < len(tokens) and _KEY_RE.match(tokens[i]) is None:
            value += " " + tokens[i]
            i += 1
        yield key, value


def parse_records(text: str, first_key: str) -> list[Record]:
    """Split ``scontrol show`` output into records, each starting with ``first_key=``.

    Works for the multi-line form and for ``scontrol -o`` (one record a line,
    detected when no line is indented; there free-form values end at the
    next ``Key=`` token).
    """
    lines = text.splitlines()
    multiline = any(line[:1].isspace() and line.strip() for line in lines)
    text_keys = (
        _TEXT_KEYS.get(first_key, NODE_TEXT_KEYS | JOB_TEXT_KEYS) if multiline else frozenset()
    )
    records: list[list[tuple[str, str]]] = []
    for raw in lines:
        if not raw.strip():
            continue
        starts_record = raw.startswith(first_key + "=")
        if starts_record:
            records.append([])
        elif not records:
            continue  # noise before the first record ("No nodes in the system")
        pairs = records[-1]
        if multiline and not starts_record and not raw[:1].isspace() and pairs:
            # A line that is not indented: the previous value had a newline in it.
            k, v = pairs[-1]
            pairs[-1] = (k, v + "\n" + raw)
            continue
        line = raw.lstrip()
        for key, value in _line_pairs(line, text_keys):
            if key is None:
                if pairs:
                    k, v = pairs[-1]
                    pairs[-1] = (k, f"{v} {value}" if v else value)
                continue
            pairs.append((key, value))
    return [Record(tuple(p)) for p in records]


# --- nodes ----------------------------------------------------------------


@record(frozen=True, slots=True)
class NodeInfo:
    name: str
    state: str  # base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: tuple[str, ...]  # DRAIN, NOT_RESPONDING, ... (the "+X" suffixes)
    gres: tuple[Gres, ...]
    gres_used: tuple[Gres, ...]
    reason: str | None
    record: Record = field(repr=False)

    @property
    def available(self) -> bool:
        """Up and not draining: the node takes jobs."""
        bad = {"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "FAIL", "INVALID_REG"}
        return self.state in ("IDLE", "MIXED", "ALLOCATED", "COMPLETING") and not (
            bad & set(self.flags)
        )


def _split_state(state: str) -> tuple[str, tuple[str, ...]]:
    base, *flags = state.split("+")
    return base.upper(), tuple(f.upper() for f in flags)


def parse_nodes(text: str) -> list[NodeInfo]:
    """Parse ``scontrol show node`` output."""
    nodes = []
    for rec in parse_records(text, "NodeName"):
        state, flags = _split_state(rec.get("State", "UNKNOWN") or "UNKNOWN")
        used = rec.get("GresUsed")
        nodes.append(
            NodeInfo(
                name=rec["NodeName"],
                state=state,
                flags=flags,
                gres=tuple(parse_gres(rec.get("Gres"))),
                gres_used=tuple(parse_gres(used)) if used else (),
                reason=rec.get("Reason"),
                record=rec,
            )
        )
    return nodes


# --- jobs -----------------------------------------------------------------


@record(frozen=True, slots=True)
class JobNodeDetail:
    """A ``scontrol show job -d`` allocation line: ``Nodes=sbx1 CPU_IDs=0 Mem=0 GRES=...``."""

    nodes: str
    gres: tuple[Gres, ...]


@record(frozen=True, slots=True)
class JobInfo:
    job_id: int
    name: str
    user: str | None
    uid: int | None
    state: str
    reason: str | None
    partition: str | None
    node_list: str | None
    tres_per_node: tuple[Gres, ...]
    restarts: int
    exit_code: str | None
    comment: str | None
    admin_comment: str | None
    details: tuple[JobNodeDetail, ...]
    record: Record = field(repr=False)


_USER_RE = re.compile(r"^(.*)\((\d+)\)$")


def _user(value: str | None) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    m = _USER_RE.match(value)
    if m is None:
        return value, None
    return m.group(1), int(m.group(2))


def _null(value: str | None) -> str | None:
    return None if value in (None, "(null)", "") else value


def parse_jobs(text: str) -> list[JobInfo]:
    """Parse ``scontrol show job [-d]`` output."""
    jobs = []
    for rec in parse_records(text, "JobId"):
        user, uid = _user(rec.get("UserId"))
        details: list[JobNodeDetail] = []
        current: str | None = None
        for key, value in rec.pairs:
            if key == "Nodes":
                current = value
            elif key == "GRES" and current is not None:
                details.append(JobNodeDetail(current, tuple(parse_gres(value))))
                current = None
        jobs.append(
            JobInfo(
                job_id=int(rec["JobId"]),
                name=rec.get("JobName", "") or "",
                user=user,
                uid=uid,
                state=(rec.get("JobState") or "UNKNOWN").upper(),
                # "None" is Slurm's word for no reason (a running or finished job).
                reason=_null(rec.get("Reason")) if rec.get("Reason") != "None" else None,
                partition=_null(rec.get("Partition")),
                node_list=_null(rec.get("NodeList")),
                tres_per_node=tuple(parse_gres(_null(rec.get("TresPerNode")))),
                restarts=int(rec.get("Restarts", "0") or 0),
                exit_code=rec.get("ExitCode"),
                comment=_null(rec.get("Comment")),
                admin_comment=_null(rec.get("AdminComment")),
                details=tuple(details),
                record=rec,
            )
        )
    return jobs


# --- slurmd -G ------------------------------------------------------------


@record(frozen=True, slots=True)
class GresConfEntry:
    """One GRES line of ``slurmd -G`` (the configuration slurmd parsed)."""

    name: str
    type: str | None
    count: int
    index: int | None
    file: str | None
    fields: dict[str, str]


_GRES_LINE_RE = re.compile(r"\bGres Name=")


def parse_slurmd_gres(text: str) -> list[GresConfEntry]:
    """Parse ``slurmd -G`` output (lines ``... Gres Name=gpu Type=a100 Count=1 ...``).

    Lines appear on stdout or stderr, prefixed with ``slurmd: ``; other lines
    are ignored.
    """
    entries = []
    for line in text.splitlines():
        m = _GRES_LINE_RE.search(line)
        if m is None:
            continue
        fields: dict[str, str] = {}
        # Only Key=Value tokens count; slurmd appends bare "(null)" flags.
        for token in line[m.start() + len("Gres ") :].split():
            key, sep, value = token.partition("=")
            if sep:
                fields[key] = value
        type_ = _null(fields.get("Type"))
        index = fields.get("Index")
        entries.append(
            GresConfEntry(
                name=fields.get("Name", ""),
                type=type_,
                count=int(fields.get("Count", "0") or 0),
                index=int(index) if index is not None and index.lstrip("-").isdigit() else None,
                file=_null(fields.get("File")),
                fields=fields,
            )
        )
    return entries
