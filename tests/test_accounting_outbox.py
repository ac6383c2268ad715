"""The outbox is durable and the push stores, verifies, retries with backoff, never duplicates."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_slurmdbd import FakeDbd

from slurmpool.accounting import codec, outbox, summary
from slurmpool.accounting.outbox import OUTBOX
from slurmpool.accounting.push import (
    REWRITTEN,
    SETTLE_S,
    SETTLED,
    WAITING,
    WRITTEN,
    Backoff,
    push_pending,
)
from slurmpool.cli import main
from slurmpool.slurm.runner import Runner
from slurmpool.state.store import NodeStore

PART = {
    "user": "alice",
    "devices": [
        {"gpu": 0, "kind": "mig", "profile": "2g.20gb", "slices": 2, "of": 7, "util_mean": None}
    ],
    "carved": [],
}


def _runner(fake: FakeDbd) -> Runner:
    return Runner(env={"PATH": str(fake.bin)}, search_path=(str(fake.bin),), timeout=20)


def _enqueue_and_exit(path: str) -> None:
    with NodeStore(path, (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART)
    os._exit(0)  # no clean shutdown: the row must already be on disk


def test_outbox_survives_a_process_that_dies(tmp_path: Path) -> None:
    db = tmp_path / "sbx1.sqlite"
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_enqueue_and_exit, args=(str(db),))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    with NodeStore(db, (OUTBOX,)) as store:
        (item,) = outbox.pending(store)
    assert (item.job_id, item.node, item.part) == ("42", "sbx1", PART)


def _outcomes(store: NodeStore, fake: FakeDbd, t: float) -> list[tuple[str, str]]:
    return [(r.job_id, r.outcome) for r in push_pending(store, _runner(fake), now=lambda: t)]


def test_push_stores_verifies_and_removes_after_a_second_check(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42", 'Site "note"')
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=1000.0)
        (r,) = push_pending(store, _runner(fake), now=lambda: 1000.0)
        assert r.stored and r.outcome == WRITTEN, r.error
        (item,) = outbox.pending(store)  # kept: checked again after the settle time
        assert item.written_at == 1000.0 and item.next_attempt_at == 1000.0 + SETTLE_S
        assert _outcomes(store, fake, 1000.0 + SETTLE_S - 1) == []
        assert _outcomes(store, fake, 1000.0 + SETTLE_S) == [("42", SETTLED)]
        assert outbox.count(store) == 0
    stored = fake.jobs()["42"]
    assert stored.startswith("site `note` | sp1:")  # lowercased by the (fake) 22.05
    assert codec.decode(stored)["nodes"]["sbx1"] == PART


def test_dead_slurmdbd_keeps_the_summary_and_backs_off(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42")
    fake.set_down(True)
    clock = [1000.0]
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=clock[0])
        outbox.put(store, "43", "sbx1", "pool", PART, now=clock[0])
        results = push_pending(store, _runner(fake), now=lambda: clock[0], backoff=Backoff(5, 60))
        assert [r.kind for r in results] == ["SlurmdbdUnavailable"] * 2
        assert "Connection refused" in results[0].error
        assert len(fake.calls()) == 0  # the fake logs only calls that reached it
        items = outbox.pending(store)
        assert [i.attempts for i in items] == [1, 1]
        assert all(i.next_attempt_at == 1005.0 for i in items)
        assert push_pending(store, _runner(fake), now=lambda: 1001.0) == []  # not due yet
        clock[0] = 1006.0
        push_pending(store, _runner(fake), now=lambda: clock[0], backoff=Backoff(5, 60))
        assert [i.next_attempt_at for i in outbox.pending(store)] == [1016.0, 1016.0]
        fake.set_down(False)
        clock[0] = 1020.0
        results = push_pending(store, _runner(fake), now=lambda: clock[0])
        assert [(r.job_id, r.stored, r.kind) for r in results] == [
            ("42", True, ""),
            ("43", False, "JobRecordMissing"),
        ]
        assert "no record in accounting yet" in results[1].error
        fake.add_job("43")  # slurmctld sent the record
        clock[0] = 1100.0
        (r,) = push_pending(store, _runner(fake), now=lambda: clock[0])
        assert r.stored
        assert _outcomes(store, fake, 1300.0) == [("42", SETTLED), ("43", SETTLED)]
        assert outbox.count(store) == 0
    assert codec.decode(fake.jobs()["43"])["job"] == "43"


def test_pushing_twice_and_two_nodes_never_duplicate(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42")
    with (
        NodeStore(tmp_path / "a.sqlite", (OUTBOX,)) as a,
        NodeStore(tmp_path / "b.sqlite", (OUTBOX,)) as b,
    ):
        outbox.put(a, "42", "sbx1", "pool", PART)
        outbox.put(b, "42", "sbx2", "pool", PART)
        assert push_pending(a, _runner(fake))[0].stored
        assert push_pending(b, _runner(fake))[0].stored
        outbox.put(a, "42", "sbx1", "pool", PART)  # an epilog rerun
        assert push_pending(a, _runner(fake))[0].stored
    doc = codec.decode(fake.jobs()["42"])
    assert sorted(doc["nodes"]) == ["sbx1", "sbx2"]
    assert fake.jobs()["42"].count("sp1:") == 1


def test_a_replaced_summary_is_not_deleted_by_an_older_push(tmp_path: Path) -> None:
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=1.0)
        (old,) = outbox.pending(store)
        outbox.put(store, "42", "sbx1", "pool", {**PART, "user": "alice2"}, now=2.0)
        assert not outbox.delete_if_unchanged(store, old)
        assert outbox.pending(store)[0].part["user"] == "alice2"


@pytest.mark.parametrize("down", [False, True], ids=["up", "down"])
def test_flush_command(tmp_path: Path, down: bool) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42")
    fake.set_down(down)
    db = tmp_path / "sbx1.sqlite"
    with NodeStore(db, (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=1e12)  # not due for a long time
    conf = tmp_path / "node-config.json"
    conf.write_text((Path(__file__).parent / "golden/sandbox/node-config.json").read_text())
    res = CliRunner().invoke(
        main,
        [
            "accounting",
            "flush",
            "--node-config",
            str(conf),
            "--node",
            "sbx1",
            "--state-db",
            str(db),
        ],
        env={"PATH": str(fake.bin)},
    )
    if down:
        assert res.exit_code == 1 and "slurmdbd is not reachable" in res.output
        assert "1 still in the outbox" in res.output
    else:
        assert res.exit_code == 0, res.output
        assert "stored   job 42 (sbx1): checked again in 90 s" in res.output
        assert "1 stored, 1 still in the outbox (1 stored, to be checked again)" in res.output


@pytest.mark.parametrize("command", ["status", "flush"])
def test_a_path_without_an_outbox_is_refused_not_created(tmp_path: Path, command: str) -> None:
    conf = tmp_path / "node-config.json"
    conf.write_text((Path(__file__).parent / "golden/sandbox/node-config.json").read_text())
    db = tmp_path / "wrong" / "sbx1.sqlite"
    db.parent.mkdir()
    args = ["accounting", command, "--node", "sbx1", "--state-db", str(db)]
    # The node config from the environment, as `slurmpool sandbox exec` sets it.
    res = CliRunner().invoke(main, args, env={"SLURMPOOL_NODE_CONFIG": str(conf)})
    assert res.exit_code == 2, res.output
    assert f"no node state store at {db} (node sbx1, from {conf})" in res.output
    assert "slurmpool sandbox exec NODE" in res.output
    assert not db.exists()  # nothing created, no "outbox empty" claimed
    assert "outbox empty" not in res.output


def test_two_runs_of_a_requeued_job_on_one_node_are_two_summaries(tmp_path: Path) -> None:
    """Run 1 on the node while run 0's summary still waits (slurmdbd down): neither
    replaces the other, in the outbox or in the job's AdminComment."""
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42")
    first, second = {**PART, "run": 0}, {**PART, "run": 1, "user": "alice"}
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", first, now=1.0)
        outbox.put(store, "42", "sbx1", "pool", second, now=2.0)
        outbox.put(store, "42", "sbx1", "pool", second, now=3.0)  # its epilog again
        assert [(i.run, i.part) for i in outbox.pending(store)] == [(0, first), (1, second)]
        assert _outcomes(store, fake, 10.0) == [("42", WRITTEN)] * 2
        assert _outcomes(store, fake, 10.0 + SETTLE_S) == [("42", SETTLED)] * 2
        assert outbox.count(store) == 0
    doc = codec.decode(fake.jobs()["42"])
    assert doc["nodes"] == {"sbx1": first, "sbx1@1": second}


def test_an_outbox_from_before_runs_is_migrated_with_its_rows(tmp_path: Path) -> None:
    from slurmpool.state.db import Component, StateDB

    path = tmp_path / "n.sqlite"
    old = Component(OUTBOX.name, OUTBOX.migrations[:1])
    with StateDB(path, (old,)) as db, db.transaction() as conn:
        conn.execute(
            "INSERT INTO accounting_outbox (job_id, node, cluster, part, created_at, "
            "next_attempt_at) VALUES ('7', 'sbx1', 'pool', '{\"run\": 2}', 1, 1)"
        )
    with NodeStore(path, (OUTBOX,)) as store:
        assert store.schema_version(OUTBOX.name) == OUTBOX.version == 4
        (item,) = outbox.pending(store)
        assert (item.job_id, item.node, item.run, item.part) == ("7", "sbx1", 0, {"run": 2})
        assert item.written_at is None
        assert outbox.made(store, "7") == {0: 1.0}  # monitord will not make it again
        outbox.put(store, "7", "sbx1", "pool", {"run": 3})
        assert outbox.count(store) == 2


def test_two_nodes_racing_on_one_job_both_end_up_stored(tmp_path: Path) -> None:
    """Node B read the AdminComment before node A wrote and wrote after A's verify:
    A's part is gone.  A's second check finds that and writes it again."""
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42")
    part_b = {**PART, "user": "bob"}
    with NodeStore(tmp_path / "a.sqlite", (OUTBOX,)) as a:
        outbox.put(a, "42", "sbx1", "pool", PART, now=0.0)
        assert _outcomes(a, fake, 1.0) == [("42", WRITTEN)]
        stale = summary.merge(None, "42", "pool", "sbx2", part_b)  # B read before A wrote
        fake.set_comment("42", codec.encode(stale, summary.index_of(stale)))
        assert sorted(codec.decode(fake.jobs()["42"])["nodes"]) == ["sbx2"]
        assert _outcomes(a, fake, 1.0 + SETTLE_S) == [("42", REWRITTEN)]
        assert outbox.count(a) == 1  # written again: checked again once more
        assert _outcomes(a, fake, 2.0 + 2 * SETTLE_S) == [("42", SETTLED)]
        assert outbox.count(a) == 0
    doc = codec.decode(fake.jobs()["42"])
    assert doc["nodes"] == {"sbx1": PART, "sbx2": part_b}


def test_a_requeued_job_waits_and_its_requeue_note_and_summary_both_stay(
    tmp_path: Path,
) -> None:
    """Run 0 ended in a requeue: its summary waits until the job's last run ends (were it
    written now, slurmctld's final record would carry only the note and replace it)."""
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42", state="REQUEUED")
    fake.set_state("42", "PENDING")
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", {**PART, "run": 0}, now=0.0)
        assert _outcomes(store, fake, 1.0) == [("42", WAITING)]
        (item,) = outbox.pending(store)
        assert item.attempts == 0 and "is PENDING in slurmctld (requeued" in item.last_error
        fake.add_job("42", state="RUNNING", end="Unknown")  # run 1 started
        fake.set_state("42", "RUNNING", "sbx1")
        # sacct may show the end before slurmctld's record of a requeue lands
        fake.add_job("42", state="COMPLETED")
        assert _outcomes(store, fake, 100.0) == [("42", WAITING)]
        assert "is RUNNING in slurmctld" in outbox.pending(store)[0].last_error
        assert not any(c.startswith("-i modify") for c in fake.calls())  # nothing written
        outbox.put(store, "42", "sbx1", "pool", {**PART, "run": 1}, now=200.0)
        # the last run ends; slurmctld's final record carries the prolog's note
        fake.set_state("42", "COMPLETED", "sbx1")
        fake.add_job("42", "requeued 1x: no room for 2g.20gb on sbx1")
        assert _outcomes(store, fake, 300.0) == [("42", WRITTEN)] * 2
        assert _outcomes(store, fake, 300.0 + SETTLE_S) == [("42", SETTLED)] * 2
    stored = fake.jobs()["42"]
    assert stored.startswith("requeued 1x: no room for 2g.20gb on sbx1 | sp1:")
    assert sorted(codec.decode(stored)["nodes"]) == ["sbx1", "sbx1@1"]


@pytest.mark.parametrize("live", ["CANCELLED", None])
def test_a_job_cancelled_while_its_requeue_completed_is_ended_at_its_requeue_record(
    tmp_path: Path, live: str | None
) -> None:
    """Slurm writes no record after the requeue's for a job cancelled while the
    requeue was completing: once slurmctld has ended the job (or forgotten it), that
    record is the last, and the summary goes there."""
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42", "requeued 1x: no room", state="REQUEUED")
    fake.set_state("42", "PENDING")
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=0.0)
        assert _outcomes(store, fake, 1.0) == [("42", WAITING)]  # it may still run again
        if live is None:
            fake.set_live("42", None)
        else:
            fake.set_state("42", live)
        assert _outcomes(store, fake, 40.0) == [("42", WRITTEN)]
        assert _outcomes(store, fake, 40.0 + SETTLE_S) == [("42", SETTLED)]
    assert fake.jobs()["42"].startswith("requeued 1x: no room | sp1:")


def test_a_requeue_record_without_its_end_is_not_final(tmp_path: Path) -> None:
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42", state="REQUEUED", end="Unknown")
    fake.set_state("42", "CANCELLED")
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=0.0)
        assert _outcomes(store, fake, 1.0) == [("42", WAITING)]


def test_a_record_that_lands_after_the_write_is_caught_by_the_second_check(
    tmp_path: Path,
) -> None:
    """The final record is pushed only once sacct shows the End; a record that still
    replaces the AdminComment (an admin's requeue) is caught within the settle time."""
    fake = FakeDbd(tmp_path / "dbd")
    fake.add_job("42", state="COMPLETED", end="Unknown")  # slurmdbd came back: not final
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        outbox.put(store, "42", "sbx1", "pool", PART, now=0.0)
        assert _outcomes(store, fake, 1.0) == [("42", WAITING)]
        fake.add_job("42", "site note")
        assert _outcomes(store, fake, 40.0) == [("42", WRITTEN)]
        fake.set_comment("42", "site note")  # a late record without the summary
        assert _outcomes(store, fake, 40.0 + SETTLE_S) == [("42", REWRITTEN)]
        assert _outcomes(store, fake, 41.0 + 2 * SETTLE_S) == [("42", SETTLED)]
    stored = fake.jobs()["42"]
    assert stored.startswith("site note | sp1:") and stored.count("sp1:") == 1


def test_a_summary_is_committed_with_a_full_sync(tmp_path: Path) -> None:
    """The outbox commit is fsynced (synchronous=FULL), and only it: the hooks'
    other transactions keep NORMAL."""
    with NodeStore(tmp_path / "n.sqlite", (OUTBOX,)) as store:
        seen: list[str] = []
        store.conn.set_trace_callback(seen.append)

        def level() -> int:
            return int(store.conn.execute("PRAGMA synchronous").fetchone()[0])

        outbox.put(store, "42", "sbx1", "pool", PART)
        store.conn.set_trace_callback(None)
        full = seen.index("PRAGMA synchronous=FULL")
        begin, commit = seen.index("BEGIN IMMEDIATE"), seen.index("COMMIT")
        assert full < begin < commit < seen.index("PRAGMA synchronous=NORMAL")
        assert any("INSERT INTO accounting_outbox" in s for s in seen[begin:commit])
        assert level() == 1  # NORMAL again
