#!/bin/bash
# Which read of one node's GRES costs slurmctld a one-node RPC, and which the whole
# node table: a node's repair (slurmpool monitord) reads its own node on every node of
# a cluster, every interval.  Run as root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-node-read-rpcs.sh [TIMES]
#
# Each candidate read of sbx1 runs TIMES (default 10) times with sdiag's counters reset
# before it; a line per candidate gives its REQUEST_NODE_INFO (whole table) and
# REQUEST_NODE_INFO_SINGLE counts, and whether its output has the node's Gres and
# GresUsed (`gres=yes used=yes`).  Then the read slurmpool makes, on a busy node and on
# a node that does not exist.
#
# 2026-12-07 (tests/data/slurm-<version>/probe-node-read-rpcs.txt): on 22.05.8, 24.11.5
# and 26.05.5 every `scontrol show node NODE` (with -d, -o or --json alike) is a
# REQUEST_NODE_INFO, the whole node table; `sinfo -n NODE` is a
# REQUEST_NODE_INFO_SINGLE, and with `-O Gres,GresUsed` has both lists.
set -euo pipefail
times=${1:-10}
# shellcheck source=tests/data/probe-lib.sh
source "$(dirname "$(realpath "$0")")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-node-read-rpcs

rpc() {  # TYPE: sdiag's count for that message type (0 when it has none)
  sdiag | awk -v t="$1" '$1 == t { for (i = 2; i <= NF; i++) if ($i ~ /^count:/) {
      sub(/^count:/, "", $i); print $i; found = 1 } }
    END { if (!found) print 0 }' | head -1
}
candidate() {  # LABEL COMMAND...
  local label=$1 out gres=no used=no
  shift
  out=$("$@" 2>&1 || true)
  grep -q 'vgpu' <<<"$out" && gres=yes
  grep -q -i 'GresUsed\|vgpu:[0-9]*(IDX\|vgpu:0' <<<"$out" && used=yes
  sdiag -r >/dev/null
  for _ in $(seq "$times"); do "$@" >/dev/null 2>&1 || true; done
  echo "$label: NODE_INFO=$(rpc REQUEST_NODE_INFO) NODE_INFO_SINGLE=$(rpc REQUEST_NODE_INFO_SINGLE) gres=$gres used=$used"
}
echo "times=$times slurm=$(scontrol --version | awk '{print $2}')"
candidate "scontrol -d show node" scontrol -d show node sbx1
candidate "scontrol show node" scontrol show node sbx1
candidate "scontrol -o show node" scontrol -o show node sbx1
candidate "sinfo -n -O Gres,GresUsed" sinfo -h -N -n sbx1 -O 'Gres:|,GresUsed:|'
candidate "sinfo -n -o %G" sinfo -h -N -n sbx1 -o '%G'
candidate "scontrol --json show node" scontrol --json show node sbx1
# What slurmpool reads (slurmpool.slurm.nodegres), while a vgpu:2 job runs on sbx1:
j=$(submit -w sbx1 --gres=vgpu:2 --wrap 'sleep 600')
until_true 60 job_is "$j" JobState RUNNING || echo "(job $j: $(job_field "$j" JobState))"
echo "sinfo -h -N -n sbx1 -O 'NodeList:|,Gres:|,GresUsed:|' while job $j runs:"
sinfo -h -N -n sbx1 -O 'NodeList:|,Gres:|,GresUsed:|' 2>&1
echo "the same for a node that does not exist: $(said sinfo -h -N -n nosuch -O 'NodeList:|,Gres:|')"
clear_jobs
