"""The generated guardrails admission policy on the real API server agrees with the
operator's own rules on every pair of the corpus: the same requests refused, and the
refusal names the policy."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dws_operator.admission import binding, guardrails_policy
from dws_operator.api import GROUP, PLURAL, VERSION, TrainingRequestSpec
from dws_operator.api.policy import POLICY_PLURAL, TrainingPolicy, TrainingPolicySpec
from dws_operator.guardrails import request_size, violations
from tests.builders import manifest
from tests.cluster.namespaces import fresh_namespace
from tests.guardrails_corpus import POLICIES, REQUESTS
from tests.polling import eventually

pytestmark = pytest.mark.usefixtures("training_request_crd")

NAME = f"guardrails-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def guarded(api: k8s.ApiClient) -> Iterator[dict[str, str]]:
    """The admission policy and its binding installed; a namespace per corpus policy
    with that TrainingPolicy in it, by policy name."""
    admission = k8s.AdmissionregistrationV1Api(api)
    admission.create_validating_admission_policy(guardrails_policy(NAME))
    admission.create_validating_admission_policy_binding(binding(NAME, params=True))
    objects = k8s.CustomObjectsApi(api)
    try:
        with contextlib.ExitStack() as stack:
            namespaces = [stack.enter_context(fresh_namespace(api, "g")) for _ in POLICIES]
            placed = dict(zip(POLICIES, namespaces, strict=True))
            for policy, namespace in placed.items():
                objects.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    POLICY_PLURAL,
                    {
                        "apiVersion": f"{GROUP}/{VERSION}",
                        "kind": "TrainingPolicy",
                        "metadata": {"name": policy},
                        "spec": POLICIES[policy],
                    },
                )
            # The API server takes up policies, bindings and params a moment later:
            # each namespace refuses a request its policy forbids before any is judged.
            for policy, namespace in placed.items():
                probe = next(r for r in REQUESTS if _expected(policy, namespace, r))
                eventually(
                    lambda n=namespace, r=probe: _verdict(api, n, r)[0],
                    timeout=60,
                    what=f"the admission policy refusing {probe} under {policy}",
                )
            yield placed
    finally:
        admission.delete_validating_admission_policy_binding(NAME)
        admission.delete_validating_admission_policy(NAME)


def _expected(policy: str, namespace: str, request: str) -> list[str]:
    spec = TrainingRequestSpec.model_validate(REQUESTS[request])
    size = request_size(spec)
    assert size is not None
    rules = TrainingPolicy(
        name=policy, namespace=namespace, spec=TrainingPolicySpec.model_validate(POLICIES[policy])
    )
    return [str(v) for v in violations(rules, spec, size)]


def _verdict(api: k8s.ApiClient, namespace: str, request: str) -> tuple[bool, str]:
    """Whether the API server refuses the request (dry run), and its message."""
    body: dict[str, Any] = manifest(f"r-{uuid.uuid4().hex[:8]}", REQUESTS[request])
    try:
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body, dry_run="All"
        )
    except ApiException as refused:
        return True, str(json.loads(refused.body).get("message", refused.body))
    return False, ""


def test_the_api_server_refuses_exactly_what_the_operator_would(
    api: k8s.ApiClient, guarded: dict[str, str]
) -> None:
    disagreements = []
    refusals = 0
    for policy, namespace in guarded.items():
        for request in REQUESTS:
            expected = _expected(policy, namespace, request)
            refused, message = _verdict(api, namespace, request)
            refusals += refused
            if refused != bool(expected):
                disagreements.append((policy, request, expected, message))
            elif refused:
                assert f"TrainingPolicy {namespace}/{policy}: " in message, message
                assert "evaluating" not in message, message  # a verdict, not a CEL error
    assert disagreements == []
    assert refusals > len(POLICIES)  # the corpus exercises every policy


def test_a_namespace_without_a_policy_is_not_limited(
    api: k8s.ApiClient, guarded: dict[str, str], namespace: str
) -> None:
    assert all(not _verdict(api, namespace, request)[0] for request in REQUESTS)
