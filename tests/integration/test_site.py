"""The sandbox is a site that ran Slurm before slurmpool (:mod:`slurmpool.sandbox.site`):
after ``install --controller`` and ``install --node``, every setting of its own is still
in force, as Slurm itself reports it (``scontrol show config``, ``scontrol show node``,
``slurmd -G``), not only as its files read."""

from __future__ import annotations

from polling import poll

from slurmpool.sandbox.cluster import host_fences_devices
from slurmpool.sandbox.site import (
    ACCOUNT_RULE,
    ALLOWED_RAM_SPACE,
    LICENSE,
    LICENSE_COUNT,
    SITE_FEATURE,
    SITE_GPU_TYPE,
    SITE_NODE,
    SITE_SHARDS,
)
from slurmpool.slurm.parse import parse_nodes

from .conftest import Cluster


def _config(cluster: Cluster) -> dict[str, str]:
    """``scontrol show config``, key -> value (slurm.conf and cgroup.conf alike)."""
    out = cluster.slurm.run("scontrol", "show", "config", timeout=15).stdout
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            config[key.strip()] = value.strip()
    return config


def test_the_sites_settings_are_in_force(cluster: Cluster) -> None:
    config = _config(cluster)
    assert config["Licenses"] == f"{LICENSE}:{LICENSE_COUNT}"
    tres = config["AccountingStorageTRES"].split(",")
    assert {"gres/gpu", f"license/{LICENSE}", "gres/vgpu"} <= set(tres)
    assert config["GresTypes"].split(",")[:2] == ["gpu", "shard"]
    assert "vgpu" in config["GresTypes"].split(",")
    assert config["JobSubmitPlugins"] == "lua"
    # slurmctld runs as the site's SlurmUser (and reads job_submit.lua and the site's
    # job_submit.site.lua as that user: test_the_sites_lua_still_rules...).
    user = cluster.sandbox.slurm_user
    assert config["SlurmUser"] == f"{user.name}({user.uid})"
    assert config["SchedulerParameters"].startswith("sched_min_interval=100000,")
    # cgroup.conf: the site's lines, and the one slurmpool needs where it fences.
    assert config["AllowedRAMSpace"] == f"{ALLOWED_RAM_SPACE}.0%"
    assert config["ConstrainRAMSpace"] == "yes" and config["ConstrainCores"] == "yes"
    fenced = host_fences_devices()
    assert config["CgroupPlugin"] == ("cgroup/v1" if fenced else "autodetect")
    assert config["ConstrainDevices"] == ("yes" if fenced else "no")


def test_the_sites_node_lines_are_the_definitions(cluster: Cluster) -> None:
    """The site's own NodeName lines define the pooled nodes (its feature kept,
    slurmpool's GRES for their GPUs) and its GPU node slurmpool does not pool keeps
    its own GPU type and shards; slurmctld started without a duplicate definition."""
    pooled = parse_nodes(cluster.slurm.run("scontrol", "show", "node", timeout=15).stdout)
    for node in pooled:
        if node.name in cluster.state.nodes:
            record = node.record.as_dict()
            assert SITE_FEATURE in record["AvailableFeatures"].split(","), record
            assert "vgpu:14" in record["Gres"] and "shard" not in record["Gres"], record
    out = cluster.slurm.run("scontrol", "show", "node", "--future", SITE_NODE).stdout
    [site_node] = parse_nodes(out)
    assert site_node.record.as_dict()["Gres"] == f"gpu:{SITE_GPU_TYPE}:1,shard:{SITE_SHARDS}"
    log = (cluster.sandbox.layout.log_dir / "slurmctld.log").read_text()
    assert "uplicate" not in log


def test_slurmd_reads_the_sites_gres_conf_lines(cluster: Cluster) -> None:
    """``slurmd -G`` as the site's own GPU node (on a sandbox host, where its device
    file lies): the site's global AutoDetect=nvml is tried there (Debian's Slurm has
    no NVML library and goes on) and its gpu and shard lines register; a pooled node
    registers slurmpool's lines alone."""
    node = cluster.state.nodes[0]
    spool = cluster.sandbox.layout.spool / SITE_NODE  # slurmd -G wants it from 24.11
    spool.mkdir(exist_ok=True)
    res = cluster.on_node(node, ["slurmd", "-G", "-v", "-N", SITE_NODE])
    said = res.stdout + res.stderr
    assert res.returncode == 0, said
    assert "nvml" in said.lower(), said
    registered = [ln.split("Gres ", 1)[1] for ln in said.splitlines() if "Gres Name=" in ln]
    assert any(g.startswith(f"Name=gpu Type={SITE_GPU_TYPE} Count=1 ") for g in registered)
    assert any(g.startswith("Name=shard ") and f" Count={SITE_SHARDS} " in g for g in registered), (
        said
    )
    res = cluster.on_node(node, ["slurmd", "-G", "-N", node])
    said = res.stdout + res.stderr
    assert res.returncode == 0, said
    assert "Gres Name=vgpu Type=(null) Count=14" in said, said
    assert "Name=shard" not in said and SITE_GPU_TYPE not in said, said


def test_the_sites_lua_still_rules_and_its_licence_counts(cluster: Cluster) -> None:
    refused = cluster.sbatch("--wrap", "true", user="sp-bob", check=False, account=False)
    assert refused.returncode != 0 and ACCOUNT_RULE in refused.stderr, refused.stderr
    job = cluster.submit(
        f"--licenses={LICENSE}:2",
        "--gres=vgpu:2",
        "-o",
        "/dev/null",
        "--wrap",
        "true",
        user="sp-bob",
    )
    assert cluster.job(job)["Licenses"] == f"{LICENSE}:2"
    assert cluster.wait(job) == "COMPLETED"

    # AccountingStorageTRES still tracks the licence: accounting has what the job held.
    def alloc_tres() -> str:
        argv = ("sacct", "-n", "-X", "-P", "-j", str(job), "-o", "AllocTRES")
        return str(cluster.slurm.run(*argv, timeout=15).stdout.strip())

    tres = poll(f"job {job} in accounting", lambda: "license/" in alloc_tres() and alloc_tres())
    assert f"license/{LICENSE}=2" in tres.split(",") and "gres/vgpu=2" in tres.split(","), tres
