#!/usr/bin/env bash
# The main job end to end on one machine: a real Slurm cluster (munge,
# MariaDB, slurmdbd, slurmctld, two slurmd) with simulated A100 GPUs, the
# config generated from examples/sandbox.yaml and slurmpool's hooks
# installed; then a whole-GPU job and a vgpu job, and the pool while they run.
#
#   make demo                       # or: bash examples/demo.sh
#   SLURMPOOL_DEMO_KEEP=1 make demo # leave the sandbox running afterwards
set -euo pipefail
cd "$(dirname "$0")/.."
root_dir=$(pwd)
dir=${SLURMPOOL_SANDBOX_DIR:-/tmp/slurmpool-demo}
user=${SLURMPOOL_DEMO_USER:-sp-demo}

say() { printf '\n== %s\n' "$*"; }

# Debian's Slurm, munge and MariaDB, and slurmpool in the venv every job user can
# run ($SLURMPOOL_VENV, default /opt/slurmpool); it says what to run when not root.
SETUP_HOST_TARGET=demo bash "$root_dir/scripts/setup-host"
venv=${SLURMPOOL_VENV:-/opt/slurmpool}
export PATH="$venv/bin:$PATH"
id "$user" >/dev/null 2>&1 || useradd -m "$user"

cleanup() {
  if [ -z "${SLURMPOOL_DEMO_KEEP:-}" ]; then
    say "sandbox down"
    slurmpool sandbox down --dir "$dir" || true
  else
    echo "sandbox left running: eval \"\$(slurmpool sandbox env --dir $dir)\"; slurmpool sandbox down --dir $dir"
  fi
}

say "sandbox up ($dir)"
slurmpool sandbox up --dir "$dir"
trap cleanup EXIT
eval "$(slurmpool sandbox env --dir "$dir")"
slurmpool sandbox status --dir "$dir"

# The job scripts run the simulator's test workload on whatever device the
# hooks gave them (CUDA_VISIBLE_DEVICES), as user $user.
work=$(runuser -u "$user" -- mktemp -d)
cat >"$work/job.sh" <<EOF
#!/bin/bash
echo "job \$SLURM_JOB_ID on \$SLURMD_NODENAME: CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES:-unset} profile=\${SLURMPOOL_PROFILE:-whole GPU}"
exec $venv/bin/python -m slurmpool.sim.workload --util 60 --mem-mib 4000 --seconds 6
EOF
chmod 755 "$work/job.sh"
say "sbatch --gres=gpu:1 (a whole passthrough GPU) and --gres=vgpu:2 (a 2g MIG instance carved for the job)"
gpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --chdir "$work" --output "$work/%j.out" --gres=gpu:1 "$work/job.sh")
vgpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --chdir "$work" --output "$work/%j.out" --gres=vgpu:2 "$work/job.sh")
echo "submitted $gpu_job and $vgpu_job"

jobs="$gpu_job,$vgpu_job"
# Why the jobs did not end as they should: slurmctld's view, then the logs' last lines.
diagnose() {
  say "what went wrong: the jobs as slurmctld sees them, and the last log lines"
  scontrol show job "$gpu_job" "$vgpu_job" | grep -E 'JobId=|JobState=|Restarts=|AdminComment=' || true
  for log in "$dir"/log/slurmctld.log "$dir"/hosts/*/state/hooks.log; do
    [ -f "$log" ] && { echo "-- $log"; tail -n 20 "$log"; }
  done
}
# Wait on the jobs' states, never on a fixed time: the deadline only ends a wait on a
# cluster that is broken, and says why.
wait_until() {  # WHAT TIMEOUT_S COMMAND...
  local what=$1 deadline=$(($(date +%s) + $2))
  shift 2
  until "$@"; do
    if [ "$(date +%s)" -gt "$deadline" ]; then
      echo "demo: $what: not within the deadline" >&2
      diagnose
      exit 1
    fi
    sleep 0.5
  done
}
gone() { [ -z "$(squeue -h -j "$jobs" -o %i)" ]; }
started() { squeue -h -j "$jobs" -t RUNNING -o %i | grep -q . || gone; }
in_accounting() {  # both jobs ended, with their end time, in slurmdbd's records
  [ "$(sacct -n -X -j "$jobs" -o End | grep -cv Unknown)" = 2 ]
}

wait_until "a job starts" 300 started
say "the pool while the jobs run"
squeue -o "%.8i %.9u %.10T %.8N %b"

wait_until "both jobs end" 300 gone
rc=0
for j in "$gpu_job" "$vgpu_job"; do
  st=$(scontrol show job "$j" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  [ "$st" = COMPLETED ] || { echo "demo: job $j ended $st" >&2; rc=1; }
done
[ "$rc" -eq 0 ] || { diagnose; exit "$rc"; }
say "job output"
cat "$work/$gpu_job.out" "$work/$vgpu_job.out"
# slurmdbd records a job some time after slurmctld ends it.
wait_until "slurmdbd records both jobs" 120 in_accounting
say "accounting"
sacct -j "$jobs" -X -o JobID,User,State,ExitCode,AllocTRES%60
