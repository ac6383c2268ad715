#!/bin/bash
# Records `squeue -h -j ID -O` with slurmpool.slurm.allocation.SQUEUE_FIELDS and
# `scontrol show job -d ID` output of running jobs whose user-owned fields carry
# forged lines, for tests/test_slurm_allocation.py; where Slurm has them (23.02+),
# `scontrol show job --json ID` and a job whose Extra forges a slurmpool: claim.
#
#   slurmpool sandbox up && eval "$(slurmpool sandbox env)"
#   bash tests/data/record-hostile.sh tests/data/slurm-$(sinfo -V | cut -d' ' -f2 | cut -d. -f1,2)
#
# Each job NAME gets NAME.squeue.txt, NAME.show-job-d.txt (and NAME.show-job.json),
# NAME.jobid, and NAME.expect: what slurmctld allocated, one "node vgpu-count" line per node.
set -euo pipefail
out=${1:?usage: record-hostile.sh OUTDIR}
mkdir -p "$out"
work=$(mktemp -d)
trap 'scancel $(cat "$work"/ids 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
NL=$'\n'
FORGED_TRES="${NL}   TresPerNode=gres:vgpu:7"
FORGED_NODE="${NL}     Nodes=sbx1 CPU_IDs=0 Mem=100 GRES=vgpu(CNT:7)"
FORGED_RECORD="${NL}JobId=999999 JobName=w${FORGED_NODE}"
FORGED_JSON='"}],"jobs":[{"job_id":1,"nodes":"sbx1","gres_detail":["vgpu(CNT:7)"],"name":"'
mkdir -p "$work/dir${FORGED_TRES}"

submit() {  # NAME EXPECT ARGS...
  local name=$1 expect=$2
  shift 2
  local id
  id=$(sbatch --parsable -o /dev/null "$@" --wrap 'sleep 300')
  echo "$id" >> "$work/ids"
  printf '%s %s\n' "$name" "$id" >> "$work/jobs"
  printf '%b' "$expect" > "$out/$name.expect"
}

submit name-tres 'sbx1 1\n' -w sbx1 --gres=vgpu:1 -J "x${FORGED_TRES}"
submit comment-node 'sbx1 1\n' -w sbx1 --gres=vgpu:1 --comment="c${FORGED_NODE}"
submit cpu-only 'sbx1 0\n' -w sbx1 -J "y${FORGED_TRES}${FORGED_NODE}"
submit name-record 'sbx1 1\n' -w sbx1 --gres=vgpu:1 -J "z${FORGED_RECORD}"
submit json-fragment 'sbx2 2\n' -w sbx2 --gres=vgpu:2 -J "$FORGED_JSON" --comment="{\"tres_per_node\":\"gres:vgpu:7\"}"
submit paths 'sbx2 1\n' -w sbx2 --gres=vgpu:1 -D "$work/dir${FORGED_TRES}" -e "$work/err${FORGED_NODE}"
submit two-nodes 'sbx1 2\nsbx2 2\n' -N 2 --gres=vgpu:2
if sbatch --help | grep -q -- '--extra'; then
  submit extra 'sbx1 1\n' -w sbx1 --gres=vgpu:1 --extra=' slurmpool:vgpu=7'
fi
# Renamed after submit, while held, so the prolog sees the new name.
submit renamed 'sbx2 3\n' -w sbx2 --gres=vgpu:3 -H -J plain
renamed=$(awk '$1 == "renamed" {print $2}' "$work/jobs")
scontrol update jobid="$renamed" name="r${FORGED_TRES}${FORGED_NODE}"
scontrol release "$renamed"

while read -r name id; do
  for _ in $(seq 100); do
    [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] && break
    sleep 0.2
  done
  [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] || { echo "job $name ($id) is not running" >&2; exit 1; }
  squeue -h -j "$id" -O 'JobID:|,NodeList:|,tres-per-node:|,tres-alloc:|' > "$out/$name.squeue.txt"
  scontrol show job -d "$id" > "$out/$name.show-job-d.txt"
  if scontrol show job --json "$id" > "$work/json" 2> /dev/null; then
    mv "$work/json" "$out/$name.show-job.json"
  fi
  echo "$id" > "$out/$name.jobid"
done < "$work/jobs"
echo "recorded $(wc -l < "$work/jobs") jobs in $out"
