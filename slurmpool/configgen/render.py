"""``generate``: policy (+ inventories) -> the text of every generated file."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurmpool.catalogue import Catalogue, default_catalogue
from slurmpool.configgen.files import (
    CGROUP_CONF,
    GRES_CONF,
    JOB_SUBMIT_LUA,
    SITE_JOB_SUBMIT_LUA,
    SLURM_FRAGMENT,
)
from slurmpool.configgen.inventory import ConfigError, Inventory, match_inventories
from slurmpool.configgen.nodeconfig import NODE_CONFIG_NAME
from slurmpool.configgen.plan import (
    HOOK_NAMES,
    accounted_gres,
    anchor_name,
    gres_types,
    lua_pools,
    node_config,
    plan_class,
)
from slurmpool.fit import FIT_GRES, NEXT_TYPE
from slurmpool.policy.model import Policy
from slurmpool.resources import templates_dir
from slurmpool.slurm.version import InstalledSlurm, parse_version
from slurmpool.templates import environment


@dataclass(frozen=True)
class GeneratedConfig:
    """Generated files: relative name -> text, in a stable order."""

    files: dict[str, str]

    def write(self, out_dir: str | os.PathLike[str]) -> list[Path]:
        """Write every file under ``out_dir`` (created if needed); return the paths."""
        root = Path(out_dir)
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in self.files.items():
            target = root / name
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_text(text)
            tmp.chmod(0o644)
            os.replace(tmp, target)
            written.append(target)
        return written


def check_slurm_supports(policy: Policy, slurm: InstalledSlurm) -> None:
    """Refuse a policy setting the target Slurm does not have."""
    if policy.cgroup_plugin == "disabled" and not slurm.version.supports("cgroup_plugin_disabled"):
        raise ConfigError(
            f"{policy.source}: cgroup_plugin: 'disabled' needs Slurm 24.11 or newer, and the "
            f"config is for {slurm.version.release} ({slurm.detected_by}); use autodetect"
        )


def target_slurm(policy: Policy, installed: InstalledSlurm | None) -> InstalledSlurm:
    """The Slurm to generate for: the policy's ``slurm_version`` when set (staging a
    config for other machines), else the installed one."""
    if policy.slurm_version is not None:
        return InstalledSlurm(parse_version(policy.slurm_version), "policy slurm_version")
    if installed is None:
        raise ConfigError(
            f"{policy.source}: no Slurm version to generate for: the policy sets no "
            "slurm_version and no installed Slurm was detected; set slurm_version "
            '(MAJOR.MINOR of the nodes\' Slurm, e.g. "24.11") to generate on a machine '
            "without Slurm"
        )
    return installed


def _anchors(policy: Policy) -> dict[str, str]:
    """Group name -> its fit anchor's node name (:func:`~slurmpool.configgen.plan.anchor_name`),
    for the MIG-pooled groups; an anchor may not share a real node's name."""
    out = {g.name: anchor_name(g) for g in policy.node_groups if g.publishes_fit}
    for group, anchor in out.items():
        clash = next((g for g in policy.node_groups if g.hostlist.contains(anchor)), None)
        if clash is not None:
            raise ConfigError(
                f"{policy.source}: node group {clash.name} has a node named {anchor}, the name "
                f"slurmpool gives the fit anchor of group {group}; rename the node or the group"
            )
    return out


def generate(
    policy: Policy,
    inventories: Sequence[Inventory] | None = None,
    catalogue: Catalogue | None = None,
    templates: str | os.PathLike[str] | None = None,
    *,
    installed: InstalledSlurm | None = None,
) -> GeneratedConfig:
    """Render slurmpool.conf, gres.conf, cgroup.conf, job_submit.lua and node-config.json
    for the Slurm of :func:`target_slurm` (``installed``: what this machine runs)."""
    slurm = target_slurm(policy, installed)
    check_slurm_supports(policy, slurm)
    cat = catalogue or default_catalogue()
    by_group = match_inventories(policy, inventories or [])
    classes = [plan_class(g, by_group.get(g.name), policy, cat) for g in policy.node_groups]
    anchors = _anchors(policy)
    partitions = []
    for p in policy.partitions:
        nodes = ",".join([p.nodes, *(anchors[g] for g in p.node_groups if g in anchors)])
        params = [f"PartitionName={p.name}", f"Nodes={nodes}"]
        params.append(f"Default={'YES' if p.default else 'NO'}")
        params += [f"{k}={v}" for k, v in p.options]
        partitions.append(" ".join(params))
    hooks_dir = policy.paths.hooks_dir.rstrip("/")
    default = policy.default_partition
    context = {
        "source": Path(policy.source).name,
        "cluster": policy.cluster,
        "accounting": policy.accounting,
        "slurm_config_dir": policy.paths.slurm_config_dir.rstrip("/"),
        "site_lua": os.path.join(policy.paths.slurm_config_dir, SITE_JOB_SUBMIT_LUA),
        "hooks": [(key, f"{hooks_dir}/{name}") for key, name in HOOK_NAMES.items()],
        "classes": classes,
        "partitions": partitions,
        "cgroup_plugin": policy.cgroup_plugin,
        "gres_types": gres_types(policy),
        "accounted_gres": accounted_gres(policy),
        "pools": lua_pools(policy, cat),
        "partition_names": [p.name for p in policy.partitions],
        "default_partition": default.name if default is not None else None,
        "has_extra": slurm.version.supports("job_extra"),
        "fit_gres": FIT_GRES,
        "fit_next": NEXT_TYPE,
        "slurm_version": slurm.version.shown,
        "slurm_detected_by": slurm.detected_by,
    }
    env = environment(str(templates or templates_dir()))
    lua_context = {**context, "partitions": context["partition_names"]}
    files = {
        SLURM_FRAGMENT: env.get_template("slurmpool.conf.j2").render(context),
        GRES_CONF: env.get_template("gres.conf.j2").render(context),
        CGROUP_CONF: env.get_template("cgroup.conf.j2").render(context),
        JOB_SUBMIT_LUA: env.get_template("job_submit.lua.j2").render(lua_context),
        NODE_CONFIG_NAME: json.dumps(node_config(policy, classes, cat, slurm), indent=2) + "\n",
    }
    return GeneratedConfig(files)
