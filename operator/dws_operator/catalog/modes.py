"""How each provisioning mode shapes a node pool and its pods.

Plain data: the GKE node pool renderer and the Job renderer read these rows; nothing
here talks to GKE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from dws_operator.kube_types import TaintEffect

FLEX_START_LABEL_KEY = "cloud.google.com/gke-flex-start"
SPOT_LABEL_KEY = "cloud.google.com/gke-spot"
NODE_POOL_LABEL_KEY = "cloud.google.com/gke-nodepool"
#: GKE's annotation on a flex-start VM's Node: when the VM ends (its max run duration).
TERMINATION_ANNOTATION = "node.gke.io/machine-termination-datetime"
#: GKE puts a NoSchedule taint of this key ("true") on queued-provisioning nodes, not a
#: label: Cluster Toolkit's gke-node-pool module adds the label to the pool's node labels
#: itself for pods that select it. Pods here select the pool and `gke-flex-start` (which
#: GKE sets on flex-start nodes, queued ones included), as GKE's GPU samples do.
QUEUED_TAINT_KEY = "cloud.google.com/gke-queued"
RESERVATION_NAME_KEY = "compute.googleapis.com/reservation-name"

#: Flex-start capacity and a TrainingRequest's run time are capped at 7 days.
MAX_RUN_DURATION_SECONDS = 7 * 24 * 3600


class ProvisioningMode(StrEnum):
    FLEX_START = "FlexStart"
    QUEUED_PROVISIONING = "QueuedProvisioning"
    SPOT = "Spot"
    ON_DEMAND = "OnDemand"
    RESERVATION = "Reservation"
    #: DWS Calendar mode: a block booked ahead (a Compute future reservation in calendar
    #: mode), its pool on the reservation Compute delivers at the block's start.
    CALENDAR = "Calendar"


#: A calendar-mode block lasts 1 to 90 days (Compute's calendar-mode page).
CALENDAR_MIN_DAYS = 1
CALENDAR_MAX_DAYS = 90
#: At most this many GPU VMs in one calendar-mode request.
CALENDAR_MAX_GPU_VMS = 80
#: The TPU chip counts one calendar-mode request may reserve.
CALENDAR_TPU_CHIPS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: How far ahead Compute's calendar-mode advice shows windows: 60 days for GPU VMs,
#: 120 for TPUs (Compute's calendar-mode page, "view resource availability").
CALENDAR_ADVICE_GPU_DAYS = 60
CALENDAR_ADVICE_TPU_DAYS = 120


class ReservationAffinity(StrEnum):
    """`NodeConfig.reservation_affinity.consume_reservation_type` values used here."""

    NO_RESERVATION = "NO_RESERVATION"
    SPECIFIC_RESERVATION = "SPECIFIC_RESERVATION"


@dataclass(frozen=True)
class Toleration:
    key: str
    value: str
    effect: TaintEffect = "NoSchedule"
    operator: Literal["Equal", "Exists"] = "Equal"


@dataclass(frozen=True)
class ModeSettings:
    mode: ProvisioningMode
    flex_start: bool = False
    queued_provisioning: bool = False
    spot: bool = False
    #: None leaves GKE's default (consume any matching reservation).
    reservation_affinity: ReservationAffinity | None = None
    #: None leaves GKE's default location policy (BALANCED).
    location_policy: str | None = None
    #: None leaves GKE's default (auto-repair on).
    auto_repair: bool | None = None
    #: Node config carries `max_run_duration` (flex-start VMs end after it).
    node_max_run_duration: bool = False
    #: Scale-up only through a ProvisioningRequest (Kueue's admission check).
    needs_provisioning_request: bool = False
    #: Labels GKE puts on the mode's nodes that pods must select.
    node_selector: dict[str, str] = field(default_factory=dict)
    #: Taints GKE puts on the mode's nodes (beyond the accelerator's own).
    tolerations: tuple[Toleration, ...] = ()
    #: Restarts after preemption or node loss when the user does not say.
    default_max_restarts: int = 0


MODE_SETTINGS: dict[ProvisioningMode, ModeSettings] = {
    s.mode: s
    for s in (
        ModeSettings(
            mode=ProvisioningMode.FLEX_START,
            flex_start=True,
            reservation_affinity=ReservationAffinity.NO_RESERVATION,
            location_policy="ANY",
            auto_repair=False,
            node_max_run_duration=True,
            node_selector={FLEX_START_LABEL_KEY: "true"},
        ),
        ModeSettings(
            mode=ProvisioningMode.QUEUED_PROVISIONING,
            flex_start=True,
            queued_provisioning=True,
            reservation_affinity=ReservationAffinity.NO_RESERVATION,
            location_policy="ANY",
            auto_repair=False,
            needs_provisioning_request=True,
            node_selector={FLEX_START_LABEL_KEY: "true"},
            tolerations=(Toleration(QUEUED_TAINT_KEY, "true"),),
        ),
        ModeSettings(
            mode=ProvisioningMode.SPOT,
            spot=True,
            location_policy="ANY",
            node_selector={SPOT_LABEL_KEY: "true"},
            # Vertex AI restarts a preempted spot job up to 6 times.
            default_max_restarts=6,
        ),
        ModeSettings(mode=ProvisioningMode.ON_DEMAND),
        ModeSettings(
            mode=ProvisioningMode.RESERVATION,
            reservation_affinity=ReservationAffinity.SPECIFIC_RESERVATION,
        ),
        # The delivered reservation is a specific one like any other (GKE's calendar-mode
        # TPU how-to: --reservation-affinity=specific --reservation=NAME).
        ModeSettings(
            mode=ProvisioningMode.CALENDAR,
            reservation_affinity=ReservationAffinity.SPECIFIC_RESERVATION,
        ),
    )
}
