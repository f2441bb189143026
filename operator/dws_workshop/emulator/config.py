"""The emulator's configuration file: clusters it serves, faults it injects, quotas it enforces.

```yaml
seed: 7                          # fault injection draws from RNGs seeded with this
operation_latency_seconds: 0.5   # PENDING -> RUNNING -> DONE takes this long (real seconds)
clock_factor: 60                 # simulated seconds per real second (default 1)
operation_durations: gke         # simulated seconds per method, or a preset's name (GKE's)
#  CreateNodePool: 40            # ... or per method; wins over the latency fields
api_rate_limit: 600              # requests per simulated minute per project (default: none)
clusters:
  - name: projects/dws-sandbox/locations/us-east5/clusters/sandbox
    version: 1.34.1-gke.1000000  # GetCluster's current_master_version (this is the default)
    concurrent_operations_quota: 5  # operations not yet DONE at once (GKE's default)
    workload_identity: true      # workload pool PROJECT.svc.id.goog (this is the default)
quotas:                          # accelerator -> chips (TPU) or GPUs, summed over pools
  nvidia-h100-80gb: 16
  tpu-v6e-slice: 64
faults:
  CreateNodePool:
    error_rate: 0.2              # fraction of calls that fail with error_code
    error_code: UNAVAILABLE
    latency_seconds: 0.1         # added before every response
    operation_error_rate: 0.5    # fraction of accepted operations that end in error
compute_operation_latency_seconds: 0.1  # Compute region operations (default: as above)
compute_faults:                  # the same knobs for the Compute resource-policies API
  resourcePolicies.insert:
    error_rate: 0.1
    error_code: UNAVAILABLE      # answered as HTTP 503 with Compute's JSON error body
```

Times in real seconds (`operation_latency_seconds`, `latency_seconds`) are for tests
that want operations to take exactly so long; `operation_durations` and the rate
limit's minute are GKE's own times, simulated, and pass `clock_factor` times faster.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args

import grpc
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

MethodName = Literal[
    "GetCluster",
    "ListNodePools",
    "GetNodePool",
    "CreateNodePool",
    "DeleteNodePool",
    "SetNodePoolAutoscaling",
    "SetNodePoolSize",
    "UpdateNodePool",
    "GetOperation",
    "ListOperations",
]
#: Every ClusterManager method the emulator serves (the Literal above, as values).
METHODS: tuple[MethodName, ...] = get_args(MethodName)
#: The methods that answer with a long-running operation.
LONG_RUNNING_METHODS: tuple[MethodName, ...] = (
    "CreateNodePool",
    "DeleteNodePool",
    "SetNodePoolAutoscaling",
    "SetNodePoolSize",
    "UpdateNodePool",
)

#: The Compute Engine methods the emulator serves, named as in Compute's discovery
#: document (`compute.resourcePolicies.insert` and so on, without the service prefix).
ComputeMethodName = Literal[
    "resourcePolicies.insert",
    "resourcePolicies.get",
    "resourcePolicies.list",
    "resourcePolicies.delete",
    "regionOperations.get",
    "regionOperations.wait",
    "futureReservations.insert",
    "futureReservations.get",
    "futureReservations.list",
    "futureReservations.cancel",
    "futureReservations.delete",
    "advice.calendarMode",
    "zoneOperations.get",
    "zoneOperations.wait",
]
COMPUTE_METHODS: tuple[ComputeMethodName, ...] = get_args(ComputeMethodName)

DEFAULT_CLUSTER = "projects/dws-sandbox/locations/us-east5/clusters/sandbox"
CLUSTER_PATTERN = (
    r"^projects/[a-z][-a-z0-9]{4,28}[a-z0-9]"
    r"/locations/[a-z0-9-]+"
    r"/clusters/[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
)
DEFAULT_VERSION = "1.34.1-gke.1000000"
#: GKE refuses a cluster's sixth operation while five are still PENDING or RUNNING.
DEFAULT_CONCURRENT_OPERATIONS = 5
#: GKE's version format (MAJOR.MINOR.PATCH-gke.BUILD).
VERSION_PATTERN = r"^[0-9]+\.[0-9]+\.[0-9]+-gke\.[0-9]+$"
DEFAULT_STOCKOUT = (
    "GCE_STOCKOUT: The zone does not have enough resources available to fulfill the request. "
    "Try a different zone, or try again later."
)

Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
Seconds = Annotated[float, Field(ge=0.0)]

#: How long GKE's node pool operations take, in seconds, PENDING to DONE, for
#: `EmulatorConfig.operation_durations` (YAML: `operation_durations: gke`).
GKE_OPERATION_SECONDS: dict[MethodName, float] = {
    # Reported: an empty node pool took 30-45 s to create before GKE's 2026 speed-ups
    # (secondary reports, no official figure). The middle of it.
    "CreateNodePool": 40.0,
    # Our estimates, no published figure found: a delete drains and removes an
    # instance group (an empty one: tens of seconds at most), a resize changes an
    # instance group's target size, and an autoscaling or label update changes only
    # GKE's own record of the pool.
    "DeleteNodePool": 20.0,
    "SetNodePoolSize": 15.0,
    "SetNodePoolAutoscaling": 10.0,
    "UpdateNodePool": 10.0,
}
#: Named sets of operation durations, for the YAML file and the CLI.
OPERATION_DURATION_PRESETS: dict[str, dict[MethodName, float]] = {"gke": GKE_OPERATION_SECONDS}


def _status_name(value: str) -> str:
    if value not in grpc.StatusCode.__members__ or value == "OK":
        allowed = ", ".join(n for n in grpc.StatusCode.__members__ if n != "OK")
        raise ValueError(f"{value!r} is not a gRPC status code; allowed: {allowed}")
    return value


class EmulatorModel(BaseModel):
    # A typo in a fault file should fail loudly, not silently inject nothing.
    model_config = ConfigDict(extra="forbid")


class MethodFaults(EmulatorModel):
    error_rate: Fraction = 0.0
    error_code: str = "UNAVAILABLE"
    error_message: str = ""
    latency_seconds: Seconds = 0.0
    #: Long-running methods only: the operation is accepted, then ends DONE with this error.
    operation_error_rate: Fraction = 0.0
    operation_error_code: str = "RESOURCE_EXHAUSTED"
    operation_error_message: str = DEFAULT_STOCKOUT
    #: Overrides `EmulatorConfig.operation_latency_seconds` for this method.
    operation_latency_seconds: Seconds | None = None
    #: The call is carried out, but its answer is lost: the client sees DEADLINE_EXCEEDED
    #: (a deadline that ran out while GKE did the work), so it cannot tell it happened.
    lost_answer_rate: Fraction = 0.0
    #: The first this many calls (since these faults were set) are carried out with their
    #: answer lost, whatever the rates say; the other faults apply to the calls after
    #: them. A test's way to say "GKE did it, the caller never heard, and it will not
    #: work again" without a race.
    lost_answers: int = Field(default=0, ge=0)

    _check_codes = field_validator("error_code", "operation_error_code")(_status_name)

    @property
    def status(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.error_code]

    @property
    def operation_status(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.operation_error_code]


class ClusterConfig(EmulatorModel):
    name: str = Field(pattern=CLUSTER_PATTERN)
    #: The control plane's (and new pools') version, as GetCluster reports it. The default
    #: is new enough for every feature the operator uses (catalog.gke_versions).
    version: str = Field(DEFAULT_VERSION, pattern=VERSION_PATTERN)
    #: Zones node pools may use; default: `<region>-a`, `-b`, `-c`.
    zones: list[str] | None = None
    #: Operations (node pool create, delete, resize, update) the cluster runs at once;
    #: one more is refused with RESOURCE_EXHAUSTED "Too many operations".
    concurrent_operations_quota: int = Field(DEFAULT_CONCURRENT_OPERATIONS, ge=1)
    #: Workload Identity on the cluster (GetCluster's `workload_identity_config`): pools
    #: with `GKE_METADATA` need it. On, as the GKE clusters the operator is installed in
    #: (README: "a GKE Standard cluster with Workload Identity enabled").
    workload_identity: bool = True

    @property
    def project(self) -> str:
        return self.name.split("/")[1]

    @property
    def workload_pool(self) -> str:
        """`PROJECT_ID.svc.id.goog`, GKE's one workload pool per project; "" when off."""
        return f"{self.project}.svc.id.goog" if self.workload_identity else ""

    @property
    def location(self) -> str:
        return self.name.split("/")[3]

    @property
    def region(self) -> str:
        parts = self.location.split("-")
        # A zonal cluster's location is a zone ("us-east5-a"); its region drops the suffix.
        return "-".join(parts[:-1]) if len(parts) == 3 else self.location

    def in_region(self, zone: str) -> bool:
        """Whether `zone` is a zone of the cluster's region (`us-east5-d` of `us-east5`):
        where GKE lets a pool of the cluster live, its node locations or not."""
        return re.fullmatch(re.escape(self.region) + r"-[a-z]", zone) is not None

    @property
    def node_zones(self) -> list[str]:
        if self.zones is not None:
            return list(self.zones)
        if self.location != self.region:
            return [self.location]
        return [f"{self.region}-{suffix}" for suffix in "abc"]


class CalendarReview(EmulatorModel):
    """How Google's review answers a submitted calendar-mode request (Google publishes
    neither how long it takes nor why it declines: both are the scenario's)."""

    #: Simulated seconds from the submit to the answer.
    review_seconds: Seconds = 600.0
    #: approve; decline; or approve and, at the start, deliver only `partial_count`
    #: (VMs or chips: FAILED_PARTIALLY_FULFILLED).
    outcome: Literal["approve", "decline", "partial"] = "approve"
    partial_count: Annotated[int, Field(ge=0)] = 1
    #: What Google can deliver in calendar mode at any one time, by zone and then by
    #: machine type (GPU VMs) or TPU VM family (chips); the advice offers windows where
    #: the blocks booked leave room. A zone or resource not listed: no limit.
    capacity: dict[str, dict[str, Annotated[int, Field(ge=0)]]] = Field(default_factory=dict)
    #: Simulated seconds from now to the earliest start the advice offers: a day by
    #: default (Cloud TPU's calendar-mode page: availability "1 to 120 days in advance").
    advice_lead_seconds: Seconds = 86400.0


class EmulatorConfig(EmulatorModel):
    seed: int = 0
    #: Real seconds an operation takes, unless `operation_durations` names its method.
    operation_latency_seconds: Seconds = 0.5
    #: Simulated seconds per real second, for `operation_durations` and the rate limit.
    clock_factor: Annotated[float, Field(gt=0.0)] = 1.0
    #: Simulated seconds an operation of the method takes, PENDING to DONE (it runs for
    #: duration / clock_factor real seconds). Wins over `operation_latency_seconds` and a
    #: method's `operation_latency_seconds`. YAML may name a preset instead: `gke`.
    operation_durations: dict[MethodName, Seconds] = Field(default_factory=dict)
    #: GKE's per-project API request quota: requests per simulated minute, counted over
    #: every ClusterManager call (reads too) of a project; one more within the minute is
    #: refused with RESOURCE_EXHAUSTED. None: no limit. GKE's quota pages give 600 per
    #: minute, 3,000 per minute or 10 per second depending on the page's version.
    api_rate_limit: int | None = Field(None, ge=1)
    clusters: list[ClusterConfig] = Field(
        default_factory=lambda: [ClusterConfig(name=DEFAULT_CLUSTER)], min_length=1
    )
    #: Accelerator (GPU type or TPU node label, e.g. `tpu-v6e-slice`) -> chips or GPUs.
    #: An accelerator not listed is unlimited.
    quotas: dict[str, Annotated[int, Field(ge=0)]] = Field(default_factory=dict)
    faults: dict[MethodName, MethodFaults] = Field(default_factory=dict)
    #: Compute region operations take this long; None: `operation_latency_seconds`.
    compute_operation_latency_seconds: Seconds | None = None
    #: Faults of the Compute API. gRPC code names map to the HTTP status and error
    #: reason Compute answers with (UNAVAILABLE: 503 backendError, and so on).
    compute_faults: dict[ComputeMethodName, MethodFaults] = Field(default_factory=dict)
    #: Google's review of calendar-mode requests (future reservations).
    calendar_review: CalendarReview = Field(default_factory=CalendarReview)
    #: Where the simulated calendar starts (calendar-mode blocks are read against it):
    #: e.g. an hour before a sample's block; None: now.
    calendar_epoch: datetime | None = None

    @field_validator("operation_durations", mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        if isinstance(value, str):
            preset = OPERATION_DURATION_PRESETS.get(value)
            if preset is None:
                names = ", ".join(OPERATION_DURATION_PRESETS)
                raise ValueError(f"{value!r} is not a preset of operation durations ({names})")
            return dict(preset)
        return value

    @field_validator("operation_durations")
    @classmethod
    def _long_running_only(cls, value: dict[MethodName, float]) -> dict[MethodName, float]:
        for method in value:
            if method not in LONG_RUNNING_METHODS:
                allowed = ", ".join(LONG_RUNNING_METHODS)
                raise ValueError(f"{method} starts no operation; allowed: {allowed}")
        return value

    def operation_seconds(self, method: str) -> float:
        """Real seconds an operation of `method` takes, PENDING to DONE."""
        duration = self.operation_durations.get(cast("MethodName", method))
        if duration is not None:
            return duration / self.clock_factor
        latency = faults_for(self, method).operation_latency_seconds
        return self.operation_latency_seconds if latency is None else latency


def load_config(path: Path) -> EmulatorConfig:
    """Read a YAML config; an empty file gives the defaults."""
    data = yaml.safe_load(path.read_text()) or {}
    return EmulatorConfig.model_validate(data)


NO_FAULTS = MethodFaults()


def faults_for(config: EmulatorConfig, method: str) -> MethodFaults:
    return config.faults.get(cast("MethodName", method)) or NO_FAULTS


def compute_faults_for(config: EmulatorConfig, method: str) -> MethodFaults:
    return config.compute_faults.get(cast("ComputeMethodName", method)) or NO_FAULTS
