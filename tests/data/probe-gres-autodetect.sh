#!/bin/bash
# Measures how slurmd reads a site's gres.conf joined with slurmpool's lines (issue 48,
# step 1c): a global `AutoDetect=nvml` line kept, slurmpool's lines for its nodes each
# carrying `AutoDetect=off`, and a site line for a node slurmpool does not pool.
# `slurmd -G` prints the GRES a node would register, then exits; from 24.11 it also
# wants munged and its spool directory, so the probe borrows the sandbox's (run as
# root after scripts/setup-host, with no sandbox up):
#
#   bash tests/data/probe-gres-autodetect.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-gres-autodetect.sh'`.
# One line per fact:
# - parse-<node>: the GRES slurmd -G prints for a pooled node (sbx1) and the site's
#   own (sbx3), or the error it stops with;
# - nvml-<node>: what slurmd -v said about AutoDetect and NVML for that node ("nothing":
#   it did not look for NVML);
# - node-specific: a pooled node with its own `AutoDetect=nvml` line as well as
#   slurmpool's AutoDetect=off lines (what install refuses): what slurmd does.
#
# Slurm 22.05.8 (bookworm), 24.11.5 (trixie) and 26.05.5 (sid) agree
# (tests/data/slurm-<version>/probe-gres-autodetect.txt): the joined file parses
# (rc=0) and each node registers the GRES its lines give; on the pooled node the
# AutoDetect=off lines win ("Using node-local AutoDetect=off" on 24.11 and 26.05; 22.05
# says nothing of NVML there), while the site's node tries NVML (Debian's build finds
# no library and goes on); a pooled node with a node-specific AutoDetect=nvml as well
# stops slurmd: "fatal: gres.conf: duplicate node-local AutoDetect specification does
# not match the first".
set -u
source "$(dirname "$0")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-gres-autodetect
dir=$(mktemp -d)
trap 'rm -rf "$dir"; "$slurmpool" sandbox down --dir /tmp/sp-probe-gres-autodetect >/dev/null' EXIT
{
    grep -E '^(AuthType|AuthInfo|CredType|SlurmdSpoolDir|SlurmdUser)=' "$SLURM_CONF"
    cat <<CONF
ClusterName=probe
SlurmctldHost=localhost
GresTypes=gpu,vgpu,vgpufit
SelectType=select/cons_tres
NodeName=sbx[1-2] CPUs=4 Gres=gpu:a100:1,vgpu:14,vgpufit:s1:14,vgpufit:next:1 State=UNKNOWN
NodeName=sbx3 CPUs=4 Gres=gpu:a100:1 State=UNKNOWN
PartitionName=p Nodes=sbx[1-3] Default=YES
CONF
} > "$dir/slurm.conf"
joined() {
    cat <<GRES
AutoDetect=nvml
#slurmpool-disabled: NodeName=sbx[1-3] Name=gpu Type=a100 File=/dev/null
NodeName=sbx3 Name=gpu Type=a100 File=/dev/null #slurmpool-added
$1
#slurmpool-begin: slurmpool's lines for the GPUs of its node groups
# GPU 2: whole
NodeName=sbx[1-2] Name=gpu Type=a100 File=/dev/null AutoDetect=off
# GPUs 0, 1: pooled
NodeName=sbx[1-2] Name=vgpu Count=14 AutoDetect=off
NodeName=sbx[1-2] Name=vgpufit Type=s1 Count=14 AutoDetect=off
NodeName=sbx[1-2] Name=vgpufit Type=next Count=1 AutoDetect=off
#slurmpool-end
GRES
}
gres_of() {  # node -> the Gres lines slurmd -G prints, one line
    timeout 30 slurmd -G -v -f "$dir/slurm.conf" -N "$1" > "$dir/out" 2>&1
    echo "rc=$? $(grep -o 'Gres Name=[^ ]* Type=[^ ]* Count=[0-9]*' "$dir/out" | sed 's/Gres //' | paste -sd';')"
}
nvml_of() {  # what slurmd said about AutoDetect and NVML, or "nothing"
    said=$(grep -i -E "autodetect|functionality|wasn't found" "$dir/out" | grep -v 'Flags=' |
        sed -e 's/^\[[^]]*\] //' -e 's/^slurmd-[^:]*: //' | paste -sd'|')
    echo "${said:-nothing}"
}
echo "slurm: $(slurmd -V)"
joined "" > "$dir/gres.conf"
for node in sbx1 sbx3; do
    echo "parse-$node: $(gres_of $node)"
    echo "nvml-$node: $(nvml_of)"
done
joined "NodeName=sbx1 AutoDetect=nvml" > "$dir/gres.conf"
echo "node-specific: $(gres_of sbx1); $(grep -i -m1 -E 'error|fatal' "$dir/out" | sed 's/^[^:]*: //')"
