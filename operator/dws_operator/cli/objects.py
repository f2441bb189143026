"""`dws-operator plan --objects`: what the operator would send for a request, as sent.

For every step of the capacity ladder: the Compute workload policy it makes if missing
(tpu7x multi-host slices), every slice's `CreateNodePoolRequest` and the Kubernetes
objects (Service, Job or JobSet). Nothing is rendered here: the controller's own
decision (`reconcile.preview`, which runs `decide`) says what to make, and the
functions the controller calls render it (`gke.slice_pool`, `gke.policies`).

Requests are shown in proto3 JSON (lowerCamelCase, enums by name, unset fields left
out), the form Google's REST APIs take and `gcloud --log-http` shows; the operator
sends the same messages over gRPC. Over REST, `parent` is the URL
(`POST /v1/{parent}/nodePools`) and the rest is the body.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.gke.bookings import insert_booking_request
from dws_operator.gke.policies import insert_policy_request
from dws_operator.gke.slice_pool import (
    api_json,
    create_node_pool_request,
    slice_node_pool,
    slice_pool_labels,
    workload_policy_topology,
)
from dws_operator.naming import workload_policy_name
from dws_operator.reconcile import ReconcileConfig, Refused, preview
from dws_operator.zones import ClusterSite, region_of

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
PLACEHOLDER_NAME = "my-training"
PLACEHOLDER_NAMESPACE = "default"
#: Stand-ins for the cluster the operator serves, when neither flag nor DWS_GKE_* says.
PLACEHOLDER_PROJECT = "my-project"
PLACEHOLDER_LOCATION = "us-east5"
PLACEHOLDER_CLUSTER = "my-cluster"


def register_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "--objects",
        "what the operator would send: the request's identity and the operator's settings "
        "(flags win over the DWS_* variables the operator reads)",
    )
    group.add_argument(
        "--objects",
        action="store_true",
        help="print every ladder step's CreateNodePool requests, workload policy and "
        "Kubernetes objects as the operator sends them (YAML unless -o json)",
    )
    group.add_argument("--name", help="TrainingRequest name (default: the manifest's)")
    group.add_argument("--namespace", help="namespace (default: the manifest's, else default)")
    group.add_argument(
        "--uid", help="the TrainingRequest's uid, known once applied (default: a placeholder)"
    )
    group.add_argument("--project", help="GCP project of the GKE cluster (DWS_GKE_PROJECT)")
    group.add_argument("--location", help="GKE cluster location (DWS_GKE_LOCATION)")
    group.add_argument("--cluster", help="GKE cluster name (DWS_GKE_CLUSTER)")
    group.add_argument(
        "--node-locations",
        help="comma-separated zones of a regional cluster's nodes (the operator reads them "
        "from GKE): a TPU slice's zone when the request names none",
    )
    group.add_argument("--kueue", help="auto, required or disabled (DWS_KUEUE)")
    group.add_argument("--default-queue", help="default Kueue LocalQueue (DWS_DEFAULT_QUEUE)")
    group.add_argument(
        "--queued-queue",
        help="LocalQueue for QueuedProvisioning requests without queueName (DWS_QUEUED_QUEUE)",
    )


@dataclass
class Identity:
    """The request's name, namespace and uid, and which of them are stand-ins."""

    name: str
    namespace: str
    uid: str
    placeholders: dict[str, str] = field(default_factory=dict)


def identity(args: argparse.Namespace, metadata: Mapping[str, Any]) -> Identity:
    """Flags, else the manifest's metadata, else a placeholder (said so)."""
    placeholders: dict[str, str] = {}

    def pick(flag: str, given: Any, known: Any, placeholder: str, why: str) -> str:
        if given:
            return str(given)
        if known:
            return str(known)
        placeholders[f"metadata.{flag}"] = f"{placeholder} ({why}; set --{flag})"
        return placeholder

    return Identity(
        name=pick("name", args.name, metadata.get("name"), PLACEHOLDER_NAME, "not given"),
        namespace=pick(
            "namespace",
            args.namespace,
            metadata.get("namespace"),
            PLACEHOLDER_NAMESPACE,
            "not given; kubectl uses the context's namespace",
        ),
        uid=pick(
            "uid",
            args.uid,
            metadata.get("uid"),
            PLACEHOLDER_UID,
            "the API server assigns it when the request is created",
        ),
        placeholders=placeholders,
    )


def run_objects(
    args: argparse.Namespace,
    spec: Mapping[str, Any],
    metadata: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
) -> int:
    """Print the objects; 2 on bad input or a request the operator would refuse."""
    # The controller package loads kopf and its clients (~2 s): only for --objects.
    from dws_operator.controller.config import ConfigError  # noqa: PLC0415

    try:
        document = objects_document(args, spec, metadata, environ)
    except (ConfigError, SpecError) as error:
        print(f"dws-operator plan: {error}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(document, indent=2))
    else:
        print(_yaml_header(document), end="")
        print(yaml.safe_dump(document, sort_keys=False), end="")
    return 0


def objects_document(
    args: argparse.Namespace,
    spec: Mapping[str, Any],
    metadata: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """The document `plan --objects` prints. Raises InvalidSpec for a spec the operator
    would reject, SpecError for one it would fail, ConfigError for a bad setting."""
    from dws_operator.controller.config import KueueMode, OperatorConfig  # noqa: PLC0415

    who = identity(args, metadata)
    placeholders = dict(who.placeholders)
    cluster: dict[str, str] = {}
    for key, env, placeholder in (
        ("project", "DWS_GKE_PROJECT", PLACEHOLDER_PROJECT),
        ("location", "DWS_GKE_LOCATION", _first_region(spec) or PLACEHOLDER_LOCATION),
        ("cluster", "DWS_GKE_CLUSTER", PLACEHOLDER_CLUSTER),
    ):
        given = getattr(args, key) or environ.get(env)
        if not given:
            placeholders[f"cluster {key}"] = f"{placeholder} (set --{key} or {env})"
        cluster[key] = given or placeholder
    # The operator's own reading of its settings: the same variables, checks and errors.
    config = OperatorConfig.from_env(
        environ,
        **cluster,
        kueue=args.kueue,
        default_queue=args.default_queue,
        queued_queue=args.queued_queue,
    )
    assumptions = [
        "the cluster serves JobSets (jobset.x-k8s.io/v1alpha2)",
        "no idle node pool of the same shape is taken over instead of a CreateNodePool "
        "(DWS_POOL_IDLE_SECONDS)",
        "each step's first attempt: a restart after preemption renders the same objects "
        "with the next attempt number",
    ]
    if config.kueue == KueueMode.AUTO:
        assumptions.insert(0, "Kueue is installed (DWS_KUEUE=auto uses it when it is)")
    reconcile = ReconcileConfig(
        kueue=config.kueue != KueueMode.DISABLED,
        jobset=True,
        default_queue=config.default_queue,
        queued_queue=config.queued_queue,
        # Steps' zones are checked against a real location only.
        location=None if "cluster location" in placeholders else config.location,
    )
    node_locations = tuple(z for z in (args.node_locations or "").split(",") if z)
    if not node_locations and not ClusterSite(config.location).zonal:
        assumptions.append(
            "the regional cluster's node locations are not known (--node-locations): a "
            "TPU slice outside flex-start needs a named zone"
        )
    site = ClusterSite(config.location, node_locations)
    try:
        steps = preview(who.name, who.namespace, who.uid, spec, reconcile, site)
    except InvalidSpec as invalid:
        raise invalid.first from None  # the flags' own errors were reported before
    except Refused as refused:
        raise SpecError("the operator would fail this request", str(refused)) from None
    region = region_of(config.location)
    rendered: list[dict[str, Any]] = []
    for step in steps:
        policies: dict[str, dict[str, Any]] = {}
        pools: list[dict[str, Any]] = []
        for name, plan in step.pools:
            # As the controller's pool create (controller/execute.py `_create_step`):
            # labels, the workload policy ensured first, then the pool.
            topology = workload_policy_topology(plan)
            policy = None
            if topology is not None:
                policy = workload_policy_name(topology)
                insert = insert_policy_request(config.project, region, topology)
                policies[policy] = _path_first(insert.wire(), "project", "region")
            defaults = config.pool_defaults
            labels = slice_pool_labels(who.namespace, who.name, who.uid, plan, defaults)
            pool = slice_node_pool(
                plan, name=name, labels=labels, workload_policy=policy, defaults=defaults
            )
            create = create_node_pool_request(config.cluster_path, pool)
            pools.append(_path_first(api_json(create), "parent"))
        entry: dict[str, Any] = {"step": step.index + 1, "mode": step.mode}
        entry["attempt"] = step.attempt
        if step.booking is not None:
            # Submitted once spec.approveBooking is true; the pool follows at the start.
            booking = insert_booking_request(config.project, step.booking)
            entry["futureReservation"] = _path_first(booking.wire(), "project", "zone")
        if policies:
            entry["workloadPolicies"] = list(policies.values())
        entry["createNodePool"] = pools
        entry["kubernetes"] = [dict(o) for o in step.objects]
        rendered.append(entry)
    return {"placeholders": placeholders, "assumptions": assumptions, "steps": rendered}


def _path_first(request: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The request with the fields of its URL path first, as one reads it."""
    return {**{k: request[k] for k in keys if k in request}, **request}


def _first_region(spec: Mapping[str, Any]) -> str | None:
    """The region of the request's first zone: a placeholder location that fits it."""
    provisioning = spec.get("provisioning")
    zones = provisioning.get("zones") if isinstance(provisioning, dict) else None
    if isinstance(zones, list) and zones and isinstance(zones[0], str):
        return region_of(zones[0])
    return None


def _yaml_header(document: Mapping[str, Any]) -> str:
    lines = ["# What dws-operator would send for this TrainingRequest, as it sends it."]
    placeholders = document["placeholders"]
    if placeholders:
        lines.append("# Placeholders (not known here; the operator sends the real values):")
        lines += [f"#   {what}: {value}" for what, value in placeholders.items()]
    else:
        lines.append("# No placeholders: every value is the one the operator sends.")
    return "\n".join(lines) + "\n"
