"""The sandbox's site: the Slurm configuration an admin had before slurmpool came.

slurmpool is installed into clusters that run Slurm already, so the sandbox starts
as one.  Its files are written first, as a site's would be, and slurmpool is then
installed into them (``install --controller``, then ``install --node``), so every
integration test runs on a merged site:

* ``slurm.conf``: a licence (``Licenses=matlab:10``, tracked in
  ``AccountingStorageTRES``), ``GresTypes=gpu,shard``, its own ``NodeName=`` line
  for the policy's nodes (with a GPU type of its own and a feature) and its own
  ``PartitionName=`` line for each policy partition, a GPU node slurmpool does not
  pool (:data:`SITE_NODE`, ``State=FUTURE``: no slurmd runs for it), a CPU
  partition, a site ``Prolog`` and ``JobSubmitPlugins=lua``;
* ``cgroup.conf`` tuned for the site's jobs (``AllowedRAMSpace``);
* ``gres.conf`` with a global ``AutoDetect=nvml``, the site's GPU lines for the
  policy's nodes and a ``shard`` line on the node slurmpool does not pool;
* ``job_submit.lua`` whose rule charges every job to a named account.

Every function here is pure: text out.
"""

from __future__ import annotations

from collections.abc import Sequence

from slurmpool.hostlist import compress
from slurmpool.policy.model import NodeGroup, Partition
from slurmpool.sandbox.layout import Layout

SITE_PROLOG_NAME = "prolog.sh"
SITE_PROLOG_LOG = "prolog.log"
# The site's GPU node slurmpool does not pool: defined, never started (State=FUTURE).
SITE_NODE = "legacy1"
SITE_GPU_TYPE = "titanv"
SITE_SHARDS = 8
SITE_FEATURE = "site-ib"
LICENSE = "matlab"
LICENSE_COUNT = 10
ALLOWED_RAM_SPACE = 95
# What the site's job_submit.lua tells a user whose job names no account.
ACCOUNT_RULE = "this site charges every job to an account: submit with --account=NAME"


def site_gpu_type(model: str) -> str:
    """The GPU type the site's own lines give a model ("A100-SXM4-80GB" -> "a100")."""
    return model.split("-")[0].lower()


def node_ports(nodes: Sequence[str], ports: dict[str, int]) -> str:
    """``Port=`` of a ``NodeName=`` line for ``nodes``: each slurmd's loopback port
    (chosen free as a block at ``up``, so consecutive)."""
    node_ports = [ports[f"slurmd:{n}"] for n in nodes]
    return str(node_ports[0]) if len(nodes) == 1 else f"[{node_ports[0]}-{node_ports[-1]}]"


def _site_gres(group: NodeGroup) -> list[tuple[str, list[int]]]:
    """(site GPU type, device indices) of a group's GPUs, in index order."""
    types: dict[str, list[int]] = {}
    for gpu in group.gpus:
        types.setdefault(site_gpu_type(gpu.model), []).append(gpu.index)
    return list(types.items())


def site_slurm_conf(
    layout: Layout,
    cluster: str,
    ports: dict[str, int],
    groups: Sequence[NodeGroup] = (),
    partitions: Sequence[Partition] = (),
    *,
    fence_devices: bool,
    configless: bool = False,
    slurm_user: str = "root",
) -> str:
    """The site's slurm.conf: everything but what slurmpool adds.

    ``fence_devices``: task/cgroup and proctrack/cgroup, so the ConstrainDevices that
    install adds to cgroup.conf holds each job to the GPU device files Slurm gave it,
    as on a production node.  ``groups``/``partitions``: the policy's, which the site
    defines as its own (slurmpool's install edits those lines rather than define them
    twice); each node's address and port are where the sandbox starts its slurmd.
    ``slurm_user``: the user slurmctld runs as (the ``SlurmUser`` of most sites is
    ``slurm``); slurmd runs as root, as everywhere.
    """
    sock = layout.munge_socket
    lines = [
        "# slurm.conf of the sandbox site (slurmpool's install merges into it).",
        f"ClusterName={cluster}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}",
        f"SlurmdPort={ports['slurmd']}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # Bind to the configured (loopback) addresses, not to every interface.
        "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
        # cred_expire=10: a requeued job runs again after ~20 s instead of ~2 min.
        f"AuthInfo=socket={sock},cred_expire=10",
        f"SlurmUser={slurm_user}",
        "SlurmdUser=root",
        f"StateSaveLocation={layout.ctld_state}",
        f"SlurmdSpoolDir={layout.spool}/%n",
        f"SlurmdPidFile={layout.run_dir}/slurmd-%n.pid",
        f"SlurmdLogFile={layout.log_dir}/slurmd-%n.log",
        f"SlurmctldPidFile={layout.run_dir}/slurmctld.pid",
        f"SlurmctldLogFile={layout.log_dir}/slurmctld.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=" + ("proctrack/cgroup" if fence_devices else "proctrack/linuxproc"),
        "TaskPlugin=" + ("task/cgroup" if fence_devices else "task/none"),
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        # Enforced by cgroup.conf's ConstrainRAMSpace where fenced: 250 MB holds the
        # simulator's workload, and 16 one-CPU jobs fill a node's 4000 MB.
        "DefMemPerCPU=250",
        "SlurmdParameters=config_overrides",
        "MpiDefault=none",
        "ReturnToService=2",
        *(["SlurmctldParameters=enable_configless"] if configless else []),
        # Slurm's default scheduler, named: what the tests see is backfill's doing.
        # sched_interval=5: the main scheduling loop (default every 60 s) picks up a
        # requeued job, and sets a waiting job's Reason, within seconds;
        # bf_interval=1: a backfill pass every second (default 30 s), so that tests
        # wait on state, not on the scheduler's clock.
        "SchedulerType=sched/backfill",
        "SchedulerParameters=sched_min_interval=100000,sched_interval=5,bf_interval=1",
        "MinJobAge=300",
        "KillWait=5",
        "InactiveLimit=0",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={ports['slurmdbd']}",
        # For slurmdbd connections this names the munge socket to use.
        f"AccountingStoragePass={sock}",
        f"AccountingStorageTRES=gres/gpu,license/{LICENSE}",
        f"Licenses={LICENSE}:{LICENSE_COUNT}",
        "GresTypes=gpu,shard",
        "JobSubmitPlugins=lua",
        f"Prolog={layout.site_dir / SITE_PROLOG_NAME}",
    ]
    for group in groups:
        gres = ",".join(f"gpu:{t}:{len(ix)}" for t, ix in _site_gres(group))
        lines.append(
            f"NodeName={group.nodes} NodeAddr=127.0.0.1 "
            f"Port={node_ports(group.hostlist.expand(), ports)} "
            f"CPUs={group.cpus} RealMemory={group.real_memory_mib}"
            + (f" Gres={gres}" if gres else "")
            + f" Features={SITE_FEATURE} State=UNKNOWN"
        )
    lines.append(
        f"NodeName={SITE_NODE} CPUs=4 RealMemory=4000 "
        f"Gres=gpu:{SITE_GPU_TYPE}:1,shard:{SITE_SHARDS} State=FUTURE"
    )
    for part in partitions:
        lines.append(f"PartitionName={part.name} Nodes={part.nodes} OverSubscribe=NO")
    # A site partition without pooled GPUs (vgpu requests there are refused).
    lines += ["PartitionName=site-cpu Nodes=ALL Default=NO State=UP", ""]
    return "\n".join(lines)


def site_gres_conf(groups: Sequence[NodeGroup], devices_root: str) -> str:
    """The site's gres.conf: NVML autodetection for every node, the GPU lines it
    wrote for the policy's nodes, and its GPU node slurmpool does not pool with
    shards of its one GPU.  ``devices_root``: where the sandbox's hosts have their
    (simulated) device files."""
    lines = ["# gres.conf of the sandbox site.", "AutoDetect=nvml"]
    for group in groups:
        for gpu_type, indices in _site_gres(group):
            files = compress(f"{devices_root}/nvidia{i}" for i in indices)
            lines.append(f"NodeName={group.nodes} Name=gpu Type={gpu_type} File={files}")
    lines += [
        f"NodeName={SITE_NODE} Name=gpu Type={SITE_GPU_TYPE} File={devices_root}/nvidia0",
        f"NodeName={SITE_NODE} Name=shard Count={SITE_SHARDS}",
        "",
    ]
    return "\n".join(lines)


def site_cgroup_conf(fence_devices: bool) -> str:
    """The site's cgroup.conf, tuned for its own jobs (cgroup v1 where the machine
    fences devices with it)."""
    return "\n".join(
        [
            "# cgroup.conf of the sandbox site.",
            "CgroupPlugin=" + ("cgroup/v1" if fence_devices else "autodetect"),
            "ConstrainCores=yes",
            "ConstrainRAMSpace=yes",
            f"AllowedRAMSpace={ALLOWED_RAM_SPACE}",
            "",
        ]
    )


def site_job_submit_lua() -> str:
    """The site's job_submit.lua: a job that names no account is refused."""
    return (
        "-- job_submit.lua of the sandbox site: every job is charged to an account\n"
        "-- its user names.\n"
        "function slurm_job_submit(job_desc, part_list, submit_uid)\n"
        '   if job_desc.account == nil or job_desc.account == "" then\n'
        f'      slurm.log_user("{ACCOUNT_RULE}")\n'
        "      return slurm.ERROR\n"
        "   end\n"
        "   return slurm.SUCCESS\n"
        "end\n"
        "\n"
        "function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)\n"
        "   return slurm.SUCCESS\n"
        "end\n"
    )


def site_prolog(layout: Layout) -> str:
    log = layout.site_dir / SITE_PROLOG_LOG
    return (
        "#!/bin/sh\n"
        "# The sandbox site's own Prolog: slurmpool's wrapper must keep running it.\n"
        f'echo "site-prolog job=$SLURM_JOB_ID node=$SLURMD_NODENAME" >> {log}\n'
        "exit 0\n"
    )


def site_files(
    layout: Layout,
    cluster: str,
    ports: dict[str, int],
    groups: Sequence[NodeGroup],
    partitions: Sequence[Partition],
    devices_root: str,
    *,
    fence_devices: bool,
    configless: bool = False,
    slurm_user: str = "root",
) -> dict[str, str]:
    """The site's Slurm files by name, as they lie next to its slurm.conf before
    slurmpool is installed."""
    return {
        "slurm.conf": site_slurm_conf(
            layout,
            cluster,
            ports,
            groups,
            partitions,
            fence_devices=fence_devices,
            configless=configless,
            slurm_user=slurm_user,
        ),
        "gres.conf": site_gres_conf(groups, devices_root),
        "cgroup.conf": site_cgroup_conf(fence_devices),
        "job_submit.lua": site_job_submit_lua(),
    }
