#!/bin/bash
# Measures what accounting keeps of a job that was requeued and then cancelled before
# it ran again (the churn test's cancel can meet a prolog's requeue so), with slurmdbd
# up, and with slurmdbd down from before the requeue until after the cancel.  Run as
# root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-requeue-cancel-acct.sh
#
# On another Slurm: `.ci/in-root sid 'bash tests/data/probe-requeue-cancel-acct.sh'`.
# Each case: a job runs on sbx1, `scontrol requeuehold` sends it back to the queue
# (held, so it cannot start again), `scancel` ends it, once the job is PENDING or at
# once (still COMPLETING); then 0, 10, 30 and 60 s after
# slurmdbd answers, `sacct -X` (the job's last record) and `sacct -X -D` (every record).
# One line per case and look: rq-<case>-<seconds>: the job's state in slurmctld, then
# sacct's STATE|END rows.
#
# Slurm 22.05.8 (bookworm), 24.11.5 (trixie) and 26.05.5 (sid) gave the same
# (tests/data/slurm-<version>/probe-requeue-cancel-acct.txt):
#   - cancelled once PENDING: a REQUEUED record, then a CANCELLED one, at once with
#     slurmdbd up, and 10 to 30 s after slurmdbd is back when it was down;
#   - cancelled while the requeue was COMPLETING: slurmctld says CANCELLED, and the
#     REQUEUED record (with its End) stays the job's last for the 60 s watched, with
#     slurmdbd up or down: no CANCELLED record comes.
# So sacct's last state is not always an ended one for a job slurmctld has ended: the
# accounting push takes a requeue's record as final once slurmctld has ended the job.
set -euo pipefail
# shellcheck source=tests/data/probe-lib.sh
source "$(dirname "$(realpath "$0")")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-requeue-cancel

dbd_pid() {
  python3 -c 'import json, sys
d = [x for x in json.load(open(sys.argv[1]))["daemons"] if x["name"] == "slurmdbd"]
print(d[-1]["pid"])' "$dir/sandbox.json"
}
dbd_down() { ! sacctmgr -n list cluster >/dev/null 2>&1; }
dbd_up() { sacctmgr -n list cluster >/dev/null 2>&1; }
rows() {  # JOBID FLAGS...: sacct's rows for the job, comma-separated
  local j=$1
  shift
  sacct -n -P -X "$@" -j "$j" -o State,End | paste -sd, -
}

case_run() {  # NAME DOWN AT: DOWN=1 stops slurmdbd around the requeue and the cancel;
  # AT=pending cancels once the job is back in the queue, AT=completing at once (while
  # the requeued run's epilog has not ended)
  local name=$1 down=$2 at=$3 j t
  j=$(submit -w sbx1 --wrap 'sleep 300')
  until_true 60 job_is "$j" JobState RUNNING || echo "($j never ran)"
  if [ "$down" = 1 ]; then
    kill "$(dbd_pid)"
    until_true 30 dbd_down || echo "(slurmdbd still answers)"
  fi
  scontrol requeuehold "$j"
  if [ "$at" = pending ]; then
    until_true 60 job_is "$j" JobState PENDING || echo "($j: $(job_field "$j" JobState))"
  else
    echo "rq-$name: cancelled while $(job_field "$j" JobState)"
  fi
  scancel "$j"
  until_true 60 job_is "$j" JobState CANCELLED || echo "($j: $(job_field "$j" JobState))"
  if [ "$down" = 1 ]; then
    restart slurmdbd
    until_true 60 dbd_up || echo "(slurmdbd does not answer)"
  fi
  local start=$SECONDS
  for t in 0 10 30 60; do
    while [ $((SECONDS - start)) -lt "$t" ]; do sleep 1; done
    echo "rq-$name-${t}s: slurmctld: $(job_field "$j" JobState); last: $(rows "$j") | all: $(rows "$j" -D)"
  done
}
case_run dbd-up 0 pending
case_run dbd-down 1 pending
case_run completing-dbd-up 0 completing
case_run completing-dbd-down 1 completing
