"""Who gets an association in the sandbox: root and every login user of this machine.

Without an association a job's account is empty (reports say ``(unknown)``), so at
``up`` the sandbox gives one, under its default account, to root and to every
account whose UID lies in the range ``/etc/login.defs`` gives to people
(``UID_MIN``..``UID_MAX``, 1000..60000 when the file does not say).  A user made
later gets one with ``slurmpool sandbox add-user NAME``.
"""

from __future__ import annotations

from collections.abc import Iterable

DEFAULT_UID_RANGE = (1000, 60000)


def login_uid_range(login_defs: str) -> tuple[int, int]:
    """``(UID_MIN, UID_MAX)`` from the text of /etc/login.defs."""
    found: dict[str, int] = {}
    for line in login_defs.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) == 2 and fields[0] in ("UID_MIN", "UID_MAX"):
            try:
                found[fields[0]] = int(fields[1])
            except ValueError:
                continue
    return found.get("UID_MIN", DEFAULT_UID_RANGE[0]), found.get("UID_MAX", DEFAULT_UID_RANGE[1])


def login_users(entries: Iterable[tuple[str, int]], uid_range: tuple[int, int]) -> list[str]:
    """root, then the names of ``entries`` (name, uid) in ``uid_range``, each once, sorted."""
    low, high = uid_range
    people = sorted({name for name, uid in entries if low <= uid <= high and name != "root"})
    return ["root", *people]


def machine_login_users() -> list[str]:
    """:func:`login_users` of this machine's password database."""
    import pwd

    try:
        with open("/etc/login.defs", encoding="utf-8", errors="replace") as f:
            uid_range = login_uid_range(f.read())
    except OSError:
        uid_range = DEFAULT_UID_RANGE
    return login_users(((p.pw_name, p.pw_uid) for p in pwd.getpwall()), uid_range)
