"""Every policy error, case by case: each names the file, the line and the field."""

from __future__ import annotations

import pytest

from slurmpool.policy.errors import Issue, PolicyError
from slurmpool.policy.loader import parse_policy

GOOD = """\
version: v1
cluster: c
node_groups:
  - name: g
    nodes: n[1-4]
    cpus: 8
    real_memory_mib: 1000
    gpus:
      - {model: A100-SXM4-80GB, count: 2, mode: mig}
      - {model: A100-SXM4-80GB, index: 2, mode: passthrough}
partitions:
  - name: p
    node_groups: [g]
    default: true
"""


def issues(text: str, variables: dict[str, str] | None = None) -> list[Issue]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "pool.yaml", variables)
    return info.value.issues


def one(text: str) -> Issue:
    found = issues(text)
    assert len(found) == 1, found
    return found[0]


def test_good_policy_parses() -> None:
    parse_policy(GOOD, "pool.yaml")


# (id, replace this, with that, expected path, expected line, message fragment)
CASES = [
    (
        "unknown-field",
        "cpus: 8",
        "cpus: 8\n    colour: red",
        "node_groups[0].colour",
        7,
        "unknown field 'colour'; expected one of name, nodes",
    ),
    ("missing-field", "    cpus: 8\n", "", "node_groups[0].cpus", 4, "missing field 'cpus'"),
    (
        "wrong-type-int",
        "cpus: 8",
        "cpus: eight",
        "node_groups[0].cpus",
        6,
        "expected an integer >= 1, got a string ('eight')",
    ),
    (
        "wrong-type-bool",
        "default: true",
        "default: yes-please",
        "partitions[0].default",
        14,
        "expected true or false",
    ),
    (
        "wrong-type-list",
        "node_groups: [g]",
        "node_groups: g",
        "partitions[0].node_groups",
        13,
        "expected a list of",
    ),
    (
        "duplicate-field",
        "index: 2, mode: passthrough}",
        "index: 2, model: X}",
        "",
        10,
        "duplicate field",
    ),
    (
        "unknown-model-name",
        "{model: A100-SXM4-80GB, index: 2",
        "{model: B999, index: 2",
        "node_groups[0].gpus[1].model",
        10,
        "unknown GPU model 'B999'; known models: A10-24GB",
    ),
    (
        "non-mig-model",
        "{model: A100-SXM4-80GB, count: 2, mode: mig}",
        "{model: L40S, count: 2, mode: mig}",
        "node_groups[0].gpus[0].mode",
        9,
        "L40S-48GB does not support MIG",
    ),
    (
        "unknown-profile",
        "index: 2, mode: passthrough}",
        "index: 2, mode: mig-static, layout: [5g.50gb]}",
        "node_groups[0].gpus[1].layout[0]",
        10,
        "unknown MIG profile '5g.50gb' for A100-SXM4-80GB; valid profiles: 1g.10gb",
    ),
    (
        "layout-misfit",
        "index: 2, mode: passthrough}",
        "index: 2, mode: mig-static, layout: [3g, 3g, 1g]}",
        "node_groups[0].gpus[1].layout",
        10,
        "does not fit one A100-SXM4-80GB",
    ),
    (
        "layout-missing",
        "index: 2, mode: passthrough}",
        "index: 2, mode: mig-static}",
        "node_groups[0].gpus[1].layout",
        10,
        "missing field 'layout'",
    ),
    (
        "layout-wrong-mode",
        "index: 2, mode: passthrough}",
        "index: 2, mode: passthrough, layout: [3g]}",
        "node_groups[0].gpus[1].layout",
        10,
        "only valid with mode mig-static",
    ),
    (
        "mix-mig-shared",
        "index: 2, mode: passthrough}",
        "index: 2, mode: shared, shares: 2}",
        "node_groups[0].gpus",
        8,
        "must all be mig or all be shared",
    ),
    (
        "shares-zero",
        "{model: A100-SXM4-80GB, count: 2, mode: mig}",
        "{model: A10, count: 2, mode: shared, shares: 0}",
        "node_groups[0].gpus[0].shares",
        9,
        "expected an integer >= 1, got 0",
    ),
    (
        "shares-missing",
        "{model: A100-SXM4-80GB, count: 2, mode: mig}",
        "{model: A10, count: 2, mode: shared}",
        "node_groups[0].gpus[0].shares",
        9,
        "missing field 'shares'",
    ),
    (
        "index-twice",
        "index: 2, mode: passthrough}",
        "index: 2, mode: passthrough}\n"
        "      - {model: A100-SXM4-80GB, index: 2, mode: passthrough}",
        "node_groups[0].gpus[2].index",
        11,
        "GPU index 2 is given twice (also at line 10)",
    ),
    (
        "index-out-of-range",
        "index: 2, mode: passthrough}",
        "index: 7, mode: passthrough}",
        "node_groups[0].gpus[1].index",
        10,
        "GPU index 7 is out of range",
    ),
    (
        "index-and-count",
        "index: 2, mode: passthrough}",
        "index: 2, count: 1, mode: passthrough}",
        "node_groups[0].gpus[1]",
        10,
        "expected exactly one of index, indices, count",
    ),
    (
        "unknown-group",
        "node_groups: [g]",
        "node_groups: [g, h]",
        "partitions[0].node_groups[1]",
        13,
        "unknown node group 'h'; node groups: g",
    ),
    (
        "unknown-mode",
        "mode: passthrough}",
        "mode: vm}",
        "node_groups[0].gpus[1].mode",
        10,
        "expected one of passthrough, mig, mig-static, shared",
    ),
    ("cluster-with-space", "cluster: c", "cluster: my cluster", "cluster", 2, "expected a cluster"),
    ("name-with-quote", "name: p", "name: p'; rm", "partitions[0].name", 12, "expected a name"),
    ("partition-newline", "name: p", 'name: "p\\nq"', "partitions[0].name", 12, "expected a name"),
    (
        "option-with-space",
        "cpus: 8",
        "cpus: 8\n    slurm_node_options: {Feature: a b}",
        "node_groups[0].slurm_node_options.Feature",
        7,
        "without spaces, quotes",
    ),
    (
        "option-with-quote",
        "cpus: 8",
        "cpus: 8\n    slurm_node_options: {Feature: 'a\"b'}",
        "node_groups[0].slurm_node_options.Feature",
        7,
        "without spaces, quotes",
    ),
    (
        "option-owned",
        "cpus: 8",
        "cpus: 8\n    slurm_node_options: {Gres: 'vgpu:99'}",
        "node_groups[0].slurm_node_options.Gres",
        7,
        "set by slurmpool",
    ),
    (
        "path-with-space",
        "cluster: c",
        "cluster: c\npaths:\n  hooks_dir: /opt/my hooks",
        "paths.hooks_dir",
        4,
        "absolute path without spaces",
    ),
    (
        "path-relative",
        "cluster: c",
        "cluster: c\npaths:\n  state_dir: var/lib",
        "paths.state_dir",
        4,
        "absolute path",
    ),
    (
        "path-undefined-var",
        "cluster: c",
        "cluster: c\npaths:\n  state_dir: ${root}/s",
        "paths.state_dir",
        4,
        "undefined variable ${root}",
    ),
    (
        "backend",
        "cluster: c",
        "cluster: c\ngpu_backend: cuda",
        "gpu_backend",
        3,
        "expected nvml or sim:<absolute directory>",
    ),
    (
        "two-defaults",
        "    default: true\n",
        "    default: true\n  - name: q\n    node_groups: [g]\n    default: true\n",
        "partitions[1].default",
        17,
        "only one partition can be the default",
    ),
    (
        "duplicate-group",
        "partitions:",
        "  - name: g\n    nodes: m1\n    cpus: 1\n"
        "    real_memory_mib: 1\n    gpus: [{model: T4, index: 0, mode: passthrough}]\npartitions:",
        "node_groups[1].name",
        11,
        "node group 'g' is defined twice",
    ),
    (
        "overlap",
        "partitions:",
        "  - name: h\n    nodes: n[4-8]\n    cpus: 1\n"
        "    real_memory_mib: 1\n    gpus: [{model: T4, index: 0, mode: passthrough}]\npartitions:",
        "node_groups[1].nodes",
        12,
        "node n4 is also in node group 'g' (line 5)",
    ),
    (
        "bad-hostlist",
        "nodes: n[1-4]",
        "nodes: n[4-1]",
        "node_groups[0].nodes",
        5,
        "descending range",
    ),
    (
        "vgpu-unit-mismatch",
        "cpus: 8",
        "cpus: 8\n    vgpu_unit: share",
        "node_groups[0].vgpu_unit",
        7,
        "expected compute-slice for mig GPUs",
    ),
]


@pytest.mark.parametrize(
    ("old", "new", "path", "line", "fragment"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_error(old: str, new: str, path: str, line: int, fragment: str) -> None:
    assert old in GOOD
    found = issues(GOOD.replace(old, new, 1))
    matching = [i for i in found if fragment in i.message]
    assert matching, f"no issue with {fragment!r} in {[str(i) for i in found]}"
    issue = matching[0]
    assert issue.file == "pool.yaml"
    if path:
        assert issue.path == path
    assert issue.line == line, str(issue)
    assert str(issue).startswith(f"pool.yaml:{line}:")


def test_unknown_version_stops_early() -> None:
    issue = one(GOOD.replace("version: v1", "version: v2"))
    assert (issue.line, issue.path) == (1, "version")
    assert "unknown version 'v2'; this slurmpool reads v1" in issue.message


def test_invalid_yaml_has_a_line() -> None:
    issue = one(GOOD.replace("cpus: 8", "cpus: [8"))
    assert issue.line is not None and "invalid YAML" in issue.message


def test_empty_file() -> None:
    assert "empty policy" in one("").message


def test_all_errors_are_collected() -> None:
    text = (
        GOOD.replace("cluster: c", "cluster: 'c d'")
        .replace("cpus: 8", "cpus: 0")
        .replace("node_groups: [g]", "node_groups: [nope]")
        .replace("{model: A100-SXM4-80GB, index: 2", "{model: Z1, index: 2")
    )
    found = issues(text)
    assert [i.path for i in found] == [
        "cluster",
        "node_groups[0].cpus",
        "node_groups[0].gpus[1].model",
        "partitions[0].node_groups[0]",
    ]
    assert [i.line for i in found] == [2, 6, 10, 13]


def test_mixed_pooled_models_rejected() -> None:
    text = GOOD.replace(
        "index: 2, mode: passthrough}", "index: 2, model: H100-SXM5-80GB, mode: mig}"
    ).replace("{model: A100-SXM4-80GB, index: 2, model:", "{index: 2, model:")
    assert "must be one model" in one(text).message


def test_partition_mixing_pool_geometries_rejected() -> None:
    text = GOOD.replace(
        "partitions:",
        "  - name: a30\n    nodes: m[1-2]\n    cpus: 1\n    real_memory_mib: 1\n"
        "    gpus: [{model: A30, count: 1, mode: mig}]\npartitions:",
    ).replace("node_groups: [g]", "node_groups: [g, a30]")
    issue = one(text)
    assert issue.path == "partitions[0]" and "one vgpu geometry" in issue.message


def test_hostile_strings_never_pass() -> None:
    for hostile in ["a'; echo foo", 'x"y', "a\nb", "a b", "$(id)", "a#b", "`id`"]:
        text = GOOD.replace("name: p", f"name: {hostile!r}".replace("\\n", "\n"))
        with pytest.raises(PolicyError):
            parse_policy(text)
    with pytest.raises(PolicyError):
        parse_policy(
            GOOD.replace("cluster: c", "cluster: c\npaths: {state_dir: ${r}}"),
            variables={"r": "/tmp/x y"},
        )
