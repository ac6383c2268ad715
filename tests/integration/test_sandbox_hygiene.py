"""What one test leaves behind is found and undone before the next runs."""

from __future__ import annotations

from pathlib import Path

from slurmpool.gpu.select import open_backend
from slurmpool.placement import Placement
from slurmpool.sim.faults import plant

from .conftest import Cluster
from .hygiene import restore


def test_restore_finds_and_undoes_every_kind_of_leftover(cluster: Cluster) -> None:
    fault = Path(plant(cluster.sandbox.layout.host_dir("sbx1") / "sim", "after-create-ci"))
    held = cluster.submit("--hold", "-w", "sbx1", "--wrap", "true", user="sp-alice")
    running = cluster.submit("-w", "sbx1", "--wrap", "sleep 600", user="sp-bob")
    with open_backend(f"sim:{cluster.sandbox.layout.host_dir('sbx2') / 'sim'}") as backend:
        leaked = backend.create_instance(0, "1g.10gb", Placement(6, 1))
    cluster.slurm.run("scontrol", "update", "NodeName=sbx2", "State=DRAIN", "Reason=hygiene")

    found = restore(cluster)

    assert found.faults == [f"sbx1:{fault.name}"] and not fault.exists()
    assert {line.split("|")[0] for line in found.jobs} == {str(held), str(running)}
    assert found.instances == [f"sbx2 GPU 0 GI {leaked.gi_id} (1g.10gb)"]
    assert len(found.drained) == 1 and found.drained[0].startswith("sbx2 ")
    assert "hygiene" in found.describe() and fault.name in found.describe()
    assert cluster.wait(held) == "CANCELLED" and cluster.wait(running) == "CANCELLED"
    assert not restore(cluster)  # nothing left: the next test finds the sandbox as new
