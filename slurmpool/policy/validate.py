"""Semantic checks of a structurally valid policy, and building the dataclasses.

Input is the plain data :mod:`slurmpool.policy.fields` produced (invalid
values already reported and left out); every check below is skipped for a
value that is missing, so one run reports every independent problem.
"""

from __future__ import annotations

from typing import Any

from slurmpool.catalogue import Catalogue, GpuModel, UnknownProfileError
from slurmpool.hostlist import HostList, HostlistError
from slurmpool.modes import GpuMode
from slurmpool.placement import engine_for
from slurmpool.policy.fields import Context
from slurmpool.policy.model import (
    GpuSpec,
    HookLimits,
    NodeGroup,
    Partition,
    Paths,
    Policy,
    Pooling,
    VgpuUnit,
)


def default_slurm_type(model: GpuModel) -> str:
    """Slurm's gpu type for a model: its name up to the first '-', lowercased (a100)."""
    return model.name.split("-", 1)[0].lower()


def units_per_gpu(mode: GpuMode, model: GpuModel, shares: int) -> int:
    """vgpu units one pooled GPU provides: compute slices (mig) or shares (shared)."""
    if mode is GpuMode.MIG and model.mig is not None:
        return model.mig.compute_slices
    return shares


def _resolve_model(cat: Catalogue, name: str, path: str, ctx: Context) -> GpuModel | None:
    m = cat.find(name)
    if m is None:
        ctx.error(path, f"unknown GPU model {name!r}; known models: {', '.join(cat.names)}")
    return m


def _gpus(
    raw: list[dict[str, Any] | None], gpath: str, cat: Catalogue, ctx: Context
) -> list[GpuSpec]:
    """Assign indices and resolve models/profiles of one node group's GPU entries."""
    total = sum(
        1 if "index" in e else len(e.get("indices") or []) if "indices" in e else e.get("count", 0)
        for e in raw
        if e is not None
    )
    taken: dict[int, str] = {}
    explicit: list[tuple[int, int, str]] = []  # (entry, index, path)
    for j, e in enumerate(raw):
        if e is None:
            continue
        epath = f"{gpath}[{j}]"
        if "index" in e:
            explicit.append((j, e["index"], f"{epath}.index"))
        for k, idx in enumerate(e.get("indices") or []):
            if idx is not None:
                explicit.append((j, idx, f"{epath}.indices[{k}]"))
    for _j, idx, ipath in explicit:
        if idx >= total:
            ctx.error(
                ipath,
                f"GPU index {idx} is out of range: the group declares {total} GPU(s), "
                f"so indices are 0..{total - 1}",
            )
        elif idx in taken:
            ctx.error(
                ipath,
                f"GPU index {idx} is given twice (also at line {ctx.line_of(taken[idx])})",
            )
        else:
            taken[idx] = ipath
    free = (i for i in range(total) if i not in taken)
    specs: list[GpuSpec] = []
    for j, e in enumerate(raw):
        if e is None:
            continue
        epath = f"{gpath}[{j}]"
        if "index" in e:
            indices = [e["index"]]
        elif "indices" in e:
            indices = [i for i in e["indices"] if i is not None]
        else:
            indices = [next(free, -1) for _ in range(e.get("count", 0))]
        model = _resolve_model(cat, e["model"], f"{epath}.model", ctx) if "model" in e else None
        if model is None or e.get("mode") is None:
            continue
        mode = GpuMode(e["mode"])  # the schema allowed only these words
        layout: tuple[str, ...] = ()
        if mode.mig_enabled and model.mig is None:
            mig_models = [m.name for m in cat if m.mig is not None]
            ctx.error(
                f"{epath}.mode",
                f"{model.name} does not support MIG, so mode {mode} is impossible; "
                f"use passthrough or shared, or a MIG model ({', '.join(mig_models)})",
            )
            continue
        if mode is GpuMode.MIG_STATIC and "layout" in e:
            layout_or_none = _layout(model, e["layout"], f"{epath}.layout", ctx)
            if layout_or_none is None:
                continue
            layout = layout_or_none
        for idx in indices:
            if idx < 0 or idx >= total:
                continue
            specs.append(
                GpuSpec(
                    index=idx,
                    model=model.name,
                    mode=mode,
                    vfio=bool(e.get("vfio", False)),
                    layout=layout,
                    shares=int(e.get("shares", 1)) if mode is GpuMode.SHARED else 1,
                    mps=bool(e.get("mps", False)),
                    cores=e.get("cores"),
                    slurm_type=e.get("slurm_type") or default_slurm_type(model),
                )
            )
    # Keep one spec per index (duplicates were reported above).
    unique = {s.index: s for s in reversed(specs)}
    return sorted(unique.values(), key=lambda s: s.index)


def _layout(
    model: GpuModel, raw: list[str | None], lpath: str, ctx: Context
) -> tuple[str, ...] | None:
    names: list[str] = []
    ok = True
    for k, name in enumerate(raw):
        if name is None:
            ok = False
            continue
        try:
            names.append(model.gi_profile(name).name)
        except UnknownProfileError as err:
            ctx.error(f"{lpath}[{k}]", str(err))
            ok = False
    if not ok:
        return None
    engine = engine_for(model)
    if engine.plan(names) is None:
        ctx.error(
            lpath,
            f"layout {' + '.join(names)} does not fit one {model.name}: "
            f"{engine.explain_misfit(names)}",
        )
        return None
    return tuple(names)


def _pool_geometry(
    gpus: list[GpuSpec], declared_unit: str | None, path: str, cat: Catalogue, ctx: Context
) -> tuple[VgpuUnit | None, int]:
    pooled = [g for g in gpus if g.pooled]
    if not pooled:
        if declared_unit is not None:
            ctx.error(f"{path}.vgpu_unit", "the group pools no GPU (no mig or shared GPU)")
        return None, 0
    modes = sorted({g.mode for g in pooled})
    if len(modes) > 1:
        ctx.error(
            f"{path}.gpus",
            "pooled GPUs on one node must all be mig or all be shared (they share one vgpu "
            f"unit); this group mixes {' and '.join(modes)}",
        )
        return None, 0
    models = sorted({g.model for g in pooled})
    if len(models) > 1:
        ctx.error(
            f"{path}.gpus",
            "pooled GPUs on one node must be one model (one vgpu geometry); "
            f"got {', '.join(models)}",
        )
        return None, 0
    shares = sorted({g.shares for g in pooled})
    if len(shares) > 1:
        ctx.error(
            f"{path}.gpus",
            f"shared GPUs on one node must have the same shares; got {', '.join(map(str, shares))}",
        )
        return None, 0
    unit: VgpuUnit = "compute-slice" if modes[0] is GpuMode.MIG else "share"
    if declared_unit is not None and declared_unit != unit:
        ctx.error(
            f"{path}.vgpu_unit",
            f"expected {unit} for {modes[0]} GPUs, got {declared_unit}",
        )
    return unit, units_per_gpu(modes[0], cat.get(models[0]), shares[0])


def _hostlist(expr: str, path: str, ctx: Context) -> HostList | None:
    try:
        return HostList(expr)
    except HostlistError as err:
        ctx.error(path, str(err))
        return None


def _options(raw: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    return tuple((k, str(v)) for k, v in (raw or {}).items())


def build_policy(data: dict[str, Any], ctx: Context, cat: Catalogue) -> Policy | None:
    """Run the semantic checks; return the Policy when no issue was recorded at all."""
    groups: list[NodeGroup] = []
    hostlists: list[tuple[int, str, HostList]] = []
    names_seen: dict[str, str] = {}
    for i, g in enumerate(data.get("node_groups") or []):
        if g is None:
            continue
        path = f"node_groups[{i}]"
        name = g.get("name")
        if name is not None:
            if name in names_seen:
                ctx.error(
                    f"{path}.name",
                    f"node group {name!r} is defined twice (also at line "
                    f"{ctx.line_of(names_seen[name])})",
                )
            names_seen.setdefault(name, f"{path}.name")
        hl = _hostlist(g["nodes"], f"{path}.nodes", ctx) if "nodes" in g else None
        if hl is not None and name is not None:
            hostlists.append((i, name, hl))
        gpus = _gpus(g.get("gpus") or [], f"{path}.gpus", cat, ctx) if "gpus" in g else []
        unit, units = _pool_geometry(gpus, g.get("vgpu_unit"), path, cat, ctx)
        if name is None or hl is None or "cpus" not in g or "real_memory_mib" not in g:
            continue
        groups.append(
            NodeGroup(
                name=name,
                nodes=hl.expression,
                cpus=g["cpus"],
                real_memory_mib=g["real_memory_mib"],
                gpus=tuple(gpus),
                slurm_node_options=_options(g.get("slurm_node_options")),
                vgpu_unit=unit,
                units_per_gpu=units,
            )
        )
    for a in range(len(hostlists)):
        for b in range(a + 1, len(hostlists)):
            ia, na, ha = hostlists[a]
            ib, _, hb = hostlists[b]
            common = ha.first_common(hb)
            if common is not None:
                other = ctx.line_of(f"node_groups[{ia}].nodes")
                ctx.error(
                    f"node_groups[{ib}].nodes",
                    f"node {common} is also in node group {na!r} (line {other}); "
                    "node groups must not overlap",
                )
    partitions = _partitions(data.get("partitions") or [], groups, names_seen, cat, ctx)
    if ctx.issues:
        return None
    hooks = data["hooks"]
    return Policy(
        version=data["version"],
        cluster=data["cluster"],
        gpu_backend=data["gpu_backend"],
        accounting=data["accounting"],
        slurm_version=data.get("slurm_version"),
        cgroup_plugin=data["cgroup_plugin"],
        paths=Paths(**data["paths"]),
        hooks=HookLimits(**hooks),
        pooling=Pooling(**data["pooling"]),
        node_groups=tuple(groups),
        partitions=tuple(partitions),
        source=ctx.file,
    )


def _partitions(
    raw: list[dict[str, Any] | None],
    groups: list[NodeGroup],
    group_names: dict[str, str],
    cat: Catalogue,
    ctx: Context,
) -> list[Partition]:
    by_name = {g.name: g for g in groups}
    out: list[Partition] = []
    seen: dict[str, str] = {}
    defaults: list[str] = []
    for i, p in enumerate(raw):
        if p is None:
            continue
        path = f"partitions[{i}]"
        name = p.get("name")
        if name is not None:
            if name in seen:
                ctx.error(
                    f"{path}.name",
                    f"partition {name!r} is defined twice (also at line {ctx.line_of(seen[name])})",
                )
            seen.setdefault(name, f"{path}.name")
        if p.get("default"):
            defaults.append(f"{path}.default")
        members: list[str] = []
        nodes = ""
        if "node_groups" in p:
            for k, gname in enumerate(p["node_groups"]):
                if gname is None:
                    continue
                if gname not in group_names:
                    ctx.error(
                        f"{path}.node_groups[{k}]",
                        f"unknown node group {gname!r}; node groups: "
                        f"{', '.join(group_names) or 'none'}",
                    )
                elif gname not in members:
                    members.append(gname)
            nodes = ",".join(by_name[m].nodes for m in members if m in by_name)
        elif "nodes" in p:
            hl = _hostlist(p["nodes"], f"{path}.nodes", ctx)
            if hl is not None:
                nodes = hl.expression
                members = [g.name for g in groups if g.hostlist.first_common(hl) is not None]
                stray = next(
                    (n for n in hl.expand() if not any(g.hostlist.contains(n) for g in groups)),
                    None,
                )
                if stray is not None and len(groups) == len(group_names):
                    ctx.error(f"{path}.nodes", f"node {stray} is in no node group")
        _check_pool_geometry(path, [by_name[m] for m in members if m in by_name], cat, ctx)
        if name is None or not nodes:
            continue
        out.append(
            Partition(
                name=name,
                node_groups=tuple(members),
                nodes=nodes,
                default=bool(p.get("default", False)),
                options=_options(p.get("options")),
            )
        )
    if len(defaults) > 1:
        ctx.error(defaults[1], f"only one partition can be the default (also {defaults[0]})")
    return out


def carve_sizes(group: NodeGroup, cat: Catalogue) -> tuple[int, ...]:
    """The vgpu counts one GPU of the group's pool can hand out, smallest first.

    mig: the compute slices of each standard profile (A100: 1, 2, 3, 4, 7);
    shared: every count from 1 to the shares.  Empty without a pool.
    """
    if group.vgpu_unit == "compute-slice" and group.pool_model is not None:
        geo = cat.get(group.pool_model).require_mig()
        return tuple(sorted({p.slices for p in geo.standard_profiles()}))
    if group.vgpu_unit == "share":
        return tuple(range(1, group.units_per_gpu + 1))
    return ()


def _check_pool_geometry(path: str, groups: list[NodeGroup], cat: Catalogue, ctx: Context) -> None:
    # job_submit.lua normalises vgpu:N per partition, so every pool in a
    # partition must carve the same way.
    pools = [g for g in groups if g.vgpu_unit is not None]
    geometries = {(g.vgpu_unit, g.units_per_gpu, carve_sizes(g, cat)) for g in pools}
    if len(geometries) > 1:
        desc = "; ".join(
            f"{g.name}: {g.units_per_gpu} {g.vgpu_unit} units per {g.pool_model}" for g in pools
        )
        ctx.error(
            path,
            f"pooled node groups of one partition must share one vgpu geometry ({desc}); "
            "split the partition",
        )
