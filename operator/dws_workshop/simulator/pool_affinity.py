"""Which node pools a pending pod may land on when its pool is chosen at scheduling time:
a required node affinity on `cloud.google.com/gke-nodepool` (an `In` list), and required
pod affinity / anti-affinity with that label as the topology key. Pure.

A multi-slice JobSet's pods carry both (dws_operator.multislice): the node affinity names
the request's N slice pools, and JobSet's pod webhook gives each child Job's leader (its
completion index 0) a required pod affinity to its own Job's pods and a required
anti-affinity to the other Jobs' pods of the same priority, both on the pool label
(JobSet v0.12.0 pkg/webhooks/pod_webhook.go `setExclusiveAffinities`).

The cluster autoscaler "creates template nodes for each of the node groups and checks if
any of the unschedulable pods would fit on a new node", respecting `nodeSelector` and
required node affinity when it picks node groups (kubernetes/autoscaler
cluster-autoscaler/FAQ.md, "How does scale-up work?" and "Does CA respect node affinity
when selecting node groups to scale up?"; read 2026-11-27); the fit is the scheduler's,
inter-pod affinity included. Our assumption: the pods of one pass are placed one after
another (in name order), each placed pod counting for the next, so two leaders never
claim one pool; `PoolOccupants` is that snapshot at the pool level (the labels of the
live pods bound to each pool's nodes, plus the pods this pass has already sent to a
pool). Simplifications, also ours: only the pool label counts as a topology key; a
term's namespaces are all namespaces when it has a `namespaceSelector` (JobSet's terms
have an empty one), else the pod's own namespace and the term's `namespaces`; a
`namespaceSelector` itself is not evaluated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dws_operator.catalog import NODE_POOL_LABEL_KEY

Obj = dict[str, Any]


def _matches_expression(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator")
    values = list(expression.get("values") or [])
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    return False  # an operator a label selector does not have matches nothing


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels. A missing selector matches nothing, an
    empty one everything (as Kubernetes reads an affinity term's selector)."""
    if selector is None:
        return False
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    return all(_matches_expression(e, labels) for e in selector.get("matchExpressions") or [])


def allowed_pools(spec: Mapping[str, Any]) -> set[str] | None:
    """The pools a pod's required node affinity allows by the pool label: the union over
    its node selector terms (ORed) of each term's `In` lists on the label (ANDed: their
    intersection). None when some term does not name pools (any pool may do)."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    allowed: set[str] = set()
    for term in terms:
        named: set[str] | None = None
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") != NODE_POOL_LABEL_KEY:
                continue
            if expression.get("operator") != "In":
                return None  # NotIn / Exists on the pool label: not a list of pools
            values = set(expression.get("values") or [])
            named = values if named is None else named & values
        if named is None:
            return None
        allowed |= named
    return allowed


def _pool_terms(spec: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    """The pod's required `kind` (podAffinity / podAntiAffinity) terms on the pool label."""
    section = (spec.get("affinity") or {}).get(kind) or {}
    terms = section.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    return [t for t in terms if t.get("topologyKey") == NODE_POOL_LABEL_KEY]


def places_by_pool(spec: Mapping[str, Any]) -> bool:
    """Whether the pod's pool is chosen by scheduling: a node affinity list of pools or a
    pod (anti-)affinity on the pool label."""
    return allowed_pools(spec) is not None or any(
        _pool_terms(spec, kind) for kind in ("podAffinity", "podAntiAffinity")
    )


@dataclass(frozen=True)
class Occupant:
    namespace: str
    labels: Mapping[str, str]


def _in_scope(term: Mapping[str, Any], pod_namespace: str, occupant: Occupant) -> bool:
    if "namespaceSelector" in term:
        return True
    return occupant.namespace in {pod_namespace, *(term.get("namespaces") or [])}


@dataclass
class PoolOccupants:
    """The pods on each pool, as the scheduling simulation of one pass sees them."""

    by_pool: dict[str, list[Occupant]] = field(default_factory=dict)

    def add(self, pool: str, pod: Obj) -> None:
        metadata = pod.get("metadata") or {}
        occupant = Occupant(str(metadata.get("namespace") or ""), metadata.get("labels") or {})
        self.by_pool.setdefault(pool, []).append(occupant)

    def _holds(self, pool: str, term: Mapping[str, Any], namespace: str) -> bool:
        return any(
            _in_scope(term, namespace, o) and selector_matches(term.get("labelSelector"), o.labels)
            for o in self.by_pool.get(pool, [])
        )

    def admits(self, pod: Obj, pool: str, all_pools: Iterable[str]) -> bool:
        """Whether the pod's pod affinity and anti-affinity on the pool label let it
        land on `pool`, given the occupants of `all_pools`."""
        spec = pod.get("spec") or {}
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        labels = metadata.get("labels") or {}
        if any(self._holds(pool, t, namespace) for t in _pool_terms(spec, "podAntiAffinity")):
            return False
        for term in _pool_terms(spec, "podAffinity"):
            if self._holds(pool, term, namespace):
                continue
            # The scheduler's exception: a pod matching its own term may start a group
            # no pod anywhere has started yet (the first pod of a Job, here its leader).
            anywhere = any(self._holds(p, term, namespace) for p in all_pools)
            if anywhere or not selector_matches(term.get("labelSelector"), labels):
                return False
        return True
