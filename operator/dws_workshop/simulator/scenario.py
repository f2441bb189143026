"""The simulated world the autoscaler runs in: capacity, preemptions and time.

```yaml
clock_factor: 60                   # simulated seconds per real second: GKE's minutes in seconds
scale_down_unneeded_seconds: 600   # idle nodes go after this (cluster autoscaler default)
booking_seconds: 600               # ProvisioningRequest: BookingExpired this long after Provisioned
provisioning_timeout_seconds: null # ProvisioningRequest: Failed (WaitTimeExceeded) after this
stuck_provisioning_requests: 0     # the first N ProvisioningRequests: Accepted, never Provisioned
stuck_flex_start_pools: 0          # the first N flex-start pools: no node comes, ever
many_pools_threshold: 200          # above this many node pools, scale-ups come later ...
many_pools_scale_up_delay_seconds: 30  # ... by this much (our estimate)
capacity:                          # first matching rule wins; no match: capacity is there at once
  - zone: us-east5-a            # omitted: any zone
    accelerator: tpu-v6e-slice     # GPU type or TPU node label; omitted: any
    after_seconds: 300             # arrives this long after a scale-up starts waiting for it
  - accelerator: nvidia-h100-80gb
    mode: Spot                     # FlexStart, QueuedProvisioning, Spot, OnDemand, Reservation
    stockout: true                 # never arrives ...
    from_seconds: 0                # ... while the clock is in [from, until) (omitted: always)
    until_seconds: 3600
preemptions:                       # Spot VMs taken back
  - at_seconds: 120                # first Spot node matching pool/zone that exists then or later
    pool: my-spot-pool             # omitted: any Spot pool
```

All times are simulated seconds; the autoscaler's clock starts when it does (a clock
given to the autoscaler: from that clock's zero, and `clock_factor` is unused).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from dws_workshop.emulator.ruleids import behaviour

Seconds = Annotated[float, Field(ge=0.0)]

#: GKE documents higher autoscaling latency in clusters with more than 200 node pools.
MANY_POOLS = 200
#: How much later a scale-up comes in such a cluster. Our estimate: GKE publishes no
#: figure; the cluster autoscaler scans every 10 s, and a loop over hundreds of pools
#: (simulating each for every pending pod) is taken to cost a few of those scans.
MANY_POOLS_SCALE_UP_DELAY_SECONDS = 30.0


class ScenarioModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


#: How a pool gets its VMs, as a capacity rule names it (the TrainingRequest's modes).
CapacityMode = Literal["FlexStart", "QueuedProvisioning", "Spot", "OnDemand", "Reservation"]


class CapacityRule(ScenarioModel):
    zone: str | None = None
    accelerator: str | None = None
    #: The kind of VMs the rule is about; omitted: any.
    mode: CapacityMode | None = None
    #: Capacity arrives this many simulated seconds after a scale-up starts waiting.
    after_seconds: Seconds = 0.0
    #: Capacity never arrives (while the rule is in force).
    stockout: bool = False
    #: The rule is in force from this simulated second (the autoscaler's clock) ...
    from_seconds: Seconds = 0.0
    #: ... until this one (omitted: for good); outside it, other rules decide.
    until_seconds: Seconds | None = None

    def matches(
        self, zone: str, accelerator: str | None, mode: str | None = None, now: float = 0.0
    ) -> bool:
        return (
            (self.zone is None or self.zone == zone)
            and (self.accelerator is None or self.accelerator == accelerator)
            and (self.mode is None or self.mode == mode)
            and self.from_seconds <= now
            and (self.until_seconds is None or now < self.until_seconds)
        )


class Preemption(ScenarioModel):
    at_seconds: Seconds
    pool: str | None = None
    zone: str | None = None


class SimScenario(ScenarioModel):
    clock_factor: Annotated[float, Field(gt=0.0)] = 1.0
    scale_down_unneeded_seconds: Seconds = 600.0
    booking_seconds: Seconds = 600.0
    provisioning_timeout_seconds: Seconds | None = None
    #: The first this many queued-provisioning ProvisioningRequests stick: Accepted, then
    #: never Provisioned however long they wait, while later ones (a recreated request's)
    #: are served as usual.
    stuck_provisioning_requests: Annotated[int, Field(ge=0)] = 0
    #: The first this many flex-start node pools (not queued) stick at zero: no node
    #: comes to them however long their pods wait, while a pool made again under the
    #: same name (a new node group) is served as usual.
    stuck_flex_start_pools: Annotated[int, Field(ge=0)] = 0
    capacity: list[CapacityRule] = Field(default_factory=list)
    preemptions: list[Preemption] = Field(default_factory=list)
    #: A cluster with more node pools than this scales up later, by the delay below.
    many_pools_threshold: Annotated[int, Field(ge=0)] = MANY_POOLS
    #: Simulated seconds added to every scale-up (pending pods' or a ProvisioningRequest's)
    #: while the cluster has more than `many_pools_threshold` node pools.
    many_pools_scale_up_delay_seconds: Seconds = MANY_POOLS_SCALE_UP_DELAY_SECONDS

    @behaviour("SIM-MANY-POOLS-DELAY")
    def scale_up_delay(self, pools: int) -> float:
        """Simulated seconds a scale-up waits beyond capacity, in a cluster of `pools`."""
        return self.many_pools_scale_up_delay_seconds if pools > self.many_pools_threshold else 0.0

    def rule(
        self, zone: str, accelerator: str | None, mode: str | None = None, now: float = 0.0
    ) -> CapacityRule | None:
        return next((r for r in self.capacity if r.matches(zone, accelerator, mode, now)), None)

    def capacity_zone(
        self,
        zones: list[str],
        accelerator: str | None,
        waited: float,
        pools: int = 0,
        mode: str | None = None,
        now: float = 0.0,
    ) -> str | None:
        """The first of `zones` with capacity for `accelerator` VMs of `mode` after
        waiting `waited` simulated seconds, at simulated second `now`, in a cluster of
        `pools` node pools; None while every zone is still short, or while a cluster of
        many pools keeps the autoscaler slow."""
        delay = self.scale_up_delay(pools)
        if waited < delay:
            return None
        waited -= delay
        for zone in zones:
            rule = self.rule(zone, accelerator, mode, now)
            if rule is None:
                return zone
            if not rule.stockout and waited >= rule.after_seconds:
                return zone
        return None


def load_scenario(path: Path) -> SimScenario:
    """Read a YAML scenario; an empty file gives the defaults."""
    return SimScenario.model_validate(yaml.safe_load(path.read_text()) or {})
