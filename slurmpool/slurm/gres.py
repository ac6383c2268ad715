"""GRES strings as Slurm prints them (``gpu:a100:1(IDX:0)``, ``gres/vgpu:2``, ...).

Pure and small: the prolog parses its allocation with these and nothing else of
:mod:`slurmpool.slurm.parse`.
"""

from __future__ import annotations

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


@record(frozen=True, slots=True)
class Gres:
    """One GRES item, e.g. ``gpu:a100:1(IDX:0)`` -> name gpu, type a100, count 1."""

    name: str
    type: str | None
    count: int
    detail: str | None = None  # what was in parentheses: "IDX:0", "S:0", "CNT:2"

    def __str__(self) -> str:
        base = self.name if self.type is None else f"{self.name}:{self.type}"
        return f"{base}:{self.count}"

    @property
    def key(self) -> str:
        return self.name if self.type is None else f"{self.name}:{self.type}"


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    if current:
        parts.append(current)
    return parts


def parse_gres(text: str | None) -> list[Gres]:
    """Parse a GRES list as Slurm prints it.

    Accepts ``gpu:a100:1,vgpu:14``, ``gpu:a100:1(S:0)``, ``vgpu:2(CNT:2)``,
    the TRES forms ``gres:vgpu:3`` and ``gres/vgpu:2``, and ``(null)``.
    A missing count means 1.
    """
    if text is None:
        return []
    text = text.strip()
    if not text or text in ("(null)", "N/A"):
        return []
    items: list[Gres] = []
    for part in _split_top_level(text):
        part = part.strip()
        detail = None
        if "(" in part and part.endswith(")"):
            part, detail = part[: part.index("(")], part[part.index("(") + 1 : -1]
        if part.startswith("gres:"):
            part = part[len("gres:") :]
        elif part.startswith("gres/"):
            part = part[len("gres/") :]
        fields = part.split(":")
        count = 1
        if len(fields) > 1 and fields[-1].isdigit():
            count = int(fields.pop())
        if not fields or not fields[0] or len(fields) > 2:
            raise ValueError(f"cannot parse GRES item {part!r}; expected NAME[:TYPE][:COUNT]")
        if detail is not None and detail.startswith("CNT:") and detail[4:].isdigit():
            count = int(detail[4:])  # 22.05 `show job -d`: "vgpu(CNT:3)"
        items.append(Gres(fields[0], fields[1] if len(fields) == 2 else None, count, detail))
    return items


def gres_totals(items: list[Gres]) -> dict[str, int]:
    """Count per ``name`` and per ``name:type`` (the untyped total includes typed items)."""
    totals: dict[str, int] = {}
    for g in items:
        totals[g.name] = totals.get(g.name, 0) + g.count
        if g.type is not None:
            totals[g.key] = totals.get(g.key, 0) + g.count
    return totals


def format_gres(items: Iterable[Gres]) -> str:
    """A GRES list as ``scontrol update NodeName=... Gres=`` takes it: ``NAME[:TYPE]:COUNT``
    items without the details Slurm prints, such as ``(S:0-7)``.

    Measured on 22.05 (``tests/data/probe-count-gres.sh``): an update without a core
    binding keeps the one gres.conf gives (the node still prints ``(S:0-7)``).
    """
    return ",".join(str(g) for g in items)


def with_counts(items: Sequence[Gres], name: str, counts: Mapping[str, int]) -> list[Gres]:
    """``items`` with the count of each ``name:TYPE`` that ``counts`` keys by TYPE set to
    its value; every other item (the site's GRES, types ``counts`` does not name) kept
    as it is and where it is.

    ``scontrol update NodeName=... Gres=`` replaces the node's whole list, and a GRES it
    leaves out is lost until slurmctld restarts: an update is built from the whole list.
    A type ``counts`` names that ``items`` lack is not added.
    """
    out = []
    for g in items:
        if g.name == name and g.type is not None and g.type in counts:
            g = Gres(g.name, g.type, counts[g.type])
        out.append(g)
    return out


def type_counts(items: Iterable[Gres], name: str) -> dict[str, int]:
    """The count of each type of GRES ``name`` in ``items`` (a node's Gres or GresUsed)."""
    out: dict[str, int] = {}
    for g in items:
        if g.name == name and g.type is not None:
            out[g.type] = out.get(g.type, 0) + g.count
    return out
