#!/bin/bash
# Measures what Slurm does with node features changed at run time and with node Weight:
# whether a node can tell Slurm what it can carve through them (issue 47, step 1a).
# Run as root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-node-features.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-node-features.sh'`.
# It brings up the sandbox (sbx1, sbx2: 16 CPUs, 4000 MB each, DefMemPerCPU=250), then
# changes its slurm.conf the way a site might: bf_interval=1, PreemptType=preempt/qos
# with PreemptMode=REQUEUE, a feature "site" on both nodes in slurm.conf; QOS splow and
# sphigh (Preempt=splow).  Every job is root's, CPU only.  `spX` names a feature set by
# `scontrol update` the way slurmpool would publish "can carve X".  One line per fact:
# - a-*: what an update leaves after `scontrol reconfigure`, a slurmd restart and a
#   slurmctld restart (features and Weight, updated again before each);
# - f-*: Weight updated at run time: where one job goes, and a burst of 20 one-CPU jobs;
# - c-one-pass: 4 held jobs asking for a feature active on one node, released at once;
# - b-*: backfill: R runs on sbx1 (8 CPUs, -t 3); J asks -n16 and a feature only sbx1
#   has; L asks sbx1, 8 CPUs, -t 10.  Does J get a planned start, does L start (it would
#   delay J)?  Once with J's feature active, once with it active nowhere;
# - d-preempt-*: sbx1 full of an splow job; an sphigh job asking for a feature of sbx1,
#   inactive, then active;
# - d-resv-*: a reservation by feature, then the feature moved; a job in it;
# - e-*: NodeFeaturesPlugins=node_features/helpers (features spmode1, spmode2 with a
#   helper, RebootProgram that only logs): an update of a plain feature, a job asking
#   for the helper feature that is not active.
# Each wait is on state, bounded; a line says what it saw when a wait runs out.
#
# Slurm 22.05.8 (bookworm), 24.11.5 (trixie) and 26.05.5 (sid) printed the same
# (tests/data/slurm-<version>/probe-node-features.txt; the READMEs beside them say more):
#   a-update: avail=site,spA,spB active=site,spA weight=7
#   a-after-reconfigure: avail=site active=site weight=1
#   a-after-slurmd-restart: avail=site,spA,spB active=site,spA weight=7
#   a-after-slurmctld-restart: avail=site active=site weight=1
#   f-one-job: sbx1 weight 100, sbx2 weight 1: runs on sbx2
#   f-burst: 20 one-CPU jobs: 4 on sbx1, 16 on sbx2, 20 RUNNING
#   c-one-pass: ... 4 jobs -C spA released at once: all 4 RUNNING@sbx1, one start time
#   b-active: J PENDING Reason=Resources StartTime=<R's end> SchedNodeList=sbx1;
#             L PENDING Reason=Priority
#   b-inactive: J PENDING Reason=BadConstraints SchedNodeList= (StartTime Unknown, or a
#             time with no node); L RUNNING
#   d-preempt-inactive: high PENDING Reason=BadConstraints; low RUNNING
#   d-preempt-active: high RUNNING on sbx1; low PENDING Reason=BeginTime Restarts=1
#   d-resv-create: Reservation created: spres nodes=sbx1
#   d-resv-moved: spA now active on sbx2 only: reservation nodes=sbx1
#   d-resv-job: -C spA in the reservation: submit refused: ... Requested node
#               configuration is not available
#   d-resv-inactive: Error creating the reservation: Requested node configuration ...
#   e-update-plain: accepted
#   e-job: -C spmode2: CONFIGURING; sbx1 MIXED+NOT_RESPONDING+POWERING_UP (26.05 also
#          REBOOT_ISSUED); helper: set spmode2; RebootProgram run (22.05 without an
#          argument, 24.11 and 26.05 with the feature)
# What follows for publishing "can carve X" as features:
# - run-time features live in slurmctld's memory only: every reconfigure and slurmctld
#   restart wipes them, so the nodes must publish again after one (a repair pass);
# - a feature is no count: one pass sends a node as many jobs as its CPUs and GRES
#   allow, so the prolog's requeue stays the fallback for a burst;
# - backfill and preemption look only at active features: a job whose size no node can
#   carve now reserves nothing and preempts nothing, and later jobs pass it;
# - a reservation picks its nodes by active features once, and never follows them;
# - never under a NodeFeaturesPlugins helper: a job asking an inactive helper feature
#   reboots its node;
# - Weight only orders the nodes that fit; it cannot keep a job off a node.
set -euo pipefail
source "$(dirname "$0")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-features

features() {  # NODE: avail=... active=...
  echo "avail=$(node_field "$1" AvailableFeatures) active=$(node_field "$1" ActiveFeatures)"
}
set_features() {  # NODE AVAIL ACTIVE
  scontrol update NodeName="$1" AvailableFeatures="$2" ActiveFeatures="$3"
}

# -- the site's changes, read at a restart of every Slurm daemon --
sed -i 's/^SchedulerParameters=.*/&,bf_interval=1/' "$SLURM_CONF"
qos_preemption
sed -i 's/^NodeName=sbx\S* /& Features=site /' "$etc/slurmpool.conf"
restart slurmctld slurmd-sbx1 slurmd-sbx2

echo "slurm: $(sinfo --version)"
echo "config: $(features sbx1) weight=$(node_field sbx1 Weight)"

# -- (a) what survives reconfigure and restarts --
publish() {
  set_features sbx1 site,spA,spB site,spA
  scontrol update NodeName=sbx1 Weight=7
}
publish
echo "a-update: $(features sbx1) weight=$(node_field sbx1 Weight)"
scontrol reconfigure
echo "a-after-reconfigure: $(features sbx1) weight=$(node_field sbx1 Weight)"
publish
restart slurmd-sbx1
echo "a-after-slurmd-restart: $(features sbx1) weight=$(node_field sbx1 Weight)"
publish
restart slurmctld
echo "a-after-slurmctld-restart: $(features sbx1) weight=$(node_field sbx1 Weight)"

# -- (f) Weight --
set_features sbx1 site,spA site
scontrol update NodeName=sbx1 Weight=100
scontrol update NodeName=sbx2 Weight=1
one=$(submit -n1 --wrap 'sleep 300')
until_true 60 job_is "$one" JobState RUNNING || true
echo "f-one-job: sbx1 weight 100, sbx2 weight 1: runs on $(job_field "$one" NodeList)"
clear_jobs
burst=()
for _ in $(seq 20); do burst+=("$(submit --hold -n1 --wrap 'sleep 300')"); done
release "${burst[@]}"
until_true 60 all_running "${burst[@]}" || true
echo "f-burst: 20 one-CPU jobs: $(for j in "${burst[@]}"; do job_field "$j" NodeList; done | sort | uniq -c | awk '{printf "%s on %s, ", $1, $2}')$(for j in "${burst[@]}"; do job_field "$j" JobState; done | sort | uniq -c | awk '{printf "%s %s ", $1, $2}')"
clear_jobs
scontrol update NodeName=sbx1 Weight=1

# -- (c) one scheduling pass and a feature that stands for one instance --
set_features sbx1 site,spA site,spA
set_features sbx2 site,spA site
held=()
for _ in 1 2 3 4; do held+=("$(submit --hold -C spA -n1 --wrap 'sleep 300')"); done
release "${held[@]}"
until_true 60 all_running "${held[@]}" || true
starts=$(for j in "${held[@]}"; do job_field "$j" StartTime; done | sort -u | paste -sd' ')
echo "c-one-pass: spA active on sbx1 only, 4 jobs -C spA released at once: $(run_state "${held[@]}")start times: $starts"
clear_jobs

# -- (b) backfill and a feature active nowhere --
set_features sbx1 site,spA,spB site,spA,spB # spB active at J's submit
set_features sbx2 site,spA,spB site
backfill_round b-active "" "-C spB" true
set_features sbx1 site,spA,spB site,spA,spB
backfill_round b-inactive "" "-C spB" set_features sbx1 site,spA,spB site,spA

# -- (d) QOS preemption --
set_features sbx1 site,spA site,spA
set_features sbx2 site,spA site
low=$(submit --qos=splow -w sbx1 -n16 --wrap 'sleep 600')
until_true 60 job_is "$low" JobState RUNNING || true
high=$(submit --hold --qos=sphigh -C spA -n16 --wrap 'sleep 600')
set_features sbx1 site,spA site
scontrol release "$high"
wait_bf
sleep 6 # one main scheduling pass (sched_interval=5) after the release
echo "d-preempt-inactive: high $(job_field "$high" JobState) Reason=$(job_field "$high" Reason); low $(job_field "$low" JobState)"
set_features sbx1 site,spA site,spA
until_true 60 job_is "$high" JobState RUNNING || true
echo "d-preempt-active: high $(job_field "$high" JobState) on $(job_field "$high" NodeList); low $(job_field "$low" JobState) Reason=$(job_field "$low" Reason) Restarts=$(job_field "$low" Restarts)"
clear_jobs

# -- (d) reservations --
res_field() { scontrol show reservation spres | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }
set_features sbx1 site,spA,spB site,spA
set_features sbx2 site,spA,spB site
echo "d-resv-create: $(scontrol create reservation ReservationName=spres StartTime=now Duration=10 Users=root NodeCnt=1 Features=spA 2>&1) nodes=$(res_field Nodes)"
set_features sbx1 site,spA,spB site
set_features sbx2 site,spA,spB site,spA
sleep 6
echo "d-resv-moved: spA now active on sbx2 only: reservation nodes=$(res_field Nodes)"
rj=$(submit --reservation=spres -C spA -n1 --wrap 'sleep 300' 2>&1) || true
if [[ "$rj" =~ ^[0-9]+$ ]]; then
  wait_bf
  sleep 6
  echo "d-resv-job: -C spA in the reservation: $(job_field "$rj" JobState) Reason=$(job_field "$rj" Reason) on $(job_field "$rj" NodeList)"
else
  echo "d-resv-job: -C spA in the reservation: submit refused: $rj"
fi
clear_jobs
scontrol delete ReservationName=spres
echo "d-resv-inactive: $(scontrol create reservation ReservationName=spres StartTime=now Duration=10 Users=root NodeCnt=1 Features=spB 2>&1) nodes=$(res_field Nodes 2>/dev/null)"
scontrol delete ReservationName=spres 2>/dev/null || true

# -- (e) NodeFeaturesPlugins=node_features/helpers --
cat >"$etc/helpers.conf" <<EOF
Feature=spmode1 Helper=$dir/helper
Feature=spmode2 Helper=$dir/helper
MutuallyExclusive=spmode1,spmode2
EOF
cat >"$dir/helper" <<EOF
#!/bin/sh
# With no argument: the active mode; with one: the mode after the next reboot.
if [ \$# -eq 0 ]; then cat $dir/helper.mode; else echo "set \$1" >>$dir/helper.log; fi
EOF
cat >"$dir/reboot" <<EOF
#!/bin/sh
echo "reboot \$*" >>$dir/reboot.log
EOF
echo spmode1 >"$dir/helper.mode"
chmod 0755 "$dir/helper" "$dir/reboot"
printf 'NodeFeaturesPlugins=node_features/helpers\nRebootProgram=%s/reboot\n' "$dir" >>"$SLURM_CONF"
if ! restart slurmctld slurmd-sbx1 slurmd-sbx2 2>"$dir/restart.err"; then
  echo "e-start: the daemons did not come back: $(tail -n 3 "$dir/restart.err" | paste -sd' ')"
  exit 0
fi
echo "e-start: sbx1 $(features sbx1) state=$(node_field sbx1 State)"
echo "e-update-plain: $(said set_features sbx1 site,spA,spmode1,spmode2 site,spA,spmode1); now $(features sbx1)"
ej=$(submit -w sbx1 -C spmode2 -n1 --wrap 'sleep 60' 2>&1) || true
if [[ "$ej" =~ ^[0-9]+$ ]]; then
  sleep 10
  echo "e-job: -C spmode2: $(job_field "$ej" JobState) Reason=$(job_field "$ej" Reason); sbx1 state=$(node_field sbx1 State) $(features sbx1); helper: $(paste -sd, "$dir/helper.log" 2>/dev/null || echo not asked); RebootProgram: $(paste -sd, "$dir/reboot.log" 2>/dev/null || echo not run)"
else
  echo "e-job: -C spmode2: submit refused: $ej"
fi
clear_jobs
