"""The GPU catalogue: one JSON file per GPU product under ``gres/``.

Each file carries a product's memory, PCI device ids, the names NVML reports
and, for MIG-capable boards, the full MIG geometry.  Values the source data
could not confirm are ``null`` in the file and ``None`` here: they are
*unknown*, never guessed.  Loading validates every file and raises
:class:`CatalogueError` naming the file and the field.

Only the standard library is used so the job hooks can load a model cheaply.
"""

from __future__ import annotations

import json
import os

from slurmpool.records import record
from slurmpool.resources import gres_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

SCHEMA_VERSION = 1


class CatalogueError(ValueError):
    """A catalogue file is malformed, or a model/profile lookup failed."""


class UnknownModelError(CatalogueError):
    def __init__(self, name: str, valid: Iterable[str]) -> None:
        self.name = name
        self.valid = sorted(valid)
        super().__init__(f"unknown GPU model {name!r}; known models: {', '.join(self.valid)}")


class UnknownProfileError(CatalogueError):
    def __init__(self, model: str, name: str, valid: Iterable[str]) -> None:
        self.model = model
        self.name = name
        self.valid = list(valid)
        super().__init__(
            f"unknown MIG profile {name!r} for {model}; valid profiles: {', '.join(self.valid)}"
        )


@record(frozen=True, slots=True)
class ComputeInstanceProfile:
    name: str
    nvml_profile_index: int
    max_count: int
    default: bool


@record(frozen=True, slots=True)
class GpuInstanceProfile:
    """One GPU-instance profile, e.g. ``3g.40gb``.

    ``placements`` are ``(start, size)`` in memory slices, as NVML reports
    them.  ``profile_id`` and ``memory_mib`` are ``None`` where unknown.
    """

    name: str
    nvml_profile_index: int
    profile_id: int | None
    slices: int
    memory_slices: int
    memory_mib: int | None
    max_count: int
    placements: tuple[tuple[int, int], ...]
    placements_inferred: bool
    notes: str = ""

    @property
    def is_standard(self) -> bool:
        """True for the plain ``Ng.Mgb`` profiles (no ``+me``, no double memory).

        These are the profiles the vgpu pooling carves; the others stay
        available to ``mig-static`` layouts.
        """
        return "+" not in self.name and self.memory_slices == _standard_memory_slices(self)


def _standard_memory_slices(p: GpuInstanceProfile) -> int:
    # 1g/2g use as many memory slices as compute slices, 3g and 4g use 4,
    # 7g uses all of them (8 on 7-slice boards, 4 on A30 whose 4g is full).
    if p.slices <= 2:
        return p.slices
    if p.slices <= 4:
        return 4
    return p.memory_slices


@record(frozen=True, slots=True)
class MigGeometry:
    compute_slices: int
    memory_slices: int
    gi_profiles: tuple[GpuInstanceProfile, ...]
    # Keyed by GI size ("7g", "3g", ...); None where the source has no data.
    ci_profiles: Mapping[str, tuple[ComputeInstanceProfile, ...]] | None
    ci_profiles_confirmed: bool

    def profile(self, name: str) -> GpuInstanceProfile | None:
        for p in self.gi_profiles:
            if p.name == name:
                return p
        return None

    def standard_profiles(self) -> tuple[GpuInstanceProfile, ...]:
        """Profiles used for vgpu pooling, smallest first."""
        return tuple(sorted((p for p in self.gi_profiles if p.is_standard), key=lambda p: p.slices))


@record(frozen=True, slots=True)
class GpuModel:
    name: str
    aliases: tuple[str, ...]
    nvml_names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    memory_mib: int
    mig: MigGeometry | None
    source: str
    notes: str
    path: str

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    def require_mig(self) -> MigGeometry:
        if self.mig is None:
            raise CatalogueError(f"{self.name} does not support MIG")
        return self.mig

    def gi_profile(self, name: str) -> GpuInstanceProfile:
        """Look a GI profile up by name (``3g.40gb``) or by size (``3g``)."""
        geo = self.require_mig()
        p = geo.profile(name)
        if p is None and name.endswith("g") and name[:-1].isdigit():
            p = next((q for q in geo.standard_profiles() if q.slices == int(name[:-1])), None)
        if p is None:
            raise UnknownProfileError(self.name, name, [q.name for q in geo.gi_profiles])
        return p

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "aliases": list(self.aliases),
            "nvml_names": list(self.nvml_names),
            "pci_device_ids": [f"0x{i:08X}" for i in self.pci_device_ids],
            "memory_mib": self.memory_mib,
            "mig_capable": self.mig_capable,
            "source": self.source,
        }
        if self.mig is not None:
            d["compute_slices"] = self.mig.compute_slices
            d["memory_slices"] = self.mig.memory_slices
            d["gpu_instance_profiles"] = [
                {
                    "name": p.name,
                    "nvml_profile_index": p.nvml_profile_index,
                    "profile_id": p.profile_id,
                    "slices": p.slices,
                    "memory_slices": p.memory_slices,
                    "memory_mib": p.memory_mib,
                    "max_count": p.max_count,
                    "placements": [list(x) for x in p.placements],
                    "placements_inferred": p.placements_inferred,
                }
                for p in self.mig.gi_profiles
            ]
        return d


# -- validation -------------------------------------------------------------


class _Reader:
    """Typed field access that reports ``file: field: problem``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, field: str, expected: str, got: object) -> CatalogueError:
        return CatalogueError(f"{self.path}: field {field!r}: expected {expected}, got {got!r}")

    def get(
        self,
        obj: Mapping[str, Any],
        key: str,
        where: str,
        types: type | tuple[type, ...],
        expected: str,
        nullable: bool = False,
    ) -> Any:
        field = f"{where}.{key}" if where else key
        if key not in obj:
            raise CatalogueError(f"{self.path}: missing field {field!r} ({expected})")
        v = obj[key]
        if v is None and nullable:
            return None
        # bool is an int subclass; never accept it where a number is meant.
        if isinstance(v, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
            raise self.fail(field, expected, v)
        if not isinstance(v, types):
            raise self.fail(field, expected, v)
        return v

    def check_keys(self, obj: Mapping[str, Any], allowed: set[str], where: str) -> None:
        extra = sorted(set(obj) - allowed)
        if extra:
            raise CatalogueError(
                f"{self.path}: unknown field {(where + '.' if where else '') + extra[0]!r}; "
                f"expected one of {', '.join(sorted(allowed))}"
            )


_TOP = {
    "schema",
    "name",
    "aliases",
    "nvml_names",
    "pci_device_ids",
    "memory_mib",
    "memory_note",
    "mig",
    "source",
    "notes",
}
_MIG = {
    "compute_slices",
    "memory_slices",
    "gpu_instance_profiles",
    "compute_instance_profiles",
    "compute_instance_profiles_confirmed",
}
_GI = {
    "name",
    "nvml_profile_index",
    "profile_id",
    "slices",
    "memory_slices",
    "memory_mib",
    "max_count",
    "placements",
    "placements_inferred",
    "notes",
}
_CI = {"name", "nvml_profile_index", "max_count", "default"}


def _parse_pci(r: _Reader, v: object, field: str) -> int:
    if not isinstance(v, str) or not v.lower().startswith("0x"):
        raise r.fail(field, "a hex string like '0x20B210DE'", v)
    try:
        return int(v, 16)
    except ValueError:
        raise r.fail(field, "a hex string like '0x20B210DE'", v) from None


def _parse_gi(r: _Reader, obj: Any, where: str, compute: int, memory: int) -> GpuInstanceProfile:
    if not isinstance(obj, dict):
        raise r.fail(where, "an object", obj)
    r.check_keys(obj, _GI, where)
    name = r.get(obj, "name", where, str, "a profile name like '3g.40gb'")
    slices = r.get(obj, "slices", where, int, "compute slices (int)")
    mem_slices = r.get(obj, "memory_slices", where, int, "memory slices (int)")
    if not 1 <= slices <= compute:
        raise r.fail(f"{where}.slices", f"1..{compute}", slices)
    if not 1 <= mem_slices <= memory:
        raise r.fail(f"{where}.memory_slices", f"1..{memory}", mem_slices)
    raw_pl = r.get(obj, "placements", where, list, "a list of [start, size]")
    placements: list[tuple[int, int]] = []
    for i, pl in enumerate(raw_pl):
        f = f"{where}.placements[{i}]"
        if (
            not isinstance(pl, list)
            or len(pl) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in pl)
        ):
            raise r.fail(f, "[start, size] integers", pl)
        start, size = pl
        if size != mem_slices:
            raise r.fail(f, f"size {mem_slices} (the profile's memory slices)", pl)
        if start < 0 or start + size > memory:
            raise r.fail(f, f"a range inside 0..{memory}", pl)
        placements.append((start, size))
    if not placements:
        raise r.fail(f"{where}.placements", "at least one placement", raw_pl)
    return GpuInstanceProfile(
        name=name,
        nvml_profile_index=r.get(obj, "nvml_profile_index", where, int, "NVML profile index (int)"),
        profile_id=r.get(obj, "profile_id", where, int, "profile id (int) or null", nullable=True),
        slices=slices,
        memory_slices=mem_slices,
        memory_mib=r.get(obj, "memory_mib", where, int, "MiB (int) or null", nullable=True),
        max_count=r.get(obj, "max_count", where, int, "max instances (int)"),
        placements=tuple(placements),
        placements_inferred=r.get(obj, "placements_inferred", where, bool, "true/false"),
        notes=obj.get("notes", "") or "",
    )


def _parse_mig(r: _Reader, obj: Any) -> MigGeometry:
    if not isinstance(obj, dict):
        raise r.fail("mig", "an object or null", obj)
    r.check_keys(obj, _MIG, "mig")
    compute = r.get(obj, "compute_slices", "mig", int, "compute slices (int)")
    memory = r.get(obj, "memory_slices", "mig", int, "memory slices (int)")
    if compute > memory:
        raise r.fail("mig.compute_slices", f"at most memory_slices ({memory})", compute)
    raw_gis = r.get(obj, "gpu_instance_profiles", "mig", list, "a list of profiles")
    gis = tuple(
        _parse_gi(r, g, f"mig.gpu_instance_profiles[{i}]", compute, memory)
        for i, g in enumerate(raw_gis)
    )
    names = [g.name for g in gis]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise r.fail("mig.gpu_instance_profiles", "unique profile names", dup)
    raw_ci = r.get(
        obj, "compute_instance_profiles", "mig", dict, "an object or null", nullable=True
    )
    ci: dict[str, tuple[ComputeInstanceProfile, ...]] | None = None
    if raw_ci is not None:
        ci = {}
        for size, lst in raw_ci.items():
            where = f"mig.compute_instance_profiles.{size}"
            if not isinstance(lst, list):
                raise r.fail(where, "a list of compute-instance profiles", lst)
            items = []
            for i, c in enumerate(lst):
                w = f"{where}[{i}]"
                if not isinstance(c, dict):
                    raise r.fail(w, "an object", c)
                r.check_keys(c, _CI, w)
                items.append(
                    ComputeInstanceProfile(
                        name=r.get(c, "name", w, str, "a name like '1c'"),
                        nvml_profile_index=r.get(c, "nvml_profile_index", w, int, "int"),
                        max_count=r.get(c, "max_count", w, int, "int"),
                        default=r.get(c, "default", w, bool, "true/false"),
                    )
                )
            ci[size] = tuple(items)
    return MigGeometry(
        compute_slices=compute,
        memory_slices=memory,
        gi_profiles=gis,
        ci_profiles=ci,
        ci_profiles_confirmed=bool(obj.get("compute_instance_profiles_confirmed", False)),
    )


def parse_model(data: Any, path: str) -> GpuModel:
    """Validate one catalogue document and build a :class:`GpuModel`."""
    r = _Reader(path)
    if not isinstance(data, dict):
        raise CatalogueError(f"{path}: expected a JSON object at the top level")
    r.check_keys(data, _TOP, "")
    schema = r.get(data, "schema", "", int, f"schema version {SCHEMA_VERSION}")
    if schema != SCHEMA_VERSION:
        raise r.fail("schema", f"{SCHEMA_VERSION}", schema)
    name = r.get(data, "name", "", str, "the catalogue name, e.g. 'A100-SXM4-80GB'")
    aliases = r.get(data, "aliases", "", list, "a list of names")
    nvml_names = r.get(data, "nvml_names", "", list, "a list of names NVML reports")
    for field, lst in (("aliases", aliases), ("nvml_names", nvml_names)):
        for i, a in enumerate(lst):
            if not isinstance(a, str) or not a:
                raise r.fail(f"{field}[{i}]", "a non-empty string", a)
    pci = r.get(data, "pci_device_ids", "", list, "a list of hex strings")
    memory = r.get(data, "memory_mib", "", int, "total memory in MiB (int)")
    if memory <= 0:
        raise r.fail("memory_mib", "a positive number", memory)
    mig_raw = r.get(data, "mig", "", dict, "MIG geometry object or null", nullable=True)
    return GpuModel(
        name=name,
        aliases=tuple(aliases),
        nvml_names=tuple(nvml_names),
        pci_device_ids=tuple(_parse_pci(r, v, f"pci_device_ids[{i}]") for i, v in enumerate(pci)),
        memory_mib=memory,
        mig=None if mig_raw is None else _parse_mig(r, mig_raw),
        source=r.get(data, "source", "", str, "where the facts come from"),
        notes=data.get("notes", "") or "",
        path=path,
    )


def _key(name: str) -> str:
    return name.strip().casefold()


def _strip_vendor(name: str) -> str:
    k = _key(name)
    for prefix in ("nvidia ", "tesla "):
        if k.startswith(prefix):
            k = k[len(prefix) :]
    return k


class Catalogue:
    """All models of a catalogue directory, looked up by name, alias, NVML name or PCI id."""

    def __init__(self, models: Iterable[GpuModel]) -> None:
        self._models: dict[str, GpuModel] = {}
        self._names: dict[str, GpuModel] = {}
        self._pci: dict[int, GpuModel] = {}
        for m in models:
            if _key(m.name) in self._models:
                raise CatalogueError(f"{m.path}: model {m.name!r} is defined twice")
            self._models[_key(m.name)] = m
            for n in (m.name, *m.aliases, *m.nvml_names):
                self._names.setdefault(_key(n), m)
                self._names.setdefault(_strip_vendor(n), m)
            for pid in m.pci_device_ids:
                self._pci.setdefault(pid, m)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(sorted(self._models.values(), key=lambda m: m.name))

    def __len__(self) -> int:
        return len(self._models)

    @property
    def names(self) -> list[str]:
        return sorted(m.name for m in self._models.values())

    def find(self, name: str) -> GpuModel | None:
        k = _key(name)
        return self._models.get(k) or self._names.get(k) or self._names.get(_strip_vendor(name))

    def get(self, name: str) -> GpuModel:
        m = self.find(name)
        if m is None:
            raise UnknownModelError(name, self.names)
        return m

    def by_pci_device_id(self, device_id: int) -> GpuModel | None:
        return self._pci.get(device_id)

    def identify(self, nvml_name: str, pci_device_id: int | None = None) -> GpuModel | None:
        """The model of a GPU as NVML describes it: by PCI id first, then by name."""
        if pci_device_id is not None:
            m = self.by_pci_device_id(pci_device_id)
            if m is not None:
                return m
        return self.find(nvml_name)


class PartialCatalogue(Catalogue):
    """The catalogue, reading only the files of the models named up front.

    For the job hooks: a node's models are known from its node config, and each
    model's file is ``<name>.json``.  A lookup those files cannot answer (another
    model, an alias, an unknown PCI id), iteration and ``names`` load the whole
    directory, so every answer is the full catalogue's.
    """

    def __init__(
        self, names: Iterable[str], directory: str | os.PathLike[str] | None = None
    ) -> None:
        self._directory = directory
        self._whole: Catalogue | None = None
        root = os.fspath(directory) if directory is not None else gres_dir()
        models = []
        for name in dict.fromkeys(names):
            f = os.path.join(root, f"{name}.json")
            if os.path.isfile(f):
                models.append(_load_file(f))
        super().__init__(models)

    def whole(self) -> Catalogue:
        if self._whole is None:
            if self._directory is None:
                self._whole = default_catalogue()
            else:
                self._whole = load_catalogue(self._directory)
        return self._whole

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.whole())

    def __len__(self) -> int:
        return len(self.whole())

    @property
    def names(self) -> list[str]:
        return self.whole().names

    def find(self, name: str) -> GpuModel | None:
        found = super().find(name)
        return found if found is not None else self.whole().find(name)

    def by_pci_device_id(self, device_id: int) -> GpuModel | None:
        found = super().by_pci_device_id(device_id)
        return found if found is not None else self.whole().by_pci_device_id(device_id)


def _load_file(f: str) -> GpuModel:
    try:
        with open(f) as fh:
            data = json.loads(fh.read())
    except json.JSONDecodeError as e:
        raise CatalogueError(f"{f}: line {e.lineno}: invalid JSON: {e.msg}") from None
    return parse_model(data, f)


def load_catalogue(directory: str | os.PathLike[str] | None = None) -> Catalogue:
    """Load and validate every ``*.json`` file of a catalogue directory."""
    root = os.fspath(directory) if directory is not None else gres_dir()
    try:
        names = os.listdir(root)
    except OSError:  # a missing or unreadable directory has no files, as with Path.glob
        names = []
    files = sorted(os.path.join(root, n) for n in names if n.endswith(".json"))
    if not files:
        raise CatalogueError(f"{root}: no GPU catalogue files (*.json) found")
    return Catalogue([_load_file(f) for f in files])


_default: Catalogue | None = None


def default_catalogue() -> Catalogue:
    """The shipped catalogue, loaded once per process."""
    global _default
    if _default is None:
        _default = load_catalogue()
    return _default
