"""``--since``/``--until`` values: ISO dates and times, ``now``, and ``-7d``/``-12h`` offsets."""

from __future__ import annotations

import re
import time
from datetime import datetime

_REL = re.compile(r"^(?:now)?-([0-9]+)([dhm])$")
_UNIT = {"d": 86400, "h": 3600, "m": 60}


class TimeSpecError(ValueError):
    pass


def parse_time(text: str, now: float | None = None) -> float:
    """Epoch seconds of ``text`` (local time for ISO values)."""
    t = time.time() if now is None else now
    value = text.strip().lower()
    if value == "now":
        return t
    m = _REL.match(value)
    if m:
        return t - int(m.group(1)) * _UNIT[m.group(2)]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise TimeSpecError(
            f"cannot read the time {text!r}: expected YYYY-MM-DD[THH:MM[:SS]], 'now', "
            "or an offset like -7d, -12h, -30m"
        ) from None


def sacct_time(epoch: float) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` local time, as sacct's -S/-E take it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))
