"""No node pool outlives its request, on the virtual clock: a create GKE carried out but
whose answer was lost, then the request deleted before any listing showed the pool; a
pool left by a request forced out while no operator ran."""

from __future__ import annotations

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller.config import ORPHAN_GRACE_SECONDS
from dws_operator.controller.finalizers import FINALIZER
from dws_workshop.emulator import MethodFaults
from tests.builders import gpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import orphaned_pools, patch, settled

L4 = gpu("nvidia-l4", nodes=1, count=1)


def test_a_deleted_request_lets_go_only_once_gke_says_its_pool_is_gone() -> None:
    async def scenario(op: VirtualOperator) -> None:
        emulator = op.emulator
        # GKE makes the pool but the answer is lost; every retry after that fails without
        # being carried out, so only the first call made the pool.
        emulator.set_faults("CreateNodePool", MethodFaults(lost_answers=1, error_rate=1.0))
        await op.create(L4, mode="Spot")
        lost = await op.until(
            lambda: next(iter(emulator.calls_for("CreateNodePool")), None),
            "a create carried out whose answer was lost",
        )
        assert lost.code.name == "DEADLINE_EXCEEDED"
        pool = str(lost.request.node_pool.name)
        assert pool in op.pool_names()
        await op.delete()
        await op.until(lambda: op.get() is None, "the request gone")
        # Gone only after its pool: the operator asked GKE before it let go.
        assert pool not in op.pool_names()
        deletes = [c.request.name for c in emulator.calls_for("DeleteNodePool") if c.ok]
        assert [name.rsplit("/", 1)[-1] for name in deletes] == [pool]

    # No listing of its own during the test: only what the operator asks GKE shows it.
    Virtual(settings={"gke_refresh_seconds": 3600.0}).run(scenario)


def test_an_orphaned_pool_is_counted_and_deleted_once_it_has_no_node(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        [made] = await op.until(op.created_pools, "the pool")
        pool = str(made.name)
        await op.until(lambda: settled(op, pool), "the pool made")
        await op.kill()
        # What a crash or an impatient admin leaves: the request forced out (its
        # finalizer taken off) while no operator ran, its pool still up (ceiling above
        # zero), a Node on it.
        node = {"metadata": {"name": pool, "labels": {NODE_POOL_LABEL_KEY: pool}}}
        await op.call("POST", "/api/v1/nodes", node)
        body = op.get()
        assert body is not None
        assert body["metadata"]["finalizers"] == [FINALIZER]
        await patch(op, {"metadata": {"finalizers": None}})
        await op.delete()
        assert op.get() is None
        await op.start()
        await op.until(lambda: orphaned_pools(op) == 1, "the orphan counted")
        # Not while a Node is on it: something may still run there.
        await op.sleep(2 * ORPHAN_GRACE_SECONDS)
        assert pool in op.pool_names()
        assert orphaned_pools(op) == 1
        await op.call("DELETE", f"/api/v1/nodes/{pool}")
        emptied = op.now()
        await op.until(lambda: pool not in op.pool_names(), "the orphan deleted")
        # After its grace with no Node: not before.
        assert op.now() - emptied >= ORPHAN_GRACE_SECONDS
        await op.until(lambda: orphaned_pools(op) == 0, "no orphan left")

    virtual.run(scenario)
