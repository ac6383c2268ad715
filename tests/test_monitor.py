"""monitord's sampling, attribution, store writes and Prometheus endpoint, on the simulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurmpool.accounting.outbox import OUTBOX
from slurmpool.gpu.nvml import NvmlBackend
from slurmpool.gpu.select import open_backend
from slurmpool.monitor.attribution import Attribution, JobRef, PidResolver
from slurmpool.monitor.daemon import Monitor, MonitorSettings
from slurmpool.monitor.sampler import Sampler
from slurmpool.placement import Placement
from slurmpool.sim.node import create_node
from slurmpool.sim.processes import attach_process
from slurmpool.state.samples import SAMPLES, job_totals
from slurmpool.state.store import NewAllocation, NodeStore


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, NvmlBackend]]:
    """GPU 0: A100 MIG (no utilisation), GPU 1: H100 MIG (GPM), GPU 2: whole A100."""
    n = create_node(
        tmp_path / "sim",
        tmp_path / "dev",
        gpus=[("A100-SXM4-80GB", True), ("H100-SXM5-80GB", True), ("A100-SXM4-80GB", False)],
    )
    backend = open_backend(n.backend_spec)
    yield n.state_dir, backend
    backend.close()


def _carve(state: Path, b: NvmlBackend, pid: int) -> tuple[int, int]:
    a = b.create_instance(0, "2g", Placement(0, 2))
    h = b.create_instance(1, "2g", Placement(0, 2))
    attach_process(state, 0, a.gi_id, a.ci_id, pid=pid, used_mib=3000, util=60)
    attach_process(state, 1, h.gi_id, h.ci_id, pid=pid, used_mib=4000, util=60)
    attach_process(state, 2, pid=pid, used_mib=5000, util=60)
    return a.gi_id, h.gi_id


def test_pass_reports_na_on_ampere_mig_and_gpm_on_hopper(
    node: tuple[Path, NvmlBackend],
) -> None:
    state, b = node
    gi_a, gi_h = _carve(state, b, os.getpid())
    att = Attribution(
        instances={(0, gi_a): JobRef("11", "alice"), (1, gi_h): JobRef("12", "bob")},
        gpus={2: [JobRef("13", "carol")]},
    )
    s = Sampler(b, "n1")
    s.prime()
    time.sleep(0.15)
    rows = {(r.gpu_index, r.gi_id): r for r in s.sample(att).samples}
    ampere, hopper, whole = rows[(0, gi_a)], rows[(1, gi_h)], rows[(2, None)]
    assert (ampere.job_id, ampere.profile, ampere.util, ampere.util_source) == (
        "11",
        "2g.20gb",
        None,
        None,
    )  # not available, never zero
    assert ampere.mem_used_mib == 3000 and (ampere.slices, ampere.total_slices) == (2, 7)
    assert hopper.job_id == "12" and hopper.util_source == "gpm"
    assert hopper.util == pytest.approx(60, abs=2)
    assert (whole.job_id, whole.kind, whole.util, whole.util_source) == ("13", "gpu", 60.0, "nvml")
    assert whole.mem_used_mib == 5000 and whole.energy_mj and whole.power_mw
    assert rows[(0, None)].util is None and rows[(0, None)].job_id is None  # the MIG board


def test_pid_resolver_ignores_the_environment_a_process_sets() -> None:
    # SLURM_JOB_ID is the user's to set: a process outside any job stays unattributed.
    env = {**os.environ, "SLURM_JOB_ID": "555", "SLURM_JOB_USER": "dora"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        ref = PidResolver().resolve(child.pid)
        assert ref is None or ref.job_id != "555"
    finally:
        child.kill()
        child.wait()


def test_monitor_stores_exports_and_serves_jobs(
    node: tuple[Path, NvmlBackend], tmp_path: Path
) -> None:
    state, b = node
    gi_a, _gi_h = _carve(state, b, os.getpid())
    db = tmp_path / "n1.sqlite"
    with NodeStore(db, (SAMPLES, OUTBOX)) as store, store.transaction():
        aid = store.add_intent(
            NewAllocation("11", "alice", 1000, "mig", 0, "GPU-0", profile="2g.20gb")
        )
        store.mark_active(aid, gi_id=gi_a, ci_id=0)
    mon = Monitor(
        node="n1",
        store_path=db,
        sampler=Sampler(b, "n1"),
        settings=MonitorSettings(interval_s=0.2, port=0),
    )
    server = mon.start_server()
    assert server is not None
    try:
        for _ in range(3):
            mon.pass_once()
        with NodeStore(db, (SAMPLES, OUTBOX)) as store:
            (t,) = job_totals(store, "11")
        assert t.n == 3 and t.util_n == 0 and t.mem_max_mib == 3000
        base = f"http://127.0.0.1:{server.port}"
        text = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'slurmpool_mig_memory_used_bytes{account="",gi="' in text
        assert 'job="11"' in text and 'user="alice"' in text
        assert f'slurmpool_mig_utilization_available{{account="",gi="{gi_a}"' in text
        assert "slurmpool_gpu_utilization_percent{" in text  # the whole GPU
        view = json.loads(urllib.request.urlopen(f"{base}/jobs/11", timeout=5).read())
        assert view["part"]["devices"][0]["profile"] == "2g.20gb"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{base}/jobs/999", timeout=5)
        assert err.value.code == 404
    finally:
        mon.close()


def test_the_epilog_path_stays_light() -> None:
    code = (
        "import sys, slurmpool.accounting.enqueue, slurmpool.accounting.outbox\n"
        "heavy = [m for m in ('prometheus_client', 'matplotlib', 'click', 'jinja2', 'psutil',"
        " 'pynvml', 'yaml') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parent.parent,
    )
    assert out.stdout.strip() == ""
