"""The CI-sized chaos run (the full one is hack/chaos.py): 8 requests of every kind, 8
SIGKILLs of two operator replicas (four on each side of an API server restart), GKE
faults, a fixed seed. Fails on any orphan, duplicate or request that did not end as it
should. (The requests run together: fewer would not make it quicker.)"""

from __future__ import annotations

from pathlib import Path

from dws_workshop.sandbox.chaos import ChaosOptions, ChaosRun, clean


def test_no_orphan_no_duplicate_nothing_lost(tmp_path: Path) -> None:
    figures = ChaosRun(
        ChaosOptions(requests=8, kills=8, seed=7, kill_gap=(0.3, 2.0)), tmp_path
    ).run()
    print(figures)
    assert figures["kills"] == 8
    assert figures["complete"]
    assert set(figures["exits_by_code"]) <= {"3"}, figures["exits_by_code"]
    assert figures["apiserver_restarts"] == 1
    # Faults were injected at all: lost create answers, and UNAVAILABLE bursts.
    assert any(k.endswith(":DEADLINE_EXCEEDED") for k in figures["faults"]), figures["faults"]
    assert any(k.endswith(":UNAVAILABLE") for k in figures["faults"]), figures["faults"]
    assert figures["unexpected"] == {}
    assert figures["pools_created_twice"] == []
    assert figures["pools_created_per_request"] == {1: 8 - 1}  # one kind fails at its quota
    assert figures["phases"] == {"Failed/QuotaExceeded": 1, "Succeeded": 7}
    assert figures["nodes_left_after_finish"] == 0
    assert (figures["pools_left"], figures["nodes_left"]) == (0, 0)
    assert (figures["jobs_left"], figures["pods_left"], figures["requests_left"]) == (0, 0, 0)
    assert clean(figures)
