"""Pool labels: valid GCE and Kubernetes labels, and ownership by uid."""

from __future__ import annotations

import re

import pytest
from google.cloud.container_v1 import NodeConfig, NodePool

from dws_operator.gke import UID_LABEL, owned_by, pool_labels
from dws_operator.gke.labels import sanitize_label_value

GCE_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
GCE_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
#: Kubernetes label values also start and end alphanumeric (the pool's node labels).
K8S_VALUE = re.compile(r"^([a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?)?$")


def test_keys_and_values() -> None:
    labels = pool_labels("team-a", "llama-v6e", "6f1c2a9e-3b7d-4c55-9a8e-0d2f4b6c8e1a")
    assert labels == {
        "dws-operator-dev_managed-by": "dws-operator",
        "dws-operator-dev_namespace": "team-a",
        "dws-operator-dev_name": "llama-v6e",
        "dws-operator-dev_uid": "6f1c2a9e-3b7d-4c55-9a8e-0d2f4b6c8e1a",
    }
    assert UID_LABEL == "dws-operator-dev_uid"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Team.A", "team-a"),
        ("UPPER_case", "upper_case"),
        ("-leading-and-trailing-", "leading-and-trailing"),
        ("a" * 80, "a" * 63),
        ("x/y:z", "x-y-z"),
        ("ünïcode", "n-code"),
    ],
)
def test_values_are_sanitized(raw: str, expected: str) -> None:
    assert sanitize_label_value(raw) == expected


@pytest.mark.parametrize(
    "raw", ["Team.A", "UPPER", "a" * 100, "-x-", "a b c", "ns/with/slashes", "z" * 62 + "-y"]
)
def test_every_label_is_within_gce_and_kubernetes_limits(raw: str) -> None:
    for key, value in pool_labels(raw, raw, raw).items():
        assert GCE_KEY.match(key), key
        assert GCE_VALUE.match(value), value
        assert K8S_VALUE.match(value), value
        assert len(key) <= 63
        assert len(value) <= 63


def pool_with(labels: dict[str, str]) -> NodePool:
    return NodePool(name="p", config=NodeConfig(resource_labels=labels))


def test_owned_by_reads_the_uid_resource_label() -> None:
    uid = "6f1c2a9e-3b7d-4c55-9a8e-0d2f4b6c8e1a"
    assert owned_by(pool_with(pool_labels("ns", "n", uid)), uid)
    assert not owned_by(pool_with(pool_labels("ns", "n", uid)), "another-uid")
    assert not owned_by(pool_with({}), uid)
    assert not owned_by(pool_with(pool_labels("ns", "n", uid)), "")


def test_owned_by_ignores_kubernetes_node_labels() -> None:
    uid = "abc"
    pool = NodePool(name="p", config=NodeConfig(labels=pool_labels("ns", "n", uid)))
    assert not owned_by(pool, uid)


def test_owned_by_compares_sanitized_uids() -> None:
    assert owned_by(pool_with(pool_labels("ns", "n", "ABC.Def")), "ABC.Def")
