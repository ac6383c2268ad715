#!/bin/bash
# Measures what slurmctld prints of a typed count GRES whose counts are all set to 0 by
# `scontrol update NodeName=... Gres=...`, and whether an update with counts brings it
# back (a MIG-pooled node publishes vgpufit:sK:0 for every size while all its slices are
# being given back).  Run as root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-fit-zero.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-fit-zero.sh'`.
# monitord is stopped on both nodes first (by its PID), so that nothing publishes
# behind the probe.  One line per fact:
# - before: sbx1's Gres as gres.conf gives it;
# - zero: every vgpufit count set to 0 (the rest of the list restated): the update's
#   outcome, sbx1's Gres and CfgTRES;
# - back: the whole list again, with counts: the outcome and sbx1's Gres;
# - some-zero: s1 to s4 at 0, s7 at 1: sbx1's Gres.
#
# 2026-12-07 (tests/data/slurm-<version>/probe-fit-zero.txt): on 22.05.8, 24.11.5 and
# 26.05.5 alike, a GRES whose counts are all 0 is left out of the node's Gres (and
# CfgTRES) entirely, and an update naming its types with counts puts it back; with
# one count above 0 every type is printed, the zeros included.
set -euo pipefail
# shellcheck source=tests/data/probe-lib.sh
source "$(dirname "$(realpath "$0")")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-fit-zero
"$slurmpool" sandbox status --dir "$dir" --json | python3 -c '
import json, sys
print(" ".join(str(d["pid"]) for d in json.load(sys.stdin)["daemons"] if d["name"].startswith("monitord-")))
' | xargs -r kill
gres() { sinfo -h -N -n sbx1 -O 'Gres:|' | head -1 | tr -d '|'; }
echo "slurm: $(sinfo --version)"
echo "before: $(gres)"
echo "zero: $(said scontrol update NodeName=sbx1 \
  Gres=gpu:a100:1,vgpu:14,vgpufit:s1:0,vgpufit:s2:0,vgpufit:s3:0,vgpufit:s4:0,vgpufit:s7:0);" \
  "Gres=$(gres) CfgTRES=$(node_field sbx1 CfgTRES)"
echo "back: $(said scontrol update NodeName=sbx1 \
  Gres=gpu:a100:1,vgpu:14,vgpufit:s1:14,vgpufit:s2:6,vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2);" \
  "Gres=$(gres)"
scontrol update NodeName=sbx1 \
  Gres=gpu:a100:1,vgpu:14,vgpufit:s1:0,vgpufit:s2:0,vgpufit:s3:0,vgpufit:s4:0,vgpufit:s7:1
echo "some-zero: Gres=$(gres)"
