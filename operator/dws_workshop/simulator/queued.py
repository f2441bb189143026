"""Queued provisioning as GKE answers it: ProvisioningRequests of class
`queued-provisioning.gke.io` turned into Nodes, all at once or not at all (a TPU
request only by whole slices of its topology, see `whole_slices`: otherwise
Provisioned=False, `NotProvisioned`).

Each request goes Accepted, then Provisioned (with NodePoolName, ResizeRequestName and
SelectedZone) once its nodes exist; BookingExpired `booking_seconds` later if no pod
consumes it (until then its nodes are never idle-removed); CapacityRevoked at
`maxRunDurationSeconds` (the nodes go); Failed (`WaitTimeExceeded`) after
`provisioning_timeout_seconds` without capacity.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.gke.ceiling import max_nodes
from dws_operator.kueue_objects import QUEUED_PROVISIONING_CLASS
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.simulator import provreq, whole_slices
from dws_workshop.simulator.autoscaler_view import (
    Obj,
    PoolStatus,
    ScalingPool,
    accelerator_of,
    consumed,
    name_of,
    queued_pools_for,
    zones_with_room,
)
from dws_workshop.simulator.fleet import Fleet
from dws_workshop.simulator.scenario import SimScenario

#: A ProvisioningRequest's namespace and name.
Key = tuple[str, str]


@dataclass
class Booking:
    """Nodes provisioned for one ProvisioningRequest."""

    pool: str
    nodes: list[str]
    provisioned_at: float
    max_run: float | None
    expired: bool = False


class QueuedCapacity:
    """Follows every queued-provisioning ProvisioningRequest, one pass at a time."""

    def __init__(self, fleet: Fleet, scenario: SimScenario) -> None:
        self.fleet = fleet
        self.scenario = scenario
        self._accepted_at: dict[Key, float] = {}
        self._bookings: dict[Key, Booking] = {}
        #: Requests that stick (the scenario's first ones), and how many were picked.
        self._stuck: set[tuple[str, str, str]] = set()
        self._stuck_picked = 0

    def booked_nodes(self) -> set[str]:
        """Nodes held for a request whose booking still runs: never idle-removed."""
        return {n for b in self._bookings.values() if not b.expired for n in b.nodes}

    def reconcile(
        self,
        now: float,
        pools: dict[str, ScalingPool],
        pods: list[Obj],
        busy: dict[str, list[Obj]],
    ) -> None:
        """One pass; `busy` (running pods by node) loses the pods of nodes it revokes."""
        seen: set[Key] = set()
        for body in self.fleet.provisioning_requests():
            if (body.get("spec") or {}).get("provisioningClassName") != QUEUED_PROVISIONING_CLASS:
                continue
            meta = body["metadata"]
            key = (meta["namespace"], meta["name"])
            seen.add(key)
            self._follow(now, key, body, pools, pods, busy)
        for key in set(self._bookings) - seen:
            self._bookings.pop(key)
        for key in set(self._accepted_at) - seen:
            self._accepted_at.pop(key)

    @behaviour("SIM-QP-ACCEPTED", "SIM-QP-BOOKING-EXPIRED", "SIM-QP-MAX-RUN")
    def _follow(
        self,
        now: float,
        key: Key,
        body: Obj,
        pools: dict[str, ScalingPool],
        pods: list[Obj],
        busy: dict[str, list[Obj]],
    ) -> None:
        if provreq.is_true(body, provreq.FAILED) or provreq.is_true(body, provreq.CAPACITY_REVOKED):
            return
        accepted_at = self._accepted_at.setdefault(key, now)
        if provreq.condition(body, provreq.ACCEPTED) is None:
            self._set(key, body, provreq.ACCEPTED, "Accepted", "The request was accepted.")
            if self._stuck_picked < self.scenario.stuck_provisioning_requests:
                self._stuck_picked += 1
                self._stuck.add((*key, _uid(body)))
            return
        if self._stuck_here(key, body):
            return
        booking = self._bookings.get(key)
        if not provreq.is_true(body, provreq.PROVISIONED) or booking is None:
            if provreq.is_true(body, provreq.PROVISIONED):
                return  # provisioned by an earlier autoscaler: nothing to follow
            self._provision(now, key, body, pools, now - accepted_at)
            return
        if not booking.expired and now - booking.provisioned_at >= self.scenario.booking_seconds:
            booking.expired = True
            if not consumed(key, pods):
                self._set(
                    key,
                    body,
                    provreq.BOOKING_EXPIRED,
                    "BookingExpired",
                    "The capacity booking expired; unused nodes may be removed.",
                )
                return
        if booking.max_run is not None and now - booking.provisioned_at >= booking.max_run:
            pool = pools.get(booking.pool)
            if pool is not None:
                for node in [n for n in pool.nodes if name_of(n) in booking.nodes]:
                    self.fleet.remove(
                        pool, node, busy, "The ProvisioningRequest's max run duration was reached."
                    )
            self._bookings.pop(key)
            self._set(
                key,
                body,
                provreq.CAPACITY_REVOKED,
                "MaxRunDurationReached",
                "maxRunDurationSeconds reached; the VMs were deleted.",
            )

    @behaviour("SIM-QP-STUCK")
    def _stuck_here(self, key: Key, body: Obj) -> bool:
        """A request picked to stick stays Accepted, never Provisioned, for as long as it
        is there; one recreated under the same name is a new object (uid) and is served."""
        return (*key, _uid(body)) in self._stuck

    @behaviour("SIM-QP-POOL-GONE")
    def _pool_gone(self, body: Obj, spec: Obj, pools: dict[str, ScalingPool]) -> bool:
        """An accepted request whose pool (the one its pods name) was deleted stays bound to
        it: never provisioned, even on a pool made again under the same name."""
        ident = (body["metadata"]["namespace"], body["metadata"]["name"], _uid(body))
        named = (spec.get("nodeSelector") or {}).get(NODE_POOL_LABEL_KEY)
        pool = pools.get(named) if named is not None else None
        if named is not None and (pool is None or pool.pool.status == PoolStatus.STOPPING):
            self._stuck.add(ident)
        return ident in self._stuck

    @behaviour("SIM-QP-WAIT-TIMEOUT", "SIM-QP-ONE-PODSET", "SIM-QP-PROVISIONED")
    def _provision(
        self, now: float, key: Key, body: Obj, pools: dict[str, ScalingPool], waited: float
    ) -> None:
        timeout = self.scenario.provisioning_timeout_seconds
        if timeout is not None and waited >= timeout:
            self._set(
                key,
                body,
                provreq.FAILED,
                "WaitTimeExceeded",
                f"Capacity was not found within {timeout:g}s.",
            )
            return
        pod_sets = (body.get("spec") or {}).get("podSets") or []
        if len(pod_sets) != 1:
            return
        count = int(pod_sets[0].get("count", 0))
        template_name = (pod_sets[0].get("podTemplateRef") or {}).get("name", "")
        template = self.fleet.pod_template(key[0], template_name)
        if template is None:
            return
        spec = (template.get("template") or {}).get("spec") or {}
        if self._pool_gone(body, spec, pools):
            return
        topology = provreq.parameter(body, provreq.TPU_TOPOLOGY_PARAMETER)
        choice = whole_slices.choose(queued_pools_for(pools, spec), count, topology)
        if choice is None:
            return
        pool = choice.pool
        if choice.refusal is not None:
            self._not_provisioned(key, body, choice.refusal)
            return
        if len(pool.nodes) + count > max_nodes(pool.pool):
            return
        # All of a request's nodes come in one zone, within a per-zone maximum if any.
        zone = self.scenario.capacity_zone(
            zones_with_room(pool, count),
            accelerator_of(pool.shape),
            waited,
            len(pools),
            pool.shape.mode,
            now,
        )
        if zone is None:
            return
        emulator = self.fleet.emulator
        if not emulator.set_node_count(pool.path, pool.count + count, expected=pool.count):
            return
        pool.count += count
        created = [name_of(self.fleet.create_node(now, pool, zone)) for _ in range(count)]
        self._bookings[key] = Booking(
            pool=pool.name, nodes=created, provisioned_at=now, max_run=provreq.max_run_seconds(body)
        )
        resize = f"{key[1]}-{zlib.crc32('/'.join(key).encode()):08x}"
        conditions = provreq.with_condition(
            body,
            provreq.PROVISIONED,
            True,
            "Provisioned",
            f"Provisioned {count} node(s) in node pool {pool.name} in {zone}.",
        )
        self.fleet.patch_provisioning_request(
            key,
            {
                "conditions": conditions,
                "provisioningClassDetails": provreq.details(pool.name, resize, zone),
            },
        )

    def _not_provisioned(self, key: Key, body: Obj, message: str) -> None:
        """Provisioned=False, written once (not on every pass) while the answer stands."""
        current = provreq.condition(body, provreq.PROVISIONED) or {}
        said = (current.get("status"), current.get("reason"), current.get("message"))
        if said == ("False", provreq.NOT_PROVISIONED, message):
            return
        conditions = provreq.with_condition(
            body,
            provreq.PROVISIONED,
            False,
            provreq.NOT_PROVISIONED,
            message,
        )
        self.fleet.patch_provisioning_request(key, {"conditions": conditions})

    def _set(self, key: Key, body: Obj, type_: str, reason: str, message: str) -> None:
        conditions = provreq.with_condition(body, type_, True, reason, message)
        self.fleet.patch_provisioning_request(key, {"conditions": conditions})


def _uid(body: Obj) -> str:
    return str(body["metadata"].get("uid", ""))
