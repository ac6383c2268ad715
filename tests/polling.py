"""Waiting on state, the one way the tests wait (integration and unit alike)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def poll(
    what: str,
    check: Callable[[], Any],
    timeout_s: float = 30,
    interval_s: float = 0.3,
    seen: Callable[[], str] | None = None,
) -> Any:
    """``check()``'s first true value.  ``timeout_s`` is a generous bound only a real
    failure reaches; then the test fails saying what it waited for and, with ``seen``,
    what it saw last."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"; last seen: {seen()}" if seen is not None else ""
            raise AssertionError(f"waited {timeout_s:g} s for {what}{detail}")
        time.sleep(interval_s)
