#!/bin/bash
# Measures what a configless slurmd (`slurmd --conf-server`, slurmctld with
# SlurmctldParameters=enable_configless) receives of slurmpool's configuration
# (issue 48, step 3): which files slurmctld ships, and whether an `Include` of
# slurmpool.conf reaches the node when named absolutely and when named relatively.  Run as root after scripts/setup-host, with no sandbox up:
#
#   bash tests/data/probe-configless.sh
#
# On another Slurm: `.ci/in-root trixie 'bash tests/data/probe-configless.sh'`.
# It brings up the sandbox, turns configless on (slurmctld restarted), stops sbx2's
# slurmd and starts one for sbx2 with --conf-server and no slurm.conf of its own
# (SLURM_CONF unset, in a mount namespace where the sandbox's etc directory is an
# empty directory, as on a node that has no /etc/slurm), then one line per fact:
# - <form>-start: whether that slurmd registered (sbx2 IDLE) or what it said;
# - <form>-cache: the files in the configless cache it wrote;
# - <form>-gres: sbx2's Gres as slurmctld shows it;
# where <form> is "absolute" (`Include /abs/etc/slurmpool.conf`) and "relative"
# (`Include slurmpool.conf`).
#
# Slurm 22.05.8 (bookworm), 24.11.5 (trixie) and 26.05.5 (sid) agree
# (tests/data/slurm-<version>/probe-configless.txt): slurmctld ships slurm.conf,
# gres.conf and cgroup.conf, and slurmpool.conf only when the Include names it
# relatively; with the absolute name the slurmd stops ("s_p_parse_file: cannot stat
# file .../slurmpool.conf"), with the relative one it registers with slurmpool's GRES.
set -u
source "$(dirname "$0")/probe-lib.sh"
probe_sandbox /tmp/sp-probe-configless
port=$(sed -n 's/^SlurmctldPort=//p' "$SLURM_CONF")
spool=$(sed -n 's/^SlurmdSpoolDir=//p' "$SLURM_CONF" | sed 's/%n/sbx2/')
empty=$(mktemp -d)
# Before it has a configuration, a configless slurmd knows munged only at its default
# socket: the sandbox's, under that name, on /run/munge in the slurmd's namespace.
munge_run=$(mktemp -d)
ln -s "$(sed -n 's/^AuthInfo=socket=\([^,]*\).*/\1/p' "$SLURM_CONF")" "$munge_run/munge.socket.2"
mkdir -p /run/munge /run/slurm
# sbx2's own files (simulated devices, state) where its daemons see them, as the
# sandbox binds them for its slurmd.
node_binds=$(for d in sim dev proc state run; do printf 'mount --bind %s %s && ' "$dir/hosts/sbx2/$d" "$dir/node/$d"; done)
ours=""
cleanup_ours() { [ -n "$ours" ] && kill "$ours" 2>/dev/null; wait "$ours" 2>/dev/null; ours=""; }
trap 'cleanup_ours; rm -rf "$empty" "$munge_run"; "$slurmpool" sandbox down --dir "$dir" >/dev/null' EXIT
echo "slurm: $(slurmd -V)"
echo "SlurmctldParameters=enable_configless" >> "$SLURM_CONF"
restart slurmctld
pid=$("$slurmpool" sandbox status --dir "$dir" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(next(x["pid"] for x in d["daemons"] if x["name"]=="slurmd-sbx2"))')
kill "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
include=$(grep -n '#slurmpool-include' "$SLURM_CONF" | cut -d: -f1)
logs=$(mktemp -d)
for form in absolute relative; do
    if [ "$form" = relative ]; then name=slurmpool.conf; else name=$etc/slurmpool.conf; fi
    sed -i "${include}s|^Include [^ ]*slurmpool.conf|Include $name|" "$SLURM_CONF"
    scontrol reconfigure
    before=$(node_field sbx2 SlurmdStartTime)
    touch "$logs/mark"
    log="$logs/slurmd-$form.log"
    env -u SLURM_CONF unshare --mount --propagation private -- /bin/sh -c \
        "${node_binds}mount --bind $empty $etc && mount --bind $munge_run /run/munge && mount --bind $dir/etc-hosts /etc/hosts && exec slurmd -D -vv -N sbx2 --conf-server 127.0.0.1:$port" \
        > "$log" 2>&1 &
    ours=$!
    started=""
    for _ in $(seq 60); do
        started=$(node_field sbx2 SlurmdStartTime)
        [ "$started" != "$before" ] && break
        kill -0 "$ours" 2>/dev/null || break
        sleep 0.5
    done
    if [ "$started" != "$before" ] && kill -0 "$ours" 2>/dev/null; then
        echo "$form-start: registered (SlurmdStartTime $started)"
    else
        echo "$form-start: not registered: $(grep -i -E 'error|fatal' "$log" | sed 's/^[^:]*: //' | tail -3 | paste -sd'|')"
    fi
    cache=$(find "$spool" /run/slurm -newer "$logs/mark" -type f 2>/dev/null | sed 's|.*/||' | sort | paste -sd' ')
    echo "$form-cache: ${cache:-none}"
    echo "$form-include: $(grep -i -E 'include|slurmpool.conf' "$log" | sed 's/^[^:]*: //' | head -3 | paste -sd'|')"
    echo "$form-gres: $(node_field sbx2 Gres)"
    cleanup_ours
done
rm -rf "$logs"
