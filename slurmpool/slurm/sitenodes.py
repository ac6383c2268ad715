"""A site's own ``NodeName=`` and ``PartitionName=`` lines for what the policy also defines.

Slurm refuses a node or partition defined twice, and a site that runs Slurm already
defines its nodes and partitions.  So where the site's ``slurm.conf`` defines a node
of the policy, the site's line stays the definition, edited in place:

* its ``Gres=`` loses the GPU GRES (``gpu``, ``shard``, ``mps``: slurmpool describes
  every GPU of its node groups) and gains slurmpool's; its other GRES stay;
* features the policy gives the node are appended to its ``Features=``; a setting
  the policy gives and the site's line lacks is added; every other site value wins;
* a line whose nodes fall in several node groups, or partly outside the policy, is
  split: one copy per group, one for the rest, each with its own hostlist.

A site partition of a policy partition's name stays the definition too: an option
the policy asks for that the line lacks is added, the fit anchors join its
``Nodes=``, and where the two disagree (an option's value, or policy nodes the
partition lacks) the edit is refused, naming both.  slurmpool's fragment then keeps
only the nodes and partitions the site does not define.

A line edited is set aside and its edited copies added after it
(:mod:`slurmpool.slurm.marks`); ``NodeName=DEFAULT`` values in force at the line
count as the line's own.  Pure: text in, text out.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurmpool.hostlist import HostList, compress
from slurmpool.records import record
from slurmpool.slurm.conf import params, strip_comment
from slurmpool.slurm.marks import LineEdit, added, set_aside

GPU_GRES = ("gpu", "shard", "mps", "vgpu", "vgpufit")  # what slurmpool's Gres= says
_FEATURE_KEYS = ("features", "feature")


@record(frozen=True, slots=True)
class PolicyNodes:
    """A policy node group's ``NodeName=`` line, as slurmpool generates it."""

    group: str
    line: str  # NodeName=... (the fragment's line)
    anchor: str | None = None  # the name of the group's fit anchor, if it has one


@record(frozen=True, slots=True)
class PolicyPartition:
    name: str
    line: str  # PartitionName=... (the fragment's line)
    anchors: tuple[str, ...]  # the fit anchors among its nodes


@record(frozen=True, slots=True)
class NodesEdit:
    text: str
    fragment: str  # slurmpool's fragment without what the site defines
    changes: tuple[LineEdit, ...]
    refusals: tuple[str, ...]
    inserted: tuple[int, ...]  # 0-based indices, in the site's text, of lines added after


def policy_definitions(
    fragment: str, groups: Sequence[tuple[str, str, str | None]]
) -> tuple[list[PolicyNodes], list[PolicyPartition]]:
    """The node group and partition lines of slurmpool's generated ``fragment``;
    ``groups``: (name, hostlist, fit anchor or None) of each node group."""
    names = {nodes: (name, anchor) for name, nodes, anchor in groups}
    nodes: list[PolicyNodes] = []
    anchors: set[str] = set()
    lines = []
    for line in fragment.splitlines():
        pairs = params(strip_comment(line))
        if not pairs:
            continue
        key, value = pairs[0][0].lower(), pairs[0][1]
        if key == "nodename" and (_get(pairs, "state") or "").upper() == "FUTURE":
            anchors.add(value)  # a fit anchor: slurmpool's own node
        elif key == "nodename":
            name, anchor = names.get(value, (value, None))
            nodes.append(PolicyNodes(name, line, anchor))
        elif key == "partitionname":
            lines.append((value, line))
    partitions = []
    for name, line in lines:
        members = (_get(params(line), "nodes") or "").split(",")
        partitions.append(PolicyPartition(name, line, tuple(m for m in members if m in anchors)))
    return nodes, partitions


def _get(pairs: Sequence[tuple[str, str]], key: str) -> str | None:
    for k, v in pairs:
        if k.lower() == key:
            return v
    return None


def _put(pairs: list[tuple[str, str]], key: str, value: str) -> None:
    """Set ``key`` (keeping its place and spelling where present, else at the end)."""
    for i, (k, _) in enumerate(pairs):
        if k.lower() == key.lower():
            pairs[i] = (k, value)
            return
    pairs.append((key, value))


def _line(pairs: Sequence[tuple[str, str]]) -> str:
    return " ".join(f"{k}={v}" for k, v in pairs)


def _names(value: str) -> list[str]:
    return [item.split(":")[0].strip().lower() for item in value.split(",") if item.strip()]


def edit_nodes(
    site: str,
    fragment: str,
    nodes: Sequence[PolicyNodes],
    partitions: Sequence[PolicyPartition],
    *,
    path: str,
    policy: str = "the policy",
) -> NodesEdit:
    """The site's ``slurm.conf`` text ``site`` (file ``path``) with its definitions of
    the policy's ``nodes`` and ``partitions`` edited, and ``fragment`` without them."""
    groups = [(n, HostList(_get(params(n.line), "nodename") or "")) for n in nodes]
    by_name = {p.name.lower(): p for p in partitions}
    out: list[str] = []
    changes: list[LineEdit] = []
    refusals: list[str] = []
    inserted: list[int] = []
    defined: list[str] = []  # site node names the policy also has
    shapes: dict[str, list[tuple[str, str]]] = {}  # fit anchor -> its group's site shape
    taken: set[str] = set()  # partitions the site defines
    default: list[tuple[str, str]] = []  # NodeName=DEFAULT values in force
    for i, line in enumerate(site.splitlines(keepends=True)):
        body = strip_comment(line.rstrip("\n"))
        pairs = params(body)
        first = pairs[0][0].lower() if pairs else None
        end = "\n" if line.endswith("\n") else ""
        where = f"{path} line {i + 1} ({line.strip()!r})"
        if first == "nodename" and pairs[0][1].lower() == "default":
            default = [*[p for p in default if p[0].lower() not in _keys(pairs[1:])], *pairs[1:]]
            out.append(line)
            continue
        if first == "nodename":
            hosts = HostList(pairs[0][1])
            hit = [(n, h) for n, h in groups if hosts.first_common(h) is not None]
            if not hit:
                out.append(line)
                continue
            copies = _split_node_line(pairs, default, hosts, hit)
            for group, _ in hit:
                if group.anchor is not None:
                    shapes.setdefault(
                        group.anchor,
                        [*default, *_edit_node(list(pairs), default, params(group.line))],
                    )
            out.append(set_aside(line))
            changes.append(LineEdit(len(out), line, "set aside: " + _why_nodes(hit)))
            for text, why in copies:
                out.append(added(text) + end)
                inserted.append(i)
                changes.append(LineEdit(len(out), None, why))
            defined += [n for n in hosts.expand() if _pooled(n, hit)]
            continue
        if first == "partitionname" and pairs[0][1].lower() in by_name:
            policy_part = by_name[pairs[0][1].lower()]
            taken.add(policy_part.name.lower())
            merged, problems = _merge_partition(pairs, policy_part)
            if problems:
                refusals += [
                    f"{where} and {policy}'s partition {policy_part.name}: {p}" for p in problems
                ]
                out.append(line)
                continue
            if merged == pairs:
                out.append(line)
                continue
            out.append(set_aside(line))
            changes.append(
                LineEdit(len(out), line, "set aside: the policy's partition " + policy_part.name)
            )
            out.append(added(_line(merged)) + end)
            inserted.append(i)
            changes.append(
                LineEdit(
                    len(out), None, "added: the site's partition with what the policy asks for"
                )
            )
            continue
        out.append(line)
    return NodesEdit(
        "".join(out),
        _fragment_without(fragment, defined, taken, shapes),
        tuple(changes),
        tuple(refusals),
        tuple(inserted),
    )


def _keys(pairs: Sequence[tuple[str, str]]) -> set[str]:
    return {k.lower() for k, _ in pairs}


def _pooled(name: str, hit: Sequence[tuple[PolicyNodes, HostList]]) -> bool:
    return any(h.contains(name) for _, h in hit)


def _why_nodes(hit: Sequence[tuple[PolicyNodes, HostList]]) -> str:
    groups = ", ".join(n.group for n, _ in hit)
    return (
        f"the policy's node group {groups} is defined here: slurmpool's GRES replace its GPU GRES"
    )


def _split_node_line(
    pairs: Sequence[tuple[str, str]],
    default: Sequence[tuple[str, str]],
    hosts: HostList,
    hit: Sequence[tuple[PolicyNodes, HostList]],
) -> list[tuple[str, str]]:
    """The edited copies of a site ``NodeName=`` line: one per group it has nodes of,
    one for its other nodes; each with (text, reason)."""
    names = hosts.expand()
    out: list[tuple[str, str]] = []
    for group, group_hosts in hit:
        mine = [n for n in names if group_hosts.contains(n)]
        edited = _edit_node(list(pairs), default, params(group.line))
        edited[0] = (pairs[0][0], compress(mine))
        out.append(
            (
                _line(edited),
                f"added: the site's line for node group {group.group}, with slurmpool's GRES",
            )
        )
    rest = [n for n in names if not _pooled(n, hit)]
    if rest:
        copy = list(pairs)
        copy[0] = (pairs[0][0], compress(rest))
        out.append((_line(copy), "added: the set-aside line for its other nodes"))
    return out


def _edit_node(
    pairs: list[tuple[str, str]],
    default: Sequence[tuple[str, str]],
    ours: Sequence[tuple[str, str]],
) -> list[tuple[str, str]]:
    """A site node line with slurmpool's GRES and features, and the policy's settings
    the line lacks."""
    site_gres = _get(pairs, "gres") or _get(default, "gres") or ""
    kept = [g for g in site_gres.split(",") if g.strip() and _names(g)[0] not in GPU_GRES]
    our_gres = (_get(ours, "gres") or "").split(",")
    gres = [g for g in our_gres if g] + kept
    if gres:
        _put(pairs, "Gres", ",".join(gres))
    theirs = _keys(pairs) | _keys(default)
    for key, value in ours[1:]:
        low = key.lower()
        if low == "gres":
            continue
        if low in _FEATURE_KEYS:
            # The line's own features, else those of NodeName=DEFAULT, spelled as there.
            spelled = [(k, v) for k, v in [*pairs, *default] if k.lower() in _FEATURE_KEYS]
            have = spelled[0][1].strip('"').split(",") if spelled else []
            more = [f for f in value.strip('"').split(",") if f and f not in have]
            if more:
                _put(pairs, spelled[0][0] if spelled else key, ",".join([*have, *more]))
            continue
        if low not in theirs and low not in ("state", "nodeaddr", "nodehostname", "port"):
            pairs.append((key, value))
    return pairs


def _merge_partition(
    pairs: Sequence[tuple[str, str]], ours: PolicyPartition
) -> tuple[list[tuple[str, str]], list[str]]:
    merged = list(pairs)
    problems: list[str] = []
    policy_pairs = params(ours.line)
    for key, value in policy_pairs[1:]:
        low = key.lower()
        site_value = _get(pairs, low)
        if low == "default" and value.upper() == "NO":
            continue  # generated for every partition the policy does not make the default
        if low == "nodes":
            if site_value is None:
                merged.append((key, value))
                continue
            if site_value.upper() == "ALL":
                continue
            site_hosts = HostList(site_value)
            wanted = [n for n in HostList(value).expand() if n not in ours.anchors]
            missing = [n for n in wanted if not site_hosts.contains(n)]
            if missing:
                problems.append(
                    f"the site's partition lacks node(s) {compress(missing)} of the policy's"
                )
                continue
            more = [a for a in ours.anchors if not site_hosts.contains(a)]
            if more:
                _put(merged, key, ",".join([site_value, *more]))
            continue
        if site_value is None:
            merged.append((key, value))
        elif site_value.strip('"').lower() != value.strip('"').lower():
            problems.append(f"{key} is {site_value} in the site's line, {value} in the policy")
    return merged, problems


# What a job may ask of a node: a fit anchor keeps the site's values of its group.
_SHAPE_KEYS = (
    "cpus",
    "realmemory",
    "boards",
    "socketsperboard",
    "sockets",
    "corespersocket",
    "threadspercore",
    "features",
    "feature",
)


def _fragment_without(
    fragment: str,
    defined: Sequence[str],
    partitions: set[str],
    shapes: dict[str, list[tuple[str, str]]],
) -> str:
    """``fragment`` with the nodes in ``defined`` left out of its ``NodeName=`` lines
    (a line left with none goes), the ``partitions`` the site defines left out, and each
    fit anchor in ``shapes`` shaped as the site defines its group's nodes."""
    if not defined and not partitions:
        return fragment
    gone = set(defined)
    out = []
    for line in fragment.splitlines(keepends=True):
        pairs = params(strip_comment(line.rstrip("\n")))
        first = pairs[0][0].lower() if pairs else None
        if first == "nodename" and pairs[0][1] in shapes:
            anchor = list(pairs)
            for key, value in shapes[pairs[0][1]]:
                if key.lower() in _SHAPE_KEYS:
                    _put(anchor, key, value)
            end = "\n" if line.endswith("\n") else ""
            line = _line(anchor) + end
        elif first == "nodename" and pairs[0][1].lower() != "default":
            names = HostList(pairs[0][1]).expand()
            left = [n for n in names if n not in gone]
            if not left:
                continue
            if len(left) < len(names):
                end = "\n" if line.endswith("\n") else ""
                line = _line([(pairs[0][0], compress(left)), *pairs[1:]]) + end
        elif first == "partitionname" and pairs[0][1].lower() in partitions:
            continue
        out.append(line)
    return "".join(out)
