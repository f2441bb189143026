"""The Kubernetes objects the operator writes, as typed dicts: mypy checks every key and
value the renderers put in them (a misspelt `ownerRefernces` or a port as a string is a
type error, not an object the API server silently prunes or refuses at run time).

Only what the operator itself sets is typed. A pod's spec is the user's template (any
PodSpec field may be there) and stays a plain mapping; so do JobSet fields the JobSet
controller defines and this operator does not set.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "EnvVar",
    "Job",
    "JobSet",
    "JobSetSpec",
    "JobSpec",
    "ObjectMeta",
    "OwnerReference",
    "PodFailurePolicy",
    "PodTemplate",
    "ReplicatedJob",
    "Service",
    "ServiceSpec",
    "TaintEffect",
    "Toleration",
]


class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]


class FieldRef(TypedDict):
    fieldPath: str


class EnvVarSource(TypedDict):
    fieldRef: FieldRef


class EnvVar(TypedDict):
    name: str
    value: NotRequired[str]
    valueFrom: NotRequired[EnvVarSource]


#: What a taint does to pods that do not tolerate it.
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(TypedDict, total=False):
    key: str
    operator: Literal["Exists", "Equal"]
    value: str
    effect: TaintEffect


class ServiceSpec(TypedDict):
    clusterIP: Literal["None"]
    selector: dict[str, str]
    publishNotReadyAddresses: bool


class Service(TypedDict):
    apiVersion: Literal["v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceSpec


class PodTemplate(TypedDict):
    metadata: ObjectMeta
    #: The user's PodSpec, with the slice's chips, selectors and tolerations merged in.
    spec: dict[str, Any]


class PodConditionPattern(TypedDict):
    type: str
    status: Literal["True", "False", "Unknown"]


class PodFailurePolicyRule(TypedDict):
    action: Literal["FailJob", "Ignore", "Count", "FailIndex"]
    onPodConditions: list[PodConditionPattern]


class PodFailurePolicy(TypedDict):
    rules: list[PodFailurePolicyRule]


class JobSpec(TypedDict):
    template: PodTemplate
    activeDeadlineSeconds: int
    completions: int
    parallelism: int
    completionMode: NotRequired[Literal["Indexed", "NonIndexed"]]
    backoffLimit: NotRequired[int]
    podFailurePolicy: NotRequired[PodFailurePolicy]
    suspend: NotRequired[bool]


class Job(TypedDict):
    apiVersion: Literal["batch/v1"]
    kind: Literal["Job"]
    metadata: ObjectMeta
    spec: JobSpec


class JobTemplate(TypedDict):
    metadata: ObjectMeta
    spec: JobSpec


class ReplicatedJob(TypedDict):
    name: str
    replicas: int
    template: JobTemplate


class JobSetNetwork(TypedDict):
    enableDNSHostnames: bool
    publishNotReadyAddresses: bool


class JobSetSuccessPolicy(TypedDict):
    operator: Literal["All", "Any"]
    targetReplicatedJobs: list[str]


class JobSetFailurePolicy(TypedDict):
    maxRestarts: int


class JobSetStartupPolicy(TypedDict):
    startupPolicyOrder: Literal["AnyOrder", "InOrder"]


class JobSetSpec(TypedDict):
    replicatedJobs: list[ReplicatedJob]
    network: JobSetNetwork
    successPolicy: JobSetSuccessPolicy
    failurePolicy: JobSetFailurePolicy
    startupPolicy: JobSetStartupPolicy
    suspend: NotRequired[bool]


class JobSet(TypedDict):
    apiVersion: str
    kind: Literal["JobSet"]
    metadata: ObjectMeta
    spec: JobSetSpec
