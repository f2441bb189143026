"""The Job and headless Service a TrainingRequest runs as (`dws_operator.workload`). Pure.

Expected values: multi-host TPU = Indexed Job, completions = parallelism = nodes,
backoffLimit 0, restartPolicy Never, subdomain = a headless Service, TPU ports
8471/8431; single-host = plain Job with OnFailure; Kueue: the queue label,
`suspend: true`, `provreq.kueue.x-k8s.io/maxRunDurationSeconds`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dws_operator.api import TrainingRequestSpec
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.workload import (
    ATTEMPT_LABEL,
    COMPLETION_INDEX_ANNOTATION,
    MANAGED_BY,
    MAX_RUN_ANNOTATION,
    QUEUE_LABEL,
    REQUEST_LABEL,
    TPU_PORTS,
    RequestRef,
    job_name,
    needs_service,
    queue_for,
    render_job,
    render_service,
    service_name,
    uses_provisioning_request,
)
from tests.builders import CONTAINER, gpu, make_spec, tpu
from tests.unit.facts import TPU_ROWS

Manifest = dict[str, Any]

REF = RequestRef(name="llama", namespace="ml", uid="6f1c2a40-0000-4000-8000-000000000001")
POOL = "dws-llama-0123456789"
OWNER = {
    "apiVersion": "dws-operator.dev/v1alpha1",
    "kind": "TrainingRequest",
    "name": "llama",
    "uid": "6f1c2a40-0000-4000-8000-000000000001",
    "controller": True,
    "blockOwnerDeletion": True,
}
TPU_TOLERATION = {
    "key": "google.com/tpu",
    "operator": "Equal",
    "value": "present",
    "effect": "NoSchedule",
}
GPU_TOLERATION = {
    "key": "nvidia.com/gpu",
    "operator": "Equal",
    "value": "present",
    "effect": "NoSchedule",
}
QUEUED_TOLERATION = {
    "key": "cloud.google.com/gke-queued",
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
FLEX_LABEL = "cloud.google.com/gke-flex-start"
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
TPU_ENV_NAMES = {"TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES"}


def _spec_and_plan(
    accelerator: dict[str, Any], mode: str = "FlexStart", pool: str | None = POOL, **extra: Any
) -> tuple[TrainingRequestSpec, SlicePlan]:
    spec = make_spec(accelerator, mode, **extra)
    return spec, plan_slice(spec, pool_name=pool)


def _render(
    accelerator: dict[str, Any],
    mode: str = "FlexStart",
    *,
    attempt: int = 0,
    queue: str | None = None,
    ref: RequestRef = REF,
    **extra: Any,
) -> tuple[Manifest, SlicePlan]:
    spec, plan = _spec_and_plan(accelerator, mode, **extra)
    return render_job(ref, spec, plan, attempt=attempt, queue=queue), plan


def _pod(job: Manifest) -> Manifest:
    pod: Manifest = job["spec"]["template"]["spec"]
    return pod


def _env(container: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in container.get("env", [])}


def _hostnames(job: Manifest) -> list[str]:
    value: str = _env(_pod(job)["containers"][0])["TPU_WORKER_HOSTNAMES"]["value"]
    return value.split(",")


def _template(**pod_spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [dict(CONTAINER)], **pod_spec}}


# A user's template exercising every field the renderer merges into or must keep.
RICH_TEMPLATE: dict[str, Any] = {
    "metadata": {
        "labels": {"team": "research", REQUEST_LABEL: "spoofed"},
        "annotations": {"example.com/note": "keep me"},
    },
    "spec": {
        "containers": [
            {
                "name": "train",
                "image": "us-docker.pkg.dev/example/train:1",
                "command": ["python", "train.py"],
                "env": [
                    {"name": "STEPS", "value": "1000"},
                    {"name": "TPU_WORKER_ID", "value": "user-set"},
                ],
                "ports": [{"name": "http", "containerPort": 8080}],
                "resources": {
                    "requests": {"cpu": "8", "memory": "32Gi"},
                    "limits": {"memory": "64Gi"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            },
            {
                "name": "sidecar",
                "image": "busybox:1.36",
                "env": [{"name": "MODE", "value": "log"}],
            },
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "serviceAccountName": "trainer",
        "nodeSelector": {NODE_POOL_LABEL: "user-pool", "example.com/rack": "a"},
        "tolerations": [
            {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"},
            dict(TPU_TOLERATION),
        ],
        "restartPolicy": "Always",
    },
}


# -- constants, names, small helpers ---------------------------------------------------


def test_constants_match_the_facts_sheet() -> None:
    assert TPU_PORTS == {"tpu-ici": 8471, "tpu-metrics": 8431}
    assert QUEUE_LABEL == "kueue.x-k8s.io/queue-name"
    assert MAX_RUN_ANNOTATION == "provreq.kueue.x-k8s.io/maxRunDurationSeconds"
    assert COMPLETION_INDEX_ANNOTATION == "batch.kubernetes.io/job-completion-index"
    assert MANAGED_BY == {"app.kubernetes.io/managed-by": "dws-operator"}
    assert REQUEST_LABEL == "dws-operator.dev/training-request"
    assert ATTEMPT_LABEL == "dws-operator.dev/attempt"


def test_owner_reference_makes_the_request_the_controller() -> None:
    assert REF.owner_reference() == OWNER


def test_request_ref_is_immutable() -> None:
    with pytest.raises(AttributeError):
        REF.name = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("request_name", "attempt", "expected"),
    [
        ("llama", 0, "llama"),
        ("llama", 1, "llama-r1"),
        ("llama", 2, "llama-r2"),
        ("llama", 10, "llama-r10"),
        ("llama", 100, "llama-r100"),
        ("a", 0, "a"),
        ("a" * 48, 0, "a" * 48),
        ("a" * 48, 7, "a" * 48 + "-r7"),
    ],
)
def test_job_name(request_name: str, attempt: int, expected: str) -> None:
    assert job_name(request_name, attempt) == expected


@pytest.mark.parametrize("attempt", [0, 1, 9, 10, 99, 100])
def test_job_name_of_longest_request_name_is_a_dns_label(attempt: int) -> None:
    # The CRD caps names at 48 characters and maxRestarts at 100.
    assert len(job_name("x" * 48, attempt)) <= 63


@pytest.mark.parametrize("name", ["llama", "a", "x" * 48])
def test_service_name_is_the_request_name(name: str) -> None:
    assert service_name(name) == name


@pytest.mark.parametrize(
    ("accelerator", "expected"),
    [
        (tpu("v6e", "1x1"), False),
        (tpu("v6e", "2x2"), False),
        (tpu("v6e", "2x4", "ct6e-standard-8t"), False),
        (tpu("v6e", "2x4"), True),
        (tpu("v6e", "4x4"), True),
        (tpu("v5p", "2x2x1"), False),
        (tpu("v5p", "2x2x2"), True),
        (gpu("nvidia-l4", nodes=1), False),
        (gpu("nvidia-h100-80gb", nodes=1), False),
        (gpu("nvidia-h100-80gb", nodes=2), True),
        (gpu("nvidia-h100-80gb", nodes=16), True),
    ],
)
def test_needs_service_only_for_more_than_one_node(
    accelerator: dict[str, Any], expected: bool
) -> None:
    _, plan = _spec_and_plan(accelerator)
    assert needs_service(plan) is expected


@pytest.mark.parametrize(
    ("spec_queue", "default", "expected"),
    [
        (None, None, None),
        (None, "default-q", "default-q"),
        ("team-a", None, "team-a"),
        ("team-a", "default-q", "team-a"),
    ],
)
def test_queue_for_prefers_the_spec_queue(
    spec_queue: str | None, default: str | None, expected: str | None
) -> None:
    extra = {"queueName": spec_queue} if spec_queue else {}
    spec = make_spec(tpu("v6e", "2x2"), **extra)
    assert queue_for(spec, default) == expected


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("FlexStart", False),
        ("QueuedProvisioning", True),
        ("Spot", False),
        ("OnDemand", False),
    ],
)
def test_uses_provisioning_request_only_for_queued_provisioning(mode: str, expected: bool) -> None:
    spec = make_spec(gpu("nvidia-h100-80gb", nodes=2), mode)
    assert uses_provisioning_request(spec.provisioning) is expected


# -- multi-host TPU ---------------------------------------------------------------------


def test_multi_host_tpu_job_whole_manifest() -> None:
    job, plan = _render(tpu("v6e", "4x4"))
    assert plan.nodes == 4
    labels = {
        "app.kubernetes.io/managed-by": "dws-operator",
        REQUEST_LABEL: "llama",
        ATTEMPT_LABEL: "0",
    }
    assert job == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "llama",
            "namespace": "ml",
            "labels": labels,
            "annotations": {},
            "ownerReferences": [OWNER],
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": 4,
            "parallelism": 4,
            "backoffLimit": 0,
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                    }
                ]
            },
            "activeDeadlineSeconds": 7 * 24 * 3600,
            "template": {
                "metadata": {"labels": labels, "annotations": {}},
                "spec": {
                    "containers": [
                        {
                            "name": "train",
                            "image": "us-docker.pkg.dev/example/train:1",
                            "resources": {
                                "requests": {"google.com/tpu": "4"},
                                "limits": {"google.com/tpu": "4"},
                            },
                            "env": [
                                {
                                    "name": "TPU_WORKER_ID",
                                    "valueFrom": {
                                        "fieldRef": {
                                            "fieldPath": "metadata.annotations"
                                            "['batch.kubernetes.io/job-completion-index']"
                                        }
                                    },
                                },
                                {
                                    "name": "TPU_WORKER_HOSTNAMES",
                                    "value": "llama-0.llama,llama-1.llama,llama-2.llama,"
                                    "llama-3.llama",
                                },
                                {"name": "DWS_ATTEMPT", "value": "0"},
                            ],
                            "ports": [
                                {"name": "tpu-ici", "containerPort": 8471},
                                {"name": "tpu-metrics", "containerPort": 8431},
                            ],
                        }
                    ],
                    "nodeSelector": {
                        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                        "cloud.google.com/gke-tpu-topology": "4x4",
                        FLEX_LABEL: "true",
                        NODE_POOL_LABEL: POOL,
                    },
                    "tolerations": [TPU_TOLERATION],
                    "restartPolicy": "Never",
                    "subdomain": "llama",
                },
            },
        },
    }


MULTI_HOST_TPU_ROWS = [
    pytest.param(version, topology, machine, resolved, nodes, id=f"{version}-{topology}")
    for version, topology, machine, resolved, nodes in TPU_ROWS
    if nodes > 1 and nodes <= 256
]


@pytest.mark.parametrize(
    ("version", "topology", "machine", "resolved", "nodes"), MULTI_HOST_TPU_ROWS
)
def test_multi_host_tpu_rows_render_an_indexed_job_of_one_pod_per_node(
    version: str, topology: str, machine: str | None, resolved: str, nodes: int
) -> None:
    mode = "Spot" if version == "v4" else "FlexStart"  # v4 has no flex-start
    job, plan = _render(tpu(version, topology, machine), mode)
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed",
        nodes,
        nodes,
    )
    assert spec["backoffLimit"] == 0
    assert "suspend" not in spec
    pod = _pod(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == "llama"
    assert _hostnames(job) == [f"llama-{i}.llama" for i in range(nodes)]
    resources = pod["containers"][0]["resources"]
    chips = str(plan.chips_per_node)
    assert resources == {"requests": {"google.com/tpu": chips}, "limits": {"google.com/tpu": chips}}
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == topology
    assert plan.machine_type == resolved


def test_tpu_worker_id_comes_from_the_completion_index_annotation() -> None:
    job, _ = _render(tpu("v5p", "2x2x4"))
    worker_id = _env(_pod(job)["containers"][0])["TPU_WORKER_ID"]
    assert worker_id == {
        "name": "TPU_WORKER_ID",
        "valueFrom": {
            "fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
            }
        },
    }
    assert "value" not in worker_id


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (0, "llama-0.llama,llama-1.llama"),
        (1, "llama-r1-0.llama,llama-r1-1.llama"),
        (12, "llama-r12-0.llama,llama-r12-1.llama"),
    ],
)
def test_tpu_worker_hostnames_are_job_pod_hostnames_under_the_service(
    attempt: int, expected: str
) -> None:
    # Pods of an Indexed Job are named <job>-<index>; the Service keeps the request name.
    job, _ = _render(tpu("v6e", "2x4"), attempt=attempt)
    assert job["metadata"]["name"] == job_name("llama", attempt)
    assert _env(_pod(job)["containers"][0])["TPU_WORKER_HOSTNAMES"]["value"] == expected
    assert _pod(job)["subdomain"] == "llama"


@pytest.mark.parametrize(
    ("accelerator", "attempt", "nodes"),
    [
        (tpu("v6e", "16x16"), 0, 64),
        (tpu("v6e", "16x16"), 100, 64),
        (tpu("v5e", "16x16"), 42, 64),
        (tpu("tpu7x", "4x4x576"), 100, 2304),
    ],
)
def test_hostnames_of_a_48_char_request_are_dns_labels(
    accelerator: dict[str, Any], attempt: int, nodes: int
) -> None:
    name = "n" * 47 + "z"
    assert len(name) == 48
    ref = RequestRef(name, "ml", "uid")
    job, _ = _render(accelerator, attempt=attempt, ref=ref)
    hostnames = _hostnames(job)
    assert len(hostnames) == nodes
    assert len(set(hostnames)) == nodes
    for hostname in hostnames:
        host, service = hostname.split(".")
        assert len(host) <= 63, host
        assert len(service) <= 63
        assert service == name
        assert host.startswith(job["metadata"]["name"] + "-")
    assert hostnames[-1] == f"{job_name(name, attempt)}-{nodes - 1}.{name}"


def test_tpu_ports_are_added_without_duplicating_the_users() -> None:
    template = _template()
    template["spec"]["containers"][0]["ports"] = [
        {"name": "ici", "containerPort": 8471},
        {"name": "http", "containerPort": 8080},
    ]
    job, _ = _render(tpu("v6e", "4x4"), template=template)
    ports = _pod(job)["containers"][0]["ports"]
    assert ports == [
        {"name": "ici", "containerPort": 8471},
        {"name": "http", "containerPort": 8080},
        {"name": "tpu-metrics", "containerPort": 8431},
    ]
    assert [p["containerPort"] for p in ports].count(8471) == 1


def test_rich_template_is_merged_and_the_users_fields_are_kept() -> None:
    job, plan = _render(tpu("v6e", "4x4"), template=copy.deepcopy(RICH_TEMPLATE))
    pod = _pod(job)
    train, sidecar = pod["containers"]

    # Plan wins on shared keys; the user's other selectors stay.
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        FLEX_LABEL: "true",
        NODE_POOL_LABEL: POOL,
        "example.com/rack": "a",
    }
    assert pod["nodeSelector"] == {"example.com/rack": "a", **plan.node_selector}
    # The user's TPU toleration is not repeated; theirs come first.
    assert pod["tolerations"] == [
        {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"},
        TPU_TOLERATION,
    ]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert pod["serviceAccountName"] == "trainer"

    assert train["command"] == ["python", "train.py"]
    assert train["volumeMounts"] == [{"name": "data", "mountPath": "/data"}]
    assert train["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi", "google.com/tpu": "4"},
        "limits": {"memory": "64Gi", "google.com/tpu": "4"},
    }
    env = train["env"]
    assert [e["name"] for e in env] == [
        "STEPS",
        "TPU_WORKER_ID",
        "TPU_WORKER_HOSTNAMES",
        "DWS_ATTEMPT",
    ]
    assert env[0] == {"name": "STEPS", "value": "1000"}
    assert "value" not in env[1]  # the user's fixed worker id is replaced by the index
    assert env[1]["valueFrom"]["fieldRef"]["fieldPath"].endswith(
        f"['{COMPLETION_INDEX_ANNOTATION}']"
    )
    assert train["ports"] == [
        {"name": "http", "containerPort": 8080},
        {"name": "tpu-ici", "containerPort": 8471},
        {"name": "tpu-metrics", "containerPort": 8431},
    ]

    # The other container is left exactly as written.
    assert sidecar == {
        "name": "sidecar",
        "image": "busybox:1.36",
        "env": [{"name": "MODE", "value": "log"}],
    }

    # Pod labels: the user's plus the operator's (the operator's win).
    meta = job["spec"]["template"]["metadata"]
    assert meta["labels"] == {
        "team": "research",
        REQUEST_LABEL: "llama",
        ATTEMPT_LABEL: "0",
        "app.kubernetes.io/managed-by": "dws-operator",
    }
    assert meta["annotations"] == {"example.com/note": "keep me"}
    # The Job's own labels do not carry the user's pod labels.
    assert "team" not in job["metadata"]["labels"]


@pytest.mark.parametrize(
    ("accelerator", "mode", "expected"),
    [
        (tpu("v6e", "4x4"), "FlexStart", [TPU_TOLERATION]),
        (tpu("v6e", "4x4"), "Spot", [TPU_TOLERATION]),
        (gpu("nvidia-h100-80gb", nodes=2), "FlexStart", [GPU_TOLERATION]),
        (
            gpu("nvidia-h100-80gb", nodes=2),
            "QueuedProvisioning",
            [GPU_TOLERATION, QUEUED_TOLERATION],
        ),
    ],
)
def test_required_tolerations_are_appended_once(
    accelerator: dict[str, Any], mode: str, expected: list[Manifest]
) -> None:
    user = {"key": "example.com/x", "operator": "Exists", "effect": "NoExecute"}
    template = _template(tolerations=[user, *copy.deepcopy(expected)])
    job, _ = _render(accelerator, mode, template=template)
    assert _pod(job)["tolerations"] == [user, *expected]

    bare, _ = _render(accelerator, mode)
    assert _pod(bare)["tolerations"] == expected


def test_accelerator_resources_go_to_the_first_container_only() -> None:
    template = _template()
    template["spec"]["containers"].append({"name": "sidecar", "image": "busybox:1.36"})
    job, _ = _render(tpu("v6e", "4x4"), template=template)
    first, second = _pod(job)["containers"]
    assert first["resources"]["requests"] == {"google.com/tpu": "4"}
    assert first["resources"]["limits"] == {"google.com/tpu": "4"}
    assert isinstance(first["resources"]["requests"]["google.com/tpu"], str)
    assert second == {"name": "sidecar", "image": "busybox:1.36"}
    assert "env" not in second


def test_no_accelerator_request_added_when_another_container_already_asks() -> None:
    # API docs (PodSpecTemplate.containers, and the CRD): requests and limits are added
    # "to the first container unless a container already asks for them". Adding 4 more
    # chips to `train` would ask for 8 on a 4-chip node: the pod could never schedule.
    template = _template()
    template["spec"]["containers"].append(
        {
            "name": "tpu-worker",
            "image": "busybox:1.36",
            "resources": {
                "requests": {"google.com/tpu": "4"},
                "limits": {"google.com/tpu": "4"},
            },
        }
    )
    job, _ = _render(tpu("v6e", "4x4"), template=template)
    first, second = _pod(job)["containers"]
    assert second["resources"]["limits"] == {"google.com/tpu": "4"}
    assert "google.com/tpu" not in first.get("resources", {}).get("limits", {})
    assert "google.com/tpu" not in first.get("resources", {}).get("requests", {})


# -- single-host and GPU ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator", "resource", "chips"),
    [
        (tpu("v6e", "1x1"), "google.com/tpu", "1"),
        (tpu("v6e", "2x2"), "google.com/tpu", "4"),
        (tpu("v6e", "2x4", "ct6e-standard-8t"), "google.com/tpu", "8"),
        (tpu("v5e", "2x4", "ct5lp-hightpu-8t"), "google.com/tpu", "8"),
        (tpu("v5p", "2x2x1"), "google.com/tpu", "4"),
        (gpu("nvidia-h100-80gb"), "nvidia.com/gpu", "8"),
        (gpu("nvidia-h100-80gb", machine_type="a3-highgpu-2g"), "nvidia.com/gpu", "2"),
        (gpu("nvidia-l4", count=4), "nvidia.com/gpu", "4"),
        (gpu("nvidia-tesla-a100", count=16), "nvidia.com/gpu", "16"),
    ],
)
def test_single_host_is_a_plain_job(accelerator: dict[str, Any], resource: str, chips: str) -> None:
    job, plan = _render(accelerator)
    assert plan.single_host
    spec = job["spec"]
    assert "completionMode" not in spec
    assert "backoffLimit" not in spec
    assert (spec["completions"], spec["parallelism"]) == (1, 1)
    assert spec["activeDeadlineSeconds"] == 7 * 24 * 3600
    pod = _pod(job)
    assert pod["restartPolicy"] == "OnFailure"
    assert "subdomain" not in pod
    container = pod["containers"][0]
    assert not TPU_ENV_NAMES & set(_env(container))
    assert "ports" not in container
    assert container["resources"] == {"requests": {resource: chips}, "limits": {resource: chips}}
    assert pod["nodeSelector"] == plan.node_selector
    assert job["metadata"]["ownerReferences"] == [OWNER]


def test_gpu_multi_node_is_indexed_without_tpu_env() -> None:
    job, plan = _render(gpu("nvidia-h100-80gb", nodes=3))
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    assert spec["backoffLimit"] == 0
    pod = _pod(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == "llama"
    container = pod["containers"][0]
    assert container["env"] == [{"name": "DWS_ATTEMPT", "value": "0"}]
    assert "ports" not in container
    assert container["resources"] == {
        "requests": {"nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    }
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        FLEX_LABEL: "true",
        NODE_POOL_LABEL: POOL,
    }
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert plan.nodes == 3


def test_gpu_multi_node_keeps_the_users_env_untouched() -> None:
    template = _template()
    template["spec"]["containers"][0]["env"] = [{"name": "TPU_WORKER_ID", "value": "7"}]
    job, _ = _render(gpu("nvidia-h100-80gb", nodes=2), template=template)
    assert _pod(job)["containers"][0]["env"] == [
        {"name": "TPU_WORKER_ID", "value": "7"},
        {"name": "DWS_ATTEMPT", "value": "0"},
    ]


def test_single_host_tpu_overrides_the_users_restart_policy() -> None:
    job, _ = _render(tpu("v6e", "2x2"), template=_template(restartPolicy="Never"))
    assert _pod(job)["restartPolicy"] == "OnFailure"


def test_without_a_pool_name_no_node_pool_selector() -> None:
    spec, plan = _spec_and_plan(tpu("v6e", "4x4"), pool=None)
    job = render_job(REF, spec, plan)
    assert NODE_POOL_LABEL not in _pod(job)["nodeSelector"]


# -- Kueue, deadlines, attempts ---------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator", "mode", "queue", "labelled", "annotation"),
    [
        (tpu("v6e", "4x4"), "FlexStart", None, False, None),
        (tpu("v6e", "4x4"), "FlexStart", "team-a", True, None),
        (tpu("v6e", "2x2"), "Spot", "team-a", True, None),
        (gpu("nvidia-l4"), "OnDemand", "team-a", True, None),
        (gpu("nvidia-h100-80gb", nodes=2), "FlexStart", "team-a", True, None),
        (gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", None, False, None),
        (gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", "team-a", True, "5400"),
        (gpu("nvidia-l4"), "QueuedProvisioning", "gpu-queue", True, "5400"),
        (tpu("v6e", "4x4"), "QueuedProvisioning", "tpu-queue", True, "5400"),
    ],
)
def test_kueue_label_suspend_and_provreq_annotation(
    accelerator: dict[str, Any],
    mode: str,
    queue: str | None,
    labelled: bool,
    annotation: str | None,
) -> None:
    job, plan = _render(accelerator, mode, queue=queue, provisioning={"maxRunDuration": "90m"})
    labels = job["metadata"]["labels"]
    annotations = job["metadata"]["annotations"]
    if labelled:
        assert labels[QUEUE_LABEL] == queue
        assert job["spec"]["suspend"] is True
    else:
        assert QUEUE_LABEL not in labels
        assert "suspend" not in job["spec"]
    if annotation is None:
        assert MAX_RUN_ANNOTATION not in annotations
    elif plan.kind == "tpu":
        # GKE provisions the whole slice of this topology for the ProvisioningRequest.
        assert annotations == {
            MAX_RUN_ANNOTATION: annotation,
            "provreq.kueue.x-k8s.io/tpu-topology": "4x4",
        }
    else:
        assert annotations == {MAX_RUN_ANNOTATION: annotation}
        assert annotation == str(plan.max_run_seconds)
    # Operator labels are there either way.
    assert labels[REQUEST_LABEL] == "llama"
    assert labels["app.kubernetes.io/managed-by"] == "dws-operator"


@pytest.mark.parametrize(
    ("duration", "seconds"),
    [
        ("168h", 604800),
        ("24h", 86400),
        ("90m", 5400),
        ("1h30m", 5400),
        ("2h0m30s", 7230),
        ("45s", 45),
    ],
)
def test_active_deadline_is_the_max_run_duration(duration: str, seconds: int) -> None:
    for accelerator in (tpu("v6e", "4x4"), tpu("v6e", "2x2"), gpu("nvidia-h100-80gb", nodes=2)):
        job, _ = _render(accelerator, provisioning={"maxRunDuration": duration})
        assert job["spec"]["activeDeadlineSeconds"] == seconds


@pytest.mark.parametrize("attempt", [0, 1, 5, 100])
def test_attempt_names_the_job_and_labels_job_and_pods(attempt: int) -> None:
    job, _ = _render(tpu("v6e", "4x4"), attempt=attempt)
    assert job["metadata"]["name"] == ("llama" if attempt == 0 else f"llama-r{attempt}")
    assert job["metadata"]["labels"][ATTEMPT_LABEL] == str(attempt)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert pod_labels[ATTEMPT_LABEL] == str(attempt)
    # Every attempt's pods are selected by the one Service.
    assert pod_labels[REQUEST_LABEL] == render_service(REF)["spec"]["selector"][REQUEST_LABEL]
    assert _pod(job)["subdomain"] == "llama"


def test_namespace_and_owner_follow_the_ref() -> None:
    ref = RequestRef("other", "team-b", "uid-2")
    job, _ = _render(tpu("v6e", "2x2"), ref=ref)
    assert job["metadata"]["namespace"] == "team-b"
    assert job["metadata"]["ownerReferences"] == [ref.owner_reference()]
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["uid"], owner["controller"], owner["name"]) == ("uid-2", True, "other")


# -- the user's template is never mutated -----------------------------------------------


@pytest.mark.parametrize(
    "accelerator",
    [tpu("v6e", "4x4"), tpu("v6e", "2x2"), gpu("nvidia-h100-80gb", nodes=2)],
)
def test_rendering_does_not_mutate_the_template(accelerator: dict[str, Any]) -> None:
    spec, plan = _spec_and_plan(accelerator, template=copy.deepcopy(RICH_TEMPLATE))
    before = spec.model_dump(by_alias=True, mode="json")
    first = render_job(REF, spec, plan, queue="q")
    second = render_job(REF, spec, plan, queue="q")
    assert first == second
    assert spec.model_dump(by_alias=True, mode="json") == before
    # The output shares nothing with the spec: editing it changes no later render.
    _pod(first)["containers"][0]["env"].append({"name": "X", "value": "y"})
    _pod(first)["nodeSelector"]["x"] = "y"
    _pod(first)["tolerations"].clear()
    first["spec"]["template"]["metadata"]["annotations"]["x"] = "y"
    first["spec"]["template"]["metadata"]["labels"]["x"] = "y"
    assert render_job(REF, spec, plan, queue="q") == second
    assert spec.model_dump(by_alias=True, mode="json") == before


# -- the headless Service ---------------------------------------------------------------


def test_headless_service() -> None:
    assert render_service(REF) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "llama",
            "namespace": "ml",
            "labels": {"app.kubernetes.io/managed-by": "dws-operator", REQUEST_LABEL: "llama"},
            "ownerReferences": [OWNER],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {REQUEST_LABEL: "llama"},
            "publishNotReadyAddresses": True,
        },
    }


def test_service_selects_the_jobs_pods_and_is_its_subdomain() -> None:
    job, _ = _render(tpu("v6e", "4x4"))
    service = render_service(REF)
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert _pod(job)["subdomain"] == service["metadata"]["name"]
    assert service["metadata"]["namespace"] == job["metadata"]["namespace"]


@pytest.mark.parametrize("attempt", [0, 3])
def test_the_attempt_is_in_the_environment(attempt: int) -> None:
    spec, plan = _spec_and_plan(tpu("v6e", "4x4"))
    job = render_job(REF, spec, plan, attempt=attempt)
    env = {e["name"]: e for e in _pod(job)["containers"][0]["env"]}
    assert env["DWS_ATTEMPT"] == {"name": "DWS_ATTEMPT", "value": str(attempt)}


def test_single_host_jobs_have_no_pod_failure_policy() -> None:
    spec, plan = _spec_and_plan(tpu("v6e", "2x2"))
    assert "podFailurePolicy" not in render_job(REF, spec, plan)["spec"]


@pytest.mark.parametrize("attempt", [0, 2])
def test_the_checkpoint_dir_reaches_every_attempt(attempt: int) -> None:
    spec = make_spec(tpu("v6e", "4x4"), checkpointDir="gs://bucket/llama/ckpt")
    plan = plan_slice(spec, pool_name=POOL)
    env = _pod(render_job(REF, spec, plan, attempt=attempt))["containers"][0]["env"]
    assert {"name": "DWS_CHECKPOINT_DIR", "value": "gs://bucket/llama/ckpt"} in env
    assert {"name": "DWS_ATTEMPT", "value": str(attempt)} in env


def test_no_checkpoint_dir_no_variable() -> None:
    spec, plan = _spec_and_plan(tpu("v6e", "4x4"))
    env = _pod(render_job(REF, spec, plan))["containers"][0]["env"]
    assert "DWS_CHECKPOINT_DIR" not in {e["name"] for e in env}
