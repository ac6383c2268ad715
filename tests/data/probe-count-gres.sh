#!/bin/bash
# Measures what Slurm does with typed count GRES whose counts change at run time
# (`scontrol update NodeName=... Gres=...`): whether a node can tell Slurm how many
# instances of each size it can carve through them (issue 47, step 1b).  Run as root
# after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-count-gres.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-count-gres.sh'`.
# It brings up the sandbox (sbx1, sbx2: 16 CPUs, `Gres=gpu:a100:1,vgpu:14`), then adds
# a typed count GRES beside vgpu, the way slurmpool would publish "can carve N of size
# X": GresTypes gains `spfit`, each node `spfit:s1:7,spfit:s4:1` (slurm.conf and
# gres.conf, no File), AccountingStorageTRES gains gres/spfit and gres/spfit:s4, the
# gpu line of gres.conf binds Cores=0, and bf_interval=1.  Every job is root's.
# An update restates the node's list as configured (without the printed "(S:0)"),
# with other spfit counts.  One line per fact:
# - setup: the nodes' state once every daemon has read the new configuration;
# - g-update-*: an update of the whole list, and of spfit alone (does it drop the rest?);
# - g-one-pass: s4 is 1 on sbx1, 0 on sbx2; 3 jobs asking spfit:s4:1 released at once;
# - g-busy-*: while a job holds sbx1's s4, its count set to 0, then to 2;
# - g-untyped: a job asking spfit:2 without a type: which types it is given;
# - g-tres: a job asking vgpu:4 and spfit:s4:1: what its TRES and AllocTRES count;
# - g-zero-submit: s4 0 on every node: is a job asking spfit:s4:1 accepted, and does it
#   start once a node's count goes up?
# - g-backfill-*: R holds sbx1's s4 (8 CPUs, -t 3); J asks -n16 and spfit:s4:1; L asks
#   sbx1, 8 CPUs, -t 10.  Does J get a planned start, does L start?  Once with s4 held
#   by R, once with s4 set to 0 everywhere after J's submit;
# - g-preempt-*: QOS sphigh preempts splow (PreemptType=preempt/qos, REQUEUE): an sphigh
#   job asking the s4 an splow job holds; then one asking s4 where the count is 0;
# - g-after-*: s4 set to 0 on sbx1, then a slurmd restart, a reconfigure and a
#   slurmctld restart: what each leaves.
#
# Slurm 22.05.8 (bookworm), 24.11.5 (trixie) and 26.05.5 (sid) printed the same but for
# two lines (tests/data/slurm-<version>/probe-count-gres.txt; "..." stands for the
# sandbox's own vgpu and vgpufit GRES, and GresUsed is left out here):
#   g-update-idle: accepted; Gres=gpu:a100:1(S:0),...,spfit:s1:3,spfit:s4:0 (the update
#     left "(S:0)" out; gres.conf's core binding stays)
#   g-update-alone: spfit:s4:1 alone: accepted; Gres=spfit:s1:0,spfit:s4:1
#   g-update-restore: the whole list again: refused: slurm_update error: Invalid
#     generic resource (gres) specification
#   g-update-reconfigure: 22.05: Gres=spfit:s1:7,spfit:s4:1 (gpu, vgpu and vgpufit still
#     gone, back only after a slurmctld restart); 24.11, 26.05: the whole list again
#   g-one-pass: ... 3 jobs spfit:s4:1 released at once: 1 RUNNING@sbx1, 2 PENDING
#     (Resources, Priority)
#   g-busy-zero: accepted; ...spfit:s4:0 with GresUsed ...spfit:s4:1; state MIXED
#   g-busy-two: accepted; ...spfit:s4:2; then the second job runs there
#   g-untyped: spfit:2: JOB_GRES=spfit:s1:2,spfit:s4:0
#   g-tres: vgpu:4,spfit:s4:1: sacct AllocTRES=...gres/spfit:s4=1,gres/spfit=1,
#     gres/vgpu=4... (`scontrol -d show job` TRES= is empty on 24.11 and 26.05)
#   g-zero-submit: refused: ... Requested node configuration is not available
#   g-backfill-held: J PENDING Reason=Resources StartTime=<R's end> SchedNodeList=sbx1;
#     L PENDING Reason=Priority
#   g-backfill-zero: J PENDING Reason=BadConstraints SchedNodeList= (StartTime Unknown,
#     or a time with no node); L RUNNING
#   g-preempt-held: sphigh asks the s4 an splow job holds: high RUNNING@sbx1, low
#     PENDING Reason=BeginTime Restarts=1 (preempted, requeued)
#   g-preempt-zero: splow fills sbx1's CPUs, its s4 set to 0: high PENDING
#     Reason=BadConstraints; low RUNNING (no preemption for a count that is not there)
#   g-after-slurmd-restart, g-after-reconfigure, g-after-slurmctld-restart: s4 back to
#     gres.conf's 1 each time
# 26.05's slurmd refuses a core binding across its one-core sockets (Cores=0-1:
# INVALID_REG, "doesn't match socket boundaries"), hence Cores=0.
# What follows for publishing "can carve N of size X" as counts:
# - counts are consumed: one pass starts no more jobs of a size than the count allows,
#   and an update while jobs hold some (even below what they hold) is accepted;
# - every slurmd registration (start, reconfigure) and slurmctld restart puts gres.conf's
#   counts back: a node publishes again after each;
# - an update replaces the node's whole GRES list, and a GRES left out is gone (a File
#   GRES such as gpu cannot be put back by an update; on 22.05 not by a reconfigure
#   either): build the list from the node's own, change only the counts;
# - a job asking a size no node counts now is refused at submit, as with features; one
#   submitted before waits (BadConstraints), reserves nothing under backfill, and later
#   jobs pass it;
# - gres/vgpu in AllocTRES is unchanged by a second GRES beside it;
# - QOS preemption frees a count that a preemptable job holds, never one the node does
#   not publish: slices held by preemptable jobs of other sizes free nothing for it.
set -euo pipefail
source "$(dirname "$0")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-gres

set_fit() {  # NODE S1 S4: the node's whole GRES list as configured, with these spfit counts
  scontrol update NodeName="$1" Gres="$(sed -E "s/spfit:s1:[0-9]+/spfit:s1:$2/; s/spfit:s4:[0-9]+/spfit:s4:$3/" <<<"$plain")"
}
gres() {  # NODE: its Gres and GresUsed
  echo "Gres=$(node_field "$1" Gres) GresUsed=$(scontrol -d show node "$1" | tr ' ' '\n' | sed -n 's/^ *GresUsed=//p')"
}
sacct_tres() {  # JOBID: its AllocTRES in accounting, once slurmdbd has it (it lags)
  local j=$1
  stored() { [ -n "$(sacct -n -X -P -j "$j" -o AllocTRES)" ]; }
  until_true 30 stored || true
  sacct -n -X -P -j "$j" -o AllocTRES
}
state() {  # NODE: its State, and its Reason (words and all) when it has one
  echo "$(node_field "$1" State)$(scontrol show node "$1" | sed -n 's/^ *Reason=/ Reason=/p')"
}
job_gres() { scontrol -d show job "$1" | tr ' ' '\n' | sed -n 's/^JOB_GRES=//p' | head -1; }
nodes_up() { [ -z "$(sinfo -h -N -p pool -t drain,down,unknown,no_respond -o %N)" ]; }

# -- the configuration, read at a restart of every Slurm daemon --
sed -i 's/^SchedulerParameters=.*/&,bf_interval=1/' "$SLURM_CONF"
sed -i 's/^GresTypes=.*/&,spfit/; s/^AccountingStorageTRES=.*/&,gres\/spfit,gres\/spfit:s4/' \
  "$etc/slurmpool.conf"
sed -i 's/^\(NodeName=sbx\S* .*Gres=\S*\)/\1,spfit:s1:7,spfit:s4:1/' "$etc/slurmpool.conf"
printf 'NodeName=sbx[1-2] Name=spfit Type=s1 Count=7\nNodeName=sbx[1-2] Name=spfit Type=s4 Count=1\n' \
  >>"$etc/gres.conf"
# A site's gpu line often binds cores: Slurm then prints the GRES as gpu:a100:1(S:0).
sed -i 's/^\(NodeName=sbx\S* Name=gpu .*\)$/\1 Cores=0/' "$etc/gres.conf"
qos_preemption
restart slurmd-sbx1 slurmd-sbx2 slurmctld
echo "slurm: $(sinfo --version)"
echo "setup: sbx1 $(state sbx1) $(gres sbx1)"
full=$(node_field sbx1 Gres)
plain=$(sed 's/([^)]*)//g' <<<"$full") # what set_fit restates: without "(S:0)"
resume_drained
until_true 30 nodes_up || echo "(nodes not up: $(sinfo -h -N -p pool -o '%N %T %E' | paste -sd,))"

# -- updates of the list --
echo "g-update-idle: $(said set_fit sbx1 3 0); $(gres sbx1)"
echo "g-update-alone: spfit:s4:1 alone: $(said scontrol update NodeName=sbx1 Gres=spfit:s4:1); $(gres sbx1)"
echo "g-update-restore: the whole list again: $(said set_fit sbx1 7 1); $(gres sbx1)"
whole() { [ "$(node_field sbx1 Gres)" = "$full" ]; }
if ! whole; then
  scontrol reconfigure
  until_true 30 nodes_up || true
  echo "g-update-reconfigure: $(gres sbx1) state $(state sbx1)"
fi
if ! whole; then
  restart slurmctld
  resume_drained
  until_true 30 nodes_up || true
  echo "g-update-slurmctld-restart: $(gres sbx1) state $(state sbx1)"
fi
set_fit sbx1 7 1
set_fit sbx2 7 0

# -- one scheduling pass --
held=()
for _ in 1 2 3; do held+=("$(submit --hold --gres=spfit:s4:1 -n1 --wrap 'sleep 300')"); done
release "${held[@]}"
first=${held[0]}
until_true 60 job_is "$first" JobState RUNNING || true
sleep 6 # one more main scheduling pass (sched_interval=5)
echo "g-one-pass: s4 1 on sbx1, 0 on sbx2, 3 jobs spfit:s4:1 released at once: $(run_state "${held[@]}")reasons $(for j in "${held[@]}"; do job_field "$j" Reason; done | paste -sd,)"

# -- counts changed while a job holds one --
echo "g-busy-zero: $(said set_fit sbx1 7 0); $(gres sbx1) state $(state sbx1)"
echo "g-busy-two: $(said set_fit sbx1 7 2); $(gres sbx1)"
until_true 30 job_is "${held[1]}" JobState RUNNING || true
echo "g-busy-two-jobs: $(run_state "${held[@]}")"
clear_jobs
set_fit sbx1 7 1
set_fit sbx2 7 1

# -- what a job is given, and counted --
untyped=$(submit --gres=spfit:2 -w sbx1 -n1 --wrap 'sleep 300')
until_true 30 job_is "$untyped" JobState RUNNING || true
echo "g-untyped: spfit:2: $(job_field "$untyped" JobState) JOB_GRES=$(job_gres "$untyped") sbx1 $(gres sbx1)"
clear_jobs
both=$(submit --gres=vgpu:4,spfit:s4:1 -n1 --wrap 'sleep 300')
until_true 30 job_is "$both" JobState RUNNING || true
echo "g-tres: vgpu:4,spfit:s4:1: $(job_field "$both" JobState) TRES=$(scontrol -d show job "$both" | tr ' ' '\n' | sed -n 's/^TRES=//p' | head -1) JOB_GRES=$(job_gres "$both") sacct AllocTRES=$(sacct_tres "$both")"
clear_jobs

# -- a count that is 0 on every node at submit --
set_fit sbx1 7 0
set_fit sbx2 7 0
zero=$(submit --gres=spfit:s4:1 -n1 --wrap 'sleep 300' 2>&1) || true
if [[ "$zero" =~ ^[0-9]+$ ]]; then
  sleep 6
  echo "g-zero-submit: accepted: $(job_field "$zero" JobState) Reason=$(job_field "$zero" Reason)"
  set_fit sbx2 7 1
  until_true 60 job_is "$zero" JobState RUNNING || true
  echo "g-zero-raised: s4 1 on sbx2: $(run_state "$zero")"
else
  echo "g-zero-submit: refused: $zero"
fi
clear_jobs

# -- backfill --
set_fit sbx1 7 1
set_fit sbx2 7 0
backfill_round g-backfill-held "--gres=spfit:s4:1" "--gres=spfit:s4:1" true
backfill_round g-backfill-zero "" "--gres=spfit:s4:1" set_fit sbx1 7 0

# -- QOS preemption --
set_fit sbx1 7 1
set_fit sbx2 7 0
low=$(submit --qos=splow -w sbx1 --gres=spfit:s4:1 -n1 --wrap 'sleep 600')
until_true 60 job_is "$low" JobState RUNNING || true
high=$(submit --qos=sphigh --gres=spfit:s4:1 -n1 --wrap 'sleep 600')
until_true 60 job_is "$high" JobState RUNNING || true
echo "g-preempt-held: sphigh asks the s4 an splow job holds: high $(run_state "$high")low $(job_field "$low" JobState) Reason=$(job_field "$low" Reason) Restarts=$(job_field "$low" Restarts)"
clear_jobs
low=$(submit --qos=splow -w sbx1 -n16 --wrap 'sleep 600')
until_true 60 job_is "$low" JobState RUNNING || true
high=$(submit --hold --qos=sphigh --gres=spfit:s4:1 -n16 --wrap 'sleep 600')
set_fit sbx1 7 0
scontrol release "$high"
wait_bf
sleep 6 # one main scheduling pass (sched_interval=5) after the release
echo "g-preempt-zero: splow fills sbx1's CPUs, its s4 set to 0: high $(job_field "$high" JobState) Reason=$(job_field "$high" Reason); low $(job_field "$low" JobState)"
clear_jobs

# -- what survives --
set_fit sbx1 7 0
echo "g-after-update: $(gres sbx1)"
restart slurmd-sbx1
echo "g-after-slurmd-restart: $(gres sbx1) state $(state sbx1)"
resume_drained
set_fit sbx1 7 0
scontrol reconfigure
until_true 30 nodes_up || true
echo "g-after-reconfigure: $(gres sbx1) state $(state sbx1)"
resume_drained
set_fit sbx1 7 0
restart slurmctld
echo "g-after-slurmctld-restart: $(gres sbx1) state $(state sbx1)"
