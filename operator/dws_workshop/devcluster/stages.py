"""kwok Stages for the simulated GKE nodes and the pods that run on them.

kwok (v0.8.0) plays the kubelet for nodes annotated `kwok.x-k8s.io/node: fake`; what it
does to them and their pods is a list of `Stage` objects (kwok.x-k8s.io/v1alpha1) given
with `--config`. Without any, kwok v0.8.0 refuses to start ("no stages found").

Nodes: initialised Ready (keeping the allocatable and capacity the autoscaler wrote),
then a status heartbeat every 20-25 s so the node lifecycle controller keeps them Ready.

Pods bound to such a node:

- `pod-ready`: Pending -> Running and Ready at once (pod and host IPs from kwok).
- `pod-succeed`: a Running pod with the annotation `dws-operator.dev/sim-duration`
  (a Go duration, "30s", "2m") ends Succeeded that long after it started, unless
  `dws-operator.dev/sim-exit-code` says otherwise ("0" is success too).
- `pod-fail`: the same, with a non-zero `dws-operator.dev/sim-exit-code`: Failed, the
  containers terminated with that exit code and reason `Error`.
- `pod-delete`: a pod being deleted goes at once (no kubelet to wait for).

A pod without `sim-duration` runs until it is deleted or its node goes away. The
duration is wall-clock time as kwok measures it: the autoscaler's clock factor does
not apply to it.
"""

from __future__ import annotations

from typing import Any

import yaml

API_VERSION = "kwok.x-k8s.io/v1alpha1"
SIM_DURATION_ANNOTATION = "dws-operator.dev/sim-duration"
SIM_EXIT_CODE_ANNOTATION = "dws-operator.dev/sim-exit-code"

_NODE = {"apiGroup": "v1", "kind": "Node"}
_POD = {"apiGroup": "v1", "kind": "Pod"}
_READY = '.status.conditions.[] | select( .type == "Ready" ) | .status'
_NOT_DELETING = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_RUNNING = {"key": ".status.phase", "operator": "In", "values": ["Running"]}
_DURATION = f'.metadata.annotations["{SIM_DURATION_ANNOTATION}"]'
_EXIT_CODE = f'.metadata.annotations["{SIM_EXIT_CODE_ANNOTATION}"]'

_NODE_CONDITIONS = """\
{{ $now := Now }}
{{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
conditions:
{{ range NodeConditions }}
- lastHeartbeatTime: {{ $now | Quote }}
  lastTransitionTime: {{ $lastTransitionTime | Quote }}
  message: {{ .message | Quote }}
  reason: {{ .reason | Quote }}
  status: {{ .status | Quote }}
  type: {{ .type | Quote }}
{{ end }}
"""

_NODE_INITIALIZE = (
    _NODE_CONDITIONS
    + """\
addresses:
{{ with NodeIP }}
- address: {{ . | Quote }}
  type: InternalIP
{{ end }}
{{ with NodeName }}
- address: {{ . | Quote }}
  type: Hostname
{{ end }}
{{ with NodePort }}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ . }}
{{ end }}
allocatable:
{{ with .status.allocatable }}
{{ YAML . 1 }}
{{ else }}
  cpu: "1"
  memory: 1Gi
  pods: "110"
{{ end }}
capacity:
{{ with .status.capacity }}
{{ YAML . 1 }}
{{ else }}
  cpu: "1"
  memory: 1Gi
  pods: "110"
{{ end }}
nodeInfo:
  architecture: amd64
  containerRuntimeVersion: {{ printf "containerd://kwok-%s" Version | Quote }}
  kernelVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeProxyVersion: {{ printf "kwok-%s" Version | Quote }}
  kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
  operatingSystem: linux
  osImage: Container-Optimized OS from Google
phase: Running
"""
)

_POD_READY = """\
{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Ready
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: ContainersReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: true
  restartCount: 0
  started: true
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPsWith .spec.nodeName }}
hostIP: {{ index . 0 | Quote }}
{{ end }}
{{ with PodIPsWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
podIP: {{ index . 0 | Quote }}
podIPs:
{{ range . }}
- ip: {{ . | Quote }}
{{ end }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _pod_finished(phase: str, exit_code: str, reason: str) -> str:
    return (
        """\
{{ $now := Now }}
{{ $root := . }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: PodCompleted
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: PodCompleted
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
"""
        + f"      exitCode: {exit_code}\n"
        + """\
      finishedAt: {{ $now | Quote }}
"""
        + f"      reason: {reason}\n"
        + """\
      startedAt: {{ or $root.status.startTime $now | Quote }}
{{ end }}
"""
        + f"phase: {phase}\n"
    )


def _stage(name: str, resource: dict[str, str], spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {"resourceRef": resource, **spec},
    }


def _after_duration() -> dict[str, Any]:
    return {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": _DURATION}}


def stage_objects() -> list[dict[str, Any]]:
    """The Stage objects, as mappings (see the module docstring)."""
    has_duration = {"key": _DURATION, "operator": "Exists"}
    return [
        _stage(
            "node-initialize",
            _NODE,
            {
                "selector": {
                    "matchExpressions": [{"key": _READY, "operator": "NotIn", "values": ["True"]}]
                },
                "next": {"statusTemplate": _NODE_INITIALIZE},
            },
        ),
        _stage(
            "node-heartbeat",
            _NODE,
            {
                "selector": {
                    "matchExpressions": [
                        {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                        {"key": _READY, "operator": "In", "values": ["True"]},
                    ]
                },
                "delay": {"durationMilliseconds": 20000, "jitterDurationMilliseconds": 25000},
                "next": {"statusTemplate": _NODE_CONDITIONS},
                "immediateNextStage": True,
            },
        ),
        _stage(
            "pod-ready",
            _POD,
            {
                "selector": {
                    "matchExpressions": [
                        _NOT_DELETING,
                        {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                        {"key": _READY, "operator": "NotIn", "values": ["True"]},
                    ]
                },
                "next": {"statusTemplate": _POD_READY},
            },
        ),
        _stage(
            "pod-succeed",
            _POD,
            {
                "selector": {
                    "matchExpressions": [
                        _NOT_DELETING,
                        _RUNNING,
                        has_duration,
                        {"key": _EXIT_CODE, "operator": "DoesNotExist"},
                    ]
                },
                "delay": _after_duration(),
                "next": {"statusTemplate": _pod_finished("Succeeded", "0", "Completed")},
            },
        ),
        _stage(
            "pod-succeed-exit-zero",
            _POD,
            {
                "selector": {
                    "matchExpressions": [
                        _NOT_DELETING,
                        _RUNNING,
                        has_duration,
                        {"key": _EXIT_CODE, "operator": "In", "values": ["0"]},
                    ]
                },
                "delay": _after_duration(),
                "next": {"statusTemplate": _pod_finished("Succeeded", "0", "Completed")},
            },
        ),
        _stage(
            "pod-fail",
            _POD,
            {
                "selector": {
                    "matchExpressions": [
                        _NOT_DELETING,
                        _RUNNING,
                        has_duration,
                        {"key": _EXIT_CODE, "operator": "Exists"},
                        {"key": _EXIT_CODE, "operator": "NotIn", "values": ["0"]},
                    ]
                },
                "delay": _after_duration(),
                "next": {
                    "statusTemplate": _pod_finished(
                        "Failed",
                        '{{ index $root.metadata.annotations "' + SIM_EXIT_CODE_ANNOTATION + '" }}',
                        "Error",
                    )
                },
            },
        ),
        _stage(
            "pod-delete",
            _POD,
            {
                "selector": {
                    "matchExpressions": [
                        {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
                    ]
                },
                "next": {"delete": True},
            },
        ),
    ]


def kwok_config() -> str:
    """kwok's `--config` file: the Stages above, as multi-document YAML."""
    return yaml.safe_dump_all(stage_objects(), sort_keys=False)
