"""The v1 policy fields: one definition for the validator and the JSON Schema.

String patterns are deliberately narrow: names, paths and slurm.conf values
end up in slurm.conf, gres.conf, a Lua table and shell wrappers, so quotes,
spaces, newlines, ``#`` and ``$`` are rejected where they could change the
meaning of the generated file.
"""

from __future__ import annotations

from typing import Any

from slurmpool.modes import MODES, GpuMode
from slurmpool.policy.fields import (
    VAR_PATTERN,
    Bool,
    Field,
    Int,
    MapOf,
    Obj,
    Seq,
    Str,
)

VERSION = "v1"
VGPU_UNITS = ("compute-slice", "share")

NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}"
HOSTLIST = r"[A-Za-z0-9_.\-\[\],]+"
_PATH_CHAR = r"[A-Za-z0-9_./+\-]"
PATH = rf"/{_PATH_CHAR}*"
# Before substitution a path may hold ${name} anywhere (it must start with
# "/" once substituted, which the validator checks).
PATH_TEMPLATE = rf"(?:{_PATH_CHAR}|{VAR_PATTERN})+"
BACKEND = rf"nvml|sim:{PATH}"
BACKEND_TEMPLATE = rf"nvml|sim:{PATH_TEMPLATE}"
MODEL = r"[A-Za-z0-9][A-Za-z0-9 _.+\-]*"
PROFILE = r"[0-9]+g(?:\.[0-9]+gb)?(?:\+me)?"
CPULIST = r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*"
SLURM_TYPE = r"[a-z0-9][a-z0-9_.\-]*"
OPTION_KEY = r"[A-Za-z][A-Za-z0-9]*"
OPTION_VALUE = r"[A-Za-z0-9_.:/@%+=,\[\]\-]+"

# NodeName/PartitionName parameters slurmpool writes itself.
NODE_KEYS_OWNED = ("NodeName", "CPUs", "RealMemory", "Gres")
PARTITION_KEYS_OWNED = ("PartitionName", "Nodes", "Default")


def _options(owned: tuple[str, ...], what: str) -> MapOf:
    return MapOf(
        value=Str(
            expected="a slurm.conf value without spaces, quotes or '#'",
            pattern=OPTION_VALUE,
            numbers_ok=True,
        ),
        key_pattern=OPTION_KEY,
        key_expected="a slurm.conf parameter name (letters and digits)",
        forbidden_keys=owned,
        description=f"extra {what} parameters written as Key=Value",
    )


GPU = Obj(
    description="GPUs of every node of the group, by NVML index",
    discriminator="mode",
    exactly_one=[("index", "indices", "count")],
    fields=[
        Field(
            "model",
            Str(
                expected="a GPU model name (see `slurmpool models`)",
                pattern=MODEL,
                description="catalogue name, alias or NVML name",
            ),
            required=True,
        ),
        Field("index", Int(minimum=0, description="one GPU by NVML index")),
        Field(
            "indices",
            Seq(Int(minimum=0), min_items=1, description="several GPUs by NVML index"),
        ),
        Field(
            "count",
            Int(
                minimum=1,
                description="this many GPUs, taking the lowest indices no entry names explicitly",
            ),
        ),
        Field("mode", Str(enum=MODES, description="how the GPUs are exposed"), required=True),
        Field(
            "vfio",
            Bool(description="the GPU may be rebound to vfio-pci for a VM job"),
            default=False,
            when=(GpuMode.PASSTHROUGH,),
        ),
        Field(
            "layout",
            Seq(
                Str(expected="a MIG profile name like 3g.40gb or 3g", pattern=PROFILE),
                min_items=1,
                description="the fixed MIG instances of each GPU",
            ),
            when=(GpuMode.MIG_STATIC,),
            required_when=(GpuMode.MIG_STATIC,),
        ),
        Field(
            "shares",
            Int(minimum=1, description="time-sliced shares per GPU (1 vgpu unit = 1 share)"),
            when=(GpuMode.SHARED,),
            required_when=(GpuMode.SHARED,),
        ),
        Field(
            "mps",
            Bool(description="enforce shares with MPS limits"),
            default=False,
            when=(GpuMode.SHARED,),
        ),
        Field(
            "cores",
            Str(
                expected="a CPU list like 0-15,32-47",
                pattern=CPULIST,
                description="gres.conf Cores= (NUMA affinity) when no inventory gives it",
            ),
        ),
        Field(
            "slurm_type",
            Str(
                expected="a lowercase Slurm GRES type",
                pattern=SLURM_TYPE,
                description="override the gpu type name derived from the model (a100)",
            ),
            when=(GpuMode.PASSTHROUGH, GpuMode.MIG_STATIC),
        ),
    ],
)

NODE_GROUP = Obj(
    description="nodes with identical hardware",
    fields=[
        Field("name", Str(expected="a name (letters, digits, _ . -)", pattern=NAME), required=True),
        Field(
            "nodes",
            Str(
                expected="a Slurm hostlist like gpu[001-064]",
                pattern=HOSTLIST,
                description="hostlist expression",
            ),
            required=True,
        ),
        Field("cpus", Int(minimum=1, description="NodeName CPUs="), required=True),
        Field("real_memory_mib", Int(minimum=1, description="NodeName RealMemory="), required=True),
        Field("slurm_node_options", _options(NODE_KEYS_OWNED, "NodeName")),
        Field(
            "vgpu_unit",
            Str(
                enum=VGPU_UNITS,
                description="documents the unit; must match the pooled mode (mig: "
                "compute-slice, shared: share)",
            ),
        ),
        Field("gpus", Seq(GPU, min_items=1), required=True),
    ],
)

PARTITION = Obj(
    description="a Slurm partition",
    exactly_one=[("node_groups", "nodes")],
    fields=[
        Field("name", Str(expected="a name (letters, digits, _ . -)", pattern=NAME), required=True),
        Field(
            "node_groups",
            Seq(Str(expected="a node group name", pattern=NAME), min_items=1),
        ),
        Field(
            "nodes",
            Str(expected="a Slurm hostlist", pattern=HOSTLIST, description="hostlist expression"),
        ),
        Field("default", Bool(description="Default=YES"), default=False),
        Field("options", _options(PARTITION_KEYS_OWNED, "PartitionName")),
    ],
)


def _path(description: str, default: str) -> Field:
    return Field(
        description.split(" ")[0],
        Str(
            expected="an absolute path without spaces or quotes",
            pattern=PATH,
            substitute=True,
            schema_pattern=PATH_TEMPLATE,
            description=" ".join(description.split(" ")[1:]),
        ),
        default=default,
    )


PATHS = Obj(
    description="filesystem locations; strings may use ${name} variables",
    fields=[
        _path("state_dir node-local state (SQLite, outbox)", "/var/lib/slurmpool"),
        _path("hooks_dir where the prolog/epilog wrappers are installed", "/usr/libexec/slurmpool"),
        _path("devices_root directory of nvidiaN and nvidia-caps/", "/dev"),
        _path("mig_minors the driver's mig-minors file", "/proc/driver/nvidia-caps/mig-minors"),
        _path("slurm_config_dir where slurm.conf and job_submit.lua live", "/etc/slurm"),
        _path("run_dir per-job files the task prolog reads (as the job's user)", "/run/slurmpool"),
        _path("sysfs_root sysfs, for vfio-pci rebinding", "/sys"),
        _path("vfio_dev_dir directory of the vfio group device files", "/dev/vfio"),
        _path("proc_root procfs, for process to job attribution", "/proc"),
        Field(
            "job_cgroup_root",
            Str(
                expected="an absolute path without spaces or quotes (%n: the node name)",
                pattern=rf"/(?:{_PATH_CHAR}|%n)*",
                substitute=True,
                schema_pattern=rf"(?:{_PATH_CHAR}|%n|{VAR_PATTERN})+",
                description="Slurm's cgroup v1 devices directory for the node's jobs "
                "(slurm_%n where several slurmd share a host); the prolog fences MIG "
                "capability devices below it",
            ),
            default="/sys/fs/cgroup/devices/slurm",
        ),
        _path(
            "mps_control the nvidia-cuda-mps-control program (shared GPUs with mps: true)",
            "/usr/bin/nvidia-cuda-mps-control",
        ),
    ],
)

POOLING = Obj(
    description="what the job hooks do on the node",
    fields=[
        Field(
            "stray_processes",
            Str(
                enum=("kill", "refuse"),
                description="processes an earlier job left on a whole GPU: kill them, or "
                "refuse the GPU (the job is requeued)",
            ),
            default="kill",
        ),
        Field(
            "allow_disable_mig",
            Bool(description="may the prolog turn MIG off on an idle passthrough GPU"),
            default=False,
        ),
        Field(
            "destroy_retry_s",
            Int(minimum=1, maximum=600, description="seconds the epilog retries a busy instance"),
            default=20,
        ),
        Field(
            "kill_grace_s",
            Int(minimum=0, maximum=120, description="seconds from SIGTERM to SIGKILL"),
            default=3,
        ),
    ],
)


def _limit(name: str, default: int) -> Field:
    return Field(name, Int(minimum=1, maximum=3600, description="seconds"), default=default)


HOOKS = Obj(
    description="time limits each hook enforces on itself",
    fields=[
        _limit("prolog_timeout_s", 30),
        _limit("task_prolog_timeout_s", 10),
        _limit("epilog_timeout_s", 60),
        _limit("epilog_slurmctld_timeout_s", 30),
    ],
)

POLICY = Obj(
    description="slurmpool pool policy",
    fields=[
        Field("version", Str(enum=(VERSION,), description="policy format version"), required=True),
        Field("cluster", Str(expected="a cluster name", pattern=NAME), required=True),
        Field(
            "gpu_backend",
            Str(
                expected="nvml or sim:<absolute directory>",
                pattern=BACKEND,
                substitute=True,
                schema_pattern=BACKEND_TEMPLATE,
                description="nvml, or sim:<dir> for the GPU simulator",
            ),
            default="nvml",
        ),
        Field(
            "accounting", Bool(description="write gres/gpu,gres/vgpu TRES accounting"), default=True
        ),
        Field(
            "slurm_version",
            Str(
                expected="MAJOR.MINOR like 22.05",
                pattern=r"[0-9]{2}\.[0-9]{2}",
                description=(
                    "the Slurm the config is for; by default the installed one (slurmd -V, "
                    "else scontrol -V) is detected by generate-config and install: set it to "
                    "stage a config for machines that run another Slurm"
                ),
            ),
        ),
        Field(
            "cgroup_plugin",
            Str(
                enum=("autodetect", "cgroup/v1", "cgroup/v2", "disabled"),
                description="cgroup.conf CgroupPlugin",
            ),
            default="autodetect",
        ),
        Field("paths", PATHS, default=PATHS.defaults()),
        Field("hooks", HOOKS, default=HOOKS.defaults()),
        Field("pooling", POOLING, default=POOLING.defaults()),
        Field("node_groups", Seq(NODE_GROUP, min_items=1), required=True),
        Field("partitions", Seq(PARTITION, min_items=1), required=True),
    ],
)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a v1 policy."""
    schema = POLICY.json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://slurmpool.invalid/schema/policy-v1.json",
        "title": "slurmpool policy v1",
        **schema,
    }
