#!/usr/bin/env bash
# The main job end to end on one machine: a real Slurm cluster (munge,
# MariaDB, slurmdbd, slurmctld, two slurmd) with simulated A100 GPUs, the
# config generated from examples/sandbox.yaml and slurmpool's hooks
# installed; then a whole-GPU job and a vgpu job: the MIG instance carved for
# the vgpu job while it runs, both jobs' GPU use measured and read back from
# Slurm accounting, a report of GPU-hours per user, and a clean sandbox down.
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
  local rc=$?
  if [ -n "${SLURMPOOL_DEMO_KEEP:-}" ]; then
    echo "sandbox left running: eval \"\$(slurmpool sandbox env --dir $dir)\"; slurmpool sandbox down --dir $dir"
  elif [ -f "$dir/sandbox.json" ]; then
    say "sandbox down"
    if [ "$rc" -ne 0 ]; then
      # A failed demo keeps the sandbox's logs (the next `sandbox up` clears them).
      slurmpool sandbox down --dir "$dir" --keep || true
      echo "the demo failed; the sandbox's logs are kept in $dir/log and $dir/hosts/*/state"
    else
      slurmpool sandbox down --dir "$dir" || true
    fi
  fi
}

say "sandbox up ($dir)"
slurmpool sandbox up --dir "$dir"
trap cleanup EXIT
eval "$(slurmpool sandbox env --dir "$dir")"
slurmpool sandbox status --dir "$dir"

# The job scripts run the simulator's test workload on whatever device the hooks
# gave them (CUDA_VISIBLE_DEVICES), as user $user, until the demo has shown them
# running (the release file): nothing here depends on how fast this machine is.
work=$(runuser -u "$user" -- mktemp -d)
release="$work/release"
cat >"$work/job.sh" <<JOB
#!/bin/bash
echo "job \$SLURM_JOB_ID on \$SLURMD_NODENAME: CUDA_VISIBLE_DEVICES=\${CUDA_VISIBLE_DEVICES:-unset} profile=\${SLURMPOOL_PROFILE:-whole GPU}"
exec $venv/bin/python -m slurmpool.sim.workload --util 60 --mem-mib 4000 --until-file $release
JOB
chmod 755 "$work/job.sh"
say "sbatch --gres=gpu:1 (a whole passthrough GPU) and --gres=vgpu:2 (a 2g MIG instance carved for the job)"
gpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --account=sandbox --chdir "$work" --output "$work/%j.out" --gres=gpu:1 "$work/job.sh")
vgpu_job=$(runuser -u "$user" -- env SLURM_CONF="$SLURM_CONF" \
  sbatch --parsable --account=sandbox --chdir "$work" --output "$work/%j.out" --gres=vgpu:2 "$work/job.sh")
echo "submitted $gpu_job and $vgpu_job"

jobs="$gpu_job,$vgpu_job"
# Why the jobs did not end as they should: slurmctld's view, then the logs' last lines.
diagnose() {
  touch "$release"
  say "what went wrong: the jobs as slurmctld sees them, and the last log lines"
  scontrol show job "$gpu_job" "$vgpu_job" | grep -E 'JobId=|JobState=|Restarts=|AdminComment=' || true
  for log in "$dir"/log/slurmctld.log "$dir"/log/monitord-*.out.log "$dir"/hosts/*/state/hooks.log; do
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
node_of() { squeue -h -j "$1" -o %N; }
monitor_of() {  # the monitord serving job $1's node
  slurmpool sandbox status --dir "$dir" --json | "$venv/bin/python" -c '
import json, sys
print("http://127.0.0.1:%d" % json.load(sys.stdin)["ports"]["monitord:" + sys.argv[1]])' \
    "$(node_of "$1")"
}
jobstats_says() {  # JOB TEST [JOBSTATS ARGS...]: jobstats --json of JOB makes TEST (on v) true
  local job=$1 test=$2
  shift 2
  slurmpool jobstats "$job" --json "$@" 2>/dev/null |
    "$venv/bin/python" -c "import json, sys; v = json.load(sys.stdin); sys.exit(0 if ($test) else 1)"
}
both_running() { [ "$(squeue -h -j "$jobs" -t RUNNING -o %i | wc -l)" = 2 ]; }
sampled() {  # monitord has seen each workload hold its 4000 MiB, five times
  local j
  for j in "$gpu_job" "$vgpu_job"; do
    jobstats_says "$j" 'v["devices"] and all(d["samples"] >= 5 and (d["mem_max_mib"] or 0) >= 4000 for d in v["devices"])' \
      --monitor-url "$(monitor_of "$j")" || return 1
  done
}
gone() { [ -z "$(squeue -h -j "$jobs" -o %i)" ]; }
summarised() {  # both GPU summaries are in accounting (jobstats of an ended job reads them)
  local j
  for j in "$gpu_job" "$vgpu_job"; do
    jobstats_says "$j" 'not v["running"] and v["devices"] and all(d["samples"] for d in v["devices"])' ||
      return 1
  done
}

wait_until "both jobs start" 300 both_running
say "the pool while the jobs run"
squeue -o "%.8i %.9u %.10T %.8N %b"
vgpu_node=$(node_of "$vgpu_job")
say "$vgpu_node while job $vgpu_job runs: the MIG instance its prolog carved (slurmpool status)"
slurmpool sandbox exec --dir "$dir" "$vgpu_node" -- slurmpool status
wait_until "monitord samples both jobs" 120 sampled
say "jobstats of the running vgpu job (live, from the monitord on $vgpu_node)"
slurmpool jobstats "$vgpu_job" --monitor-url "$(monitor_of "$vgpu_job")"
touch "$release"

wait_until "both jobs end" 300 gone
rc=0
for j in "$gpu_job" "$vgpu_job"; do
  st=$(scontrol show job "$j" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
  [ "$st" = COMPLETED ] || { echo "demo: job $j ended $st" >&2; rc=1; }
done
[ "$rc" -eq 0 ] || { diagnose; exit "$rc"; }
say "job output"
cat "$work/$gpu_job.out" "$work/$vgpu_job.out"
say "$vgpu_node after the jobs: the epilog destroyed the instance"
slurmpool sandbox exec --dir "$dir" "$vgpu_node" -- slurmpool status
# slurmdbd records a job some time after slurmctld ends it; then monitord pushes the
# job's GPU summary into its AdminComment.
wait_until "both jobs' GPU summaries in accounting" 180 summarised
say "accounting"
sacct -j "$jobs" -X -o JobID,User,Account,State,ExitCode,AllocTRES%60
for j in "$gpu_job" "$vgpu_job"; do
  say "slurmpool jobstats $j (read back from accounting)"
  slurmpool jobstats "$j"
done
say "slurmpool report: GPU-hours per user, account, partition, GPU model and profile"
slurmpool report --since -1d

[ -z "${SLURMPOOL_DEMO_KEEP:-}" ] || exit 0
trap - EXIT
say "sandbox down: jobs cancelled, daemons stopped by PID, whatever the nodes left found and stopped"
slurmpool sandbox down --dir "$dir"
left=$(ps -eo pid=,args= | grep -F -- "$dir" | grep -v -F -e "grep -F" || true)
if [ -n "$left" ]; then
  printf 'demo: processes of the sandbox still running:\n%s\n' "$left" >&2
  exit 1
fi
echo "no process of the sandbox is left (ps shows none with $dir)"
