#!/bin/bash
# Measures node Extra with SchedulerParameters=extra_constraints, where the Slurm has it:
# a JSON object a node may publish (`scontrol update NodeName=... Extra=...`) and jobs
# filter on with `--extra 'key>=value'` (issue 47, step 1b).  Run as root after
# scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-node-extra.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-node-extra.sh'`.
# It brings up the sandbox (sbx1, sbx2: 16 CPUs each) and adds `extra_constraints` and
# bf_interval=1 to SchedulerParameters.  Every job is root's.  One line per fact:
# - config: SchedulerParameters as slurmctld took them, and what its log said of them;
# - x-update: a node's Extra set to {"sp4": 1};
# - x-job: a job asking --extra 'sp4>=1': where it runs;
# - x-nowhere: a job asking a key no node has: accepted? and once a node gets it;
# - x-token: a job whose Extra is slurmpool's own token ("slurmpool:vgpu=1"), and a
#   vgpu job, whose Extra the generated job_submit.lua sets to that token;
# - x-one-pass: sp4 on sbx1 only, 4 jobs asking it, released at once;
# - x-backfill-*: as probe-node-features.sh's b-*: R on sbx1 (8 CPUs, -t 3), J -n16
#   asking sp4 (sbx1 only), L sbx1 8 CPUs -t 10; sp4 kept, then taken off after J's
#   submit;
# - x-after-*: what a reconfigure, a slurmd restart and a slurmctld restart leave.
#
# Slurm 22.05.8 (bookworm) takes the node Extra and the parameter, but its sbatch has no
# --extra ("Invalid numeric value "sp4>=1" for first arg of -B").  24.11.5 (trixie) and
# 26.05.5 (sid) printed the same (tests/data/slurm-<version>/probe-node-extra.txt):
#   x-job: --extra sp4>=1: RUNNING@sbx1
#   x-nowhere: --extra sp7>=1, no node has sp7: accepted, PENDING Reason=Constraints
#   x-nowhere-then: sbx2 gets sp7: RUNNING@sbx2
#   x-token: --extra slurmpool:vgpu=1: Extra= RUNNING (job_submit.lua scrubbed it)
#   x-token-vgpu: --gres=vgpu:1: Extra=slurmpool:vgpu=1 PENDING Reason=Constraints
#   x-one-pass: sp4 on sbx1 only, 4 jobs released at once: all 4 RUNNING@sbx1
#   x-backfill-kept: J PENDING Reason=Resources SchedNodeList=sbx2 (a node without sp4);
#     L RUNNING
#   x-backfill-gone: J PENDING Reason=Constraints StartTime=Unknown; L RUNNING
#   x-after-reconfigure, -slurmd-restart, -slurmctld-restart: Extra={"sp4": 3} each time
# What follows: Extra survives everything and a job asking what no node has now is
# accepted and waits, but it is no count (one pass oversends), backfill plans such a job
# on nodes that do not match, it needs SchedulerParameters=extra_constraints (a scalar
# key of the site's slurm.conf), 22.05 has no --extra, and with it on, the Extra token
# the generated job_submit.lua gives every vgpu job is a constraint no node meets: the
# job never starts.
set -euo pipefail
source "$(dirname "$0")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-extra

extra_of() { scontrol show node "$1" | sed -n 's/^ *Extra=//p'; }
set_extra() { scontrol update NodeName="$1" Extra="$2"; }
reason_of() { echo "$(job_field "$1" JobState) Reason=$(job_field "$1" Reason)"; }

sed -i 's/^SchedulerParameters=.*/&,bf_interval=1,extra_constraints/' "$SLURM_CONF"
restart slurmctld slurmd-sbx1 slurmd-sbx2
echo "slurm: $(sinfo --version)"
echo "config: $(scontrol show config | sed -n 's/^SchedulerParameters *= /SchedulerParameters=/p'); slurmctld log: $(grep -i 'extra_constraints' "$dir/log/slurmctld.log" | tail -n 1 || echo nothing of extra_constraints)"

echo "x-update: $(said set_extra sbx1 '{"sp4": 1}'); sbx1 Extra=$(extra_of sbx1)"
# 22.05's sbatch has no --extra: getopt takes it for --extra-node-info (-B) and refuses.
j=$(submit --extra 'sp4>=1' -n1 --wrap 'sleep 300' 2>&1) || true
if ! [[ "$j" =~ ^[0-9]+$ ]]; then
  echo "x-job: --extra sp4>=1: refused: $j"
  exit 0
fi
until_true 30 job_is "$j" JobState RUNNING || true
echo "x-job: --extra sp4>=1: $(run_state "$j")"
clear_jobs

nowhere=$(submit --extra 'sp7>=1' -n1 --wrap 'sleep 300' 2>&1) || true
if [[ "$nowhere" =~ ^[0-9]+$ ]]; then
  sleep 6 # one main scheduling pass (sched_interval=5)
  echo "x-nowhere: --extra sp7>=1, no node has sp7: accepted, $(reason_of "$nowhere")"
  set_extra sbx2 '{"sp7": 1}'
  until_true 30 job_is "$nowhere" JobState RUNNING || true
  echo "x-nowhere-then: sbx2 gets sp7: $(run_state "$nowhere")"
else
  echo "x-nowhere: --extra sp7>=1: refused: $nowhere"
fi
clear_jobs
set_extra sbx2 '{}'

token=$(submit --extra 'slurmpool:vgpu=1' -n1 --wrap 'sleep 300' 2>&1) || true
sleep 6
if [[ "$token" =~ ^[0-9]+$ ]]; then
  echo "x-token: --extra slurmpool:vgpu=1: Extra=$(job_field "$token" Extra) $(reason_of "$token")"
else
  echo "x-token: --extra slurmpool:vgpu=1: refused: $token"
fi
vgpu=$(submit --gres=vgpu:1 -n1 --wrap 'sleep 300' 2>&1) || true
sleep 6
if [[ "$vgpu" =~ ^[0-9]+$ ]]; then
  echo "x-token-vgpu: --gres=vgpu:1: Extra=$(job_field "$vgpu" Extra) $(reason_of "$vgpu")"
else
  echo "x-token-vgpu: --gres=vgpu:1: refused: $vgpu"
fi
clear_jobs

held=()
for _ in 1 2 3 4; do held+=("$(submit --hold --extra 'sp4>=1' -n1 --wrap 'sleep 300')"); done
release "${held[@]}"
until_true 60 all_running "${held[@]}" || true
echo "x-one-pass: sp4 on sbx1 only, 4 jobs released at once: $(run_state "${held[@]}")start times: $(for j in "${held[@]}"; do job_field "$j" StartTime; done | sort -u | paste -sd' ')"
clear_jobs

set_extra sbx1 '{"sp4": 1}'
backfill_round x-backfill-kept "" "--extra sp4>=1" true
set_extra sbx1 '{"sp4": 1}'
backfill_round x-backfill-gone "" "--extra sp4>=1" set_extra sbx1 '{"sp4": 0}'

set_extra sbx1 '{"sp4": 3}'
scontrol reconfigure
echo "x-after-reconfigure: sbx1 Extra=$(extra_of sbx1)"
set_extra sbx1 '{"sp4": 3}'
restart slurmd-sbx1
echo "x-after-slurmd-restart: sbx1 Extra=$(extra_of sbx1)"
set_extra sbx1 '{"sp4": 3}'
restart slurmctld
echo "x-after-slurmctld-restart: sbx1 Extra=$(extra_of sbx1)"
