"""Making untrusted text safe for one log line or an AdminComment."""

from __future__ import annotations

MAX_REASON = 200


def clean(text: str, limit: int = MAX_REASON) -> str:
    """One printable line, at most ``limit`` characters."""
    flat = "".join(c if c.isprintable() else " " for c in text)
    flat = " ".join(flat.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
