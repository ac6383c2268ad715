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
exec $venv/bin/python -m slurmpool.sim.workload --state "$dir/node/sim" --util 60 --mem-mib 4000 --seconds 6
EOF
chmod 755 "$work/job.sh"
say "sbatch --gres=gpu:1 (a whole passthrough GPU) and --gres=vgpu:2 (a 2g MIG instance carved for the job)"
gpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --chdir "$work" --output "$work/%j.out" --gres=gpu:1 "$work/job.sh")
vgpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --chdir "$work" --output "$work/%j.out" --gres=vgpu:2 "$work/job.sh")
echo "submitted $gpu_job and $vgpu_job"

for _ in $(seq 1 60); do
  state=$(squeue -h -j "$gpu_job,$vgpu_job" -o %T | sort -u | tr '\n' ' ')
  case "$state" in *RUNNING*) break ;; esac
  sleep 1
done
say "the pool while the jobs run"
squeue -o "%.8i %.9u %.10T %.8N %b"

for _ in $(seq 1 90); do
  [ -z "$(squeue -h -j "$gpu_job,$vgpu_job" -o %i)" ] && break
  sleep 1
done
say "job output"
cat "$work/$gpu_job.out" "$work/$vgpu_job.out"
say "accounting"
sacct -j "$gpu_job,$vgpu_job" -X -o JobID,User,State,ExitCode,AllocTRES%60
rc=0
for j in "$gpu_job" "$vgpu_job"; do
  st=$(sacct -n -X -j "$j" -o State | tr -d ' ')
  [ "$st" = COMPLETED ] || { echo "demo: job $j ended $st" >&2; rc=1; }
done
exit "$rc"
