"""Compute Engine's checks on a resource policy insert, applied before any state changes.

Each broken rule is an HTTP 400 with Compute's JSON error body; the first broken rule
wins. Sources: the `ResourcePolicy` and `ResourcePolicyWorkloadPolicy` messages of
google-cloud-compute (field names, enum values, the RFC 1035 name rule) and
`gcloud compute resource-policies create workload-policy` (`--type` is required;
`--accelerator-topology` and `--max-topology-distance` exclude each other). The rules
marked "ours" are not documented by Google; the wording of every message but the name
rule's is the emulator's.
"""

from __future__ import annotations

import re

from google.cloud import compute_v1

from dws_workshop.emulator.compute_api import ComputeApiError

#: RFC 1035, 1 to 63 characters, as Compute documents for every resource name.
NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$"
_NAME_RE = re.compile(NAME_PATTERN)
_PROJECT_RE = re.compile(r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$")
_REGION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
#: `2x2x2` for TPUs, `1x72` for GPU NVLink domains: two or three positive sides.
_TOPOLOGY_RE = re.compile(r"^[1-9][0-9]*(x[1-9][0-9]*){1,2}$")

WORKLOAD_TYPES = ("HIGH_AVAILABILITY", "HIGH_THROUGHPUT")
TOPOLOGY_MODES = ("AUTO_CONNECT", "PROVISION_ONLY")
TOPOLOGY_DISTANCES = ("BLOCK", "CLUSTER", "SUBBLOCK")
#: The kinds of resource policy; a policy is exactly one of them.
POLICY_KINDS = (
    "workload_policy",
    "group_placement_policy",
    "snapshot_schedule_policy",
    "instance_schedule_policy",
    "disk_consistency_group_policy",
)


def invalid(field: str, value: str, why: str, *, rule: str) -> ComputeApiError:
    return ComputeApiError(
        400, "invalid", f"Invalid value for field '{field}': '{value}'. {why}", rule=rule
    )


def required(field: str, *, rule: str) -> ComputeApiError:
    return ComputeApiError(400, "required", f"Required field '{field}' not specified", rule=rule)


def validate_location(project: str, region: str) -> None:
    """The project and region of a request path."""
    if not _PROJECT_RE.match(project):
        raise invalid("project", project, "Must be a valid project ID.", rule="CE-PROJECT-ID")
    if not _REGION_RE.match(region):
        raise invalid("region", region, "Unknown region.", rule="CE-REGION")


def validate_name(field: str, name: str) -> None:
    if not name:
        raise required(field, rule="CE-NAME")
    if not _NAME_RE.match(name):
        raise invalid(
            field,
            name,
            "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'",
            rule="CE-NAME",
        )


def validate_policy(policy: compute_v1.ResourcePolicy) -> None:
    """Raise the 400 Compute would answer `resourcePolicies.insert` of `policy` with."""
    validate_name("resource.name", policy.name)
    kinds = [kind for kind in POLICY_KINDS if kind in policy]
    if len(kinds) != 1:
        # Ours: Compute's own message for this case is not documented.
        raise invalid(
            "resource",
            policy.name,
            "A resource policy must set exactly one of workloadPolicy, groupPlacementPolicy, "
            f"snapshotSchedulePolicy, instanceSchedulePolicy, diskConsistencyGroupPolicy; "
            f"got {len(kinds)}.",
            rule="CE-POLICY-ONE-KIND",
        )
    if "workload_policy" in policy:
        validate_workload_policy(policy.workload_policy)


def validate_workload_policy(workload: compute_v1.ResourcePolicyWorkloadPolicy) -> None:
    field = "resource.workloadPolicy"
    if "type_" not in workload or not workload.type_:
        raise required(f"{field}.type", rule="CE-WORKLOAD-TYPE")
    if workload.type_ not in WORKLOAD_TYPES:
        raise invalid(
            f"{field}.type",
            workload.type_,
            f"Must be one of {', '.join(WORKLOAD_TYPES)}.",
            rule="CE-WORKLOAD-TYPE",
        )
    has_topology = "accelerator_topology" in workload
    if has_topology and "max_topology_distance" in workload:
        raise invalid(
            f"{field}.maxTopologyDistance",
            workload.max_topology_distance,
            "acceleratorTopology and maxTopologyDistance cannot both be set.",
            rule="CE-TOPOLOGY-XOR-DISTANCE",
        )
    if has_topology:
        topology = workload.accelerator_topology
        if not _TOPOLOGY_RE.match(topology):
            raise invalid(
                f"{field}.acceleratorTopology",
                topology,
                "Must be two or three positive integers joined by 'x', such as 2x2x2.",
                rule="CE-TOPOLOGY-FORMAT",
            )
        if workload.type_ != "HIGH_THROUGHPUT":
            # Ours: an interconnect topology only makes sense for colocated VMs.
            raise invalid(
                f"{field}.acceleratorTopology",
                topology,
                "An accelerator topology needs type HIGH_THROUGHPUT.",
                rule="CE-TOPOLOGY-NEEDS-HIGH-THROUGHPUT",
            )
    if "accelerator_topology_mode" in workload:
        mode = workload.accelerator_topology_mode
        if mode not in TOPOLOGY_MODES:
            raise invalid(
                f"{field}.acceleratorTopologyMode",
                mode,
                f"Must be one of {', '.join(TOPOLOGY_MODES)}.",
                rule="CE-TOPOLOGY-MODE",
            )
        if not has_topology:
            # Ours: the mode says how the chips of the topology are connected.
            raise invalid(
                f"{field}.acceleratorTopologyMode",
                mode,
                "Needs an acceleratorTopology.",
                rule="CE-TOPOLOGY-MODE-NEEDS-TOPOLOGY",
            )
    if "max_topology_distance" in workload:
        distance = workload.max_topology_distance
        if distance not in TOPOLOGY_DISTANCES:
            raise invalid(
                f"{field}.maxTopologyDistance",
                distance,
                f"Must be one of {', '.join(TOPOLOGY_DISTANCES)}.",
                rule="CE-TOPOLOGY-DISTANCE",
            )
