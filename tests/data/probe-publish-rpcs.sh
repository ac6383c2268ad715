#!/bin/bash
# Measures the RPCs slurmctld serves while the hooks publish what each node can carve
# (slurmpool.pooling.publish, issue 47 step 2a): a burst of vgpu jobs on the sandbox,
# with sdiag's counters reset before it.  Run as root after scripts/setup-host, with no
# sandbox up:
#
#   bash tests/data/probe-publish-rpcs.sh [JOBS]
#
# JOBS (default 40) jobs of root's, vgpu:1 to vgpu:4 in turn, each `sleep 2`, are
# submitted at once; when every one has ended and every epilog is done, it prints
# sdiag's count per RPC type: the node reads and updates only the hooks make
# (`sinfo -n NODE` is REQUEST_NODE_INFO_SINGLE, `scontrol update NodeName=`
# REQUEST_UPDATE_NODE; the figures below were measured while the read was
# `scontrol -d show node`, a REQUEST_NODE_INFO), the job reads (the hooks' and this script's squeue polling)
# and updates and requeues, all RPCs together, and how many updates the hook logs say
# were sent and how many requeues.
#
# 2026-12-07, 40 jobs (tests/data/slurm-<version>/probe-publish-rpcs.txt):
#   Slurm     node reads  node updates  all RPCs  requeues
#   22.05.8       54           54          936        4
#   24.11.5       65           65          910        5
#   26.05.5       60           60          923        4
# Of some 88 prolog and epilog runs, 54 to 65 changed what their node can carve and
# sent it (a read and an update each); the others sent nothing.  The publishing adds
# 11 to 14 % to the RPCs of the burst, this script's own squeue polling included.
set -euo pipefail
jobs=${1:-40}
# shellcheck source=tests/data/probe-lib.sh
source "$(dirname "$(realpath "$0")")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-publish-rpcs
hook_lines() {  # ACTION: how many times the nodes' hook logs say it
  cat "$dir"/hosts/*/state/hooks.log 2>/dev/null | grep -c "action=$1" || true
}
published_before=$(hook_lines fit-published)
requeued_before=$(hook_lines 'requeue ')

sdiag -r >/dev/null
ids=()
for i in $(seq "$jobs"); do
  ids+=("$(submit --gres=vgpu:$(((i - 1) % 4 + 1)) --wrap 'sleep 2')")
done
# squeue lists a job until its epilog is done (COMPLETING); nothing here reads nodes.
ended() { [ -z "$(squeue -h -o %i)" ]; }
until_true 600 ended || echo "(jobs left: $(squeue -h -o '%i %T' | paste -sd,))"

rpc() {  # TYPE: sdiag's count for that message type (0 when it has none)
  sdiag | awk -v t="$1" '$1 == t { for (i = 2; i <= NF; i++) if ($i ~ /^count:/) {
      sub(/^count:/, "", $i); print $i; found = 1 } }
    END { if (!found) print 0 }' | head -1
}
total=$(sdiag | awk '/^Remote Procedure Call statistics by message type/ { on = 1; next }
  /^Remote Procedure Call statistics by user/ { on = 0 }
  on && /count:/ { sub(/^.*count:/, ""); sub(/ .*/, ""); n += $0 } END { print n + 0 }')
published=$(($(hook_lines fit-published) - published_before))
requeued=$(($(hook_lines 'requeue ') - requeued_before))
echo "jobs=$jobs slurm=$(scontrol --version | awk '{print $2}')"
for t in REQUEST_NODE_INFO REQUEST_NODE_INFO_SINGLE REQUEST_UPDATE_NODE \
  REQUEST_JOB_INFO_SINGLE REQUEST_JOB_INFO REQUEST_JOB_REQUEUE REQUEST_UPDATE_JOB; do
  echo "rpc $t=$(rpc "$t")"
done
echo "rpc all=$total"
echo "hooks: updates sent=$published requeues=$requeued"
