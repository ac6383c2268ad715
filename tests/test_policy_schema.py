"""The JSON Schema comes from the validator's own field definitions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import needs
import pytest
import yaml

from slurmpool.policy.schema import GPU, POLICY, json_schema

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


def _validator() -> Any:
    jsonschema = needs.module("jsonschema")
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_schema(path: Path) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(bogus=1),
        lambda d: d.pop("cluster"),
        lambda d: d["node_groups"][0]["gpus"][0].update(layout=["3g"]),
        lambda d: d["node_groups"][0]["gpus"][0].update(index=0),
        lambda d: d["node_groups"][0].update(cpus="8"),
        lambda d: d["partitions"][0].update(name="a b"),
        lambda d: d["node_groups"][0]["gpus"][0].update(mode="shared"),  # shares missing
    ],
    ids=["unknown", "missing", "layout-wrong-mode", "index-and-count", "type", "space", "shares"],
)
def test_schema_rejects(mutate: Any) -> None:
    data = yaml.safe_load((EXAMPLES[0].parent / "sandbox.yaml").read_text())
    mutate(data)
    assert list(_validator().iter_errors(data))


def test_schema_lists_every_field() -> None:
    schema = json_schema()
    assert set(schema["properties"]) == {f.name for f in POLICY.fields}
    gpu = schema["properties"]["node_groups"]["items"]["properties"]["gpus"]["items"]
    assert set(gpu["properties"]) == {f.name for f in GPU.fields}
