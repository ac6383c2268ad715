"""Slurm hostlist expressions: expand, compress, match and overlap.

``gpu[001-064,070]`` is 65 names, zero padded to 3 digits; ``a[1-2]b[3-4]``
is the product of its bracket groups; ``gpu[1-4],login1`` lists several
expressions.  A compiled :class:`HostList` keeps the last bracket group of
each expression as integer intervals, so membership and overlap between two
hostlists are decided without expanding them (the 10,000-node case).

Standard library only: the job hooks use :meth:`HostList.contains`.
"""

from __future__ import annotations

import re
from itertools import product

from slurmpool.records import record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

__all__ = [
    "HostList",
    "HostlistError",
    "RangeSet",
    "compress",
    "expand",
    "overlap",
]

_NAME_CHARS = re.compile(r"^[A-Za-z0-9_.\-]*$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)([^\d]*)$")
# A safety valve against "n[1-999999999]" typos reaching expand().
MAX_EXPAND = 1_000_000


class HostlistError(ValueError):
    """A malformed hostlist expression."""


@record(frozen=True, slots=True)
class RangeSet:
    """Names ``prefix + format(n, width) + suffix`` for n in ``intervals``.

    ``width`` is 0 when numbers are not zero padded.  ``intervals`` are
    sorted, disjoint, inclusive ``(lo, hi)`` pairs.
    """

    prefix: str
    width: int
    intervals: tuple[tuple[int, int], ...]
    suffix: str = ""

    def __len__(self) -> int:
        return sum(hi - lo + 1 for lo, hi in self.intervals)

    def names(self) -> Iterator[str]:
        for lo, hi in self.intervals:
            for n in range(lo, hi + 1):
                yield f"{self.prefix}{n:0{self.width}d}{self.suffix}"

    def number_of(self, name: str) -> int | None:
        """The number ``name`` carries in this range set's pattern, or None."""
        p, s = self.prefix, self.suffix
        if len(name) <= len(p) + len(s) or not name.startswith(p) or not name.endswith(s):
            return None
        digits = name[len(p) : len(name) - len(s)] if s else name[len(p) :]
        if not digits.isdigit() or not digits.isascii():
            return None
        n = int(digits)
        # "gpu01" is not in gpu[1-9]; "gpu1" is not in gpu[01-09].
        if f"{n:0{self.width}d}" != digits:
            return None
        return n

    def contains(self, name: str) -> bool:
        n = self.number_of(name)
        if n is None:
            return False
        return any(lo <= n <= hi for lo, hi in self.intervals)


def _merge(intervals: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return tuple(out)


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            if depth:
                raise HostlistError(f"nested '[' in hostlist {expr!r}")
            depth = 1
        elif ch == "]":
            if not depth:
                raise HostlistError(f"unbalanced ']' in hostlist {expr!r}")
            depth = 0
        if ch == "," and not depth:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in hostlist {expr!r}")
    parts.append("".join(cur))
    return parts


def _parse_bracket(body: str, expr: str) -> tuple[int, tuple[tuple[int, int], ...]]:
    """``001-064,070`` -> (width 3, intervals)."""
    width: int | None = None
    intervals: list[tuple[int, int]] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise HostlistError(f"bad range {item!r} in hostlist {expr!r}")
        a, b = m.group(1), m.group(2) or m.group(1)
        lo, hi = int(a), int(b)
        if hi < lo:
            raise HostlistError(f"descending range {item!r} in hostlist {expr!r}")
        w = len(a) if a.startswith("0") and len(a) > 1 else 0
        if width is None:
            width = w
        elif w and w != width:
            raise HostlistError(f"mixed zero padding in hostlist {expr!r}")
        intervals.append((lo, hi))
    return width or 0, _merge(intervals)


def _compile_one(part: str, full: str) -> list[RangeSet | str]:
    """One comma-free expression -> range sets (last group kept symbolic) or plain names."""
    if not part:
        raise HostlistError(f"empty name in hostlist {full!r}")
    pieces = re.split(r"\[([^\]]*)\]", part)
    # pieces alternate: literal, bracket body, literal, ...
    literals = pieces[0::2]
    bodies = pieces[1::2]
    for lit in literals:
        if not _NAME_CHARS.match(lit):
            raise HostlistError(f"invalid character in hostlist {full!r}")
    if not bodies:
        return [part]
    groups = [_parse_bracket(b, full) for b in bodies]
    # Expand every group but the last; the last stays an interval set.
    heads: list[list[str]] = [[literals[0]]]
    for (width, ivs), lit in zip(groups[:-1], literals[1:-1], strict=True):
        heads.append([f"{n:0{width}d}{lit}" for lo, hi in ivs for n in range(lo, hi + 1)])
    width, ivs = groups[-1]
    suffix = literals[-1]
    return [RangeSet("".join(h), width, ivs, suffix) for h in product(*heads)]


class HostList:
    """A compiled hostlist expression (immutable, cheap to test membership)."""

    __slots__ = ("expression", "names_", "ranges")

    def __init__(self, expression: str) -> None:
        expr = expression.strip()
        if not expr:
            raise HostlistError("empty hostlist")
        self.expression = expr
        ranges: list[RangeSet] = []
        names: set[str] = set()
        for part in _split_top(expr):
            for item in _compile_one(part.strip(), expr):
                if isinstance(item, str):
                    names.add(item)
                else:
                    ranges.append(item)
        self.ranges: tuple[RangeSet, ...] = tuple(ranges)
        self.names_: frozenset[str] = frozenset(names)

    def __repr__(self) -> str:
        return f"HostList({self.expression!r})"

    def __len__(self) -> int:
        return len(self.expand())

    def contains(self, name: str) -> bool:
        if name in self.names_:
            return True
        return any(r.contains(name) for r in self.ranges)

    __contains__ = contains

    def size_upper_bound(self) -> int:
        """Names counted with repetition (exact unless the expression repeats names)."""
        return len(self.names_) + sum(len(r) for r in self.ranges)

    def expand(self) -> list[str]:
        """Every name, sorted naturally, without duplicates."""
        if self.size_upper_bound() > MAX_EXPAND:
            raise HostlistError(f"hostlist {self.expression!r} has more than {MAX_EXPAND} names")
        seen = set(self.names_)
        for r in self.ranges:
            seen.update(r.names())
        return sorted(seen, key=natural_key)

    def first_common(self, other: HostList) -> str | None:
        """A name in both hostlists, or None; never expands two big ranges."""
        for n in sorted(self.names_, key=natural_key):
            if other.contains(n):
                return n
        for n in sorted(other.names_, key=natural_key):
            if self.contains(n):
                return n
        for a in self.ranges:
            for b in other.ranges:
                hit = _ranges_common(a, b)
                if hit is not None:
                    return hit
        return None


def _ranges_common(a: RangeSet, b: RangeSet) -> str | None:
    if a.prefix == b.prefix and a.suffix == b.suffix:
        # Both spell n the same way once n has at least max(width) digits.
        floor = 10 ** (max(a.width, b.width) - 1) if a.width != b.width else 0
        i = j = 0
        while i < len(a.intervals) and j < len(b.intervals):
            lo = max(a.intervals[i][0], b.intervals[j][0], floor)
            hi = min(a.intervals[i][1], b.intervals[j][1])
            if lo <= hi:
                return f"{a.prefix}{lo:0{a.width}d}{a.suffix}"
            if a.intervals[i][1] < b.intervals[j][1]:
                i += 1
            else:
                j += 1
        return None
    # Different patterns can still meet ("n[1-20]" and "n1[0-5]"): walk the
    # smaller one and test membership in the other.
    small, big = (a, b) if len(a) <= len(b) else (b, a)
    if not (small.prefix.startswith(big.prefix) or big.prefix.startswith(small.prefix)):
        return None
    for name in small.names():
        if big.contains(name):
            return name
    return None


def natural_key(name: str) -> tuple[tuple[int, str, int], ...]:
    """Sort key that orders ``n2`` before ``n10`` and ``n01`` before ``n1``."""
    out: list[tuple[int, str, int]] = []
    for tok in re.findall(r"\d+|\D+", name):
        if tok.isdigit():
            out.append((1, "", int(tok)))
            out.append((1, tok, 0))
        else:
            out.append((0, tok, 0))
    return tuple(out)


def expand(expr: str) -> list[str]:
    """``gpu[01-03],x`` -> ``['gpu01', 'gpu02', 'gpu03', 'x']`` (sorted, unique)."""
    return HostList(expr).expand()


def overlap(a: str | HostList, b: str | HostList) -> str | None:
    """A host name in both expressions, or None."""
    ha = a if isinstance(a, HostList) else HostList(a)
    hb = b if isinstance(b, HostList) else HostList(b)
    return ha.first_common(hb)


def _fmt_intervals(ivs: Iterable[tuple[int, int]], width: int) -> str:
    return ",".join(
        f"{lo:0{width}d}" if lo == hi else f"{lo:0{width}d}-{hi:0{width}d}" for lo, hi in ivs
    )


def compress(names: Iterable[str]) -> str:
    """The shortest-ish hostlist expression for ``names`` (deterministic).

    Names are grouped by (prefix, suffix, zero padding) around their last
    run of digits; a group of one name stays a plain name.
    """
    plain: set[str] = set()
    padded: dict[tuple[str, str, int], set[int]] = {}
    natural: dict[tuple[str, str], set[int]] = {}
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        m = _TRAILING_DIGITS.match(name)
        if not m:
            plain.add(name)
            continue
        prefix, digits, suffix = m.groups()
        if digits.startswith("0") and len(digits) > 1:
            padded.setdefault((prefix, suffix, len(digits)), set()).add(int(digits))
        else:
            natural.setdefault((prefix, suffix), set()).add(int(digits))
    # An unpadded number with at least `width` digits prints the same padded,
    # so "gpu100" joins gpu[001-099].
    for (prefix, suffix), nums in list(natural.items()):
        widths = sorted((w for (p, s, w) in padded if p == prefix and s == suffix), reverse=True)
        for n in list(nums):
            w = next((w for w in widths if len(str(n)) >= w), None)
            if w is not None:
                padded[(prefix, suffix, w)].add(n)
                nums.discard(n)
        if not nums:
            del natural[(prefix, suffix)]
    exprs: list[str] = list(plain)
    groups = [(p, s, w, nums) for (p, s, w), nums in padded.items()]
    groups += [(p, s, 0, nums) for (p, s), nums in natural.items()]
    for prefix, suffix, width, nums in groups:
        ivs = _merge((n, n) for n in nums)
        if len(nums) == 1:
            exprs.append(f"{prefix}{next(iter(nums)):0{width}d}{suffix}")
        else:
            exprs.append(f"{prefix}[{_fmt_intervals(ivs, width)}]{suffix}")
    return ",".join(sorted(exprs, key=natural_key))
