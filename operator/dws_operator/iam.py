"""The Google permissions the operator uses, the one list they are read from: every GKE
and Compute method the operator calls, the permission Google's documentation gives for
it, and which custom role carries it.

`hack/gen_manifests.py` writes the custom roles (`manifests/iam/*.yaml`, the files
`gcloud iam roles create --file` reads) from `ROLES` and `PERMISSIONS`; a unit test fails
when a committed role drifts, and another when the operator calls a GKE or Compute method
that `PERMISSIONS` does not list (tests/unit/test_iam.py scans the source for them).

Four roles, so each is granted only where and when it is needed:
- `dwsOperator`: node pools of the cluster (always), bound on the project.
- `dwsOperatorNodeServiceAccount`: acting as the nodes' service account (always), bound
  on that service account only, not the project.
- `dwsOperatorWorkloadPolicies`: Ironwood (tpu7x) multi-host slices' workload policies.
- `dwsOperatorCalendarMode`: DWS Calendar-mode bookings (future reservations).

A call is named `<client class>.<method>` of the Python client the operator calls
(google-cloud-container's ClusterManagerAsyncClient; for Compute, the REST resources of
dws_operator.gke.compute_rest, whose methods are Compute's own: `ResourcePolicies.insert`
is `resourcePolicies.insert`).
Sources were read 2026-11-28 through stored copies of Google's pages; where a page's
permission section could not be read, the entry's `note` says so.

Not used, so in no role: `container.clusters.getCredentials` (GetCluster's table row
names it only "to see the cluster's credentials"; the operator reads the version and
locations), zone operations (a booking's insert is not waited on: the next pass reads the
booking).
"""

from __future__ import annotations

from dataclasses import dataclass

#: GKE's "API permissions" table (method -> permission, and on what).
GKE_TABLE = "https://cloud.google.com/kubernetes-engine/docs/reference/api-permissions"
GKE_REST = "https://cloud.google.com/kubernetes-engine/docs/reference/rest/v1beta1/"
COMPUTE_REST = "https://cloud.google.com/compute/docs/reference/rest/v1/"
COMPUTE_DOCS = "https://cloud.google.com/compute/docs/instances/"

CLUSTER_MANAGER = "ClusterManagerAsyncClient"
RESOURCE_POLICIES = "ResourcePolicies"
REGION_OPERATIONS = "RegionOperations"
FUTURE_RESERVATIONS = "FutureReservations"
ADVICE = "Advice"


@dataclass(frozen=True)
class Role:
    #: The custom role's id (`gcloud iam roles create ID`): letters, digits, _ and . only.
    id: str
    title: str
    description: str
    #: When the operator needs it.
    when: str
    #: Where to bind it.
    bound_on: str


@dataclass(frozen=True)
class Permission:
    name: str
    #: The client methods that need it, as `<client class>.<method>`.
    calls: tuple[str, ...]
    #: The id of the role that carries it.
    role: str
    #: Google's page that gives the permission for those methods.
    source: str
    note: str = ""


CORE = Role(
    id="dwsOperator",
    title="dws-operator: node pools",
    description="Create, read, resize, relabel and delete the node pools of the cluster, "
    "and read GKE's operations on them.",
    when="always",
    bound_on="the project (GKE checks these on the cluster)",
)
NODE_SERVICE_ACCOUNT = Role(
    id="dwsOperatorNodeServiceAccount",
    title="dws-operator: act as the nodes' service account",
    description="Create node pools whose nodes run as this service account.",
    when="always",
    bound_on="the nodes' service account only",
)
WORKLOAD_POLICIES = Role(
    id="dwsOperatorWorkloadPolicies",
    title="dws-operator: TPU workload policies",
    description="Create and read the Compute workload policies that place Ironwood (tpu7x) "
    "multi-host TPU slices.",
    when="Ironwood (tpu7x) multi-host slices",
    bound_on="the project",
)
CALENDAR_MODE = Role(
    id="dwsOperatorCalendarMode",
    title="dws-operator: DWS Calendar-mode bookings",
    description="Submit, read and cancel the calendar-mode future reservations of "
    "TrainingRequests with a calendar step, and ask Compute's advice when a block can start.",
    when="DWS Calendar mode",
    bound_on="the project",
)
ROLES: tuple[Role, ...] = (CORE, NODE_SERVICE_ACCOUNT, WORKLOAD_POLICIES, CALENDAR_MODE)

PERMISSIONS: tuple[Permission, ...] = (
    Permission(
        "container.clusters.get",
        (
            f"{CLUSTER_MANAGER}.get_cluster",
            f"{CLUSTER_MANAGER}.get_node_pool",
            f"{CLUSTER_MANAGER}.list_node_pools",
        ),
        CORE.id,
        # Rows projects.locations.clusters.get, .nodePools.get and .nodePools.list.
        GKE_TABLE,
    ),
    Permission(
        "container.clusters.update",
        (
            f"{CLUSTER_MANAGER}.create_node_pool",
            f"{CLUSTER_MANAGER}.delete_node_pool",
            f"{CLUSTER_MANAGER}.set_node_pool_size",
            f"{CLUSTER_MANAGER}.set_node_pool_autoscaling",
            f"{CLUSTER_MANAGER}.update_node_pool",
        ),
        CORE.id,
        # create and delete: GKE's table. setSize, setAutoscaling and update are not in
        # the table; each method's REST page says "Authorization requires the following
        # IAM permission on the specified resource name: container.clusters.update".
        f"{GKE_TABLE}; {GKE_REST}projects.locations.clusters.nodePools/setSize, "
        "/setAutoscaling, /update",
        note="the REST pages read were v1beta1's (and v1's on documentation.s3ns.fr); "
        "v1's own pages cut the permission's name from the copy read",
    ),
    Permission(
        "container.operations.get",
        (f"{CLUSTER_MANAGER}.get_operation",),
        CORE.id,
        GKE_TABLE,
    ),
    Permission(
        "iam.serviceAccounts.actAs",
        (f"{CLUSTER_MANAGER}.create_node_pool",),
        NODE_SERVICE_ACCOUNT.id,
        # GKE's table gives it for clusters.create "on the specified service account";
        # IAM: attaching a service account to a resource needs it (Service Account User).
        f"{GKE_TABLE}; https://cloud.google.com/iam/docs/service-account-permissions",
        note="GKE's table lists it for clusters.create, not nodePools.create; a pool names "
        "its nodes' service account as a cluster does, so it is taken to apply",
    ),
    Permission(
        "compute.resourcePolicies.create",
        (f"{RESOURCE_POLICIES}.insert",),
        WORKLOAD_POLICIES.id,
        f"{COMPUTE_REST}resourcePolicies/insert",
        note="the page's IAM Permissions section was not in the copy read; Compute names "
        "an insert's permission .create (futureReservations.insert: "
        "compute.futureReservations.create, documented)",
    ),
    Permission(
        "compute.resourcePolicies.get",
        (f"{RESOURCE_POLICIES}.get",),
        WORKLOAD_POLICIES.id,
        f"{COMPUTE_REST}resourcePolicies/get",
    ),
    Permission(
        "compute.regionOperations.get",
        (f"{REGION_OPERATIONS}.wait",),
        WORKLOAD_POLICIES.id,
        # regionOperations.get's page gives compute.regionOperations.get;
        # globalOperations.wait's gives compute.globalOperations.get, the get permission.
        f"{COMPUTE_REST}regionOperations/get; {COMPUTE_REST}globalOperations/wait",
        note="regionOperations.wait's own IAM section was not in the copy read",
    ),
    Permission(
        "compute.futureReservations.create",
        (f"{FUTURE_RESERVATIONS}.insert",),
        CALENDAR_MODE.id,
        f"{COMPUTE_DOCS}create-single-project-future-reservations",
    ),
    Permission(
        "compute.reservations.create",
        (f"{FUTURE_RESERVATIONS}.insert",),
        CALENDAR_MODE.id,
        # "To let Compute Engine auto-create reservations: compute.reservations.create on
        # the project"; the booking has Compute create the block's reservation.
        f"{COMPUTE_DOCS}create-single-project-future-reservations",
    ),
    Permission(
        "compute.futureReservations.get",
        (f"{FUTURE_RESERVATIONS}.get",),
        CALENDAR_MODE.id,
        f"{COMPUTE_DOCS}view-future-reservations",
    ),
    Permission(
        "compute.futureReservations.cancel",
        (f"{FUTURE_RESERVATIONS}.cancel",),
        CALENDAR_MODE.id,
        f"{COMPUTE_DOCS}delete-future-reservations",
    ),
    Permission(
        "compute.advice.calendarMode",
        (f"{ADVICE}.calendar_mode",),
        CALENDAR_MODE.id,
        f"{COMPUTE_REST.replace('/v1/', '/beta/')}advice/calendarMode",
        note="the name follows Compute's permission for a method (service.resource.verb) "
        "and public permission lists; the REST page's own IAM section was not in the copy read",
    ),
)


def permissions_of(role: Role) -> tuple[str, ...]:
    """The role's permissions, sorted (a permission is listed once per role)."""
    return tuple(sorted({p.name for p in PERMISSIONS if p.role == role.id}))


def calls() -> dict[str, tuple[str, ...]]:
    """Every listed client method and the permissions it needs."""
    needed: dict[str, set[str]] = {}
    for permission in PERMISSIONS:
        for call in permission.calls:
            needed.setdefault(call, set()).add(permission.name)
    return {call: tuple(sorted(names)) for call, names in sorted(needed.items())}


def role_yaml(role: Role) -> str:
    """The role as `gcloud iam roles create ID --project P --file FILE` reads it (title,
    description, stage, includedPermissions), each permission's calls in a comment."""
    lines = [
        "# Generated by hack/gen_manifests.py from dws_operator.iam. Do not edit.",
        f"# gcloud iam roles create {role.id} --project PROJECT --file manifests/iam/"
        f"{role.id}.yaml",
        f"# Needed: {role.when}. Bind on {role.bound_on}.",
        f"title: {_quoted(role.title)}",
        f"description: {_quoted(role.description)}",
        "stage: GA",
        "includedPermissions:",
    ]
    for name in permissions_of(role):
        used_by = sorted(
            {c for p in PERMISSIONS if p.role == role.id and p.name == name for c in p.calls}
        )
        lines.append(f"# {', '.join(used_by)}")
        lines.append(f"- {name}")
    return "\n".join(lines) + "\n"


def _quoted(text: str) -> str:
    """A YAML double-quoted scalar (the texts here hold no quote or backslash)."""
    if '"' in text or "\\" in text:
        raise ValueError(f"unexpected quote or backslash in {text!r}")
    return f'"{text}"'
