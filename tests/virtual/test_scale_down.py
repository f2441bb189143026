"""Scale to zero while GKE refuses the resize, on the virtual clock. It is
level-triggered: the pool's Nodes, not the calls made, say when it is at zero. Capping
the autoscaler removes no node (as on GKE: the emulator's GKE-AUTOSCALING-CAP-KEEPS-NODES);
the resize does. A TPU slice pool is never capped (GKE checks its maximum against the
slice size): it is resized to zero with its bounds left at the slice.

Nothing here removes a Node but the operator's resize: no autoscaler takes idle nodes
away, and the test, standing in for GKE and the kubelets, deletes a pool's Node objects
only once GKE counts none in it (`nodes_follow_gke`), so a pool at zero proves the
resize. A refused resize waits in the operation scheduler for its backoff
(`RETRY_BACKOFF_SECONDS`) before it is sent again, which virtual time steps over."""

from __future__ import annotations

import itertools
from typing import Any

from dws_operator.controller.operations import RETRY_BACKOFF_SECONDS
from dws_workshop.emulator import MethodFaults
from dws_workshop.emulator.server import CallRecord
from tests.builders import gpu, tpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import pool_max, pool_of

REFUSED = MethodFaults(error_rate=1.0, error_code="UNAVAILABLE")
#: Both pools here have two nodes.
NODES = 2
#: Virtual seconds stepped over with no operator running, and with GKE refusing every
#: resize (the backoff grows to its cap, 60 s, within the first two minutes).
SPAN = 600.0


async def ran(op: VirtualOperator, accelerator: dict[str, Any], mode: str) -> str:
    """The request's work ran on its pool's nodes and succeeded; its pool."""
    await op.create(accelerator, mode=mode)
    pool = await pool_of(op)
    await op.job()
    await op.nodes_up(pool, NODES)
    await op.job_running(NODES)
    await op.wait_phase("Running")
    await op.job_succeeded()
    await op.wait_phase("Succeeded")
    return pool


async def nodes_follow_gke(op: VirtualOperator, pool: str) -> None:
    """Stand in for GKE and the kubelets: once GKE counts no node in `pool` (a resize to
    zero taken), its Node objects go."""
    await op.until(lambda: op.pool_nodes(pool) == 0, f"GKE's {pool} resized to zero")
    for node in op.nodes_of(pool):
        await op.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")


def resizes(op: VirtualOperator) -> list[CallRecord]:
    return op.emulator.calls_for("SetNodePoolSize")


def still_up(op: VirtualOperator, pool: str) -> None:
    """The pool's nodes are all there, in GKE and as Nodes, and the request does not
    claim to be scaled down."""
    assert op.pool_nodes(pool) == NODES
    assert len(op.nodes_of(pool)) == NODES
    assert op.status().get("scaledDownAt") is None
    condition = op.condition("ScaledDown")
    assert condition is None or condition["status"] != "True", condition


async def said_refused(op: VirtualOperator, pool: str) -> None:
    """The status says GKE refuses the scale-down, in GKE's words, and that the nodes
    are still up (billed): not only the operator's log."""

    def retrying() -> dict[str, Any] | None:
        condition = op.condition("ScaledDown")
        return condition if condition and condition["reason"] == "Retrying" else None

    condition = await op.until(retrying, "ScaledDown False/Retrying")
    assert condition["status"] == "False"
    assert condition["message"].startswith(f"GKE refused to scale node pool {pool} down (")
    assert "SetNodePoolSize: UNAVAILABLE" in condition["message"]
    assert condition["message"].endswith(f"{NODES} node(s) still up")


def scaled_to_zero(op: VirtualOperator) -> None:
    condition = op.condition("ScaledDown")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ScaledToZero")


def test_stopped_between_cap_and_resize_it_resizes_after_restart(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        emulator = op.emulator
        emulator.set_faults("SetNodePoolSize", REFUSED)
        pool = await ran(op, gpu("nvidia-l4", nodes=NODES, count=1), "Spot")
        await op.until(lambda: pool_max(op, pool) == 0, "the autoscaler capped")
        await op.until(lambda: resizes(op), "a resize refused")
        await said_refused(op, pool)
        await op.stop()
        # Stopped between the two calls: the ceiling is 0, the two billed nodes are still
        # up, and the request does not claim to be scaled down; nor does any of that
        # change while no operator runs.
        asked = len(emulator.calls)
        await op.sleep(SPAN)
        assert len(emulator.calls) == asked
        assert pool_max(op, pool) == 0
        still_up(op, pool)
        assert not any(c.ok for c in resizes(op))
        emulator.set_faults("SetNodePoolSize", None)
        restarted = op.now()
        await op.start()
        await nodes_follow_gke(op, pool)
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        [resized] = [c for c in resizes(op) if c.ok]
        assert resized.request.node_count == 0
        assert resized.started >= restarted
        scaled_to_zero(op)
        # Capped once: the new operator found the ceiling at 0, and only resized.
        assert [c.ok for c in emulator.calls_for("SetNodePoolAutoscaling")] == [True]

    virtual.run(scenario)


def test_a_resize_refused_again_and_again_is_retried_until_zero(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        emulator = op.emulator
        emulator.set_faults("SetNodePoolSize", REFUSED)
        pool = await ran(op, tpu("v6e", "2x4"), "FlexStart")
        await op.until(lambda: len(resizes(op)) >= 3, "three refused resizes")
        still_up(op, pool)
        await said_refused(op, pool)
        # Retried for as long as GKE refuses, each time after the scheduler's backoff
        # (doubling from 1 s up to 60 s): never hot-looping, never given up.
        await op.sleep(SPAN)
        still_up(op, pool)
        refused = resizes(op)
        assert not any(c.ok for c in refused)
        first, cap = RETRY_BACKOFF_SECONDS
        sent = [c.started for c in refused]
        gaps = [later - earlier for earlier, later in itertools.pairwise(sent)]
        backoff = [min(first * 2**k, cap) for k in range(len(gaps))]
        assert all(b <= gap < b + 1 for gap, b in zip(gaps, backoff, strict=True)), gaps
        assert op.now() - sent[-1] < cap + 1
        emulator.set_faults("SetNodePoolSize", None)
        cleared = op.now()
        await nodes_follow_gke(op, pool)
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        calls = resizes(op)
        assert [c.ok for c in calls].count(True) == 1
        assert [c.ok for c in calls].index(True) >= 3  # after every refusal, one that took
        # The one that took was sent when the pause then running ended (at most the cap).
        assert calls[-1].ok
        assert calls[-1].started - cleared <= cap
        scaled_to_zero(op)
        # The slice pool was resized, never capped: its bounds are still the slice's.
        assert emulator.calls_for("SetNodePoolAutoscaling") == []
        assert pool_max(op, pool) == NODES

    virtual.run(scenario)
