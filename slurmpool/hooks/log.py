"""One structured line per hook action, to syslog, stderr and an optional file.

Lines are ``key=value`` pairs; values with spaces, quotes, ``=`` or control
characters are JSON-quoted, so a hostile job name can never start a new
line or forge a field.
"""

from __future__ import annotations

import json
import os
import sys
import time

from slurmpool.safefs import open_append

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import TextIO

_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:/@+-,[]")


def quote(value: object) -> str:
    text = str(value)
    if text and all(c in _PLAIN for c in text):
        return text
    return json.dumps(text, ensure_ascii=True)


def format_line(fields: Mapping[str, object]) -> str:
    return " ".join(f"{k}={quote(v)}" for k, v in fields.items())


class HookLog:
    """Writes each event to syslog (LOG_DAEMON), ``stream`` and ``path`` if set.

    Failures to log never fail the hook (the TaskProlog runs as the job's
    user and may not write the node's log file).
    """

    def __init__(
        self,
        hook: str,
        stream: TextIO | None = None,
        path: str | None = None,
        use_syslog: bool = True,
    ) -> None:
        self.hook = hook
        self.stream = sys.stderr if stream is None else stream
        self.path = path
        self._syslog = None
        if use_syslog:
            try:
                import syslog

                syslog.openlog("slurmpool", syslog.LOG_PID, syslog.LOG_DAEMON)
                self._syslog = syslog
            except (ImportError, OSError):
                self._syslog = None

    def event(
        self,
        action: str,
        fields: Mapping[str, object] | None = None,
        level: str = "info",
        **more: object,
    ) -> str:
        """Log one action with ``fields`` (and keyword ``more``); return the line."""
        line = format_line(
            {"hook": self.hook, "action": action, "level": level, **(fields or {}), **more}
        )
        if self._syslog is not None:
            priority = self._syslog.LOG_ERR if level == "error" else self._syslog.LOG_INFO
            try:  # noqa: SIM105 (contextlib stays off the hook path)
                self._syslog.syslog(priority, line)
            except OSError:
                pass
        try:
            self.stream.write(f"slurmpool: {line}\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass
        if self.path:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            try:
                fd = open_append(self.path, 0o600)  # never through a link, nor into a FIFO
                with os.fdopen(fd, "a") as f:
                    f.write(f"{stamp} pid={os.getpid()} {line}\n")
            except OSError:
                pass
        return line
