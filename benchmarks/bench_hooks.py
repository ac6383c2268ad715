"""Hook wall time per job on the simulator, against bare interpreter starts.

Runs prolog, task prolog and epilog for N jobs (default 200) as slurmd runs them: the
wrapper scripts ``slurmpool install`` writes (rendered from
templates/hook-wrapper.sh.j2, so the same shell, ``timeout`` and interpreter flags), separate
processes, only the environment Slurm gives. The hooks' calls to Slurm are answered by
stand-in ``/bin/sh`` scripts, so no slurmctld is needed (a real call took about 5 ms on
the sandbox, SLURM_FACTS.md): the prolog's read of the job's allocation, and the reads
and updates of the node's GRES that prolog and epilog make to publish what the node can
carve (each job changes it, so each prolog and epilog sends). Each job is a vgpu:1 MIG
job on a simulated two-A100 node. The baseline, measured in the same run and interleaved
with the jobs, is a bare hook process: what any hook costs before it does anything, the
installed wrapper's ``sh`` running ``timeout`` running ``python -I -S -c pass``. A bare
``python3 -c pass`` start is measured beside it, for comparison with older figures. Run
as root on a machine with the cgroup v1 devices controller, the prolog's MIG fence
writes each job's cgroup for real (270 deny rules), below a cgroup of its own that the
benchmark removes at the end.

Budget (ARCHITECTURE.md): the three hooks together take at most 7 times three bare hook
processes at p50.  The benchmark reports OK or OVER BUDGET and exits 0 either way; it
exits 1 only when a hook fails.

    python benchmarks/bench_hooks.py [--jobs 200] [--json] [--direct FLAGS]

``--direct FLAGS`` runs ``python FLAGS -m slurmpool.hooks`` without the wrapper instead
(for comparisons, e.g. ``--direct=-I``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUDGET = 7.0
DEVICES = Path("/sys/fs/cgroup/devices")


def _node_config(root: Path, sim_dir: Path, dev: Path, path: Path, cgroups: Path) -> Path:
    gpu = {
        "minor": 0,
        "model": "A100-SXM4-80GB",
        "mode": "mig",
        "shares": 1,
        "mps": False,
        "vfio": False,
        "layout": [],
        "slurm_type": "a100",
    }
    data = {
        "schema": 1,
        "cluster": "bench",
        "gpu_backend": f"sim:{sim_dir}",
        "accounting": False,
        "slurm_version": "23.02",
        "paths": {
            "state_dir": str(root / "state"),
            "run_dir": str(root / "run"),
            "hooks_dir": str(root / "hooks"),
            "devices_root": str(dev),
            "mig_minors": str(sim_dir / "proc" / "driver" / "nvidia-caps" / "mig-minors"),
            "slurm_config_dir": str(root / "etc"),
            "job_cgroup_root": str(cgroups),
        },
        "hooks": {"prolog_timeout_s": 30, "task_prolog_timeout_s": 10, "epilog_timeout_s": 60},
        "profiles": {
            "A100-SXM4-80GB": {"1": "1g.10gb", "2": "2g.20gb", "3": "3g.40gb", "4": "4g.40gb"}
        },
        "node_classes": [
            {
                "name": "bench",
                "hostlist": "bench1",
                "vgpu_unit": "compute-slice",
                "units_per_gpu": 7,
                "vgpu_count": 14,
                "gpus": [{**gpu, "index": i, "minor": i} for i in range(2)],
            }
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def _wrappers(root: Path, python: str) -> dict[str, Path]:
    """The installed hook wrappers, rendered exactly as ``slurmpool install`` does."""
    from slurmpool.hookpath import resolve_import_path
    from slurmpool.install import HOOKS, InstallTarget, render_wrapper

    target = InstallTarget(
        slurm_conf=str(root / "etc" / "slurm.conf"),
        config_dir=str(root / "etc"),
        hooks_dir=str(root / "hooks"),
        state_dir=str(root / "state"),
        python=python,
        timeout_bin=shutil.which("timeout") or "/usr/bin/timeout",
    )
    import_path = resolve_import_path(python)
    out = {}
    for spec in HOOKS:
        path = root / "hooks" / spec.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_wrapper(spec, [], target, import_path))
        path.chmod(0o755)
        out[spec.name] = path
    return out


# Called as: scontrol show job --json ID.  The allocation as 24.11 prints it (recorded
# in tests/data/slurm-24.11/hostile/), job_resources cut down to the node's name.
_JSON_ALLOCATION = {
    "jobs": [
        {
            "job_id": "JOB_ID",
            "nodes": "bench1",
            "tres_per_node": "gres/vgpu:1",
            "tres_alloc_str": "cpu=1,mem=100M,node=1,billing=1,gres/vgpu=1",
            "gres_detail": ["vgpu(CNT:1)"],
            "job_resources": {"nodes": {"allocation": [{"index": 0, "name": "bench1"}]}},
        }
    ],
    "errors": [],
}
# The hooks also publish the node's fit counts: `sinfo -h -N -n bench1 -O ...` prints its
# Gres (kept in a file, as generate-config writes it for an empty node) and `scontrol
# update NodeName=bench1 Gres=LIST` sets it, as slurmctld would.
EMPTY_GRES = "vgpu:14,vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2"


def fake_scontrol(gres_file: Path) -> str:
    allocation = json.dumps(_JSON_ALLOCATION).replace('"JOB_ID"', "$4")
    return (
        "#!/bin/sh\n"
        'case "$1 $2" in\n'
        f"'update NodeName=bench1') printf '%s' \"${{3#Gres=}}\" > {gres_file} ;;\n"
        f"*) cat <<EOF\n{allocation}\nEOF\n;;\n"
        "esac\n"
    )


def fake_sinfo(gres_file: Path) -> str:
    return f"#!/bin/sh\nprintf 'bench1|%s|vgpu:1|\\n' \"$(cat {gres_file})\"\n"


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - t0, proc


def pct(values: list[float], q: float) -> float:
    return (
        statistics.quantiles(values, n=100, method="inclusive")[q - 1]
        if len(values) > 1
        else values[0]
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument(
        "--direct",
        metavar="FLAGS",
        help="run `python FLAGS -m slurmpool.hooks` directly instead of the installed wrapper",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="slurmpool-bench-hooks-"))
    # The prolog's MIG fence writes job cgroups: in a cgroup of the machine's own v1
    # devices controller where there is one (the real cost), else nowhere.
    cgroups = root / "cgroup" / "slurm"
    if os.geteuid() == 0 and (DEVICES / "devices.deny").exists():
        cgroups = DEVICES / f"slurmpool-bench-{os.getpid()}"
    try:
        return _bench(args, root, cgroups)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if cgroups.is_relative_to(DEVICES):
            for d in sorted(cgroups.glob("**/"), key=lambda p: len(p.parts), reverse=True):
                d.rmdir()


def _bench(args: argparse.Namespace, root: Path, cgroups: Path) -> int:
    from slurmpool.sim.node import create_node

    sim_dir, dev = root / "sim", root / "dev"
    create_node(sim_dir, dev, [("A100-SXM4-80GB", True)] * 2, node_name="bench1")
    (root / "state").mkdir(mode=0o700)
    config = _node_config(root, sim_dir, dev, root / "etc" / "node-config.json", cgroups)
    py = sys.executable
    wrappers = _wrappers(root, py)
    fake_bin = root / "bin"
    fake_bin.mkdir()
    squeue = fake_bin / "squeue"
    # Called as: squeue -h -j ID -O FORMAT; the line is the allocation slurmctld made.
    squeue.write_text(
        "#!/bin/sh\nprintf '%s|bench1|gres:vgpu:1|cpu=1,mem=100M,node=1,billing=1,"
        'gres/vgpu=1|\\n\' "$3"\n'
    )
    squeue.chmod(0o755)
    # The node config declares 23.02: the prolog's one read is `scontrol show job --json`.
    scontrol = fake_bin / "scontrol"
    (fake_bin / "node-gres").write_text(EMPTY_GRES)
    scontrol.write_text(fake_scontrol(fake_bin / "node-gres"))
    scontrol.chmod(0o755)
    sinfo = fake_bin / "sinfo"
    sinfo.write_text(fake_sinfo(fake_bin / "node-gres"))
    sinfo.chmod(0o755)

    # A bare hook process: the wrapper's shell, timeout and isolated interpreter, no work.
    bare_hook = root / "hooks" / "bare"
    bare_hook.write_text(
        f"#!/bin/sh\n{shutil.which('timeout') or '/usr/bin/timeout'} -k 5 30 {py} -I -S -c pass\n"
    )
    bare_hook.chmod(0o755)
    base_env = {"PATH": f"{fake_bin}:/usr/bin:/bin"}
    if args.direct is not None:
        how = f"direct: python {args.direct} -m slurmpool.hooks"
    else:
        how = f"installed wrappers ({wrappers['prolog'].parent})"
    uid = os.getuid()
    bare: list[float] = []
    bare_python: list[float] = []
    per_hook: dict[str, list[float]] = {"prolog": [], "task-prolog": [], "epilog": []}
    totals: list[float] = []
    for i in range(args.jobs):
        # Three bare starts per job, interleaved, so both see the same machine load.
        for _ in range(3):
            bare.append(_run([str(bare_hook)], {"PATH": "/usr/bin:/bin"})[0])
        bare_python.append(_run([py, "-c", "pass"], {"PATH": "/usr/bin:/bin"})[0])
        env = {
            **base_env,
            "SLURM_JOB_ID": str(1000 + i),
            "SLURM_JOB_UID": str(uid),
            "SLURM_JOB_USER": "bench",
            "SLURM_JOB_GID": str(os.getgid()),
            "SLURMD_NODENAME": "bench1",
            "SLURM_CLUSTER_NAME": "bench",
            "SLURM_JOB_PARTITION": "pool",
            "SLURM_JOB_EXTRA": "slurmpool:vgpu=1",
        }
        total = 0.0
        for hook in ("prolog", "task-prolog", "epilog"):
            if args.direct is not None:
                argv = [py, *args.direct.split(), "-m", "slurmpool.hooks", hook]
                argv += ["--node-config", str(config)]
            else:
                argv = [str(wrappers[hook])]
            dt, proc = _run(argv, {**env, "SLURM_SCRIPT_CONTEXT": hook})
            # Each job changes what the node can carve: prolog and epilog both publish.
            published = hook == "task-prolog" or "action=fit-published" in proc.stderr
            if proc.returncode != 0 or (hook == "task-prolog" and "MIG-" not in proc.stdout):
                print(f"job {i} {hook} failed ({proc.returncode}):\n{proc.stderr}", file=sys.stderr)
                return 1
            if not published:
                print(f"job {i} {hook} published nothing:\n{proc.stderr}", file=sys.stderr)
                return 1
            per_hook[hook].append(dt)
            total += dt
        totals.append(total)

    bare_p50 = statistics.median(bare)
    result = {
        "jobs": args.jobs,
        "how": how,
        "python": py,
        "job_cgroups": str(cgroups),
        "bare_hook_ms": {"p50": bare_p50 * 1e3, "p95": pct(bare, 95) * 1e3},
        "bare_python_ms": {
            "p50": statistics.median(bare_python) * 1e3,
            "p95": pct(bare_python, 95) * 1e3,
        },
        "hooks_ms": {
            h: {"p50": statistics.median(v) * 1e3, "p95": pct(v, 95) * 1e3}
            for h, v in per_hook.items()
        },
        "three_hooks_ms": {"p50": statistics.median(totals) * 1e3, "p95": pct(totals, 95) * 1e3},
        "ratio_p50": statistics.median(totals) / (3 * bare_p50),
        "budget": BUDGET,
    }
    result["ok"] = result["ratio_p50"] <= BUDGET
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.jobs} jobs, {how}, {py}, job cgroups in {cgroups}")
        b = result["bare_hook_ms"]
        print(f"bare hook process p50 {b['p50']:7.1f} ms  p95 {b['p95']:7.1f} ms")
        b = result["bare_python_ms"]
        print(f"python3 -c pass   p50 {b['p50']:7.1f} ms  p95 {b['p95']:7.1f} ms")
        for h, v in result["hooks_ms"].items():
            print(f"{h:<17} p50 {v['p50']:7.1f} ms  p95 {v['p95']:7.1f} ms")
        t = result["three_hooks_ms"]
        print(f"three hooks       p50 {t['p50']:7.1f} ms  p95 {t['p95']:7.1f} ms")
        verdict = "OK" if result["ok"] else "OVER BUDGET"
        print(
            f"ratio (p50 three hooks / 3 bare hook processes): {result['ratio_p50']:.2f} "
            f"(budget {BUDGET}): {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
