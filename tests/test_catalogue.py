"""The GPU catalogue: every shipped file validates; malformed files fail with file and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slurmpool.catalogue import (
    Catalogue,
    CatalogueError,
    UnknownModelError,
    load_catalogue,
)
from slurmpool.resources import gres_dir

REQUIRED = [
    "A100-SXM4-40GB",
    "A100-SXM4-80GB",
    "A100-PCIE-80GB",
    "A30-24GB",
    "H100-SXM5-80GB",
    "H100-PCIe-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "GH200-144GB",
    "L40S-48GB",
    "A10-24GB",
    "V100-SXM2-32GB",
]


def test_required_models_present(catalogue: Catalogue) -> None:
    for name in REQUIRED:
        assert catalogue.get(name).name == name


@pytest.mark.parametrize(
    "query, expected",
    [
        ("a100-sxm4-80gb", "A100-SXM4-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("A30", "A30-24GB"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
        ("h200-141gb", "H200-141GB"),
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
    ],
)
def test_lookup_by_catalogue_alias_and_nvml_name(
    catalogue: Catalogue, query: str, expected: str
) -> None:
    assert catalogue.get(query).name == expected


def test_identify_prefers_pci_device_id(catalogue: Catalogue) -> None:
    # A PCIe A100 80GB whose name string is unfamiliar is still identified by its PCI id.
    assert catalogue.identify("NVIDIA Something", 0x20B510DE).name == "A100-PCIE-80GB"
    assert catalogue.identify("NVIDIA A30", None).name == "A30-24GB"
    assert catalogue.identify("unknown board", 0x12345678) is None


def test_unknown_model_lists_valid_names(catalogue: Catalogue) -> None:
    with pytest.raises(UnknownModelError) as e:
        catalogue.get("B300")
    assert "B300" in str(e.value) and "A100-SXM4-80GB" in str(e.value)


def test_mig_geometry_matches_source(catalogue: Catalogue) -> None:
    a100 = catalogue.get("A100-SXM4-40GB").require_mig()
    assert (a100.compute_slices, a100.memory_slices) == (7, 8)
    assert [p.name for p in a100.standard_profiles()] == [
        "1g.5gb",
        "2g.10gb",
        "3g.20gb",
        "4g.20gb",
        "7g.40gb",
    ]
    p3 = a100.profile("3g.20gb")
    assert p3 is not None
    assert (p3.profile_id, p3.nvml_profile_index, p3.memory_slices) == (9, 2, 4)
    assert p3.placements == ((0, 4), (4, 4))
    a30 = catalogue.get("A30-24GB").require_mig()
    assert (a30.compute_slices, a30.memory_slices) == (4, 4)
    assert [p.name for p in a30.standard_profiles()] == ["1g.6gb", "2g.12gb", "4g.24gb"]


def test_unknown_values_stay_unknown(catalogue: Catalogue) -> None:
    # The source has no confirmed MiB for A100-80GB profiles and no ids for H100-96GB.
    assert catalogue.get("A100-SXM4-80GB").gi_profile("3g").memory_mib is None
    assert catalogue.get("H100-96GB").gi_profile("3g").profile_id is None
    assert catalogue.get("H200-141GB").gi_profile("1g").placements_inferred is True
    assert catalogue.get("GH200-144GB").require_mig().ci_profiles is None


def test_non_mig_models_have_memory_only(catalogue: Catalogue) -> None:
    l40s = catalogue.get("L40S")
    assert not l40s.mig_capable and l40s.memory_mib == 48 * 1024
    with pytest.raises(CatalogueError, match="does not support MIG"):
        l40s.require_mig()


def test_every_file_cites_a_source() -> None:
    for f in sorted(Path(gres_dir()).glob("*.json")):
        assert json.loads(f.read_text())["source"].strip(), f


def _broken_copy(tmp_path: Path, name: str, mutate) -> Path:
    d = tmp_path / "gres"
    shutil.copytree(gres_dir(), d)
    f = d / f"{name}.json"
    data = json.loads(f.read_text())
    mutate(data)
    f.write_text(json.dumps(data))
    return d


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("memory_mib"), "missing field 'memory_mib'"),
        (lambda d: d.update(colour="green"), "unknown field 'colour'"),
        (lambda d: d.update(memory_mib="lots"), "field 'memory_mib': expected total memory"),
        (lambda d: d.update(schema=2), "field 'schema'"),
        (
            lambda d: d["mig"]["gpu_instance_profiles"][0].update(placements=[[8, 1]]),
            "gpu_instance_profiles[0].placements[0]",
        ),
        (
            lambda d: d["mig"]["gpu_instance_profiles"][3].update(slices=True),
            "gpu_instance_profiles[3].slices",
        ),
        (lambda d: d.update(pci_device_ids=["20B2"]), "pci_device_ids[0]"),
    ],
    ids=[
        "missing",
        "unknown-field",
        "wrong-type",
        "schema",
        "placement-off-board",
        "bool-int",
        "pci",
    ],
)
def test_malformed_file_names_file_and_field(tmp_path: Path, mutate, message: str) -> None:
    d = _broken_copy(tmp_path, "A100-SXM4-80GB", mutate)
    with pytest.raises(CatalogueError) as e:
        load_catalogue(d)
    assert "A100-SXM4-80GB.json" in str(e.value)
    assert message in str(e.value)


def test_invalid_json_reports_line(tmp_path: Path) -> None:
    d = tmp_path / "gres"
    d.mkdir()
    (d / "Bad.json").write_text('{\n  "schema": 1,\n  "name": \n}')
    with pytest.raises(CatalogueError, match=r"Bad\.json: line 4: invalid JSON"):
        load_catalogue(d)


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="no GPU catalogue files"):
        load_catalogue(tmp_path)
