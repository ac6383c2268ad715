"""Builders for pooling tests: a simulated node, its node config, a fake ``scontrol``.

Everything is real but Slurm: the simulator is the NVML module, the hooks run through
their entry point (in this process or as separate processes, as slurmd runs them), and
``squeue`` and ``scontrol`` are small executables that record their arguments; ``squeue
-h -j ID -O ...`` prints the allocation a test set for the job (as slurmctld would), and
``scontrol show job`` a canned record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slurmpool.configgen.nodeconfig import load_node_config
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.hostlist import expand
from slurmpool.modes import GpuMode
from slurmpool.pooling.deadline import Deadline
from slurmpool.pooling.node import Job, Node
from slurmpool.sim.faults import plant
from slurmpool.sim.node import create_node
from slurmpool.state.store import Allocation, NodeStore, open_node_store

A100 = "A100-SXM4-80GB"
A100_PROFILES = {
    "1": "1g.10gb",
    "2": "2g.20gb",
    "3": "3g.40gb",
    "4": "4g.40gb",
    "5": "7g.80gb",
    "6": "7g.80gb",
    "7": "7g.80gb",
}
NODE = "node1"
# generate-config's Gres for the default pool (two MIG A100s, one passthrough): the
# fit counts of an empty node.
EMPTY_NODE_GRES = (
    "gpu:a100:1,vgpu:14,vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,"
    "vgpufit:next:1,vgpufit:pad:14"
)
HOOKS = {
    "prolog_timeout_s": 30,
    "task_prolog_timeout_s": 10,
    "epilog_timeout_s": 60,
    "epilog_slurmctld_timeout_s": 30,
}

# How a node's GRES read appears in the fake Slurm's call log.
NODE_READ = "sinfo -h -N -n "

FAKE_SCONTROL = """#!/bin/sh
# Records every call; `show job --json ID` prints the job's JSON if set, `show job`
# the canned record; `update NodeName=N Gres=LIST` sets the node's Gres (node-gres) as
# slurmctld would, with no vgpufit while its counts are all 0.
printf '%s\\n' "$*" >> "{calls}"
if [ "$1 $3" = "show --json" ]; then cat "{jobs}/$4.json"; exit $?; fi
if [ "$1 ${{2%%=*}} ${{3%%=*}}" = "update NodeName Gres" ]; then
  list=$(printf '%s' "${{3#Gres=}}" | tr ',' '\\n')
  # slurmctld lists no vgpufit while its counts are all 0 (tests/data/probe-fit-zero.sh)
  if ! printf '%s\\n' "$list" | grep '^vgpufit:' | grep -qv ':0$'; then
    list=$(printf '%s\\n' "$list" | grep -v '^vgpufit:')
  fi
  printf '%s' "$(printf '%s' "$list" | paste -sd,)" > "{bin}/node-gres"
  exit 0
fi
if [ "$1" = show ]; then cat "{record}"; fi
exit 0
"""

FAKE_SINFO = """#!/bin/sh
# Records every call; `-h -N -n N -O FORMAT` prints the node's line: its name, Gres
# (node-gres) and GresUsed (node-used), in two partitions as the sandbox's nodes are.
printf 'sinfo %s\\n' "$*" >> "{calls}"
for p in 1 2; do
  printf '%s|%s|%s|\\n' "$4" "$(cat "{bin}/node-gres")" "$(cat "{bin}/node-used")"
done
"""

FAKE_SQUEUE = """#!/bin/sh
# Records every call; prints the job's allocation line (or AdminComment line, or state
# and ExcNodeList) if set.
printf 'squeue %s\\n' "$*" >> "{calls}"
case "$5" in
  *AdminComment*) f="{jobs}/$3.comment" ;;
  *%x*) f="{jobs}/$3.exclusions" ;;
  *) f="{jobs}/$3.alloc" ;;
esac
if [ -f "$f" ]; then cat "$f"; fi
exit 0
"""


def squeue_line(job_id: str, vgpu: int = 0, nodes: str = NODE, gres: str = "vgpu") -> str:
    """The line ``read_allocation``'s squeue call prints (as 22.05 does); ``gres``:
    what the pool counts (``shard`` where job_submit.lua rewrote the request)."""
    count = len(expand(nodes))
    tres = f"cpu={count},mem={100 * count}M,node={count},billing={count}"
    if vgpu:
        tres += f",gres/{gres}={vgpu * count}"
    return f"{job_id}|{nodes}|{f'gres:{gres}:{vgpu}' if vgpu else 'N/A'}|{tres}|\n"


def gpu_entry(index: int, model: str, mode: str, **kw: Any) -> dict[str, Any]:
    return {
        "index": index,
        "minor": index,
        "model": model,
        "mode": mode,
        "shares": kw.get("shares", 1),
        "mps": kw.get("mps", False),
        "vfio": kw.get("vfio", False),
        "layout": [],
        "slurm_type": model.split("-")[0].lower(),
    }


@dataclass
class Pool:
    root: Path
    config_path: Path
    sim_dir: Path
    dev: Path
    bin_dir: Path

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def calls(self) -> list[str]:
        path = self.bin_dir / "calls.log"
        return path.read_text().splitlines() if path.exists() else []

    def clear_calls(self) -> None:
        """Forget the calls made so far."""
        (self.bin_dir / "calls.log").unlink(missing_ok=True)

    def set_allocation(
        self, job_id: str, vgpu: int = 0, admin_comment: str = "", gres: str = "vgpu"
    ) -> None:
        """What slurmctld allocated to the job on this node (what the fake squeue prints)."""
        jobs = self.bin_dir / "jobs"
        jobs.mkdir(exist_ok=True)
        (jobs / f"{job_id}.alloc").write_text(squeue_line(job_id, vgpu, gres=gres))
        (jobs / f"{job_id}.comment").write_text(f"{job_id}|{admin_comment or '(null)'}|\n")
        self.set_exclusions(job_id, "COMPLETING", "(null)")  # as it is right after a requeue

    def set_exclusions(self, job_id: str, state: str, nodes: str) -> None:
        """What ``squeue -o '%T|%x'`` prints for the job: its state and ExcNodeList."""
        (self.bin_dir / "jobs" / f"{job_id}.exclusions").write_text(f"{state}|{nodes}\n")

    def set_node_gres(self, gres: str, used: str = "vgpu:0") -> None:
        """What ``sinfo -n`` prints as the node's Gres and GresUsed."""
        (self.bin_dir / "node-gres").write_text(gres)
        (self.bin_dir / "node-used").write_text(used)

    def node_gres(self) -> str:
        """The node's Gres as the fake slurmctld has it now (updates included)."""
        return (self.bin_dir / "node-gres").read_text()

    def slurm_calls(self) -> list[str]:
        """The calls made, less the node GRES reads and updates the hooks publish with."""
        return [c for c in self.calls if not c.startswith((NODE_READ, "update NodeName="))]

    def set_json(self, job_id: str, text: str) -> None:
        """What ``scontrol show job --json ID`` prints for the job."""
        jobs = self.bin_dir / "jobs"
        jobs.mkdir(exist_ok=True)
        (jobs / f"{job_id}.json").write_text(text)

    def set_job_record(self, job_id: str, tres: str, admin_comment: str = "(null)") -> None:
        (self.bin_dir / "record.txt").write_text(
            f"JobId={job_id} JobName=t\n   UserId=alice(1000) GroupId=alice(1000)\n"
            f"   JobState=RUNNING Reason=None Dependency=(null)\n"
            f"   Restarts=0 ExitCode=0:0\n   AdminComment={admin_comment}\n"
            f"   TresPerNode={tres}\n"
        )

    def env(
        self,
        job_id: str,
        uid: int = 1000,
        user: str = "alice",
        vgpu: int | None = None,
        **more: str,
    ) -> dict[str, str]:
        """The prolog's environment for a job; ``vgpu`` also sets the job's allocation and
        the Extra job_submit.lua would store (23.02+).  A job without an allocation set
        is a CPU job."""
        if vgpu is not None:
            self.set_allocation(job_id, vgpu)
            more = {"SLURM_JOB_EXTRA": f"slurmpool:vgpu={vgpu}", **more}
        elif job_id.isdigit() and not (self.bin_dir / "jobs" / f"{job_id}.alloc").exists():
            self.set_allocation(job_id)
        return {
            "PATH": f"{self.bin_dir}:/usr/bin:/bin",
            "SLURM_JOB_ID": job_id,
            "SLURM_JOB_UID": str(uid),
            "SLURM_JOB_USER": user,
            "SLURMD_NODENAME": NODE,
            "SLURM_CLUSTER_NAME": "t",
            **more,
        }

    def argv(self, hook: str, budget_s: int | None = None, *more: str) -> list[str]:
        """The hook's command line (``budget_s``: the wrapper's ``--budget-s``)."""
        argv = [sys.executable, "-m", "slurmpool.hooks", hook]
        argv += ["--node-config", str(self.config_path)]
        return argv + (["--budget-s", str(budget_s)] if budget_s is not None else []) + [*more]

    def hook(
        self, hook: str, env: Mapping[str, str], budget_s: int | None = None, *more: str
    ) -> tuple[int, str, str]:
        """Run a hook as slurmd does: a separate process with only ``env``."""
        proc = subprocess.run(
            self.argv(hook, budget_s, *more),
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    def start_hook(
        self, hook: str, env: Mapping[str, str], budget_s: int | None = None
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(hook, budget_s),
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def backend(self) -> NvmlBackend:
        return open_backend(f"sim:{self.sim_dir}")

    def store(self) -> NodeStore:
        return open_node_store(self.state_dir, NODE)

    def node(self, log: Any) -> Node:
        config = load_node_config(self.config_path)
        cls = config.node_class(NODE)
        assert cls is not None
        return Node(
            NODE, config, cls, log, lambda: open_backend(f"sim:{self.sim_dir}"), Deadline(30)
        )

    def fault(self, point: str, nth: int = 1) -> None:
        """Kill the next hook that reaches ``point`` (:mod:`slurmpool.sim.faults`)."""
        plant(self.sim_dir, point, nth)

    def instances(self) -> list[tuple[int, str, int, int, str | None]]:
        """(gpu, profile, start, size, uuid) of every instance, sorted."""
        with self.backend() as b:
            return sorted(
                (g.index, i.profile, i.placement.start, i.placement.size, i.uuid)
                for g in b.gpus()
                for i in b.instances(g.index)
            )


class ListLog:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, object]]] = []

    def event(
        self,
        action: str,
        fields: Mapping[str, object] | None = None,
        level: str = "info",
        **more: object,
    ) -> str:
        self.lines.append((action, {**(fields or {}), **more, "level": level}))
        return action

    def actions(self) -> list[str]:
        return [a for a, _ in self.lines]


def make_pool(
    root: Path,
    gpus: Sequence[tuple[str, str, dict[str, Any]]] = (
        (A100, "mig", {}),
        (A100, "mig", {}),
        (A100, "passthrough", {}),
    ),
    vgpu_unit: str | None = "compute-slice",
    units_per_gpu: int = 7,
    pooling: dict[str, Any] | None = None,
    extra_paths: dict[str, str] | None = None,
    slurm_version: str = "22.05",
) -> Pool:
    sim_dir, dev = root / "sim", root / "dev"
    create_node(
        sim_dir,
        dev,
        [(model, mode == "mig") for model, mode, _ in gpus],
        node_name=NODE,
    )
    entries = [gpu_entry(i, m, mode, **kw) for i, (m, mode, kw) in enumerate(gpus)]
    pooled = [e for e in entries if e["mode"] in ("mig", "shared")]
    (root / "state").mkdir(mode=0o711)
    os.chmod(root / "state", 0o711)
    data: dict[str, Any] = {
        "schema": 1,
        "cluster": "t",
        "gpu_backend": f"sim:{sim_dir}",
        "accounting": False,
        "slurm_version": slurm_version,
        "paths": {
            "state_dir": str(root / "state"),
            "run_dir": str(root / "run"),
            "hooks_dir": str(root / "hooks"),
            "devices_root": str(dev),
            "mig_minors": str(sim_dir / "proc" / "driver" / "nvidia-caps" / "mig-minors"),
            "slurm_config_dir": str(root / "etc"),
            # No devices controller here: the prolog leaves the machine's cgroups alone.
            "job_cgroup_root": str(root / "cgroup" / "devices" / "slurm"),
            "mps_control": str(root / "bin" / "nvidia-cuda-mps-control"),
            **(extra_paths or {}),
        },
        "hooks": HOOKS,
        "profiles": {A100: A100_PROFILES},
        "node_classes": [
            {
                "name": "c",
                "hostlist": NODE,
                "vgpu_unit": vgpu_unit if pooled else None,
                "units_per_gpu": units_per_gpu,
                "vgpu_count": units_per_gpu * len(pooled),
                "gpus": entries,
            }
        ],
    }
    if pooling is not None:
        data["pooling"] = pooling
    config_path = root / "node-config.json"
    config_path.write_text(json.dumps(data))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(
        FAKE_SCONTROL.format(
            calls=bin_dir / "calls.log",
            record=bin_dir / "record.txt",
            jobs=bin_dir / "jobs",
            bin=bin_dir,
        )
    )
    scontrol.chmod(0o755)
    squeue = bin_dir / "squeue"
    squeue.write_text(FAKE_SQUEUE.format(calls=bin_dir / "calls.log", jobs=bin_dir / "jobs"))
    squeue.chmod(0o755)
    sinfo = bin_dir / "sinfo"
    sinfo.write_text(FAKE_SINFO.format(calls=bin_dir / "calls.log", bin=bin_dir))
    sinfo.chmod(0o755)
    mps_control = bin_dir / "nvidia-cuda-mps-control"
    # The simulated one, told where the node's GPUs are, so its servers hold their contexts.
    mps_control.write_text(
        f"#!/bin/sh\nSLURMPOOL_SIM_STATE={sim_dir} exec {sys.executable} -I -m slurmpool.sim.mps"
        ' "$@"\n'
    )
    mps_control.chmod(0o755)
    pool = Pool(root, config_path, sim_dir, dev, bin_dir)
    pool.set_job_record("0", "(null)")
    pool.set_node_gres(EMPTY_NODE_GRES if vgpu_unit == "compute-slice" else "gpu:a100:1")
    return pool


def job(job_id: str = "100", uid: int = 1000, user: str = "alice") -> Job:
    return Job(job_id, uid, user)


def allocation(**kw: object) -> Allocation:
    """An allocation record for pure tests: an active one-share record unless ``kw`` says."""
    base = dict(
        id=1,
        job_id="1",
        user="u",
        uid=1000,
        mode=GpuMode.SHARED,
        gpu_index=0,
        gpu_uuid="GPU-a",
        profile=None,
        placement_start=None,
        placement_size=None,
        shares=1,
        gi_id=None,
        ci_id=None,
        mig_uuid=None,
        cap_minors=(),
        state="active",
        created_at=0.0,
        updated_at=0.0,
        released_at=None,
        note="",
    )
    base.update(kw)
    return Allocation(**base)  # type: ignore[arg-type]
