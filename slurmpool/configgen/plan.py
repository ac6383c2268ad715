"""What the generated files say, computed from the policy (pure, no templates).

One node group is one node class: one NodeName line, one block of gres.conf
lines and one entry of the node config, whatever the number of nodes.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from slurmpool.catalogue import Catalogue, GpuModel
from slurmpool.configgen.inventory import ConfigError, Inventory, InventoryGpu
from slurmpool.configgen.nodeconfig import NODE_CONFIG_SCHEMA
from slurmpool.fit import FIT_GRES, fit_request, fit_sizes, fit_type, node_counts
from slurmpool.gresorder import GresGpu, gpu_gres_types, mig_type_name, shared_type_name
from slurmpool.modes import GpuMode
from slurmpool.placement import GpuOccupancy, engine_for
from slurmpool.policy.model import GpuSpec, NodeGroup, Policy
from slurmpool.policy.validate import carve_sizes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from slurmpool.slurm.version import InstalledSlurm

HOOK_NAMES = {
    "Prolog": "prolog",
    "TaskProlog": "task-prolog",
    "Epilog": "epilog",
    "EpilogSlurmctld": "epilog-slurmctld",
}


def gi_id_for(start: int, size: int, memory_slices: int) -> int:
    """The GPU instance id the driver gives a placement on a fresh board.

    GI ids are numbered by size, then position (full 0, halves 1-2,
    quarters 3-6, eighths 7-14).  Only an estimate: the driver assigns ids,
    so an inventory read back from the GPU wins whenever one is given.
    """
    return memory_slices // size - 1 + start // size


def cap_minors(gpu_minor: int, gi_id: int, ci_id: int) -> tuple[int, int]:
    """mig-minors numbering: gi = 3 + 135*gpu + 9*gi, ci = gi + 1 + ci."""
    gi = 3 + 135 * gpu_minor + 9 * gi_id
    return gi, gi + 1 + ci_id


@dataclass
class GresLine:
    text: str
    comment: str = ""


@dataclass
class NodeClass:
    group: NodeGroup
    nodename: str  # the full NodeName= line
    gres: list[GresLine] = field(default_factory=list)
    node_config: dict[str, Any] = field(default_factory=dict)
    anchor: str | None = None  # the NodeName= line of the class's fit anchor, if any


# NodeName parameters that place a node on a host or set its state: an anchor has
# neither.
_HOST_KEYS = frozenset({"NodeAddr", "NodeHostname", "BcastAddr", "Port", "State", "Reason"})


def anchor_name(group: NodeGroup) -> str:
    """The node name of a MIG-pooled group's fit anchor: ``vgpufit-<group>``.

    An anchor is a FUTURE node shaped like the group's nodes when empty.  Slurm refuses
    at submit a job that no node of its partitions could ever run, judged by each node's
    GRES counts now, whatever its state (``tests/data/probe-fit-submit.sh``); a vgpu
    job asks for the fit count of its size, and when every node's GPUs are in pieces no
    real node counts that size.  The anchor still does, so the job is accepted and
    waits.  A FUTURE node never runs a job, and sinfo and ``scontrol show node`` do not
    list it.
    """
    return f"{FIT_GRES}-" + re.sub(r"[^A-Za-z0-9-]", "-", group.name)


def _static_instances(
    spec: GpuSpec, model: GpuModel, found: InventoryGpu | None, minor: int
) -> list[tuple[str, int, int, str]]:
    """(profile, gi minor, ci minor, provenance) of each instance of a mig-static GPU."""
    if found is not None and found.instances:
        wanted = sorted(spec.layout)
        have = sorted(i.profile for i in found.instances)
        if have != wanted:
            raise ConfigError(
                f"GPU {spec.index} has MIG instances {', '.join(have)}, but the policy's "
                f"mig-static layout is {', '.join(wanted)}; apply the layout and rediscover"
            )
        half_made = [i for i in found.instances if i.ci_id is None]
        if half_made:
            raise ConfigError(
                f"GPU {spec.index}: GPU instance {half_made[0].gi_id} ({half_made[0].profile}) has "
                "no compute instance; finish or destroy it and rediscover"
            )
        out = []
        for inst in sorted(found.instances, key=lambda i: (i.gi_id, i.ci_id or 0)):
            assert inst.ci_id is not None
            gi, ci = cap_minors(minor, inst.gi_id, inst.ci_id)
            out.append(
                (
                    inst.profile,
                    inst.gi_minor if inst.gi_minor is not None else gi,
                    inst.ci_minor if inst.ci_minor is not None else ci,
                    "inventory",
                )
            )
        return out
    geo = model.require_mig()
    placements = engine_for(model).plan(list(spec.layout))
    assert placements is not None  # validation planned this layout already
    out = []
    for profile, pl in zip(spec.layout, placements, strict=True):
        gi, ci = cap_minors(minor, gi_id_for(pl.start, pl.size, geo.memory_slices), 0)
        out.append((profile, gi, ci, "estimated"))
    return sorted(out, key=lambda t: t[1])


def _gpu_files(devices: str, minor: int) -> str:
    return f"{devices}/nvidia{minor}"


def plan_class(
    group: NodeGroup, inv: Inventory | None, policy: Policy, cat: Catalogue
) -> NodeClass:
    devices = policy.paths.devices_root.rstrip("/") or ""
    nodes = group.nodes
    lines: list[GresLine] = []
    gres_counts: dict[str, int] = {}
    gpus_out: list[dict[str, Any]] = []
    for spec in sorted(group.gpus, key=lambda g: g.index):
        model = cat.get(spec.model)
        found = inv.gpu(spec.index) if inv is not None else None
        minor = found.minor if found is not None else spec.index
        cores = spec.cores or (found.cpu_affinity if found is not None else None)
        cores_opt = f" Cores={cores}" if cores else ""
        entry: dict[str, Any] = {
            "index": spec.index,
            "minor": minor,
            "model": spec.model,
            "mode": spec.mode.value,
            "shares": spec.shares,
            "mps": spec.mps,
            "vfio": spec.vfio,
            "layout": list(spec.layout),
            "slurm_type": spec.slurm_type,
        }
        if spec.mode is GpuMode.PASSTHROUGH:
            lines.append(
                GresLine(
                    f"NodeName={nodes} Name=gpu Type={spec.slurm_type} "
                    f"File={_gpu_files(devices, minor)}{cores_opt}",
                    f"GPU {spec.index}: {spec.model}, whole GPU" + (", vfio" if spec.vfio else ""),
                )
            )
            gres_counts[f"gpu:{spec.slurm_type}"] = gres_counts.get(f"gpu:{spec.slurm_type}", 0) + 1
        elif spec.mode is GpuMode.MIG_STATIC:
            instances = _static_instances(spec, model, found, minor)
            for profile, gi, ci, how in instances:
                t = mig_type_name(spec.slurm_type, profile)
                lines.append(
                    GresLine(
                        f"NodeName={nodes} Name=gpu Type={t} MultipleFiles="
                        f"{_gpu_files(devices, minor)},{devices}/nvidia-caps/nvidia-cap{gi},"
                        f"{devices}/nvidia-caps/nvidia-cap{ci}{cores_opt}",
                        f"GPU {spec.index}: {spec.model} {profile} (cap minors {how})",
                    )
                )
                gres_counts[f"gpu:{t}"] = gres_counts.get(f"gpu:{t}", 0) + 1
        elif spec.mode is GpuMode.SHARED:
            # A File-backed gpu with its shards: the only way Slurm fences a share
            # (ConstrainDevices ignores a GRES without a plugin, such as vgpu, even
            # with File=; shard needs a gpu on the same file).  See README, "Security".
            t = shared_type_name(spec.slurm_type)
            files = _gpu_files(devices, minor)
            lines.append(
                GresLine(
                    f"NodeName={nodes} Name=gpu Type={t} File={files}{cores_opt}",
                    f"GPU {spec.index}: {spec.model}, shared: {spec.shares} shards"
                    + (", MPS limits" if spec.mps else ""),
                )
            )
            # Untyped: slurmd gives each shard its GPU's type, and an empty shard of
            # every other gpu type, which 24.11's slurmctld refuses against typed
            # shards in Gres= ("gres/shard type (a100) reported but not configured").
            lines.append(
                GresLine(f"NodeName={nodes} Name=shard Count={spec.shares} File={files}{cores_opt}")
            )
            gres_counts[f"gpu:{t}"] = gres_counts.get(f"gpu:{t}", 0) + 1
            gres_counts["shard"] = gres_counts.get("shard", 0) + spec.shares
        gpus_out.append(entry)
    mig_pool = group.publishes_fit
    fit: dict[str, int] = {}
    if mig_pool:
        pooled = ", ".join(str(g.index) for g in group.pooled_gpus)
        lines.append(
            GresLine(
                f"NodeName={nodes} Name=vgpu Count={group.vgpu_count}",
                f"GPUs {pooled}: pooled, {group.units_per_gpu} vgpu ({group.vgpu_unit}) each",
            )
        )
        fit = empty_fit_counts(group, cat)
        for i, (gres_type, count) in enumerate(fit.items()):
            lines.append(
                GresLine(
                    f"NodeName={nodes} Name={FIT_GRES} Type={gres_type} Count={count}",
                    "instances of each size the node can carve, the one job more it may "
                    "be sent, and what keeps the total: an empty node's counts (its hooks "
                    "publish the live ones)"
                    if i == 0
                    else "",
                )
            )
    # gpu types in the order Slurm is to number the node's GPUs (slurmpool.gresorder).
    order = gpu_gres_types(GresGpu(g.index, g.mode, g.slurm_type, g.layout) for g in group.gpus)
    gres = [f"gpu:{t}:{gres_counts[f'gpu:{t}']}" for t in order]
    gres += [f"{k}:{v}" for k, v in sorted(gres_counts.items()) if not k.startswith("gpu:")]
    if mig_pool:
        gres.append(f"vgpu:{group.vgpu_count}")
        gres += [f"{FIT_GRES}:{gres_type}:{count}" for gres_type, count in fit.items()]
    shape = [f"CPUs={group.cpus}", f"RealMemory={group.real_memory_mib}"]
    if gres:
        shape.append(f"Gres={','.join(gres)}")
    options = dict(group.slurm_node_options)
    anchor = None
    if mig_pool:
        # Features, sockets and the like shape what a job may ask, so the anchor has
        # them too; where the node lives and its state are the real nodes' alone.
        kept = [f"{k}={v}" for k, v in options.items() if k not in _HOST_KEYS]
        anchor = " ".join([f"NodeName={anchor_name(group)}", *shape, *kept, "State=FUTURE"])
    options.setdefault("State", "UNKNOWN")
    params = [f"NodeName={nodes}", *shape, *(f"{k}={v}" for k, v in options.items())]
    node_config = {
        "name": group.name,
        "hostlist": nodes,
        "vgpu_unit": group.vgpu_unit,
        "units_per_gpu": group.units_per_gpu,
        "vgpu_count": group.vgpu_count,
        "gpus": gpus_out,
    }
    return NodeClass(
        group=group,
        nodename=" ".join(params),
        gres=lines,
        node_config=node_config,
        anchor=anchor,
    )


def empty_fit_counts(group: NodeGroup, cat: Catalogue) -> dict[str, int]:
    """The count of each :data:`~slurmpool.fit.FIT_GRES` type on a node of a MIG pool
    whose GPUs are empty: what gres.conf says, and Slurm counts until the node's hooks
    publish what it can carve (:func:`~slurmpool.fit.node_counts`)."""
    gpus = [
        GpuOccupancy(g.index, cat.get(g.model)) for g in group.pooled_gpus if g.mode is GpuMode.MIG
    ]
    if not gpus:
        return {}
    slices = _slices_by_count(gpus[0].model)
    return node_counts(gpus, fit_sizes(group.units_per_gpu, slices.get), {}, 0)


def _slices_by_count(model: GpuModel) -> dict[int, int]:
    """vgpu count -> the compute slices of the instance a request of it gets on one GPU
    (the node config's profile table)."""
    return {int(n): model.gi_profile(p).slices for n, p in profile_table(model).items()}


def lua_fit(group: NodeGroup, cat: Catalogue, sizes: tuple[int, ...]) -> dict[int, str]:
    """For job_submit.lua: normalised vgpu count -> the fit type it asks one instance
    of, for each size up to one GPU, and for a whole GPU's units the type a multi-GPU
    request asks several of (:func:`~slurmpool.fit.fit_request`).  Empty where the group
    publishes no fit counts."""
    if not group.publishes_fit or group.pool_model is None:
        return {}
    slices = _slices_by_count(cat.get(group.pool_model))
    out = {}
    for n in sizes:
        asked = fit_request(n, group.units_per_gpu, slices.get)
        if asked is not None:
            out[n] = fit_type(asked[0])
    return out


def profile_table(model: GpuModel) -> dict[str, str]:
    """vgpu count (as a string key) -> the smallest standard profile with that many slices."""
    standard = model.require_mig().standard_profiles()
    out = {}
    for n in range(1, model.require_mig().compute_slices + 1):
        p = next((q for q in standard if q.slices >= n), None)
        if p is not None:
            out[str(n)] = p.name
    return out


@dataclass
class LuaPool:
    """What job_submit.lua knows about one partition's pool."""

    partition: str
    units: int  # vgpu units of one GPU
    max_gpus: int  # pooled GPUs on the largest node
    sizes: tuple[int, ...]  # counts one GPU can hand out, smallest first
    unit: str
    labels: dict[int, str]  # size -> what the user gets ("7g", "2 of 4 shares")
    gres: str  # what Slurm schedules a vgpu request as: "vgpu" (mig) or "shard" (shared)
    # Normalised count up to one GPU -> the fit type the job asks for (MIG pools); a
    # multi-GPU request asks count / units of the type of ``units``.
    fit: dict[int, str] = field(default_factory=dict)


def pool_gres(group: NodeGroup) -> str:
    """The GRES a group's pool is scheduled as: MIG slices are counted as ``vgpu``;
    shares are Slurm ``shard``s of one File-backed GPU (a vgpu request is rewritten)."""
    return "shard" if group.vgpu_unit == "share" else "vgpu"


def gres_types(policy: Policy) -> list[str]:
    """GresTypes: gpu and vgpu always, shard where a group shares GPUs, and the fit
    counts where a group pools MIG slices."""
    out = ["gpu", "vgpu"]
    if any(g.vgpu_unit == "share" for g in policy.node_groups):
        out.append("shard")
    if any(g.publishes_fit for g in policy.node_groups):
        out.append(FIT_GRES)
    return out


def accounted_gres(policy: Policy) -> list[str]:
    """The GRES whose use accounting records (AccountingStorageTRES): not the fit
    counts, which only steer Slurm's choice of node; reports read ``gres/vgpu``."""
    return [t for t in gres_types(policy) if t != FIT_GRES]


def lua_pools(policy: Policy, cat: Catalogue) -> list[LuaPool]:
    pools = []
    for part in policy.partitions:
        groups = [policy.group(n) for n in part.node_groups]
        pooled = [g for g in groups if g.vgpu_unit is not None]
        if not pooled:
            continue
        g0 = pooled[0]
        sizes = carve_sizes(g0, cat)
        if g0.vgpu_unit == "compute-slice":
            labels = {s: f"{s}g MIG instance" for s in sizes}
        else:
            labels = {s: f"{s}/{g0.units_per_gpu} of a GPU" for s in sizes}
        pools.append(
            LuaPool(
                partition=part.name,
                units=g0.units_per_gpu,
                max_gpus=max(len(g.pooled_gpus) for g in pooled),
                sizes=sizes,
                unit=g0.vgpu_unit or "",
                labels=labels,
                gres=pool_gres(g0),
                fit=lua_fit(g0, cat, sizes),
            )
        )
    return pools


def node_config(
    policy: Policy, classes: list[NodeClass], cat: Catalogue, slurm: InstalledSlurm
) -> dict[str, Any]:
    models = sorted({g.model for c in classes for g in c.group.gpus if g.mode is GpuMode.MIG})
    return {
        "schema": NODE_CONFIG_SCHEMA,
        "cluster": policy.cluster,
        "gpu_backend": policy.gpu_backend,
        "accounting": policy.accounting,
        # The Slurm the config is for (hooks gate features on it; doctor compares it
        # with the node's) and how that was decided.
        "slurm_version": slurm.version.shown,
        "slurm_detected_by": slurm.detected_by,
        "paths": asdict(policy.paths),
        "hooks": asdict(policy.hooks),
        "pooling": asdict(policy.pooling),
        "profiles": {m: profile_table(cat.get(m)) for m in models},
        "node_classes": [c.node_config for c in classes],
    }
