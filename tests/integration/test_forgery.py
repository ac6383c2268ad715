"""Attacks on the allocation, as an ordinary user would try them on the real sandbox.

A root prolog that let a job pick its own slice would not be deployable.  Each job
here forges what ``scontrol show job`` text would show (a name, comment or a rename
holding ``\\n   TresPerNode=gres:vgpu:7``), or a ``slurmpool:`` token in Extra, and
must get exactly what slurmctld allocated: a 1g instance for ``vgpu:1``, nothing for
a CPU-only job.  job_submit.lua logs each attempt in slurmctld's log; no node drains.
"""

from __future__ import annotations

import pwd
from collections.abc import Callable
from pathlib import Path

import pytest
from polling import poll

from slurmpool.slurm.parse import parse_nodes
from slurmpool.slurm.version import parse_version

from .conftest import Cluster

USER = "sp-bob"
FORGED = "x\n   TresPerNode=gres:vgpu:7\n     Nodes=sbx1 CPU_IDs=0 Mem=100 GRES=vgpu(CNT:7)"
SHOW = "echo dev=$CUDA_VISIBLE_DEVICES profile=$SLURMPOOL_PROFILE"


def _ctld_log(cluster: Cluster) -> str:
    return (cluster.sandbox.layout.log_dir / "slurmctld.log").read_text(errors="replace")


def _attempt_logged(cluster: Cluster, field: str, how: str) -> Callable[[], bool]:
    uid = pwd.getpwnam(USER).pw_uid
    line = f"forgery-attempt: uid {uid} {how} a job whose {field} holds a line"
    return lambda: line in _ctld_log(cluster)


def _got(cluster: Cluster, job: int, out: Path) -> str:
    assert cluster.wait(job) == "COMPLETED"
    return out.read_text().strip()


def _no_node_drained(cluster: Cluster) -> None:
    nodes = parse_nodes(cluster.slurm.run("scontrol", "show", "node").stdout)
    assert all(n.available for n in nodes), [(n.name, n.state, n.flags) for n in nodes]


def _submit(cluster: Cluster, tag: str, *args: str) -> tuple[int, Path]:
    out = cluster.workdir / f"forgery-{tag}.out"
    job = cluster.submit("-w", "sbx1", "-o", str(out), *args, "--wrap", SHOW, user=USER)
    return job, out


@pytest.mark.parametrize("field", ["name", "comment"])
def test_a_forged_line_in_a_user_field_gets_the_allocated_1g(cluster: Cluster, field: str) -> None:
    forged = ["-J", FORGED] if field == "name" else [f"--comment={FORGED}"]
    job, out = _submit(cluster, field, "--gres=vgpu:1", *forged)
    assert _got(cluster, job, out).endswith("profile=1g.10gb")
    poll(
        f"the forged {field} logged by job_submit.lua", _attempt_logged(cluster, field, "submitted")
    )
    _no_node_drained(cluster)


def test_a_rename_after_submit_gets_the_allocated_1g(cluster: Cluster) -> None:
    job, out = _submit(cluster, "renamed", "--gres=vgpu:1", "--hold")
    cluster.slurm.run("scontrol", "update", f"JobId={job}", f"Name={FORGED}", as_user=USER)
    poll("the rename logged by job_submit.lua", _attempt_logged(cluster, "name", "modified"))
    cluster.slurm.run("scontrol", "release", str(job), as_user=USER)
    assert _got(cluster, job, out).endswith("profile=1g.10gb")
    _no_node_drained(cluster)


def test_a_cpu_only_job_with_a_forged_name_gets_no_gpu(cluster: Cluster) -> None:
    job, out = _submit(cluster, "cpu-only", "-J", FORGED)
    assert _got(cluster, job, out) == "dev= profile="
    hooks = [ln for ln in cluster.host_hook_log("sbx1").splitlines() if f" job={job} " in ln]
    assert hooks, "the prolog logged nothing for the job"
    assert not any(" action=request " in ln or " action=active " in ln for ln in hooks), hooks
    poll("the forged name logged by job_submit.lua", _attempt_logged(cluster, "name", "submitted"))
    _no_node_drained(cluster)


def test_a_forged_extra_is_scrubbed_and_gets_the_allocated_1g(cluster: Cluster) -> None:
    version = parse_version(cluster.slurm.run("sbatch", "--version").stdout)
    if not version.at_least(23, 2):
        pytest.skip(f"Slurm {version} has no --extra (from 23.02): Extra cannot be forged here")
    job, out = _submit(cluster, "extra", "--gres=vgpu:1", "--extra= SlurmPool:vgpu=7")
    assert _got(cluster, job, out).endswith("profile=1g.10gb")
    poll("the scrub logged", lambda: "removed a slurmpool token" in _ctld_log(cluster))
    _no_node_drained(cluster)
