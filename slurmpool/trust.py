"""Whether root can trust a path: that no one but root can change what lies there.

The job hooks run as root on every job start.  Every file they execute or
import, and every directory they write into, must be root's alone: owned by
root and writable by neither group nor others, and so must every directory on
the way to it, each symbolic link followed.  A world-writable directory with
the sticky bit (``/tmp``) may lie on the way, since no one can rename or
remove another user's entries in it, but it may not be the path itself.

``install`` refuses a node where this does not hold and ``doctor`` fails on
it; both name the path, what others can do to it, and the fix.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

# "path": the path and the way to it; "children": also each entry directly in the
# directory (a module there shadows the one the hooks mean); "tree": everything below.
Scope = Literal["path", "children", "tree"]


@dataclass(frozen=True, slots=True)
class RootPath:
    """A path the root hooks run, import, read or write, and what it is to them."""

    role: str  # "the hooks' interpreter", "the state dir", ...
    path: str
    scope: Scope = "path"
    may_be_missing: bool = False  # created later, by root: the directory it goes in counts


@dataclass(frozen=True, slots=True)
class Untrusted:
    """A file or directory on the way to a :class:`RootPath` that others can change."""

    role: str
    path: str
    culprit: str  # the file or directory itself, or one on the way to it
    owner_ok: bool
    mode: int | None  # its permission bits when they let others write; None when not

    def text(self) -> str:
        what = []
        if not self.owner_ok:
            what.append("is not owned by root")
        if self.mode is not None:
            what.append(f"has mode {self.mode:04o}, writable by group or others")
        where = "" if self.culprit == self.path else f", on the way to it: {self.culprit}"
        return f"{self.role} {self.path}{where} " + " and ".join(what)

    def fix(self) -> str:
        steps = []
        if not self.owner_ok:
            steps.append(f"chown root:root {self.culprit}")
        if self.mode is not None:
            steps.append(f"chmod go-w {self.culprit}")
        return " && ".join(steps)


def _verdict(st: os.stat_result, *, on_the_way: bool) -> tuple[bool, int | None]:
    """(owned by root, the mode when group or others may write) for one file."""
    mode = stat.S_IMODE(st.st_mode)
    writable = mode & (stat.S_IWGRP | stat.S_IWOTH)
    if on_the_way and stat.S_ISDIR(st.st_mode) and mode & stat.S_ISVTX:
        writable = 0  # sticky: others may add their own entries, not replace root's
    return st.st_uid == 0, mode if writable else None


def symlink_hops(path: Path) -> list[Path]:
    """``path`` and each link it goes through, as the kernel follows them (a venv's
    ``bin/python`` -> ``python3`` -> ``/usr/bin/python3.11``)."""
    hops = [path]
    while hops[-1].is_symlink():
        if len(hops) > 40:  # the kernel's own limit on links followed
            raise OSError(f"too many levels of symbolic links at {path}")
        link = Path(os.readlink(hops[-1]))
        hops.append(link if link.is_absolute() else hops[-1].parent / link)
    return hops


def directories_on_the_way(path: Path) -> list[Path]:
    """Every directory the kernel walks to reach ``path``: those of its literal path,
    then those of each link it follows, as written and as resolved (a directory on
    the way may itself be a link), in order, each once."""
    chain = [
        d
        for hop in symlink_hops(path)
        for d in (
            *reversed(hop.parents),
            *reversed(hop.parent.resolve().parents),
            hop.parent.resolve(),
        )
    ]
    return list(dict.fromkeys(chain))


def check(paths: Iterable[RootPath]) -> list[Untrusted]:
    """What others can change among ``paths``, each culprit named once (for the first
    path it is on the way to)."""
    seen: set[str] = set()
    out: list[Untrusted] = []
    for rp in paths:
        for u in _check_one(rp):
            if u.culprit not in seen:
                seen.add(u.culprit)
                out.append(u)
    return out


def _check_one(rp: RootPath) -> Iterator[Untrusted]:
    path = Path(rp.path)
    if not path.is_absolute():
        yield Untrusted(rp.role, rp.path, rp.path, True, None)
        return
    if rp.may_be_missing and not os.path.lexists(path):
        # Root creates it later: the nearest directory that exists decides who else could.
        existing = next(p for p in path.parents if p.exists())
        yield from _walk(rp, existing)
        return
    yield from _walk(rp, path)
    if rp.scope != "path" and path.is_dir():
        yield from _below(rp, path.resolve(), recursive=rp.scope == "tree")


def _walk(rp: RootPath, path: Path) -> Iterator[Untrusted]:
    try:
        way = directories_on_the_way(path)
    except OSError:
        return  # a link loop: nothing resolves, so nothing is run or written there
    for d in way:
        yield from _judge(rp, d, on_the_way=True)
    yield from _judge(rp, path.resolve(), on_the_way=False)


def _judge(rp: RootPath, p: Path, *, on_the_way: bool, follow: bool = True) -> Iterator[Untrusted]:
    try:
        st = p.stat() if follow else p.lstat()
    except OSError:
        return  # gone, or never there: nothing anyone could have changed
    owner_ok, mode = _verdict(st, on_the_way=on_the_way)
    if not owner_ok or mode is not None:
        yield Untrusted(rp.role, rp.path, str(p), owner_ok, mode)


def _below(rp: RootPath, top: Path, *, recursive: bool) -> Iterator[Untrusted]:
    for entry in sorted(os.scandir(top), key=lambda e: e.name):
        p = Path(entry.path)
        if entry.is_symlink():
            yield from _walk(rp, p)  # where it leads must be root's alone as well
            continue
        yield from _judge(rp, p, on_the_way=False, follow=False)
        if recursive and entry.is_dir(follow_symlinks=False):
            yield from _below(rp, p, recursive=True)
