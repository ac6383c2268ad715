"""What a MIG-pooled node tells slurmctld it can carve (slurmpool.pooling.publish): the
counts, the note under the node lock, the send after it (generations, the site's own
GRES, failures and the hook's deadline).  slurmctld is the fake scontrol of
pooling_env, which keeps the node's Gres as updates leave it."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from pooling_env import (
    A100,
    EMPTY_NODE_GRES,
    NODE,
    NODE_READ,
    ListLog,
    Pool,
    allocation,
    make_pool,
)

from slurmpool.catalogue import default_catalogue
from slurmpool.modes import GpuMode
from slurmpool.placement import GpuOccupancy, PlacedInstance, Placement
from slurmpool.pooling import publish
from slurmpool.pooling.deadline import Deadline
from slurmpool.pooling.node import Node
from slurmpool.pooling.reconcile import BOOT_KEY
from slurmpool.pooling.slurmjob import SlurmJobs
from slurmpool.slurm.nodegres import READ_FORMAT

SIZES = (1, 2, 3, 4, 7)


@pytest.fixture
def pool(tmp_path: Path) -> Pool:
    return make_pool(tmp_path)


def _gpu(index: int, *placed: tuple[str, int, int]) -> GpuOccupancy:
    model = default_catalogue().get(A100)
    return GpuOccupancy(
        index, model, tuple(PlacedInstance(p, Placement(s, n)) for p, s, n in placed)
    )


def _mig(index: int, profile: str, start: int, size: int, state: str = "active") -> object:
    return allocation(
        mode=GpuMode.MIG,
        gpu_index=index,
        profile=profile,
        placement_start=start,
        placement_size=size,
        shares=None,
        state=state,
    )


# -- the counts, pure --------------------------------------------------------------


def test_an_empty_node_counts_what_generate_config_writes() -> None:
    got = publish.counts([_gpu(0), _gpu(1)], [], SIZES)
    assert got == {"s1": 14, "s2": 6, "s3": 4, "s4": 2, "s7": 2, "next": 1, "pad": 14}


def test_a_held_instance_counts_as_its_size_and_blocks_the_others() -> None:
    occ = [_gpu(0, ("4g.40gb", 0, 4)), _gpu(1)]
    got = publish.counts(occ, [_mig(0, "4g.40gb", 0, 4)], SIZES)
    # s4: the job's own plus GPU 1's; s7: only GPU 1; s1: 3 left on GPU 0 and 7 on GPU 1;
    # next: the one job and one more.
    assert got == {"s1": 10, "s2": 4, "s3": 3, "s4": 2, "s7": 1, "next": 2, "pad": 21}


def test_an_instance_being_released_or_unrecorded_only_blocks() -> None:
    occ = [_gpu(0, ("4g.40gb", 0, 4)), _gpu(1, ("7g.80gb", 0, 8))]
    releasing = _mig(0, "4g.40gb", 0, 4, state="releasing")
    # GPU 1's 7g has no record (an orphan): neither is something a Slurm job holds.
    got = publish.counts(occ, [releasing], SIZES)
    assert got == {"s1": 3, "s2": 1, "s3": 1, "s4": 0, "s7": 0, "next": 1, "pad": 37}


def test_next_counts_jobs_not_instances() -> None:
    # A vgpu:14 job holds two 7g instances; a second job holds a 1g being carved.
    occ = [_gpu(0, ("7g.80gb", 0, 8)), _gpu(1, ("7g.80gb", 0, 8))]
    both = [_mig(0, "7g.80gb", 0, 8), _mig(1, "7g.80gb", 0, 8)]
    assert publish.counts(occ, both, SIZES)["next"] == 2
    other = allocation(
        job_id="101",
        mode=GpuMode.MIG,
        gpu_index=0,
        profile="1g.10gb",
        placement_start=6,
        placement_size=1,
        shares=None,
        state="intent",
    )
    assert publish.counts(occ, [*both, other], SIZES)["next"] == 3


def test_an_intent_is_held_already() -> None:
    occ = [_gpu(0, ("1g.10gb", 6, 1)), _gpu(1)]
    got = publish.counts(occ, [_mig(0, "1g.10gb", 6, 1, state="intent")], SIZES)
    assert got["s1"] == 14  # the job's own 1g plus 13 free: what Slurm allocated stays
    assert got["next"] == 2  # its job, counted before its instance is carved


# -- note and send -------------------------------------------------------------------


def _node(pool: Pool, deadline_s: float = 30) -> Node:
    return _logged_node(pool, deadline_s)[0]


def _logged_node(pool: Pool, deadline_s: float = 30) -> tuple[Node, ListLog]:
    """The pool's node with a deadline of ``deadline_s``, and its event log."""
    log = ListLog()
    node = pool.node(log)
    node.deadline = Deadline(deadline_s)
    return node, log


def _slurm(pool: Pool) -> SlurmJobs:
    return SlurmJobs.from_env(pool.env("1"))


def _note(pool: Pool, node: Node, *placed: tuple[str, int, int]) -> bool:
    occ = [_gpu(0, *placed), _gpu(1)]
    store = node.store()
    with store.transaction():
        return publish.note(node, store, occ)


def _sent(pool: Pool) -> dict[str, object]:
    data: dict[str, object] = json.loads((pool.run_dir / publish.SENT_FILE).read_text())
    return data


def test_a_note_is_stored_once_per_change_with_the_next_generation(pool: Pool) -> None:
    node = _node(pool)
    assert _note(pool, node, ("7g.80gb", 0, 8))
    assert not _note(pool, node, ("7g.80gb", 0, 8))  # the same counts: no new note
    assert _note(pool, node)
    note = json.loads(node.store().meta(publish.NOTE_KEY) or "")
    assert note == {
        "gen": 2,
        "counts": {"s1": 14, "s2": 6, "s3": 4, "s4": 2, "s7": 2, "next": 1, "pad": 14},
    }
    node.close()


def test_send_sets_only_the_fit_counts_and_keeps_the_sites_gres(pool: Pool) -> None:
    pool.set_node_gres(
        "gpu:a100:1,nic:mlx:2,vgpu:14,vgpufit:s1:14,vgpufit:s2:6,"
        "vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2,license_x:3"
    )
    node = _node(pool)
    _note(pool, node, ("7g.80gb", 0, 8))
    publish.send(node, lambda: _slurm(pool))
    assert pool.node_gres() == (
        "gpu:a100:1,nic:mlx:2,vgpu:14,vgpufit:s1:7,vgpufit:s2:3,"
        "vgpufit:s3:2,vgpufit:s4:1,vgpufit:s7:1,license_x:3"
    )
    assert _sent(pool)["gen"] == 1
    node.close()


def test_a_late_sender_sends_the_newest_note_or_nothing(pool: Pool) -> None:
    node = _node(pool)
    _note(pool, node, ("7g.80gb", 0, 8))  # gen 1: one hook noted, and is slow to send
    _note(pool, node)  # gen 2: a later hook noted the node empty again
    publish.send(node, lambda: _slurm(pool))  # the first sender sends gen 2, not its own
    assert pool.node_gres() == EMPTY_NODE_GRES
    assert _sent(pool)["gen"] == 2
    before = list(pool.calls)
    publish.send(node, lambda: _slurm(pool))  # the later hook: sent already
    assert pool.calls == before
    node.close()


def test_no_update_when_slurmctld_has_the_counts_already(pool: Pool) -> None:
    node = _node(pool)
    _note(pool, node)  # an empty node: what slurmctld has from gres.conf
    publish.send(node, lambda: _slurm(pool))
    assert pool.calls == [f"sinfo -h -N -n {NODE} -O {READ_FORMAT}"]
    assert _sent(pool)["gen"] == 1
    node.close()


def test_a_failed_update_is_logged_and_sent_by_the_next_hook(pool: Pool) -> None:
    node, log = _logged_node(pool)
    _note(pool, node, ("7g.80gb", 0, 8))
    scontrol = pool.bin_dir / "scontrol"
    working = scontrol.read_text()
    scontrol.write_text(
        "#!/bin/sh\necho 'slurm_update error: Unable to contact slurmctld' >&2\nexit 1\n"
    )
    publish.send(node, lambda: _slurm(pool))  # never raises
    [fields] = [f for a, f in log.lines if a == "fit-publish-failed"]
    assert "Unable to contact slurmctld" in str(fields["error"])
    assert not (pool.run_dir / publish.SENT_FILE).read_text()
    scontrol.write_text(working)
    publish.send(node, lambda: _slurm(pool))
    assert "vgpufit:s7:1" in pool.node_gres()
    node.close()


def test_a_send_waits_its_turn_only_within_the_deadline(pool: Pool) -> None:
    node, log = _logged_node(pool, deadline_s=0.3)
    _note(pool, node, ("7g.80gb", 0, 8))
    pool.run_dir.mkdir(exist_ok=True)
    holder = os.open(pool.run_dir / publish.SENT_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another hook's send, stuck
    try:
        publish.send(node, lambda: _slurm(pool))
    finally:
        os.close(holder)
    assert "fit-publish-skipped" in log.actions()
    assert pool.calls == []
    node.close()


def test_an_unreadable_note_or_sent_record_is_sent_anew(pool: Pool) -> None:
    node = _node(pool)
    _note(pool, node, ("7g.80gb", 0, 8))
    pool.run_dir.mkdir(exist_ok=True)
    (pool.run_dir / publish.SENT_FILE).write_text('{"gen": "x"')
    publish.send(node, lambda: _slurm(pool))
    assert "vgpufit:s7:1" in pool.node_gres()
    node.close()


@pytest.mark.parametrize("mode", ["passthrough", "shared"])
def test_a_node_without_mig_pooling_publishes_nothing(tmp_path: Path, mode: str) -> None:
    unit = "share" if mode == "shared" else None
    pool = make_pool(tmp_path, gpus=((A100, mode, {}), (A100, "passthrough", {})), vgpu_unit=unit)
    node = pool.node(ListLog())
    assert not publish.fit_pooled(node)
    if mode == "shared":
        env = pool.env("300")
        pool.set_allocation("300", vgpu=1, gres="shard")
        env["SLURM_JOB_GPUS"] = "0"
        assert pool.hook("prolog", env)[0] == 0
        assert pool.hook("epilog", env)[0] == 0
        assert not any(c.startswith((NODE_READ, "update NodeName=")) for c in pool.calls)


# -- repair (monitord) -------------------------------------------------------------


# One GPU's slices held by a 7g (held, so counted), the other GPU free.
CARVED_7G = (
    "gpu:a100:1,vgpu:14,vgpufit:s1:7,vgpufit:s2:3,vgpufit:s3:2,vgpufit:s4:1,vgpufit:s7:2,"
    "vgpufit:next:2,vgpufit:pad:26"
)


def _carve_7g(pool: Pool) -> None:
    """A 7g instance held by job 100 (a hook carved it and published)."""
    env = pool.env("100", vgpu=7)
    assert pool.hook("prolog", env)[0] == 0
    assert pool.node_gres() == CARVED_7G


def test_a_repair_puts_back_what_a_registration_took(pool: Pool) -> None:
    _carve_7g(pool)
    pool.set_node_gres(EMPTY_NODE_GRES)  # slurmd registered: gres.conf's counts again
    node, log = _logged_node(pool)
    pool.clear_calls()
    assert publish.repair(node, lambda: _slurm(pool))
    assert pool.node_gres() == CARVED_7G
    [fields] = [f for a, f in log.lines if a == "fit-repaired"]
    assert fields["slurmctld_had"] == "next:1,pad:14,s1:14,s2:6,s3:4,s4:2,s7:2"
    # In step now: the next repair costs one read and sends nothing.
    pool.clear_calls()
    assert not publish.repair(node, lambda: _slurm(pool))
    assert pool.calls == [f"sinfo -h -N -n {NODE} -O {READ_FORMAT}"]
    node.close()


def test_a_repair_sends_a_note_no_hook_sent(pool: Pool) -> None:
    # A hook killed between its note and its send: the note is there, unsent.
    node = _node(pool)
    _note(pool, node, ("7g.80gb", 0, 8))
    assert not (pool.run_dir / publish.SENT_FILE).exists()
    # The repair notes from what NVML lists (nothing: the instance of the note is not
    # there), so it sends the node empty, as it is, with the next generation.
    assert not publish.repair(node, lambda: _slurm(pool))
    assert pool.node_gres() == EMPTY_NODE_GRES
    assert _sent(pool)["gen"] == 2
    node.close()


def test_a_repair_that_cannot_reach_slurmctld_fails_quietly(pool: Pool) -> None:
    _carve_7g(pool)
    pool.set_node_gres(EMPTY_NODE_GRES)
    (pool.bin_dir / "sinfo").write_text(
        "#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    node, log = _logged_node(pool)
    assert not publish.repair(node, lambda: _slurm(pool))
    [fields] = [f for a, f in log.lines if a == "fit-publish-failed"]
    assert "Unable to contact slurm controller" in str(fields["error"])
    assert pool.node_gres() == EMPTY_NODE_GRES
    node.close()


def test_a_repair_after_a_reboot_counts_no_job_the_boot_ended(pool: Pool) -> None:
    _carve_7g(pool)
    with pool.backend() as b:  # a reboot: the instance is gone, its record stays
        [inst] = b.instances(0) or b.instances(1)
        b.destroy_instance(0 if b.instances(0) else 1, inst.gi_id)
    with pool.store() as store, store.transaction():
        store.set_meta(BOOT_KEY, "an-earlier-boot")
    pool.set_node_gres(EMPTY_NODE_GRES)  # the rebooted slurmd registered
    node, log = _logged_node(pool)
    assert not publish.repair(node, lambda: _slurm(pool))  # slurmctld has it right
    assert pool.node_gres() == EMPTY_NODE_GRES
    assert "node-rebooted" in log.actions()
    with pool.store() as store:
        assert store.live() == []
    node.close()


def test_a_node_whose_counts_were_all_zero_publishes_them_again(pool: Pool) -> None:
    # Every slice blocked by an instance no job holds (being given back, or an orphan):
    # the node publishes 0 of each size, and the one job it may be sent.
    with pool.backend() as b:
        gis = [b.create_instance(g, "7g.80gb", Placement(0, 8)).gi_id for g in (0, 1)]
    node = _node(pool)
    publish.publish_now(node, lambda: _slurm(pool))
    assert pool.node_gres() == (
        "gpu:a100:1,vgpu:14,vgpufit:s1:0,vgpufit:s2:0,vgpufit:s3:0,vgpufit:s4:0,vgpufit:s7:0,"
        "vgpufit:next:1,vgpufit:pad:42"
    )
    # slurmctld lists no vgpufit at all while its counts are all 0 (a node config from
    # before vgpufit:next; tests/data/probe-fit-zero.sh; the fake scontrol does the same).
    pool.set_node_gres("gpu:a100:1,vgpu:14")
    with pool.backend() as b:
        for g, gi in zip((0, 1), gis, strict=True):
            b.destroy_instance(g, gi)
    publish.publish_now(node, lambda: _slurm(pool))  # the counts, and their types, again
    assert pool.node_gres() == (
        "gpu:a100:1,vgpu:14,vgpufit:next:1,vgpufit:pad:14,vgpufit:s1:14,vgpufit:s2:6,"
        "vgpufit:s3:4,vgpufit:s4:2,vgpufit:s7:2"
    )
    node.close()
