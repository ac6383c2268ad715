"""The pool under churn (tests/integration/churn.py): a fixed seed here, random seeds for
as long as asked in ``make soak`` (SLURMPOOL_SOAK_S seconds; SLURMPOOL_SOAK_SEED to
replay a reported seed)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator

import pytest

from .acct import login_users
from .churn import Counts, Round, churn_round
from .conftest import Cluster

SEED = 20261205
USERS = ("sp-alice", "sp-bob", "sp-churn-cy")


@pytest.fixture(scope="module")
def users(cluster: Cluster) -> Iterator[tuple[str, ...]]:
    with login_users(cluster, USERS) as names:
        yield names


def test_churn_keeps_every_slice_and_summary_whole(
    cluster: Cluster, users: tuple[str, ...]
) -> None:
    counts = churn_round(cluster, Round(SEED, users))
    print(f"churn seed {SEED}: {counts.line()}")
    # The fixed seed exercises what the round is for (a changed plan must keep it so).
    assert counts.cancels and counts.requeues and counts.kills_struck, counts.line()
    assert counts.completed and counts.summaries_checked, counts.line()


def test_soak(cluster: Cluster, users: tuple[str, ...]) -> None:
    seconds = float(os.environ.get("SLURMPOOL_SOAK_S") or 0)
    if seconds <= 0:
        pytest.skip("a soak runs only when asked: make soak SOAK_S=1800")
    seed = int(os.environ.get("SLURMPOOL_SOAK_SEED") or random.SystemRandom().randrange(2**31))
    total = Counts()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        print(f"soak round seed {seed}", flush=True)
        total.add(churn_round(cluster, Round(seed, users)))
        print(f"soak after seed {seed}: {total.line()}", flush=True)
        seed += 1
    report = os.environ.get("SLURMPOOL_SOAK_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump(vars(total), f, indent=2)
    print(f"soak passed: {total.line()}")
