"""The generated CRD: committed copy up to date, structural, and carrying the CEL rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dws_operator.catalog import TPU_GENERATIONS, default_machine_type
from dws_operator.crd import custom_resource_definition, render_crd_yaml
from dws_operator.crd.accelerator_rules import _single_hosts
from dws_operator.crd.schema import SchemaError, at_path
from dws_operator.validation import slice_errors
from tests.builders import make_spec, tpu

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "crds" / "trainingrequests.dws-operator.dev.yaml"
FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "uniqueItems", "const"}


@pytest.fixture(scope="module")
def crd() -> dict[str, Any]:
    return custom_resource_definition()


@pytest.fixture(scope="module")
def schema(crd: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return result


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED.read_text() == render_crd_yaml(), (
        "crds/ is stale: run `dws-operator crd -o crds/trainingrequests.dws-operator.dev.yaml`"
    )


def test_yaml_round_trips(crd: dict[str, Any]) -> None:
    assert yaml.safe_load(render_crd_yaml()) == crd


def test_names_scope_and_subresources(crd: dict[str, Any]) -> None:
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "trainingrequests.dws-operator.dev"
    assert spec["group"] == "dws-operator.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "TrainingRequest"
    assert spec["names"]["plural"] == "trainingrequests"
    assert spec["names"]["shortNames"] == ["tr", "treq"]
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}


def test_printer_columns(crd: dict[str, Any]) -> None:
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    default = [c["name"] for c in columns if not c.get("priority")]
    assert default == ["Phase", "Mode", "Step", "Accelerator", "Shape", "Nodes", "Age"]


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, node)]
    for name, child in node.get("properties", {}).items():
        found += _walk(child, f"{path}.{name}")
    if "items" in node:
        found += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_schema_is_structural(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema):
        assert "type" in node, f"{path} has no type"
        assert not FORBIDDEN & set(node), f"{path} uses {FORBIDDEN & set(node)}"
        assert node.get("additionalProperties") is not False, path
        if node["type"] == "object" and path.startswith(".spec") and path != ".spec.template":
            assert "description" in node, f"{path} has no description for kubectl explain"
        if "default" in node:
            assert node["default"] is not None, path


def test_every_spec_field_is_described(schema: dict[str, Any]) -> None:
    for path, node in _walk(schema["properties"]["spec"], ".spec"):
        if path.endswith(("[]", "{}")):
            continue  # list items and map values are described by their field
        assert node.get("description"), f"{path} has no description"


def test_pod_template_keeps_unknown_fields(schema: dict[str, Any]) -> None:
    template = at_path(schema, ("spec", "template"))
    assert template["x-kubernetes-preserve-unknown-fields"] is True
    assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    container = template["properties"]["spec"]["properties"]["containers"]["items"]
    assert container["required"] == ["name", "image"]


def test_defaults(schema: dict[str, Any]) -> None:
    provisioning = at_path(schema, ("spec", "provisioning"))["properties"]
    assert provisioning["maxWaitDuration"]["default"] == "24h"
    assert provisioning["maxRunDuration"]["default"] == "168h"
    node_pool = at_path(schema, ("spec", "nodePool"))
    assert node_pool["default"] == {"existing": False, "cleanup": "ScaleToZero"}
    assert node_pool["properties"]["cleanup"]["default"] == "ScaleToZero"


def test_conditions_are_a_map_keyed_by_type(schema: dict[str, Any]) -> None:
    conditions = at_path(schema, ("status", "conditions"))
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert set(conditions["items"]["required"]) >= {"type", "status", "lastTransitionTime"}


def _rules(schema: dict[str, Any], *path: str) -> list[dict[str, str]]:
    rules: list[dict[str, str]] = at_path(schema, path).get("x-kubernetes-validations", [])
    return rules


def _find(rules: list[dict[str, str]], words: str) -> dict[str, str]:
    matching = [r for r in rules if words in r["message"]]
    assert matching, f"no rule whose message says {words!r}"
    return matching[0]


@pytest.mark.parametrize(
    ("path", "words", "field_path"),
    [
        (("spec", "accelerator"), "exactly one of tpu or gpu", None),
        (("spec",), "QueuedProvisioning are not available for TPU v4", ".provisioning.mode"),
        (("spec",), "QueuedProvisioning are not available for nvidia-gb200", ".provisioning.mode"),
        (
            ("spec",),
            "slices above 1 are not available with QueuedProvisioning",
            ".accelerator.tpu.slices",
        ),
        (("spec", "accelerator", "tpu"), "slices above 1 need a multi-host slice", ".slices"),
        (
            ("spec", "provisioning"),
            "reservation is required when mode is Reservation",
            ".reservation",
        ),
        (("spec", "provisioning"), "at most 168h", ".maxRunDuration"),
        (("spec", "accelerator", "tpu"), "not valid for TPU v6e", ".topology"),
        (("spec", "accelerator", "tpu"), "not valid for TPU v4", ".topology"),
        (("spec", "accelerator", "tpu"), "not valid for TPU v5p", ".topology"),
        (("spec", "accelerator", "tpu"), "not valid for TPU tpu7x", ".topology"),
        (("spec", "accelerator", "tpu"), "not valid for TPU v5e", ".topology"),
        (("spec", "accelerator", "tpu"), "does not carry TPU v6e", ".machineType"),
        (
            ("spec", "accelerator", "tpu"),
            "ct6e-standard-8t hosts only topology 2x4",
            ".machineType",
        ),
        (("spec", "accelerator", "gpu"), "does not carry nvidia-h100-80gb", ".machineType"),
        (("spec", "accelerator", "gpu"), "count must equal the GPUs per VM", ".count"),
        (("spec", "nodePool"), "name is required when existing is true", ".name"),
        ((), "metadata.name must be a DNS label", None),
    ],
)
def test_cel_rule_for_each_invalid_case(
    schema: dict[str, Any], path: tuple[str, ...], words: str, field_path: str | None
) -> None:
    rule = _find(_rules(schema, *path), words)
    assert rule.get("fieldPath") == field_path
    if field_path and not field_path.startswith(".metadata"):
        # fieldPath must point at a real property below the rule's node.
        at_path(at_path(schema, path), tuple(field_path.strip(".").split(".")))


@pytest.mark.parametrize("field", ["accelerator", "provisioning"])
def test_accelerator_and_provisioning_are_immutable(schema: dict[str, Any], field: str) -> None:
    rule = _find(_rules(schema, "spec", field), "is immutable")
    assert rule["rule"] == "self == oldSelf"


def test_rules_come_from_the_catalog(schema: dict[str, Any]) -> None:
    tpu_rules = _rules(schema, "spec", "accelerator", "tpu")
    v6e = _find(tpu_rules, "not valid for TPU v6e")["rule"]
    for topology in ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16"):
        assert f'"{topology}"' in v6e
    v4 = _find(tpu_rules, "not valid for TPU v4")["rule"]
    assert "/ 64 <= 64" in v4
    assert "int(d) <= 256" in v4


def test_missing_rule_path_is_an_error(schema: dict[str, Any]) -> None:
    with pytest.raises(SchemaError, match=r"no field spec\.nope"):
        at_path(schema, ("spec", "nope"))


def test_cel_and_python_agree_on_every_single_vm_slice() -> None:
    """The CEL rule's list of one-VM slices is the Python rule's, over the whole catalog."""
    for generation in TPU_GENERATIONS.values():
        cel = {(t, m) for t, m, _ in _single_hosts(generation)}
        for topology, hosts in generation.topologies.items():
            for machine in (None, *hosts):
                spec = make_spec(tpu(generation.version, topology, machine, slices=2), "Spot")
                chosen = machine or default_machine_type(generation, topology)
                refused = bool(slice_errors(spec))
                assert refused == ((topology, chosen) in cel), (generation.version, topology)
