"""The chart's ValidatingAdmissionPolicies, generated here, never written by hand.

The guardrails: a TrainingRequest its namespace's TrainingPolicies forbid is refused at
admission, by CEL generated from the catalog and the same rules as `guardrails`.

The TrainingPolicy objects are its parameters: the binding selects every one in the
request's namespace (a namespace-scoped `paramKind` with no `paramRef.namespace` reads
the admitted object's namespace), and each must pass; a namespace without one is not
limited (`parameterNotFoundAction: Allow`). Only CREATE is checked: a request's spec is
immutable, and an update by the operator (its finalizer) must never be refused because a
policy changed after the request was admitted. What needs the other requests of the
namespace (the in-flight limits) only the operator can check.

The operator's scope: the operator's ServiceAccount may create and delete Jobs, JobSets
and Services (RBAC cannot say which); this policy lets it touch only those that carry
its request label and a TrainingRequest owner, and nothing in kube-system, so a stolen
token of the operator cannot replace or delete a workload it did not make.
"""

from __future__ import annotations

from typing import Any

from dws_operator.api import GROUP, KIND, PLURAL
from dws_operator.api.policy import POLICY_API_VERSION, POLICY_KIND
from dws_operator.catalog import GPU_ACCELERATORS, TPU_GENERATIONS, default_machine_type
from dws_operator.crd.rule import lit
from dws_operator.multislice import JOBSET_GROUP, JOBSET_PLURAL
from dws_operator.workload import REQUEST_LABEL

ADMISSION_API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_NAME = "dws-operator-guardrails"
SCOPE_NAME = "dws-operator-scope"

_SPEC = "object.spec"
_TPU = f"{_SPEC}.accelerator.tpu"
_GPU = f"{_SPEC}.accelerator.gpu"
_FALLBACK = f"{_SPEC}.provisioning.fallback"
#: A reservation without its block and sub-block, as `guardrails.reservation_allowed`.
_BASE = "^(projects/[^/]+/reservations/)?[^/]+"


def _map(values: dict[str, int]) -> str:
    return "{" + ", ".join(f"{lit(k)}: {v}" for k, v in sorted(values.items())) + "}"


def _tpu_chips_per_vm() -> str:
    """Chips of one VM of the request's slice: its machine type's, else the default
    machine type's for its generation and topology (a cube's type for a topology the
    catalog does not list)."""
    by_type = {m.name: m.chips for g in TPU_GENERATIONS.values() for m in g.machine_types}
    defaults: dict[str, int] = {}
    cubes: dict[str, int] = {}
    for g in TPU_GENERATIONS.values():
        chips = {m.name: m.chips for m in g.machine_types}
        for topology in g.topologies:
            defaults[f"{g.version.value}/{topology}"] = chips[default_machine_type(g, topology)]
        if g.cube_rule is not None:
            cubes[g.version.value] = chips[g.cube_rule.machine_type]
    key = f"{_TPU}.version + '/' + {_TPU}.topology"
    return (
        f"has({_TPU}.machineType) ? {_map(by_type)}[{_TPU}.machineType] : "
        f"({key} in {_map(defaults)} ? {_map(defaults)}[{key}] : {_map(cubes)}[{_TPU}.version])"
    )


def _gpus_per_vm() -> str:
    by_type = {m.name: m.gpus for a in GPU_ACCELERATORS.values() for m in a.machine_types}
    defaults = {
        a.type.value: next(m.gpus for m in a.machine_types if m.name == a.default_machine_type)
        for a in GPU_ACCELERATORS.values()
    }
    return (
        f"has({_GPU}.count) ? {_GPU}.count : has({_GPU}.machineType) ? "
        f"{_map(by_type)}[{_GPU}.machineType] : {_map(defaults)}[{_GPU}.type]"
    )


def variables() -> list[dict[str, str]]:
    sides = "variables.sides"
    pairs = [
        ("tpu", f"has({_TPU})"),
        ("accelerator", f"variables.tpu ? {_TPU}.version : {_GPU}.type"),
        (
            "acceleratorField",
            "variables.tpu ? 'spec.accelerator.tpu.version' : 'spec.accelerator.gpu.type'",
        ),
        (
            "modes",
            f"[{_SPEC}.provisioning.mode] + (has({_FALLBACK}) ? {_FALLBACK}.map(s, s.mode) : [])",
        ),
        (
            "reservations",
            f"(has({_SPEC}.provisioning.reservation) ? [{_SPEC}.provisioning.reservation] : []) + "
            f"(has({_FALLBACK}) ? {_FALLBACK}.filter(s, has(s.reservation))"
            ".map(s, s.reservation) : [])",
        ),
        ("reservationBases", f"variables.reservations.map(r, r.find({lit(_BASE)}))"),
        ("sides", f"variables.tpu ? {_TPU}.topology.split('x').map(d, int(d)) : [1]"),
        (
            "sliceChips",
            f"size({sides}) == 3 ? {sides}[0] * {sides}[1] * {sides}[2] : "
            f"size({sides}) == 2 ? {sides}[0] * {sides}[1] : {sides}[0]",
        ),
        ("slices", f"variables.tpu && has({_TPU}.slices) ? {_TPU}.slices : 1"),
        ("chipsPerVm", f"variables.tpu ? ({_tpu_chips_per_vm()}) : ({_gpus_per_vm()})"),
        (
            "nodes",
            f"variables.tpu ? variables.sliceChips / variables.chipsPerVm * variables.slices : "
            f"{_GPU}.nodes",
        ),
        (
            "chips",
            "variables.tpu ? variables.sliceChips * variables.slices : "
            f"{_GPU}.nodes * variables.chipsPerVm",
        ),
    ]
    return [{"name": name, "expression": expression} for name, expression in pairs]


_WHO = "'TrainingPolicy ' + params.metadata.namespace + '/' + params.metadata.name + ': '"


def _limit(field: str, value: str, unit: str) -> dict[str, str]:
    return {
        "expression": f"!has(params.spec.{field}) || {value} <= params.spec.{field}",
        "messageExpression": (
            f"{_WHO} + 'spec.accelerator: ' + string({value}) + ' {unit}, over {field} (' + "
            f"string(params.spec.{field}) + ')'"
        ),
        "reason": "Forbidden",
    }


def validations() -> list[dict[str, str]]:
    allowed = (
        "params.spec.reservations.exists(e, e == b || (e.endsWith('/*') && "
        "b.startsWith('projects/') && b.startsWith(e.substring(0, size(e) - 1))))"
    )
    return [
        {
            "expression": (
                "!has(params.spec.accelerators) || "
                "variables.accelerator in params.spec.accelerators"
            ),
            "messageExpression": (
                f"{_WHO} + variables.acceleratorField + ': ' + variables.accelerator + "
                "' is not allowed (allowed: ' + params.spec.accelerators.join(', ') + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                "!has(params.spec.modes) || variables.modes.all(m, m in params.spec.modes)"
            ),
            "messageExpression": (
                f"{_WHO} + 'spec.provisioning: mode ' + "
                "variables.modes.filter(m, !(m in params.spec.modes)).join(', ') + "
                "' is not allowed (allowed: ' + params.spec.modes.join(', ') + ')'"
            ),
            "reason": "Forbidden",
        },
        {
            "expression": (
                f"!has(params.spec.reservations) || variables.reservationBases.all(b, {allowed})"
            ),
            "messageExpression": (
                f"{_WHO} + 'spec.provisioning: reservation ' + "
                f"variables.reservationBases.filter(b, !({allowed})).join(', ') + "
                "' is not allowed (allowed: ' + params.spec.reservations.join(', ') + ')'"
            ),
            "reason": "Forbidden",
        },
        _limit("maxChipsPerRequest", "variables.chips", "chips"),
        _limit("maxNodesPerRequest", "variables.nodes", "nodes"),
        _limit("maxChipsInFlight", "variables.chips", "chips"),
        _limit("maxNodesInFlight", "variables.nodes", "nodes"),
    ]


def _policy(
    name: str, resources: list[tuple[str, str]], operations: list[str], **spec: Any
) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy on `resources` ((group, resource) pairs), failing
    closed: a rule that cannot be evaluated refuses."""
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": list(operations),
            "resources": [resource],
        }
        for group, resource in resources
    ]
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": rules}, **spec},
    }


def guardrails_policy(name: str = POLICY_NAME) -> dict[str, Any]:
    return _policy(
        name,
        [(GROUP, PLURAL)],
        ["CREATE"],
        paramKind={"apiVersion": POLICY_API_VERSION, "kind": POLICY_KIND},
        variables=variables(),
        validations=validations(),
    )


#: What the operator makes and deletes, by API group: their resources.
_SCOPED = (("batch", "jobs"), (JOBSET_GROUP, JOBSET_PLURAL), ("", "services"))


def operator_scope_policy(identity: str, name: str = SCOPE_NAME) -> dict[str, Any]:
    """Refuses `identity` (the operator's ServiceAccount user name) any create or delete
    of a Job, JobSet or Service without the request label and a TrainingRequest owner of
    that name, or in kube-system. (It updates none: RBAC gives it no update or patch.)"""
    target = "variables.target.metadata"
    return _policy(
        name,
        list(_SCOPED),
        ["CREATE", "DELETE"],
        matchConditions=[
            {
                "name": "the-operator",
                "expression": f"request.userInfo.username == {lit(identity)}",
            }
        ],
        variables=[
            {
                "name": "target",
                "expression": "request.operation == 'DELETE' ? oldObject : object",
            }
        ],
        validations=[
            {
                "expression": "request.namespace != 'kube-system'",
                "message": "dws-operator makes nothing in kube-system",
                "reason": "Forbidden",
            },
            {
                "expression": f"has({target}.labels) && {lit(REQUEST_LABEL)} in {target}.labels",
                "message": f"dws-operator touches only objects labelled {REQUEST_LABEL}",
                "reason": "Forbidden",
            },
            {
                "expression": (
                    f"has({target}.labels) && {lit(REQUEST_LABEL)} in {target}.labels && "
                    f"has({target}.ownerReferences) && {target}.ownerReferences.exists(r, "
                    f"r.apiVersion.startsWith({lit(GROUP + '/')}) && r.kind == {lit(KIND)} && "
                    f"r.name == {target}.labels[{lit(REQUEST_LABEL)}])"
                ),
                "message": (
                    "dws-operator touches only objects the TrainingRequest its label names owns"
                ),
                "reason": "Forbidden",
            },
        ],
    )


def binding(name: str, params: bool = False) -> dict[str, Any]:
    """The binding of policy `name`: denying; with `params`, every TrainingPolicy of the
    admitted object's namespace (none: allowed)."""
    spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if params:
        spec["paramRef"] = {"selector": {}, "parameterNotFoundAction": "Allow"}
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": spec,
    }
