#!/bin/bash
# Records the Slurm output slurmpool's parsers read (scontrol show node / job,
# slurmd -G, the report's sacct) from a sandbox cluster on the Slurm installed
# here, for tests/test_slurm_parse.py and tests/test_report.py.  Run as root
# after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/record-sandbox.sh tests/data/slurm-$(slurmd -V | grep -o '[0-9][0-9]\.[0-9][0-9]' | head -1)
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/record-sandbox.sh /root/out'`
# leaves the files in the cached root's /root/out.  The jobs, all root's, run in
# /tmp and sleep until cancelled:
# - show-node-idle.txt: `scontrol show node`, both nodes idle;
# - show-job-running-d.txt: `scontrol show job -d` of a --gres=vgpu:3 job on sbx1
#   named `hostile "q" $(touch /tmp/pwned) `id`` with --comment 'c1 x=y' and
#   AdminComment 'sp1:ABC def' (scontrol update);
# - show-job-gpu-running-d.txt / show-job-running.txt: a --gres=gpu:1 job on sbx1,
#   with and without -d; show-node-allocated.txt: `scontrol show node` meanwhile,
#   and show-node-allocated-d.txt: `scontrol -d show node sbx1` (GresUsed);
# - show-job-pending.txt: a --gres=vgpu:14 -w sbx1 job named waiting, pending;
# - show-job-newline-name.txt: a completed job named `two<newline>lines`;
# - show-job-cancelled.txt: the hostile-named job after scancel;
# - show-node-drained.txt: sbx2 drained with reason "maintenance by admin";
# - slurmd-G-sbx1.txt: `slurmd -G -N sbx1` in sbx1's namespace;
# - sacct-report-sandbox.txt: the report's sacct query over the recording, once
#   the vgpu:3 job's GPU summary is in accounting.
set -euo pipefail
out=$(realpath -m "${1:?usage: record-sandbox.sh OUTDIR}")
here=$(dirname "$(realpath "$0")")
slurmpool=${SLURMPOOL:-/opt/slurmpool/bin/slurmpool}
python=$(dirname "$slurmpool")/python
dir=/tmp/sp-sbx
mkdir -p "$out"
"$slurmpool" sandbox up --dir "$dir" >/dev/null
trap '"$slurmpool" sandbox down --dir "$dir" >/dev/null' EXIT
eval "$("$slurmpool" sandbox env --dir "$dir")"
cd /tmp
start=$(date +%FT%T)

state() { squeue -h -t all -j "$1" -o %T 2>/dev/null || true; }
wait_state() {  # JOBID STATE: up to 60 s, then fail naming the job
  for _ in $(seq 300); do
    [ "$(state "$1")" = "$2" ] && return 0
    sleep 0.2
  done
  echo "record-sandbox: job $1 is not $2 but '$(state "$1")'" >&2
  exit 1
}
started() {  # JOBID: running, its prolog done (Reason None)
  wait_state "$1" RUNNING
  for _ in $(seq 300); do
    [ "$(squeue -h -j "$1" -o %r)" = None ] && return 0
    sleep 0.2
  done
  echo "record-sandbox: job $1 is still in its prolog" >&2
  exit 1
}
held() { sbatch --parsable -o /dev/null "$@" --wrap 'sleep 600'; }

scontrol show node > "$out/show-node-idle.txt"

hostile=$(held -w sbx1 --gres=vgpu:3 -J 'hostile "q" $(touch /tmp/pwned) `id`' --comment 'c1 x=y')
gpu=$(held -w sbx1 --gres=gpu:1 -J gpu)
started "$hostile"
started "$gpu"
scontrol update jobid="$hostile" AdminComment='sp1:ABC def'
scontrol show job -d "$hostile" > "$out/show-job-running-d.txt"
scontrol show job -d "$gpu" > "$out/show-job-gpu-running-d.txt"
scontrol show job "$gpu" > "$out/show-job-running.txt"
scontrol show node > "$out/show-node-allocated.txt"
scontrol -d show node sbx1 > "$out/show-node-allocated-d.txt"

waiting=$(held -w sbx1 --gres=vgpu:14 -J waiting)
for _ in $(seq 300); do  # pending with its reason set by a scheduling pass
  [ "$(squeue -h -j "$waiting" -o %r)" != None ] && break
  sleep 0.2
done
scontrol show job "$waiting" > "$out/show-job-pending.txt"
scancel "$waiting"

newline=$(sbatch --parsable -o /dev/null -J $'two\nlines' --wrap true)
wait_state "$newline" COMPLETED
scontrol show job "$newline" > "$out/show-job-newline-name.txt"

scancel "$hostile" "$gpu"
wait_state "$hostile" CANCELLED
scontrol show job "$hostile" > "$out/show-job-cancelled.txt"

scontrol update nodename=sbx2 state=drain reason="maintenance by admin"
scontrol show node sbx2 > "$out/show-node-drained.txt"
scontrol update nodename=sbx2 state=resume

"$slurmpool" sandbox exec sbx1 -- slurmd -G -N sbx1 > "$out/slurmd-G-sbx1.txt" 2>&1

# The vgpu:3 job's summary: the epilog queued it, monitord pushes it once sacct
# shows the job's End.
for _ in $(seq 300); do
  sacct -n -X -P -j "$hostile" -o AdminComment | grep -q 'sp1:sbx1,' && break
  sleep 0.2
done
"$python" - "$start" > "$out/sacct-report-sandbox.txt" <<'PY'
import subprocess
import sys

from slurmpool.report.sacct import sacct_args

argv = ["sacct", *sacct_args(sys.argv[1], "now")]
sys.stdout.write(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
PY
printf '%s\n' "$out"/*
