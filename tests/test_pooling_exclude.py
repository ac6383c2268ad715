"""A requeued job is kept off the node that requeued it until the node frees slices
(pooling/exclude.py).  Slurm here is a pair of scripts holding each job's state and
ExcNodeList in a file, refusing the update while the job runs as slurmctld does
(measured: the module docstring); tests/integration/test_pooling.py does it on the
sandbox's real Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest
from pooling_env import ListLog

from slurmpool.pooling.exclude import exclude_here, readmit, with_node, without_node
from slurmpool.pooling.slurmjob import SlurmJobs
from slurmpool.slurm.runner import Runner
from slurmpool.state.store import NodeStore

SQUEUE = """#!/bin/sh
# squeue -h -j ID -o '%T|%x'
f="{jobs}/$3"
[ -f "$f" ] || {{ echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }}
while IFS= read -r line; do echo "$line"; done < "$f"
"""
SCONTROL = """#!/bin/sh
# scontrol update jobid=ID ExcNodeList=NODES
id="${{2#jobid=}}"; nodes="${{3#ExcNodeList=}}"
f="{jobs}/$id"
IFS='|' read -r state rest < "$f"
[ "$state" = RUNNING ] && {{ echo "Job is no longer pending execution for job $id" >&2; exit 1; }}
case "$nodes" in *bad*) echo "Invalid node name specified for job $id" >&2; exit 1;; esac
echo "$state|$nodes" > "$f"
echo "scontrol $*" >> {jobs}/calls
"""


class Ctld:
    """The jobs slurmctld knows: id -> (state, ExcNodeList)."""

    def __init__(self, root: Path) -> None:
        self.jobs = root / "jobs"
        self.jobs.mkdir()
        bin_dir = root / "bin"
        bin_dir.mkdir()
        for name, text in (("squeue", SQUEUE), ("scontrol", SCONTROL)):
            path = bin_dir / name
            path.write_text(text.format(jobs=self.jobs))
            path.chmod(0o755)
        self.slurm = SlurmJobs(Runner(search_path=[str(bin_dir)]), timeout_s=10)

    def put(self, job_id: str, state: str, nodes: str = "") -> None:
        (self.jobs / job_id).write_text(f"{state}|{nodes}\n")

    def get(self, job_id: str) -> tuple[str, str]:
        state, _, nodes = (self.jobs / job_id).read_text().strip().partition("|")
        return state, nodes

    def forget(self, job_id: str) -> None:
        (self.jobs / job_id).unlink()

    def updates(self) -> int:
        calls = self.jobs / "calls"
        return len(calls.read_text().splitlines()) if calls.exists() else 0


@pytest.fixture
def ctld(tmp_path: Path) -> Ctld:
    return Ctld(tmp_path)


@pytest.fixture
def store(tmp_path: Path) -> NodeStore:
    return NodeStore(tmp_path / "gpu3.sqlite")


def test_the_node_is_added_to_and_taken_from_a_hostlist() -> None:
    assert with_node("", "gpu3") == "gpu3"
    assert with_node("login1", "gpu3") == "login1,gpu3"
    assert with_node("gpu[1-4]", "gpu3") == "gpu[1-4]"  # already there
    assert without_node("gpu[1-4]", "gpu3") == "gpu[1-2,4]"
    assert without_node("gpu3", "gpu3") == ""
    assert without_node("login1,gpu3", "gpu3") == "login1"
    assert without_node("", "gpu3") == ""


def test_a_requeued_job_is_recorded_then_kept_off_the_node(ctld: Ctld, store: NodeStore) -> None:
    """The user's own exclusion stays; the node is appended."""
    ctld.put("7", "COMPLETING", "login1")
    log = ListLog()
    assert exclude_here("gpu3", "7", ctld.slurm, lambda: store, log)
    assert ctld.get("7") == ("COMPLETING", "login1,gpu3")
    assert store.exclusions() == ["7"]
    assert log.actions() == ["excluded"]


def test_the_epilog_readmits_then_forgets_once_it_reads_the_list_without_the_node(
    ctld: Ctld, store: NodeStore
) -> None:
    ctld.put("7", "PENDING", "login1,gpu3")
    log = ListLog()
    readmit("gpu3", ctld.slurm, store, log)
    assert ctld.updates() == 0  # not on record: not this node's exclusion
    with store.transaction():
        store.add_exclusion("7")
    readmit("gpu3", ctld.slurm, store, log)
    assert ctld.get("7") == ("PENDING", "login1")
    assert store.exclusions() == ["7"]  # kept until seen taken out
    readmit("gpu3", ctld.slurm, store, log)
    assert store.exclusions() == []
    assert ctld.updates() == 1


def test_a_running_job_is_left_alone_and_seen_to_when_it_comes_back(
    ctld: Ctld, store: NodeStore
) -> None:
    """It ran elsewhere; its list cannot change while it runs.  Requeued again later, it
    is taken out of the node at the next epilog."""
    ctld.put("7", "RUNNING", "gpu3")
    with store.transaction():
        store.add_exclusion("7")
    log = ListLog()
    readmit("gpu3", ctld.slurm, store, log)
    assert (ctld.get("7"), store.exclusions(), ctld.updates()) == (("RUNNING", "gpu3"), ["7"], 0)
    ctld.put("7", "PENDING", "gpu3,gpu4")
    readmit("gpu3", ctld.slurm, store, log)
    assert ctld.get("7") == ("PENDING", "gpu4")


@pytest.mark.parametrize("end", ["COMPLETED", "CANCELLED", "gone"])
def test_an_ended_job_is_forgotten(ctld: Ctld, store: NodeStore, end: str) -> None:
    if end == "gone":
        ctld.put("7", "PENDING")
        ctld.forget("7")
    else:
        ctld.put("7", end, "gpu3")
    with store.transaction():
        store.add_exclusion("7")
    readmit("gpu3", ctld.slurm, store, ListLog())
    assert store.exclusions() == [] and ctld.updates() == 0


def test_a_failed_update_is_logged_and_tried_again(ctld: Ctld, store: NodeStore) -> None:
    """One job's failure does not stop the others; its entry stays for the next epilog."""
    ctld.put("7", "PENDING", "gpu3,bad1")  # the stand-in refuses any list naming "bad"
    ctld.put("8", "PENDING", "gpu3")
    with store.transaction():
        store.add_exclusion("7")
        store.add_exclusion("8")
    log = ListLog()
    readmit("gpu3", ctld.slurm, store, log)
    assert "readmit-failed" in log.actions()
    _, fields = log.lines[log.actions().index("readmit-failed")]
    assert "Invalid node name" in str(fields["error"])
    assert ctld.get("8") == ("PENDING", "")
    assert store.exclusions() == ["7", "8"]


def test_a_job_cancelled_before_the_exclusion_is_left_alone(ctld: Ctld, store: NodeStore) -> None:
    log = ListLog()
    assert not exclude_here("gpu3", "9", ctld.slurm, lambda: store, log)
    assert store.exclusions() == ["9"]  # the next epilog finds it gone and forgets it
    readmit("gpu3", ctld.slurm, store, log)
    assert store.exclusions() == []
