"""A configless site: slurmctld serves the configuration, each slurmd fetches it.

The slurmds run with --conf-server and no slurm.conf of their own; slurmpool.conf
reaches them because install includes it by a relative name (slurmctld ships no
other: tests/data/probe-configless.sh), and a vgpu job runs as on any site.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmpool.sandbox.cluster import Sandbox

from .conftest import Cluster

pytestmark = [pytest.mark.own_sandbox, pytest.mark.sandbox_configless]


def test_a_configless_site_runs_a_vgpu_job(own_sandbox: Sandbox) -> None:
    cluster = Cluster.of_own_sandbox(own_sandbox, "work")
    st = cluster.state
    conf = Path(st.slurm_conf).read_text()
    assert "SlurmctldParameters=enable_configless" in conf
    assert "\nInclude slurmpool.conf #slurmpool-include\n" in conf
    for node in st.nodes:
        slurmd = next(d for d in st.daemons if d.name == f"slurmd-{node}")
        assert "--conf-server" in slurmd.argv
        # What the slurmd fetched and runs on: slurmpool.conf came with slurm.conf.
        cache = own_sandbox.layout.spool / node / "conf-cache"
        assert {"slurm.conf", "slurmpool.conf", "gres.conf", "cgroup.conf"} <= {
            p.name for p in cache.iterdir()
        }
    out = cluster.workdir / "vgpu.out"
    job = cluster.submit(
        "--gres=vgpu:2", "-o", str(out), "--wrap", "echo $SLURMPOOL_PROFILE", user="sp-bob"
    )
    assert cluster.wait(job) == "COMPLETED"
    assert out.read_text().strip() == "2g.20gb"  # the prolog carved the job's instance
