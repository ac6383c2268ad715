#!/bin/bash
# Records the hostile jobs of record-hostile.sh on another Slurm version: a bare
# two-node cluster (munged, slurmctld, slurmd sbx1 and sbx2, no accounting) inside a
# Debian root, the jobs submitted by an ordinary user of that root.  Run as root:
#
#   mmdebstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,munge,procps \
#       trixie /var/tmp/roots/trixie
#   bash tests/data/record-in-root.sh /var/tmp/roots/trixie tests/data/slurm-24.11/hostile
#
# Besides record-hostile.sh's files, the cluster's Prolog saves
# `scontrol show job --json ID` as the prolog sees it (NAME.prolog.json).
#
# Everything runs in a new PID and mount namespace: the daemons and the root's
# mounts end with the script, whatever state it ends in.  Loopback ports 17817-17820.
set -euo pipefail
root=$(realpath "${1:?usage: record-in-root.sh ROOT OUTDIR}")
out=$(realpath -m "${2:?usage: record-in-root.sh ROOT OUTDIR}")
here=$(dirname "$(realpath "$0")")

if [ "${SP_RECORD_INNER:-}" != 1 ]; then
  mkdir -p "$out"
  exec env SP_RECORD_INNER=1 unshare --mount --propagation private --pid --fork \
    bash "$0" "$root" "$out"
fi

# -- inside the namespaces: PID 1's child; the root's mounts are ours alone --
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
chmod 1777 "$root/tmp"
work=/var/spool/sp-record
rm -rf "${root:?}$work"
mkdir -p "$root$work"/{ctld,d/sbx1,d/sbx2,seen,out}
chmod 0777 "$root$work/out"
install -m 0755 "$here/record-hostile.sh" "$root$work/record-hostile.sh"

cat > "$root$work/prolog" <<EOF
#!/bin/sh
scontrol show job --json "\$SLURM_JOB_ID" > $work/seen/\$SLURM_JOB_ID.json 2>&1
exit 0
EOF
chmod 0755 "$root$work/prolog"
cat > "$root/etc/slurm/slurm.conf" <<EOF
ClusterName=rec
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=17817
SlurmdPort=17818
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/d/%n
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
GresTypes=vgpu
PrologFlags=Alloc
Prolog=$work/prolog
MpiDefault=none
# The nodes below are made up: trust their CPUs, not this machine's.
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=sbx1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17819 CPUs=16 RealMemory=4000 Gres=vgpu:14
NodeName=sbx2 NodeHostname=localhost NodeAddr=127.0.0.1 Port=17820 CPUs=16 RealMemory=4000 Gres=vgpu:14
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
printf 'NodeName=sbx[1-2] Name=vgpu Count=14 Flags=CountOnly\n' > "$root/etc/slurm/gres.conf"
# 24.11+ slurmd exits without a mounted cgroup hierarchy unless told not to use one.
printf 'CgroupPlugin=disabled\n' > "$root/etc/slurm/cgroup.conf"

# NoInAddrAny binds to this host's name: the root must resolve it.
printf '127.0.0.1 localhost %s\n' "$(hostname)" > "$root/etc/hosts"

in_root() { chroot "$root" "$@"; }
in_root id sp-rec > /dev/null 2>&1 || in_root useradd -m sp-rec
mkdir -p "$root/run/munge"
in_root chown munge:munge /run/munge
in_root runuser -u munge -- munged --force
in_root slurmctld
in_root slurmd -N sbx1
in_root slurmd -N sbx2
for _ in $(seq 150); do
  idle=$(in_root timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle' || true)
  [ "$idle" = 2 ] && break
  sleep 0.2
done
[ "$idle" = 2 ] || { in_root sinfo -N; tail -20 "$root$work"/*.log; exit 1; }
in_root sinfo -V

in_root runuser -u sp-rec -- bash -c "cd /tmp && $work/record-hostile.sh $work/out"
cp "$root$work"/out/* "$out/"
for f in "$out"/*.jobid; do
  id=$(cat "$f")
  cp "$root$work/seen/$id.json" "${f%.jobid}.prolog.json"
done
in_root sinfo -V > "$out/VERSION"
# What each read costs here (printed, not recorded): 20 calls of each, one job.
id=$(cat "$out/two-nodes.jobid")
for read in "squeue -h -j $id --states=all -O JobID:|,NodeList:|,tres-per-node:|,tres-alloc:|" \
  "scontrol show job --json $id"; do
  start=$(date +%s%N)
  for _ in $(seq 20); do in_root $read > /dev/null; done
  echo "$(( ($(date +%s%N) - start) / 20000000 )) ms per call: $read"
done
echo "recorded $(find "$out" -name '*.jobid' | wc -l) jobs with $(cat "$out/VERSION") in $out"
