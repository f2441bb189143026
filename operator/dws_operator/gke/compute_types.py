"""The Compute Engine resources the operator sends and reads, as typed JSON.

Each model is one JSON object of Compute's REST API, its fields in Python spelling and
camelCase on the wire (`workload_policy` is `workloadPolicy`). Written as proto3 JSON,
as Compute takes it: a field left at its default (empty, zero, false, unset) is not
sent, and an int64 field is sent as a decimal string. Fields of an answer the operator
does not read are ignored, so a field Compute adds later changes nothing here.

The `*Request` models are one call each: the path's parts (project, region or zone)
and the body under the name `dws-operator plan --objects` prints it with
(`resourcePolicyResource`, `futureReservationResource`), plus the query's `requestId`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

#: Proto3 JSON writes an int64 as a string (JSON numbers lose precision past 2**53).
Int64 = Annotated[int, PlainSerializer(str, return_type=str)]


class Wire(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def wire(self) -> dict[str, Any]:
        """The JSON object as sent: camelCase, defaults left out, keys sorted (two runs
        of `plan --objects` must compare line by line)."""
        sent: dict[str, Any] = _sorted(
            self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        )
        return sent


def _sorted(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted(item) for item in value]
    return value


# Operations ---------------------------------------------------------------------


class OperationErrorEntry(Wire):
    code: str = ""
    message: str = ""


class OperationError(Wire):
    errors: list[OperationErrorEntry] = Field(default_factory=list)


class Operation(Wire):
    """A zone or region operation: `status` PENDING, RUNNING or DONE; one DONE in error
    carries `error.errors` and the HTTP status the call would have failed with."""

    name: str = ""
    status: str = ""
    http_error_status_code: int = 0
    http_error_message: str = ""
    error: OperationError = Field(default_factory=OperationError)

    @property
    def done(self) -> bool:
        return self.status == "DONE"


# Resource policies ----------------------------------------------------------------


class WorkloadPolicy(Wire):
    # `type` on the wire; `type_` here, as Python's builtin keeps its name.
    type_: str = Field("", validation_alias="type", serialization_alias="type")
    accelerator_topology: str = ""
    accelerator_topology_mode: str = ""
    max_topology_distance: str = ""


class ResourcePolicy(Wire):
    name: str = ""
    description: str = ""
    #: CREATING, READY, DELETING... (answers only).
    status: str = ""
    workload_policy: WorkloadPolicy | None = None


class InsertResourcePolicyRequest(Wire):
    project: str
    region: str
    resource_policy_resource: ResourcePolicy


# Future reservations (calendar mode) ---------------------------------------------------


class TimeWindow(Wire):
    start_time: str = ""
    end_time: str = ""


class InstanceProperties(Wire):
    machine_type: str = ""


class SpecificSkuProperties(Wire):
    total_count: Int64 = 0
    instance_properties: InstanceProperties | None = None


class Accelerator(Wire):
    accelerator_count: int = 0


class ReservedResource(Wire):
    accelerator: Accelerator | None = None


class AggregateReservation(Wire):
    vm_family: str = ""
    workload_type: str = ""
    reserved_resources: list[ReservedResource] = Field(default_factory=list)


class FutureReservationStatus(Wire):
    procurement_status: str = ""
    auto_created_reservations: list[str] = Field(default_factory=list)


class FutureReservation(Wire):
    name: str = ""
    description: str = ""
    reservation_mode: str = ""
    planning_status: str = ""
    reservation_name: str = ""
    auto_delete_auto_created_reservations: bool = False
    specific_reservation_required: bool = False
    time_window: TimeWindow | None = None
    specific_sku_properties: SpecificSkuProperties | None = None
    aggregate_reservation: AggregateReservation | None = None
    #: Compute's (answers only).
    status: FutureReservationStatus | None = None


class InsertFutureReservationRequest(Wire):
    project: str
    zone: str
    future_reservation_resource: FutureReservation
    #: Compute runs an insert once per requestId: a repeat answers the first's operation.
    request_id: str = ""


# Calendar-mode advice ------------------------------------------------------------------


class SpecificSkuResources(Wire):
    machine_type: str = ""
    instance_count: Int64 = 0


class AggregateResources(Wire):
    vm_family: str = ""
    workload_type: str = ""
    accelerator_count: Int64 = 0


class TargetResources(Wire):
    specific_sku_resources: SpecificSkuResources | None = None
    aggregate_resources: AggregateResources | None = None


class FlexibleTimeRange(Wire):
    start_time_not_earlier_than: str = ""
    start_time_not_later_than: str = ""
    #: google.protobuf.Duration's JSON form: seconds and an "s".
    min_duration: str = ""
    max_duration: str = ""


class LocationPreference(Wire):
    #: ALLOW or DENY.
    preference: str = ""


class LocationPolicy(Wire):
    #: By `zones/ZONE`.
    locations: dict[str, LocationPreference] = Field(default_factory=dict)


class FutureResourcesSpec(Wire):
    target_resources: TargetResources | None = None
    time_range_spec: FlexibleTimeRange | None = None
    location_policy: LocationPolicy | None = None


class CalendarModeAdviceRequest(Wire):
    future_resources_specs: dict[str, FutureResourcesSpec] = Field(default_factory=dict)


class CalendarModeAdviceRpcRequest(Wire):
    project: str
    region: str
    calendar_mode_advice_request_resource: CalendarModeAdviceRequest


class OtherLocation(Wire):
    status: str = ""
    details: str = ""


class Recommendation(Wire):
    location: str = ""
    start_time: str = ""
    end_time: str = ""
    recommendation_id: str = ""
    other_locations: dict[str, OtherLocation] = Field(default_factory=dict)


class CalendarModeRecommendation(Wire):
    recommendations_per_spec: dict[str, Recommendation] = Field(default_factory=dict)


class CalendarModeAdviceResponse(Wire):
    recommendations: list[CalendarModeRecommendation] = Field(default_factory=list)
