"""Discovered hardware (``slurmpool discover --json``) matched to node groups.

An inventory is one node's view of its GPUs: device minors, NUMA CPU
affinity and, on MIG GPUs, the instances present.  Each inventory is
matched to the node group whose hostlist holds its hostname; a group with
no inventory falls back to what the policy declares (minor = index).

Fields read from each ``instances[]`` item: ``profile`` (name), ``gi_id``,
``ci_id`` and optionally ``gi_minor``/``ci_minor`` (``gi``/``ci`` are
accepted as short names for the ids).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpool.catalogue import Catalogue
from slurmpool.policy.model import NodeGroup, Policy

INVENTORY_SCHEMA = 1
_CPULIST = re.compile(r"^[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*$")


class ConfigError(ValueError):
    """The policy and the discovered hardware disagree, or an inventory is malformed."""


@dataclass(frozen=True, slots=True)
class InventoryInstance:
    profile: str
    gi_id: int
    ci_id: int | None  # None: a GPU instance without a compute instance (half-made)
    gi_minor: int | None = None
    ci_minor: int | None = None


@dataclass(frozen=True, slots=True)
class InventoryGpu:
    index: int
    name: str
    model: str | None  # catalogue name when identified
    minor: int
    cpu_affinity: str | None
    uuid: str | None = None
    pci_bus_id: str | None = None
    instances: tuple[InventoryInstance, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    hostname: str
    gpus: tuple[InventoryGpu, ...]
    source: str

    def gpu(self, index: int) -> InventoryGpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def _int(obj: dict[str, Any], key: str, where: str, *alts: str) -> int:
    for k in (key, *alts):
        v = obj.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    raise ConfigError(f"{where}: field {key!r}: expected a non-negative integer, got {v!r}")


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def parse_inventory(data: Any, source: str, catalogue: Catalogue) -> Inventory:
    """Validate one ``discover --json`` document."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object")
    if data.get("schema") != INVENTORY_SCHEMA:
        raise ConfigError(
            f"{source}: field 'schema': expected {INVENTORY_SCHEMA}, got {data.get('schema')!r}"
        )
    host = data.get("hostname")
    if not isinstance(host, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", host):
        raise ConfigError(f"{source}: field 'hostname': expected a host name, got {host!r}")
    raw_gpus = data.get("gpus")
    if not isinstance(raw_gpus, list):
        raise ConfigError(f"{source}: field 'gpus': expected a list")
    gpus: list[InventoryGpu] = []
    for i, g in enumerate(raw_gpus):
        where = f"{source}: gpus[{i}]"
        if not isinstance(g, dict):
            raise ConfigError(f"{where}: expected an object")
        name = g.get("name") or ""
        model_name = g.get("model") or name
        model = catalogue.find(model_name) if isinstance(model_name, str) else None
        affinity = g.get("cpu_affinity")
        if affinity is not None and (not isinstance(affinity, str) or not _CPULIST.match(affinity)):
            raise ConfigError(
                f"{where}: field 'cpu_affinity': expected a CPU list like 0-15, got {affinity!r}"
            )
        instances = []
        for k, inst in enumerate(g.get("instances") or []):
            w = f"{where}.instances[{k}]"
            if not isinstance(inst, dict) or not isinstance(inst.get("profile"), str):
                raise ConfigError(f"{w}: expected an object with a 'profile' name")
            instances.append(
                InventoryInstance(
                    profile=inst["profile"],
                    gi_id=_int(inst, "gi_id", w, "gi"),
                    ci_id=None if inst.get("ci_id") is None else _int(inst, "ci_id", w),
                    gi_minor=_opt_int(inst.get("gi_minor")),
                    ci_minor=_opt_int(inst.get("ci_minor")),
                )
            )
        index = _int(g, "index", where)
        gpus.append(
            InventoryGpu(
                index=index,
                name=str(name),
                model=model.name if model is not None else None,
                minor=_int(g, "minor", where) if "minor" in g else index,
                cpu_affinity=affinity or None,
                uuid=g.get("uuid") if isinstance(g.get("uuid"), str) else None,
                pci_bus_id=g.get("pci_bus_id") if isinstance(g.get("pci_bus_id"), str) else None,
                instances=tuple(instances),
            )
        )
    return Inventory(hostname=host, gpus=tuple(sorted(gpus, key=lambda g: g.index)), source=source)


def load_inventories(
    paths: Iterable[str | os.PathLike[str]], catalogue: Catalogue
) -> list[Inventory]:
    out = []
    for p in paths:
        try:
            data = json.loads(Path(p).read_text())
        except OSError as err:
            raise ConfigError(f"{p}: cannot read: {err.strerror}") from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"{p}: line {err.lineno}: invalid JSON: {err.msg}") from None
        out.append(parse_inventory(data, str(p), catalogue))
    return out


def _check_against(group: NodeGroup, inv: Inventory) -> None:
    for spec in group.gpus:
        found = inv.gpu(spec.index)
        if found is None:
            raise ConfigError(
                f"{inv.source}: {inv.hostname} has no GPU {spec.index}, but node group "
                f"{group.name!r} declares one ({spec.model})"
            )
        if found.model != spec.model:
            raise ConfigError(
                f"{inv.source}: GPU {spec.index} of {inv.hostname} is {found.name!r}, but node "
                f"group {group.name!r} declares {spec.model}"
            )


def _same_hardware(a: Inventory, b: Inventory, group: NodeGroup) -> bool:
    for spec in group.gpus:
        ga, gb = a.gpu(spec.index), b.gpu(spec.index)
        if ga is None or gb is None:
            return False
        if (ga.minor, ga.cpu_affinity, ga.model) != (gb.minor, gb.cpu_affinity, gb.model):
            return False
    return True


def match_inventories(policy: Policy, inventories: Sequence[Inventory]) -> dict[str, Inventory]:
    """The inventory describing each node group (by group name).

    Several inventories of one group must agree on minors, models and
    affinity: a group is one line in gres.conf, so its nodes must be alike.
    """
    out: dict[str, Inventory] = {}
    for inv in sorted(inventories, key=lambda i: i.hostname):
        group = next((g for g in policy.node_groups if g.hostlist.contains(inv.hostname)), None)
        if group is None:
            raise ConfigError(f"{inv.source}: host {inv.hostname} is in no node group")
        _check_against(group, inv)
        first = out.get(group.name)
        if first is None:
            out[group.name] = inv
        elif not _same_hardware(first, inv, group):
            raise ConfigError(
                f"{inv.source}: {inv.hostname} differs from {first.hostname} ({first.source}) "
                f"in GPU minors, models or CPU affinity, but both are in node group "
                f"{group.name!r}; split the group"
            )
    return out
