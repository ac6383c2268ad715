"""slurm.conf settings whose value is a list, and how slurmpool's items join a site's.

A site that runs Slurm already has its own ``GresTypes=gpu,shard`` or
``AccountingStorageTRES=gres/gpu,license/matlab``; slurmpool needs items of its own in
the same settings.  Slurm keeps one value per key (the last line wins), so the two
lists become one: the site's items first, in the site's order, then slurmpool's items
the site lacks (pure: :func:`merge`).

``SchedulerParameters`` and similar settings hold ``name=value`` items: an item of
slurmpool's whose name the site gives another value is a conflict, which
:func:`merge` reports rather than choose.
"""

from __future__ import annotations

from slurmpool.records import record

# Lower-case key -> whether its items compare case-sensitively (GRES names are; Slurm
# reads plugin names, flags and TRES names in any case).
LIST_KEYS: dict[str, bool] = {
    "grestypes": True,
    "accountingstoragetres": False,
    "jobsubmitplugins": False,
    "prologflags": False,
    "schedulerparameters": False,
    "accountingstorageenforce": False,
}


@record(frozen=True, slots=True)
class Merged:
    value: str  # the joined list, as it goes into slurm.conf
    added: tuple[str, ...]  # slurmpool's items the site lacked
    conflicts: tuple[str, ...]  # "name: site has X, slurmpool needs Y"


def is_list_key(key: str) -> bool:
    return key.lower() in LIST_KEYS


def items(value: str) -> list[str]:
    """The comma-separated items of ``value``, stripped, empty ones left out."""
    return [item.strip() for item in value.split(",") if item.strip()]


def merge(key: str, site: str, ours: str) -> Merged:
    """The site's list ``site`` joined with slurmpool's ``ours`` for setting ``key``.

    An item counts as the site's when it is the same item (``name=value`` items: the
    same name); a ``name=value`` item of ours whose name the site sets to another value
    is a conflict, and the site's value stays in the joined list.
    """
    sensitive = LIST_KEYS.get(key.lower())
    if sensitive is None:
        raise ValueError(f"{key} is not a list setting slurmpool merges")

    def name(item: str) -> str:
        head = item.split("=", 1)[0].strip()
        return head if sensitive else head.lower()

    def norm(item: str) -> str:
        return item if sensitive else item.lower()

    joined = items(site)
    by_name = {name(item): item for item in joined}
    added: list[str] = []
    conflicts: list[str] = []
    for item in items(ours):
        theirs = by_name.get(name(item))
        if theirs is None:
            joined.append(item)
            by_name[name(item)] = item
            added.append(item)
        elif norm(theirs) != norm(item):
            conflicts.append(f"{name(item)}: the site has {theirs}, slurmpool needs {item}")
    return Merged(",".join(joined), tuple(added), tuple(conflicts))
