"""The one jinja2 environment every generated file is rendered with, and its filters.

Strict (an undefined name is an error, never an empty string), no HTML
escaping, block tags on lines of their own leave no blank lines, and a
file's trailing newline is kept.  Filters: ``lua`` (a Lua 5.1 string
literal) and ``sh`` (one shell word).
"""

from __future__ import annotations

import shlex
from functools import lru_cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    import jinja2


def lua_string(value: object) -> str:
    """A Lua 5.1 literal for ``value`` (None -> nil); non-printable bytes become ``\\ddd``."""
    if value is None:
        return "nil"
    out = ['"']
    for byte in str(value).encode():
        ch = chr(byte)
        if ch.isascii() and (ch.isalnum() or ch in " _.,:/+-=()[]"):
            out.append(ch)
        else:
            out.append(f"\\{byte:03d}")
    out.append('"')
    return "".join(out)


@lru_cache(maxsize=4)
def shell_word(value: object) -> str:
    """``value`` as one POSIX shell word."""
    return shlex.quote(str(value))


@lru_cache(maxsize=4)
def environment(directory: str | None = None) -> jinja2.Environment:
    """The environment over ``directory`` (the shipped templates by default)."""
    import jinja2

    from slurmpool.resources import templates_dir

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory or templates_dir()),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["lua"] = lua_string
    env.filters["sh"] = shell_word
    return env
