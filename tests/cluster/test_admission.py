"""The real API server enforces the generated CRD: schema, CEL rules, immutability,
defaults and the status subresource."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from dws_operator.api import GROUP, PLURAL, VERSION, TrainingRequestSpec
from dws_operator.catalog import GPU_ACCELERATORS, TPU_GENERATIONS, ProvisioningMode
from dws_operator.validation import spec_errors
from tests.builders import CONTAINER, gpu, manifest, spec_body, tpu
from tests.corpus import (
    BLOCK,
    INVALID,
    INVALID_STEPS,
    MALFORMED_RESERVATIONS,
    VALID_RESERVATIONS,
    WINDOW,
)
from tests.unit import facts

pytestmark = pytest.mark.usefixtures("training_request_crd")


def _objects(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


def create(
    api: k8s.ApiClient, namespace: str, body: dict[str, Any], dry_run: bool = True
) -> dict[str, Any]:
    result: dict[str, Any] = _objects(api).create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        body,
        dry_run="All" if dry_run else None,
        field_validation="Strict",
    )
    return result


def rejection(
    api: k8s.ApiClient, namespace: str, body: dict[str, Any], status: int = 422
) -> tuple[str, list[str]]:
    """The server's message and the fields its causes name; fails if it accepts `body`
    or refuses it with another status than `status`: 422 for schema and CEL violations,
    400 for what strict decoding refuses (a field the schema does not have)."""
    with pytest.raises(ApiException) as raised:
        create(api, namespace, body)
    assert raised.value.status == status, raised.value.body
    status = json.loads(raised.value.body)
    causes = status.get("details", {}).get("causes", [])
    return status["message"], [c.get("field", "") for c in causes]


def _name() -> str:
    return f"tr-{uuid.uuid4().hex[:8]}"


# -- the domain rules (same corpus as the Python rules) ---------------------------------


@pytest.mark.parametrize(("case", "kwargs", "field", "words"), INVALID, ids=[c[0] for c in INVALID])
def test_server_rejects_what_gke_would(
    api: k8s.ApiClient, namespace: str, case: str, kwargs: dict[str, Any], field: str, words: str
) -> None:
    args = copy.deepcopy(kwargs)
    body = manifest(_name(), spec_body(args.pop("accelerator"), **args))
    message, fields = rejection(api, namespace, body)
    assert field in fields, f"{case}: server named {fields}: {message}"
    assert f"{field}:" in message
    assert "evaluating rule" not in message, message  # no CEL runtime errors, only verdicts


@pytest.mark.parametrize(
    ("case", "kwargs", "field", "words"), INVALID_STEPS, ids=[c[0] for c in INVALID_STEPS]
)
def test_server_names_the_broken_step_of_a_ladder(
    api: k8s.ApiClient, namespace: str, case: str, kwargs: dict[str, Any], field: str, words: str
) -> None:
    args = copy.deepcopy(kwargs)
    body = manifest(_name(), spec_body(args.pop("accelerator"), **args))
    message, fields = rejection(api, namespace, body)
    named = [f for f in fields if f.startswith("spec.provisioning.fallback")]
    assert named, f"{case}: server named {fields}: {message}"
    assert f"{field}: " in message, message
    assert words in message, message
    assert "evaluating rule" not in message, message


def test_a_valid_ladder_is_accepted_and_immutable(api: k8s.ApiClient, namespace: str) -> None:
    spec = spec_body(
        tpu("v6e", "4x4"),
        provisioning={
            "zones": ["us-east5-a"],
            "maxWaitDuration": "30m",
            "fallback": [
                {"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "30m"},
                {"mode": "Spot"},
                {"mode": "Reservation", "reservation": "r1", "maxWaitDuration": "0s"},
            ],
        },
    )
    name = _name()
    created = create(api, namespace, manifest(name, spec), dry_run=False)
    assert created["spec"]["provisioning"]["fallback"][1] == {"mode": "Spot"}
    changed = copy.deepcopy(created)
    changed["spec"]["provisioning"]["fallback"].pop()
    with pytest.raises(ApiException) as raised:
        _objects(api).replace_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, changed
        )
    assert raised.value.status == 422
    assert "spec.provisioning is immutable" in raised.value.body


def test_a_long_run_is_accepted_with_its_defaults_and_immutable(
    api: k8s.ApiClient, namespace: str
) -> None:
    spec = spec_body(gpu("nvidia-h100-80gb", nodes=2), run={"duration": "500h"})
    name = _name()
    created = create(api, namespace, manifest(name, spec), dry_run=False)
    assert created["spec"]["run"] == {
        "duration": "500h",
        "stopBefore": "10m",
        "requestAhead": "30m",
    }
    objects = _objects(api)
    for change in ({"duration": "600h"}, None):
        changed = copy.deepcopy(created)
        if change is None:
            del changed["spec"]["run"]
        else:
            changed["spec"]["run"].update(change)
        with pytest.raises(ApiException) as raised:
            objects.replace_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, changed
            )
        assert raised.value.status == 422
        assert "spec.run is immutable" in raised.value.body
    # A run of one window, or with no duration, has no segment rule to break.
    for run in (
        {"stopBefore": "5m"},
        {"duration": "40m", "stopBefore": "59m"},
    ):
        one = spec_body(gpu("nvidia-h100-80gb"), provisioning={"maxRunDuration": "1h"}, run=run)
        assert spec_errors(TrainingRequestSpec.model_validate(one)) == []
        create(api, namespace, manifest(_name(), one))
    # Added later, too: the pools' names were chosen without room for its segments.
    plain = create(api, namespace, manifest(_name(), spec_body(gpu("nvidia-h100-80gb"))), False)
    plain["spec"]["run"] = {"duration": "500h"}
    with pytest.raises(ApiException) as raised:
        objects.replace_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, plain["metadata"]["name"], plain
        )
    assert "spec.run is immutable" in raised.value.body


def test_a_ladder_has_at_most_eight_steps(api: k8s.ApiClient, namespace: str) -> None:
    spec = spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Spot"}] * 8})
    message, fields = rejection(api, namespace, manifest(_name(), spec))
    assert "spec.provisioning.fallback" in fields, message
    assert "must have at most 7 items" in message


# -- malformed input: schema errors naming the field -------------------------------------

TPU_4X4 = tpu("v6e", "4x4")


def _with(path: str, value: Any, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """A valid spec with `path` (dotted, below spec) set to `value`; None deletes it."""
    spec = copy.deepcopy(base or spec_body(TPU_4X4))
    *parents, leaf = path.split(".")
    node = spec
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(leaf, None)
    else:
        node[leaf] = value
    return spec


GPU_SPEC = spec_body(gpu("nvidia-l4", nodes=2))

MALFORMED: list[tuple[str, dict[str, Any], str]] = [
    (
        "topology-trailing-x",
        _with("accelerator.tpu.topology", "4x"),
        "spec.accelerator.tpu.topology",
    ),
    (
        "topology-zero-side",
        _with("accelerator.tpu.topology", "0x4"),
        "spec.accelerator.tpu.topology",
    ),
    ("topology-4d", _with("accelerator.tpu.topology", "4x4x4x4"), "spec.accelerator.tpu.topology"),
    ("topology-letters", _with("accelerator.tpu.topology", "axb"), "spec.accelerator.tpu.topology"),
    (
        "topology-huge",
        _with("accelerator.tpu.topology", "99999x99999"),
        "spec.accelerator.tpu.topology",
    ),
    ("topology-int", _with("accelerator.tpu.topology", 44), "spec.accelerator.tpu.topology"),
    ("topology-missing", _with("accelerator.tpu.topology", None), "spec.accelerator.tpu.topology"),
    ("version-unknown", _with("accelerator.tpu.version", "v9"), "spec.accelerator.tpu.version"),
    ("version-missing", _with("accelerator.tpu.version", None), "spec.accelerator.tpu.version"),
    ("tpu-as-string", _with("accelerator.tpu", "v6e"), "spec.accelerator.tpu"),
    (
        "gpu-type-unknown",
        _with("accelerator.gpu.type", "nvidia-k80", GPU_SPEC),
        "spec.accelerator.gpu.type",
    ),
    ("gpu-nodes-zero", _with("accelerator.gpu.nodes", 0, GPU_SPEC), "spec.accelerator.gpu.nodes"),
    (
        "gpu-nodes-huge",
        _with("accelerator.gpu.nodes", 10**12, GPU_SPEC),
        "spec.accelerator.gpu.nodes",
    ),
    (
        "gpu-nodes-string",
        _with("accelerator.gpu.nodes", "two", GPU_SPEC),
        "spec.accelerator.gpu.nodes",
    ),
    (
        "gpu-nodes-missing",
        _with("accelerator.gpu.nodes", None, GPU_SPEC),
        "spec.accelerator.gpu.nodes",
    ),
    ("gpu-count-huge", _with("accelerator.gpu.count", 64, GPU_SPEC), "spec.accelerator.gpu.count"),
    ("both-tpu-and-gpu", _with("accelerator", {**TPU_4X4, **gpu("nvidia-l4")}), "spec.accelerator"),
    ("neither-tpu-nor-gpu", _with("accelerator", {}), "spec.accelerator"),
    ("accelerator-missing", _with("accelerator", None), "spec.accelerator"),
    ("provisioning-missing", _with("provisioning", None), "spec.provisioning"),
    ("mode-missing", _with("provisioning.mode", None), "spec.provisioning.mode"),
    ("mode-unknown", _with("provisioning.mode", "Cheap"), "spec.provisioning.mode"),
    (
        "wait-in-days",
        _with("provisioning.maxWaitDuration", "1d"),
        "spec.provisioning.maxWaitDuration",
    ),
    (
        "wait-negative",
        _with("provisioning.maxWaitDuration", "-1h"),
        "spec.provisioning.maxWaitDuration",
    ),
    ("run-empty", _with("provisioning.maxRunDuration", ""), "spec.provisioning.maxRunDuration"),
    (
        "run-overflow",
        _with("provisioning.maxRunDuration", "99999999999h"),
        "spec.provisioning.maxRunDuration",
    ),
    ("zone-malformed", _with("provisioning.zones", ["mars"]), "spec.provisioning.zones[0]"),
    ("zones-not-a-list", _with("provisioning.zones", "us-east5-a"), "spec.provisioning.zones"),
    (
        "reservation-malformed",
        _with("provisioning.reservation", "Not A Name"),
        "spec.provisioning.reservation",
    ),
    *[
        (
            f"reservation-{case}",
            _with("provisioning", {"mode": "Reservation", "reservation": value}),
            "spec.provisioning.reservation",
        )
        for case, value in MALFORMED_RESERVATIONS
    ],
    ("cleanup-unknown", _with("nodePool", {"cleanup": "Shred"}), "spec.nodePool.cleanup"),
    ("pool-name-too-long", _with("nodePool", {"name": "p" * 41}), "spec.nodePool.name"),
    ("pool-name-uppercase", _with("nodePool", {"name": "Pool"}), "spec.nodePool.name"),
    ("restarts-negative", _with("maxRestarts", -1), "spec.maxRestarts"),
    ("restarts-huge", _with("maxRestarts", 10**9), "spec.maxRestarts"),
    ("queue-malformed", _with("queueName", "Queue_1"), "spec.queueName"),
    ("template-missing", _with("template", None), "spec.template"),
    (
        "containers-empty",
        _with("template", {"spec": {"containers": []}}),
        "spec.template.spec.containers",
    ),
    (
        "container-without-image",
        _with("template", {"spec": {"containers": [{"name": "t"}]}}),
        "spec.template.spec.containers[0].image",
    ),
    ("unknown-field", _with("accelerator.tpu.chips", 16), "spec.accelerator.tpu.chips"),
    # Slices are TPU slices: a GPU request has no such field.
    (
        "slices-on-gpu",
        _with("accelerator", {"gpu": {"type": "nvidia-l4", "nodes": 2, "slices": 2}}),
        "spec.accelerator.gpu.slices",
    ),
    ("slices-zero", _with("accelerator.tpu.slices", 0), "spec.accelerator.tpu.slices"),
    (
        "gpu-driver-unknown",
        _with("accelerator.gpu.driver", "Newest", GPU_SPEC),
        "spec.accelerator.gpu.driver",
    ),
    ("gpu-driver-on-tpu", _with("accelerator.tpu.driver", "Latest"), "spec.accelerator.tpu.driver"),
    ("slices-too-many", _with("accelerator.tpu.slices", 65), "spec.accelerator.tpu.slices"),
]


#: The malformed cases that name a field the schema does not have: strict decoding refuses
#: them (400) before any rule is evaluated (422).
UNKNOWN_FIELDS = {"unknown-field", "slices-on-gpu", "gpu-driver-on-tpu"}


@pytest.mark.parametrize(("case", "spec", "field"), MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_input_is_rejected_naming_the_field(
    api: k8s.ApiClient, namespace: str, case: str, spec: dict[str, Any], field: str
) -> None:
    status = 400 if case in UNKNOWN_FIELDS else 422
    message, _ = rejection(api, namespace, manifest(_name(), spec), status)
    assert field in message, f"{case}: {message}"
    assert "evaluating rule" not in message, message


def test_the_corpus_is_large_enough() -> None:
    assert len(INVALID) + len(MALFORMED) >= 30


@pytest.mark.parametrize(
    "name", ["9-starts-with-digit", "has_underscore", "x" * 49], ids=["digit", "underscore", "long"]
)
def test_names_that_cannot_become_hostnames_are_rejected(
    api: k8s.ApiClient, namespace: str, name: str
) -> None:
    body = manifest(name, spec_body(TPU_4X4))
    with pytest.raises(ApiException) as raised:
        create(api, namespace, body)
    assert raised.value.status == 422
    assert "metadata.name" in json.loads(raised.value.body)["message"]


def test_a_multi_slice_name_leaves_room_for_the_jobsets_pod_names(
    api: k8s.ApiClient, namespace: str
) -> None:
    sliced = spec_body(tpu("v5p", "2x2x2", slices=2))
    with pytest.raises(ApiException) as raised:
        create(api, namespace, manifest("x" * 42, sliced))
    assert raised.value.status == 422
    assert "at most 41 characters with several slices" in json.loads(raised.value.body)["message"]
    assert create(api, namespace, manifest("y" * 41, sliced))["metadata"]["name"] == "y" * 41


def test_missing_spec_is_rejected(api: k8s.ApiClient, namespace: str) -> None:
    body = manifest(_name(), {})
    del body["spec"]
    message, _ = rejection(api, namespace, body)
    assert "spec: Required value" in message


# -- everything valid is accepted ------------------------------------------------------

VALID: list[tuple[str, dict[str, Any]]] = [
    *[
        (f"{v}-{t}-{m or 'default'}", spec_body(tpu(v, t, m), mode="Spot"))
        for v, t, m, _, _ in facts.TPU_ROWS
    ],
    *[
        (f"{g}-{m}", spec_body(gpu(g, nodes=2, machine_type=m, count=n), mode="OnDemand"))
        for g, machines in facts.GPU_MACHINES.items()
        for m, n in machines.items()
    ],
    *[
        (f"mode-{mode}", spec_body(gpu("nvidia-h100-80gb"), mode=mode))
        for mode in ("FlexStart", "QueuedProvisioning", "Spot", "OnDemand")
    ],
    *[
        (f"queued-tpu-{v}-{t}", spec_body(tpu(v, t), mode="QueuedProvisioning"))
        for v, t in (("v5e", "2x4"), ("v5p", "2x2x2"), ("v6e", "4x4"), ("tpu7x", "2x2x2"))
    ],
    *[
        (f"slices-{v}-{t}-{n}", spec_body(tpu(v, t, m, slices=n), mode=mode))
        for v, t, m, n, mode in (
            ("v5p", "2x2x2", None, 2, "FlexStart"),
            ("v6e", "4x4", None, 64, "Spot"),
            ("v5e", "2x4", "ct5lp-hightpu-4t", 3, "OnDemand"),
            ("tpu7x", "4x4x4", None, 4, "FlexStart"),
        )
    ],
    *[
        (f"gpu-driver-{d}", spec_body({"gpu": {"type": "nvidia-l4", "nodes": 1, "driver": d}}))
        for d in ("Default", "Latest", "Disabled")
    ],
    (
        "slices-named-pool",
        spec_body(tpu("v5p", "2x2x2", slices=2), nodePool={"name": "p" * 36}),
    ),
    (
        "reservation",
        spec_body(
            TPU_4X4,
            mode="Reservation",
            provisioning={"reservation": "projects/my-proj/reservations/blk-1"},
        ),
    ),
    *[
        (
            f"reservation-{index}",
            spec_body(gpu("nvidia-b200"), mode="Reservation", provisioning={"reservation": r}),
        )
        for index, r in enumerate(VALID_RESERVATIONS)
    ],
    *[
        (
            f"calendar-{how}",
            spec_body(
                gpu("nvidia-h100-80gb", nodes=2),
                mode="Calendar",
                provisioning={"zones": ["us-east5-a"], "calendar": {"duration": "72h", **when}},
            ),
        )
        for how, when in (
            ("start", {"startTime": BLOCK["startTime"]}),
            ("window", WINDOW),
            ("window-of-a-moment", {"earliest": WINDOW["earliest"], "latest": WINDOW["earliest"]}),
        )
    ],
    (
        "durations",
        spec_body(TPU_4X4, provisioning={"maxWaitDuration": "0s", "maxRunDuration": "1h30m"}),
    ),
    (
        "existing-pool",
        spec_body(TPU_4X4, nodePool={"existing": True, "name": "tpu-pool", "cleanup": "Keep"}),
    ),
    (
        "everything",
        spec_body(
            TPU_4X4,
            queueName="team-a",
            maxRestarts=3,
            provisioning={"zones": ["us-east5-b"]},
            template={
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "containers": [{**CONTAINER, "env": [{"name": "X", "value": "1"}]}],
                    "volumes": [{"name": "v", "emptyDir": {}}],
                },
            },
        ),
    ),
]


@pytest.mark.parametrize(("case", "spec"), VALID, ids=[c[0] for c in VALID])
def test_valid_requests_are_accepted(
    api: k8s.ApiClient, namespace: str, case: str, spec: dict[str, Any]
) -> None:
    TrainingRequestSpec.model_validate(spec)  # valid for the Python rules too
    assert spec_errors(TrainingRequestSpec.model_validate(spec)) == []
    created = create(api, namespace, manifest(_name(), spec))
    # The server adds the accelerator's defaults: a TPU request is one slice, and GKE
    # installs its default GPU driver.
    expected = copy.deepcopy(spec["accelerator"])
    if "tpu" in expected:
        expected["tpu"].setdefault("slices", 1)
    if "gpu" in expected:
        expected["gpu"].setdefault("driver", "Default")
    assert created["spec"]["accelerator"] == expected


def test_defaults_are_applied(api: k8s.ApiClient, namespace: str) -> None:
    created = create(api, namespace, manifest(_name(), spec_body(TPU_4X4)))
    assert created["spec"]["provisioning"]["maxWaitDuration"] == "24h"
    assert created["spec"]["provisioning"]["maxRunDuration"] == "168h"
    assert created["spec"]["nodePool"] == {"cleanup": "ScaleToZero", "existing": False}


# -- the API server agrees with the Python rules on random requests ----------------------

TPU_MACHINES = sorted({m.name for g in TPU_GENERATIONS.values() for m in g.machine_types})
GPU_MACHINES = sorted({m.name for a in GPU_ACCELERATORS.values() for m in a.machine_types})
TOPOLOGIES = st.one_of(
    st.sampled_from(sorted({t for g in TPU_GENERATIONS.values() for t in g.topologies})),
    st.lists(st.sampled_from([1, 2, 4, 8, 12, 16, 32, 64, 256, 260]), min_size=2, max_size=3).map(
        lambda sides: "x".join(map(str, sides))
    ),
)
ACCELERATORS = st.one_of(
    st.builds(
        tpu,
        st.sampled_from([v.value for v in TPU_GENERATIONS]),
        TOPOLOGIES,
        st.one_of(st.none(), st.sampled_from(TPU_MACHINES)),
    ),
    st.builds(
        gpu,
        st.sampled_from([t.value for t in GPU_ACCELERATORS]),
        st.integers(1, 8),
        st.one_of(st.none(), st.sampled_from(GPU_MACHINES)),
        st.one_of(st.none(), st.sampled_from([1, 2, 3, 4, 8, 16])),
    ),
)
PROVISIONING = st.fixed_dictionaries(
    {"maxRunDuration": st.sampled_from(["1h", "168h", "169h", "0s", "10080m"])},
    optional={"reservation": st.sampled_from(VALID_RESERVATIONS)},
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ACCELERATORS, st.sampled_from([m.value for m in ProvisioningMode]), PROVISIONING)
def test_server_and_python_agree(
    api: k8s.ApiClient,
    namespace: str,
    accelerator: dict[str, Any],
    mode: str,
    provisioning: dict[str, Any],
) -> None:
    spec = spec_body(accelerator, mode=mode, provisioning=provisioning)
    try:
        python_errors = spec_errors(TrainingRequestSpec.model_validate(spec))
    except ValidationError:
        assume(False)  # structurally invalid: MALFORMED covers the schema's side
        return
    body = manifest(_name(), spec)
    if not python_errors:
        create(api, namespace, body)
        return
    message, fields = rejection(api, namespace, body)
    assert python_errors[0].field in fields, f"{python_errors}: server said {message}"
