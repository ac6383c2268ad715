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
qos_preemption() {  # QOS splow and sphigh (Preempt=splow), root may use both, and
  # PreemptType=preempt/qos with PreemptMode=REQUEUE in slurm.conf (read at the next
  # slurmctld restart)
  printf 'PreemptType=preempt/qos\nPreemptMode=REQUEUE\n' >>"$SLURM_CONF"
  sacctmgr -i add qos splow >/dev/null
  sacctmgr -i add qos sphigh Preempt=splow Priority=100 >/dev/null
  sacctmgr -i modify user root set qos+=splow,sphigh >/dev/null
}

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
resume_drained() {  # a node drained by a registration that came before the new config
  local n
  for n in sbx1 sbx2; do
    case "$(node_field "$n" State)" in *DRAIN*) scontrol update NodeName="$n" State=RESUME ;; esac
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
backfill_round() {  # LABEL R_ARGS J_ARGS COMMAND...: does backfill plan J, and keep L off?
  # R runs on sbx1 (8 CPUs, -t 3, and R_ARGS); J asks -n16 -t 2 and J_ARGS, which only
  # sbx1 can meet; COMMAND then runs (`true`, or one that takes J's requirement away);
  # L asks sbx1, 8 CPUs, -t 10: it would delay J.  Prints J's plan and L's state.
  local label=$1 r_args=$2 j_args=$3 r j l
  shift 3
  # shellcheck disable=SC2086 # the ARGS are words, unquoted on purpose
  r=$(submit -w sbx1 -n8 -t 3 $r_args --wrap 'sleep 600')
  until_true 60 job_is "$r" JobState RUNNING || true
  # shellcheck disable=SC2086
  j=$(submit $j_args -n16 -t 2 --wrap 'sleep 60')
  "$@"
  wait_bf
  l=$(submit -w sbx1 -n8 -t 10 --wrap 'sleep 600')
  wait_bf
  echo "$label: J $(job_field "$j" JobState) Reason=$(job_field "$j" Reason) StartTime=$(job_field "$j" StartTime) SchedNodeList=$(job_field "$j" SchedNodeList); L $(job_field "$l" JobState) Reason=$(job_field "$l" Reason)"
  clear_jobs
}
