"""A site's own ``gres.conf`` with slurmpool's lines for the nodes it pools.

slurmpool describes every GPU of its node groups (whole, fixed MIG, pooled MIG and
shared GPUs: :mod:`slurmpool.configgen`); the site's gres.conf goes on describing
everything else.  Line by line:

* a line for nodes slurmpool has none of, or for a GRES other than ``gpu``,
  ``shard`` and ``mps`` (a NIC, an FPGA), stays as written;
* a ``gpu``/``shard``/``mps`` line for slurmpool's nodes is set aside, slurmpool's
  lines describe those GPUs; where its ``NodeName`` also names other nodes, a copy
  for those others takes its place;
* refused, naming the line: such a line with no ``NodeName`` (it describes every
  node, pooled ones included), a ``shard`` or ``mps`` on a node group with MIG GPUs,
  a node-specific ``AutoDetect`` other than ``off`` on slurmpool's nodes, and a
  GRES named as slurmpool's own (``vgpu``, ``vgpufit``).

A global ``AutoDetect=nvml`` line stays: node-specific ``AutoDetect`` trumps the
global one (gres.conf(5), 22.05 to 26.05), so slurmpool's lines then carry
``AutoDetect=off``.  Without it NVML would report a MIG-mode GPU's instances on a
pooled node as ``gpu`` GRES beside slurmpool's ``vgpu`` count.

slurmpool's lines go at the end, between block markers, the site's set-aside and
added lines marked (:mod:`slurmpool.slurm.marks`).  Pure: text in, text out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from slurmpool.hostlist import HostList, compress
from slurmpool.records import record
from slurmpool.slurm.conf import params, strip_comment
from slurmpool.slurm.marks import LineEdit, added, block, set_aside

GPU_NAMES = ("gpu", "shard", "mps")  # GRES slurmpool describes on its nodes
OWN_NAMES = ("vgpu", "vgpufit")  # GRES names that are slurmpool's alone
SHARING_NAMES = ("shard", "mps")


@record(frozen=True, slots=True)
class PooledGroup:
    """A node group of the policy: slurmpool describes every GPU of its nodes."""

    name: str
    nodes: str  # hostlist expression
    has_mig: bool  # a GPU in mig or mig-static mode
    anchor: str | None = None  # the name of its fit anchor, if it has one


@record(frozen=True, slots=True)
class GresEdit:
    text: str
    changes: tuple[LineEdit, ...]
    refusals: tuple[str, ...]  # each names the site's line and the fix


_NODENAME = re.compile(r"(?i)\bNodeName=\S+")


def _pairs(body: str) -> dict[str, str]:
    return {key.lower(): value for key, value in params(body)}


def edit_gres_conf(site: str, ours: str, groups: Sequence[PooledGroup], *, path: str) -> GresEdit:
    """The site's gres.conf ``site`` (file ``path``) joined with slurmpool's generated
    gres.conf ``ours`` for the node groups ``groups``."""
    out: list[str] = []
    changes: list[LineEdit] = []
    refusals: list[str] = []
    global_autodetect = False
    lines = site.splitlines(keepends=True)
    for i, line in enumerate(lines):
        body = strip_comment(line.rstrip("\n"))
        pairs = _pairs(body)
        where = f"{path} line {i + 1} ({line.strip()!r})"
        nodes = pairs.get("nodename")
        name = pairs.get("name", "").lower()
        autodetect = pairs.get("autodetect")
        if not pairs or body.lower().startswith("include"):
            out.append(line)
            continue
        if nodes is None and autodetect is not None and autodetect.lower() != "off":
            global_autodetect = True
        hit = _groups_on(nodes, groups)
        if not hit:
            out.append(line)
            continue
        names = ", ".join(f"{g.name} ({g.nodes})" for g in hit)
        if name in OWN_NAMES:
            refusals.append(f"{where}: {name} is slurmpool's own GRES; rename the site's")
            out.append(line)
            continue
        if nodes is not None and autodetect is not None and autodetect.lower() != "off":
            refusals.append(
                f"{where}: AutoDetect={autodetect} on nodes slurmpool describes, node group "
                f"{names}; leave them out of this line's NodeName (slurmpool's lines set "
                "AutoDetect=off there)"
            )
            out.append(line)
            continue
        if name not in GPU_NAMES:
            out.append(line)
            continue
        if nodes is None:
            refusals.append(
                f"{where}: a {name} line without NodeName describes every node, slurmpool's "
                f"node group {names} included; give it NodeName= for the nodes slurmpool "
                "does not pool"
            )
            out.append(line)
            continue
        mig = [g for g in hit if g.has_mig]
        if name in SHARING_NAMES and mig:
            refusals.append(
                f"{where}: a {name} on node group {mig[0].name}, whose MIG GPUs slurmpool "
                f"pools; a MIG GPU is not shared by {name}s: leave those nodes out of this "
                "line, or pool the GPUs as shared in the policy"
            )
            out.append(line)
            continue
        out.append(set_aside(line))
        changes.append(
            LineEdit(
                len(out), line, f"set aside: slurmpool describes the GPUs of node group {names}"
            )
        )
        rest = _rest(nodes, hit)
        if rest:
            end = "\n" if line.endswith("\n") else ""
            out.append(added(_NODENAME.sub(f"NodeName={rest}", body, count=1)) + end)
            changes.append(
                LineEdit(len(out), None, f"added: the set-aside line for its other nodes, {rest}")
            )
    text = "".join(out)
    if groups:
        if text and not text.endswith("\n"):
            text += "\n"
        ours_lines = [
            _with_autodetect_off(line) if global_autodetect else line
            for line in ours.splitlines(keepends=True)
        ]
        first = text.count("\n") + 1
        text += "".join(block(ours_lines, "slurmpool's lines for the GPUs of its node groups"))
        why = "slurmpool's lines for the GPUs of node group " + ", ".join(g.name for g in groups)
        if global_autodetect:
            why += ", each with AutoDetect=off, which trumps the site's global AutoDetect"
        last = text.count("\n")
        changes.append(LineEdit(first, None, f"added, through line {last}: {why}"))
    return GresEdit(text, tuple(changes), tuple(refusals))


def _groups_on(nodes: str | None, groups: Sequence[PooledGroup]) -> list[PooledGroup]:
    """The groups with a node on the line (every group for a line without NodeName)."""
    if nodes is None:
        return list(groups)
    line = HostList(nodes)
    return [g for g in groups if line.first_common(HostList(g.nodes)) is not None]


def _rest(nodes: str, groups: Sequence[PooledGroup]) -> str:
    """The line's nodes that no group has, as a hostlist (empty: none)."""
    pooled = [HostList(g.nodes) for g in groups]
    return compress(n for n in HostList(nodes).expand() if not any(h.contains(n) for h in pooled))


def _with_autodetect_off(line: str) -> str:
    body = line.rstrip("\n")
    if not strip_comment(body) or "autodetect=" in body.lower():
        return line
    return f"{body} AutoDetect=off" + line[len(body) :]
