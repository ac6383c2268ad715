"""A job's AdminComment: the site's text and slurmpool's parts, one grammar.

Two writers share the field: the prolog's requeue note (through slurmctld,
``scontrol update``) and the GPU summary (through slurmdbd, ``sacctmgr``).
Each writes only its own part and keeps everything else as it was::

    <site's text> | slurmpool: <requeue note> | sp1:<index>:<payload>

Every part is optional; present ones are joined by `` | `` in that order, so
the value is the same whichever writer came last.  slurmpool's parts are the
trailing `` | ``-separated segments that start with ``slurmpool:`` (the note)
or are one ``sp<N>:`` word (the summary); the site's text is the rest,
verbatim, whatever it holds (an admin's ``sp1:ABC def`` included).  A summary
appended with a space by older slurmpool (``site note sp1:...``) is read as
the summary too (and a note after it).  Parsing is case-blind: 22.05's
sacctmgr lowercases the whole value.

Standard library only: the prolog and the epilog use it.
"""

from __future__ import annotations

import re

from slurmpool.records import record

SEPARATOR = " | "
NOTE_MARKER = "slurmpool:"
_SUMMARY_WORD = re.compile(r"sp[0-9]+:\S*\Z", re.I)


def is_summary_word(text: str) -> bool:
    """``text`` is one ``sp<N>:`` word: the summary part of an AdminComment."""
    return _SUMMARY_WORD.match(text) is not None


@record(frozen=True, slots=True)
class AdminComment:
    site: str = ""  # the site's text, verbatim
    note: str | None = None  # slurmpool's requeue note, without its marker
    summary: str | None = None  # the ``sp<N>:`` word of the GPU summary

    @classmethod
    def parse(cls, text: str | None) -> AdminComment:
        rest = text or ""
        note: str | None = None
        summary: str | None = None
        while rest:
            head, sep, tail = rest.rpartition(SEPARATOR)
            part = tail.strip()
            if summary is None and note is None and is_summary_word(part):
                summary = part
            elif note is None and part[: len(NOTE_MARKER)].casefold() == NOTE_MARKER:
                note = part[len(NOTE_MARKER) :].strip()
            else:
                break
            rest = head if sep else ""
        if summary is None:
            # Older slurmpool appended the summary to the site's words with a space,
            # and its requeue note after that.
            head, _, last = rest.rstrip().rpartition(" ")
            if is_summary_word(last):
                summary, rest = last, head.rstrip()
        return cls(rest, note, summary)

    def text(self) -> str:
        """The value to write back."""
        parts = [self.site] if self.site.strip() else []
        if self.note is not None:
            parts.append(f"{NOTE_MARKER} {self.note}".rstrip())
        if self.summary is not None:
            parts.append(self.summary)
        return SEPARATOR.join(parts)

    def with_note(self, note: str) -> AdminComment:
        """The same comment with slurmpool's requeue note set to ``note`` (one line)."""
        return AdminComment(self.site, " ".join(note.split()), self.summary)

    def with_summary(self, word: str) -> AdminComment:
        """The same comment with its summary part set to ``word`` (an ``sp<N>:`` word)."""
        if not is_summary_word(word):
            raise ValueError(f"{word[:40]!r} is not a summary word (sp<N>:..., no spaces)")
        return AdminComment(self.site, self.note, word)
