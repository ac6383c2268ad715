#!/bin/bash
# Measures what Slurm does with a job's ExcNodeList around a requeue: the facts
# slurmpool/pooling/exclude.py rests on, on the Slurm installed here.  Run as root
# after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-excnodelist.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-excnodelist.sh'`.
# One job of root's, no GPU, sleeping; it prints a line per fact:
# - running-update: what `scontrol update ExcNodeList` says while the job runs;
# - requeued-update: the same right after `scontrol requeue`;
# - next-start: the node the job runs on next, against the one it was kept off;
# - all-excluded: the job's Reason once every node is in its ExcNodeList;
# - cleared: where it runs once one node is taken out again.
# Each wait is on the job's state, at most 300 s.  Slurm 22.05.8 (bookworm), 24.11.5
# (trixie) and 26.05.5 (sid) printed the same: refused while running ("Job is no
# longer pending execution"), accepted right after the requeue, next start on the
# other node, Reason=BadConstraints with every node excluded, running again once
# one is taken out.
set -euo pipefail
slurmpool=${SLURMPOOL:-/opt/slurmpool/bin/slurmpool}
dir=/tmp/sp-probe
"$slurmpool" sandbox up --dir "$dir" >/dev/null
trap '"$slurmpool" sandbox down --dir "$dir" >/dev/null' EXIT
eval "$("$slurmpool" sandbox env --dir "$dir")"
cd /tmp

field() {  # JOBID NAME: the job's NAME=value from scontrol
  scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
wait_for() {  # JOBID NAME VALUE: up to 300 s, then fail naming what it saw
  for _ in $(seq 1500); do
    [ "$(field "$1" "$2")" = "$3" ] && return 0
    sleep 0.2
  done
  echo "job $1: $2 never became $3 (it is $(field "$1" "$2"))" >&2
  return 1
}
update() {  # JOBID LIST: what scontrol says of setting the job's ExcNodeList to LIST
  local said
  if said=$(scontrol update JobId="$1" ExcNodeList="$2" 2>&1); then
    echo "accepted${said:+ ($said)}"
  else
    echo "refused: $said"
  fi
}

echo "slurm: $(sinfo --version)"
job=$(sbatch --parsable --wrap 'sleep 3600')
wait_for "$job" JobState RUNNING
first=$(field "$job" NodeList)
echo "running-update: $(update "$job" "$first")"
scontrol requeue "$job"
said=$(update "$job" "$first")
echo "requeued-update: $said, state $(field "$job" JobState), ExcNodeList $(field "$job" ExcNodeList)"
wait_for "$job" JobState RUNNING
echo "next-start: $(field "$job" NodeList) (kept off $first)"
nodes=$(sinfo -h -N -o %N | sort -u | paste -sd, -)
scontrol requeue "$job"
echo "all-excluded-update: $(update "$job" "$nodes")"
wait_for "$job" Reason BadConstraints
echo "all-excluded: state $(field "$job" JobState), Reason BadConstraints, ExcNodeList $(field "$job" ExcNodeList)"
echo "cleared-update: $(update "$job" "$first")"
wait_for "$job" JobState RUNNING
echo "cleared: runs on $(field "$job" NodeList) (ExcNodeList $(field "$job" ExcNodeList))"
scancel "$job"
