# Shared by the probes in tests/data (sourced, not run): brings up the sandbox in DIR
# for the probe, takes it down when the probe exits, and gives the helpers below.
#
#   source "$(dirname "$0")/probe-lib.sh"; probe_sandbox /tmp/sp-probe-NAME
slurmpool=${SLURMPOOL:-/opt/slurmpool/bin/slurmpool}

probe_sandbox() {  # DIR: the sandbox up, SLURM_CONF and PATH set, $dir and $etc named
  dir=$1
  "$slurmpool" sandbox up --dir "$dir" >/dev/null
  trap '"$slurmpool" sandbox down --dir "$dir" >/dev/null' EXIT
  eval "$("$slurmpool" sandbox env --dir "$dir")"
  etc=$(dirname "$SLURM_CONF")
  cd /tmp
}
restart() { "$slurmpool" sandbox restart --dir "$dir" "$@" >/dev/null; }

job_field() {  # JOBID NAME: the job's NAME=value from scontrol
  scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
node_field() {  # NODE NAME
  scontrol show node "$1" | tr ' ' '\n' | sed -n "s/^ *$2=//p" | head -1
}
until_true() {  # SECONDS COMMAND...: poll COMMAND every 0.2 s; 1 if it never held
  local end=$((SECONDS + $1))
  shift
  until "$@"; do
    [ "$SECONDS" -ge "$end" ] && return 1
    sleep 0.2
  done
}
job_is() { [ "$(job_field "$1" "$2")" = "$3" ]; }
all_running() {
  local j
  for j in "$@"; do job_is "$j" JobState RUNNING || return 1; done
}
no_jobs() { [ -z "$(squeue -h -o %i)" ]; }
clear_jobs() {
  scancel --quiet --user=root || true
  until_true 60 no_jobs || echo "(jobs left after scancel: $(squeue -h -o '%i %T' | paste -sd,))"
}
bf_cycles() { sdiag | sed -n 's/^[[:space:]]*Total cycles: //p' | head -1; }
bf_passed() { [ "$(bf_cycles)" -ge "$1" ]; }
wait_bf() {  # two backfill cycles from now (the first may have started before)
  local want=$(($(bf_cycles) + 2))
  until_true 60 bf_passed "$want" || echo "(backfill ran $(bf_cycles) cycles, waited for $want)"
}
submit() { sbatch --parsable -o /dev/null "$@"; }
release() {  # JOBID...: released in one call, so that one scheduling pass sees them all
  local IFS=,
  scontrol release "$*"
}
run_state() {  # JOBID...: id=STATE@NODE for each
  local j
  for j in "$@"; do printf '%s=%s@%s ' "$j" "$(job_field "$j" JobState)" "$(job_field "$j" NodeList)"; done
}
said() {  # COMMAND...: "accepted" or "refused: <what it said>"
  local out
  if out=$("$@" 2>&1); then echo "accepted${out:+ ($out)}"; else echo "refused: $out"; fi
}
