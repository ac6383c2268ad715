"""The /etc/hosts the sandbox's Slurm daemons see: this machine's names on 127.0.0.1.

With ``CommunicationParameters=NoInAddrAny`` (loopback only) slurmdbd listens on
the address its own hostname resolves to, while its clients dial the configured
127.0.0.1.  Debian's installer maps the hostname to ``127.0.1.1`` and a real
host maps it to its LAN address, so on such machines slurmdbd listens where
nobody dials (``sacctmgr`` cannot connect, and the sandbox would also listen
beyond loopback).  The daemons therefore run with this file bind-mounted on
/etc/hosts in their own mount namespace: the machine's names resolve to
127.0.0.1 for them alone, whatever the machine's own file says.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

LOOPBACK = "127.0.0.1"


def machine_names() -> list[str]:
    """This machine's hostname, and its first label when the name is qualified."""
    name = os.uname().nodename
    short = name.split(".", 1)[0]
    return [n for n in dict.fromkeys([name, short]) if n]


def loopback_hosts(original: str, names: Iterable[str]) -> str:
    """``original`` (an /etc/hosts text) with ``names`` taken off every line and put
    on a first ``127.0.0.1 localhost ...`` line; every other entry is kept."""
    wanted = list(dict.fromkeys(names))
    drop = {n.lower() for n in wanted} | {"localhost"}
    out = [" ".join([LOOPBACK, "localhost", *[n for n in wanted if n.lower() != "localhost"]])]
    for line in original.splitlines():
        entry, hash_, comment = line.partition("#")
        fields = entry.split()
        if len(fields) < 2:
            out.append(line)
            continue
        kept = [f for f in fields[1:] if f.lower() not in drop]
        if not kept:
            continue
        out.append(" ".join([fields[0], *kept]) + (f"  #{comment}" if hash_ else ""))
    return "\n".join(out) + "\n"
