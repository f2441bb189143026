"""At its start the operator lists each kind it watches once: kopf's own listing fills the
caches (its watches go on from that listing), with no listing of the operator's own
before it and none again soon after. Counted by the API server itself."""

from __future__ import annotations

import re
from collections import Counter

from kubernetes import client as k8s

from dws_operator.api import PLURAL
from dws_operator.controller import OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

#: One sample of the API server's request counter: its labels, then its value.
_SAMPLE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def lists_by_resource(api: k8s.ApiClient) -> Counter[str]:
    """LIST requests in one namespace the API server has answered, by resource: the
    operator serves only its test's namespace, while the cluster's other clients (its
    controllers, Kueue, the admission policies' informers) list across namespaces."""
    response = api.call_api("GET", f"{api.configuration.host}/metrics")
    counts: Counter[str] = Counter()
    for line in response.read().decode().splitlines():
        sample = _SAMPLE.match(line)
        if sample is None:
            continue
        labels = dict(_LABEL.findall(sample["labels"]))
        if labels.get("verb") == "LIST" and labels.get("scope") == "namespace":
            counts[labels.get("resource", "")] += int(float(sample["value"]))
    return counts


def test_each_watched_kind_is_listed_once_at_the_start(
    devcluster: DevCluster,
    training_request_crd: str,
    api: k8s.ApiClient,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    # The namespace controller lists every kind in a namespace it deletes: an earlier
    # test's namespace still going would be counted (ci79 counted one: two LISTs of
    # trainingrequests, jobs, workloads, and of pods and events, which we never list).
    core = k8s.CoreV1Api(api)
    eventually(
        lambda: all(ns.status.phase != "Terminating" for ns in core.list_namespace().items),
        what="no namespace being deleted",
    )
    before = lists_by_resource(api)
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        # A pass has run: every kind's first listing was in the cache before it.
        scenario.wait_phase("WaitingForCapacity", "Provisioning")
        during = lists_by_resource(api) - before
    print(f"\nLIST calls at the start, by resource: {dict(sorted(during.items()))}")
    # Nodes have no namespace: listed by the cluster's controllers too, not counted here.
    for kind in (PLURAL, "trainingpolicies", "jobs", "services"):
        assert during[kind] == 1, kind
