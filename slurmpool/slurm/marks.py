"""How slurmpool marks what it changed in a site's own Slurm files, and takes it back.

install edits files the site owns (slurm.conf, cgroup.conf, gres.conf) in place, in
three ways, each visible in the file itself:

* a site line set aside is commented out behind :data:`DISABLED_PREFIX`;
* a line slurmpool adds ends with :data:`ADDED_MARKER`;
* a block of slurmpool's lines sits between :data:`BLOCK_BEGIN` and :data:`BLOCK_END`.

Uninstall gives back the recorded bytes where the file is as install left it; where
an admin has edited it since, :func:`unmark` undoes the three and keeps the rest.
"""

from __future__ import annotations

from slurmpool.records import record

DISABLED_PREFIX = "#slurmpool-disabled: "
ADDED_MARKER = "#slurmpool-added"
BLOCK_BEGIN = "#slurmpool-begin"
BLOCK_END = "#slurmpool-end"


@record(frozen=True, slots=True)
class LineEdit:
    """One line of a site file that an edit changes, and why (``--dry-run`` says it)."""

    line: int  # 1-based, in the edited text
    before: str | None  # the site's line; None: a line added
    reason: str


def set_aside(line: str) -> str:
    """``line`` (with its newline, if any) commented out."""
    return DISABLED_PREFIX + line


def added(body: str) -> str:
    """``body`` (no newline) as a line slurmpool adds."""
    return f"{body} {ADDED_MARKER}"


def block(lines: list[str], why: str) -> list[str]:
    """``lines`` (each with its newline) between the block markers."""
    return [f"{BLOCK_BEGIN}: {why}\n", *lines, f"{BLOCK_END}\n"]


def unmark(text: str) -> str:
    """``text`` with slurmpool's added lines and blocks removed and set-aside lines back."""
    out: list[str] = []
    inside = False
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\n")
        if inside:
            inside = body != BLOCK_END
            continue
        if body.startswith(BLOCK_BEGIN):
            inside = True
            continue
        if body.endswith(ADDED_MARKER):
            continue
        out.append(line.removeprefix(DISABLED_PREFIX))
    return "".join(out)


def marked_lines(text: str) -> list[str]:
    """The lines of ``text`` that :func:`unmark` removes or changes (without newlines):
    what uninstall checks are still as install wrote them before it takes them back."""
    out: list[str] = []
    inside = False
    for line in text.splitlines():
        if inside or line.startswith((BLOCK_BEGIN, DISABLED_PREFIX)) or line.endswith(ADDED_MARKER):
            out.append(line)
            inside = (inside or line.startswith(BLOCK_BEGIN)) and line != BLOCK_END
    return out
