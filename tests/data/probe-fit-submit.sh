#!/bin/bash
# Measures what keeps Slurm from refusing, at submit, a job that asks a count no real
# node has now (issue 47 step 3: a vgpu job must be accepted and wait, while
# job_submit.lua asks for the size it needs and a node counts 0 of it when it cannot carve
# it).  Run as root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-fit-submit.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-fit-submit.sh'`.
# It brings up the sandbox (sbx1, sbx2: 16 CPUs, 4000 MB, DefMemPerCPU=250) and adds a
# typed count GRES beside vgpu, `spfit:s4:1` on both nodes (slurm.conf and gres.conf, no
# File), with bf_interval=1.  A "ghost" node (NodeAddr 127.0.0.1, no slurmd,
# `Gres=spfit:s4:1`, a new name each time) is added to partition pool in a given
# slurm.conf State, and every daemon restarted.  The counts of sbx1 and sbx2 are then set
# to 0 (an update restates the whole list).  Every job is root's.  One line per fact:
# - z-*: no ghost: is a job asking spfit:s4:1 accepted?
# - <shape>-<state>-sinfo: with the ghost of that shape (small: 1 CPU, 100 MB, less than
#   J's memory; node: sbx1's CPUs and memory) in State DOWN, DRAIN or FUTURE: what sinfo
#   shows of the partition and of the ghost, and what slurmctld has of the ghost;
# - <shape>-<state>-submit: is J (spfit:s4:1, 1 CPU) accepted?  If so, its state and
#   Reason after two backfill cycles, and where backfill plans it;
# - <shape>-<state>-pass: L (sbx1, 8 CPUs, -t 10, no GRES) submitted behind J: does it
#   start?
# - <shape>-<state>-count: sbx1's count set to 1: where J runs;
# - r-<state>: no ghost; sbx2 (registered, its slurmd running) counts 1 and is set to
#   DRAIN or DOWN by an admin, sbx1 counts 0: is J accepted?
# - w-*: J pinned with -w sbx1, beside a node-shaped FUTURE ghost, while sbx1 counts 0,
#   then 1.
# Each wait is on state, bounded; a line says what it saw when a wait runs out.
#
# 2026-12-07 (tests/data/slurm-<version>/probe-fit-submit.txt): 22.05.8, 24.11.5 and
# 26.05.5 printed the same:
#   z-submit and every small-*-submit: refused ("Requested node configuration is not
#     available"), though slurmctld shows the ghost with Gres=spfit:s4:1;
#   node-DOWN, node-DRAIN, node-FUTURE: accepted; J PENDING with
#     Reason=ReqNodeNotAvail (UnavailableNodes:<ghost>; "May be reserved for other job"
#     for FUTURE), not planned; L passes it; J runs on sbx1 once sbx1 counts 1.  A
#     FUTURE ghost is in neither sinfo nor scontrol show node;
#   r-DRAIN, r-DOWN: accepted;
#   w-submit: refused; w-count: accepted.
# So the submit-time test asks whether some node of the partition could ever run the
# job, by its shape (CPUs, memory) and its GRES counts now, whatever its state: a node
# line shaped like the real nodes, never started, keeps a job that asks a size no real
# node counts now accepted; a job pinned to nodes is judged by those nodes alone.  (A
# ghost in DRAIN keeps the sandbox's own wait for node states from ending: those lines
# say "(restart: the sandbox's wait ran out)".)
set -euo pipefail
# shellcheck source=tests/data/probe-lib.sh
source "$(dirname "$(realpath "$0")")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-fit-submit

set_fit() {  # NODE N: the node's whole GRES list as configured, with spfit:s4:N
  scontrol update NodeName="$1" Gres="$(sed -E "s/spfit:s4:[0-9]+/spfit:s4:$2/" <<<"$plain")"
}
nodes_up() { [ -z "$(sinfo -h -N -n sbx1,sbx2 -t drain,down,unknown,no_respond -o %N)" ]; }
ghost() {  # STATE|none [NAME SHAPE]: the ghost node NAME in that State (or none), read at a
  # slurmctld restart.  A new name each time: 26.05 keeps a node's state from its state
  # file over the State slurm.conf gives it.
  sed -i '/^NodeName=spg-/d; /^PartitionName=pool /s/,spg-[a-z-]*//' "$etc/slurmpool.conf"
  if [ "$1" != none ]; then
    sed -i "/^PartitionName=pool /i NodeName=$2 NodeAddr=127.0.0.1 $3 Gres=spfit:s4:1 State=$1" \
      "$etc/slurmpool.conf"
    sed -i "s/^\(PartitionName=pool Nodes=\S*\)/\1,$2/" "$etc/slurmpool.conf"
  fi
  # Every daemon reads the new node table; a ghost in DRAIN may keep the sandbox's own
  # wait for known node states from ending: the wait below is on sbx1 and sbx2.
  restart slurmd-sbx1 slurmd-sbx2 slurmctld 2>/dev/null || echo "(restart: the sandbox's wait ran out)"
  resume_drained
  until_true 30 nodes_up || echo "(nodes not up: $(sinfo -h -N -o '%N %T %E' | paste -sd,))"
  set_fit sbx1 0
  set_fit sbx2 0
}

# -- the configuration, read at a restart of every Slurm daemon --
sed -i 's/^SchedulerParameters=.*/&,bf_interval=1/' "$SLURM_CONF"
sed -i 's/^GresTypes=.*/&,spfit/' "$etc/slurmpool.conf"
sed -i 's/^\(NodeName=sbx\S* .*Gres=\S*\)/\1,spfit:s4:1/' "$etc/slurmpool.conf"
printf 'NodeName=sbx[1-2] Name=spfit Type=s4 Count=1\n' >>"$etc/gres.conf"
restart slurmd-sbx1 slurmd-sbx2 slurmctld
resume_drained
until_true 30 nodes_up || echo "(nodes not up: $(sinfo -h -N -o '%N %T %E' | paste -sd,))"
echo "slurm: $(sinfo --version)"
plain=$(sed 's/([^)]*)//g' <<<"$(node_field sbx1 Gres)")

ghost none
echo "z-submit: $(said submit --gres=spfit:s4:1 -p pool --wrap 'sleep 600')"
clear_jobs

# small-*: the ghost is smaller than J with the sandbox's DefMemPerCPU=250; node-*: it has
# sbx1's CPUs and RealMemory.
for shape in small node; do
for st in DOWN DRAIN FUTURE; do
  g=spg-$shape-${st,,}
  if [ "$shape" = small ]; then
    ghost "$st" "$g" "CPUs=1 RealMemory=100"
  else
    ghost "$st" "$g" "CPUs=$(node_field sbx1 CPUTot) RealMemory=$(node_field sbx1 RealMemory)"
  fi
  st=$shape-$st
  echo "$st-sinfo: pool $(sinfo -h -p pool -o '%D nodes %t' | paste -sd,);" \
    "ghost $(sinfo -h -N -n "$g" -o '%N %t %E' | sort -u | paste -sd,);" \
    "slurmctld: $(scontrol show node "$g" 2>&1 | grep -o 'State=[^ ]*\|Gres=[^ ]*\|CfgTRES=[^ ]*' | paste -sd' ')"
  if out=$(submit --gres=spfit:s4:1 -p pool --wrap 'sleep 600' 2>&1); then
    j=$out
    wait_bf
    echo "$st-submit: accepted; J $(job_field "$j" JobState) Reason=$(job_field "$j" Reason)" \
      "StartTime=$(job_field "$j" StartTime) SchedNodeList=$(job_field "$j" SchedNodeList)"
    l=$(submit -w sbx1 -n8 -t 10 --wrap 'sleep 600')
    wait_bf
    echo "$st-pass: L $(job_field "$l" JobState) Reason=$(job_field "$l" Reason)"
    set_fit sbx1 1
    until_true 30 job_is "$j" JobState RUNNING || true
    echo "$st-count: sbx1 counts 1: J $(run_state "$j")"
  else
    echo "$st-submit: refused: $out"
  fi
  clear_jobs
done
done
ghost none

# A registered node instead of a ghost: sbx2 counts 1, then an admin drains it or sets
# it DOWN (its slurmd still runs); sbx1 counts 0.
set_fit sbx2 1
for st in DRAIN DOWN; do
  scontrol update NodeName=sbx2 State="$st" Reason=probe
  echo "r-$st: sbx2 $(node_field sbx2 State) counts 1:" \
    "$(said submit --gres=spfit:s4:1 -p pool --wrap 'sleep 600')"
  clear_jobs
  scontrol update NodeName=sbx2 State=RESUME
  until_true 30 nodes_up || echo "(sbx2 not back: $(node_field sbx2 State))"
done

# A job pinned to a node (-w sbx1) while sbx1 counts 0, beside a node-shaped FUTURE ghost
# that counts 1; then once sbx1 counts 1.
ghost FUTURE spg-pin-future "CPUs=$(node_field sbx1 CPUTot) RealMemory=$(node_field sbx1 RealMemory)"
echo "w-submit: -w sbx1, sbx1 counts 0, ghost counts 1:" \
  "$(said submit -w sbx1 --gres=spfit:s4:1 -p pool --wrap 'sleep 600')"
clear_jobs
set_fit sbx1 1
echo "w-count: -w sbx1, sbx1 counts 1: $(said submit -w sbx1 --gres=spfit:s4:1 -p pool --wrap 'sleep 600')"
clear_jobs
