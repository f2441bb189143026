"""GKE's rules: every invalid combination is an error naming its field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dws_operator.api import TrainingRequestSpec
from dws_operator.errors import InvalidSpec, SpecError, from_validation_error
from dws_operator.planning import plan_slice
from dws_operator.validation import spec_errors
from tests.builders import CONTAINER, gpu, make_spec, spec_body, tpu
from tests.corpus import INVALID, INVALID_STEPS, MALFORMED_RESERVATIONS, VALID_RESERVATIONS


@pytest.mark.parametrize(
    ("case", "kwargs", "field", "words"),
    INVALID + INVALID_STEPS,
    ids=[c[0] for c in INVALID + INVALID_STEPS],
)
def test_invalid_combination(case: str, kwargs: dict[str, Any], field: str, words: str) -> None:
    args = dict(kwargs)
    spec = make_spec(args.pop("accelerator"), **args)
    errors = spec_errors(spec)
    assert errors, f"{case} should be rejected"
    assert errors[0].field == field
    assert words in errors[0].message
    with pytest.raises(InvalidSpec) as raised:
        plan_slice(spec)
    assert raised.value.first == errors[0]
    assert str(raised.value).startswith(field)


def test_all_errors_are_reported_not_only_the_first() -> None:
    spec = make_spec(
        tpu("v4", "2x2x2", "ct5p-hightpu-4t"),
        mode="QueuedProvisioning",
        provisioning={"maxRunDuration": "200h"},
    )
    fields = [e.field for e in spec_errors(spec)]
    assert fields == [
        "spec.accelerator.tpu.machineType",
        "spec.provisioning.mode",
        "spec.provisioning.maxRunDuration",
    ]


def test_allowed_values_are_listed() -> None:
    spec = make_spec(tpu("v6e", "4x4", "ct6e-standard-1t"), mode="Spot")
    error = spec_errors(spec)[0]
    assert error.allowed == ("ct6e-standard-4t",)
    assert str(error).endswith("allowed: ct6e-standard-4t")


def _structural_errors(body: dict[str, Any]) -> list[SpecError]:
    with pytest.raises(ValidationError) as raised:
        TrainingRequestSpec.model_validate(body)
    return list(from_validation_error(raised.value).errors)


TEMPLATE = {"spec": {"containers": [CONTAINER]}}
FLEX = {"mode": "FlexStart"}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"accelerator": {}, "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator",
            "exactly one of tpu or gpu",
        ),
        (
            {
                "accelerator": {**tpu("v6e", "4x4"), **gpu("nvidia-l4")},
                "provisioning": FLEX,
                "template": TEMPLATE,
            },
            "spec.accelerator",
            "exactly one of tpu or gpu",
        ),
        (
            {"accelerator": tpu("v9", "4x4"), "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator.tpu.version",
            "'v9' is not supported",
        ),
        (
            {"accelerator": tpu("v6e", "4x"), "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator.tpu.topology",
            "malformed",
        ),
        (
            {"accelerator": tpu("v6e", "0x4"), "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator.tpu.topology",
            "malformed",
        ),
        (
            {"accelerator": tpu("v6e", "4x4x4x4"), "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator.tpu.topology",
            "malformed",
        ),
        (
            {"accelerator": gpu("nvidia-l4", nodes=0), "provisioning": FLEX, "template": TEMPLATE},
            "spec.accelerator.gpu.nodes",
            "greater than or equal to 1",
        ),
        (
            {
                "accelerator": gpu("nvidia-l4", nodes=10**9),
                "provisioning": FLEX,
                "template": TEMPLATE,
            },
            "spec.accelerator.gpu.nodes",
            "less than or equal to 1000",
        ),
        (
            {
                "accelerator": {"gpu": {"type": "nvidia-l4", "nodes": "two"}},
                "provisioning": FLEX,
                "template": TEMPLATE,
            },
            "spec.accelerator.gpu.nodes",
            "valid integer",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": {"mode": "Cheap"},
                "template": TEMPLATE,
            },
            "spec.provisioning.mode",
            "'Cheap' is not supported",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": {"mode": "Spot", "maxWaitDuration": "1d"},
                "template": TEMPLATE,
            },
            "spec.provisioning.maxWaitDuration",
            "malformed",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": {"mode": "Spot", "zones": ["mars"]},
                "template": TEMPLATE,
            },
            "spec.provisioning.zones[0]",
            "a zone such as us-east5-a",
        ),
        (
            {"accelerator": tpu("v6e", "4x4"), "provisioning": FLEX},
            "spec.template",
            "Field required",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": FLEX,
                "template": {"spec": {"containers": []}},
            },
            "spec.template.spec.containers",
            "at least 1 item",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": FLEX,
                "template": TEMPLATE,
                "nodePool": {"name": "Bad_Name"},
            },
            "spec.nodePool.name",
            "malformed",
        ),
        (
            {
                "accelerator": tpu("v6e", "4x4"),
                "provisioning": FLEX,
                "template": TEMPLATE,
                "maxRestarts": -1,
            },
            "spec.maxRestarts",
            "greater than or equal to 0",
        ),
    ],
)
def test_structural_errors_name_the_field(body: dict[str, Any], field: str, words: str) -> None:
    errors = _structural_errors(body)
    assert errors[0].field == field
    assert words in errors[0].message


def test_enum_errors_list_allowed_values() -> None:
    errors = _structural_errors(
        {"accelerator": tpu("v9", "4x4"), "provisioning": FLEX, "template": TEMPLATE}
    )
    assert errors[0].allowed == ("v4", "v5e", "v5p", "v6e", "tpu7x")


@pytest.mark.parametrize("slices", [0, 65])
def test_slices_out_of_range(slices: int) -> None:
    body = {
        "accelerator": {"tpu": {"version": "v5p", "topology": "2x2x2", "slices": slices}},
        "provisioning": FLEX,
        "template": TEMPLATE,
    }
    errors = _structural_errors(body)
    assert [e.field for e in errors] == ["spec.accelerator.tpu.slices"]


def test_slices_with_an_existing_pool_are_refused() -> None:
    spec = make_spec(tpu("v5p", "2x2x2", slices=2), nodePool={"name": "shared", "existing": True})
    assert [e.field for e in spec_errors(spec)] == ["spec.nodePool.existing"]


def test_slices_with_a_long_pool_name_are_refused() -> None:
    spec = make_spec(tpu("v5p", "2x2x2", slices=2), nodePool={"name": "p" * 37})
    assert [e.field for e in spec_errors(spec)] == ["spec.nodePool.name"]


def _reservation_spec(reservation: str) -> dict[str, Any]:
    return spec_body(gpu("nvidia-b200"), "Reservation", provisioning={"reservation": reservation})


@pytest.mark.parametrize(
    "value", [v for _, v in MALFORMED_RESERVATIONS], ids=[c for c, _ in MALFORMED_RESERVATIONS]
)
def test_malformed_reservation_references_are_refused(value: str) -> None:
    [error] = _structural_errors(_reservation_spec(value))
    assert error.field == "spec.provisioning.reservation"
    assert error.message.startswith(f"{value!r} is malformed; expected a reservation name")
    assert "/reservationBlocks/BLOCK and then /reservationSubBlocks/SUB_BLOCK" in error.message


@pytest.mark.parametrize("value", VALID_RESERVATIONS)
def test_reservations_blocks_and_sub_blocks_are_targeted_as_given(value: str) -> None:
    spec = TrainingRequestSpec.model_validate(_reservation_spec(value))
    affinity = plan_slice(spec).node_pool.reservation_affinity
    assert affinity is not None
    assert affinity.key == "compute.googleapis.com/reservation-name"
    assert affinity.values == (value,)
