{{- define "dws-operator.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "dws-operator.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "dws-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dws-operator.serviceAccountName" -}}
{{- default (include "dws-operator.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* nodes.labels as DWS_NODE_LABELS: key=value pairs, comma-separated, sorted by key. */}}
{{- define "dws-operator.nodeLabels" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key (toString $value)) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/*
What the operator does to namespaced objects: in every namespace (no watchNamespaces),
or in each one served.
*/}}
{{- define "dws-operator.namespacedRules" -}}
# The requests: watched, the finalizer patched in and out.
- apiGroups: ["dws-operator.dev"]
  resources: ["trainingrequests"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["dws-operator.dev"]
  resources: ["trainingrequests/status"]
  verbs: ["get", "patch"]
# The namespaces' TrainingPolicies (guardrails), watched; never written.
- apiGroups: ["dws-operator.dev"]
  resources: ["trainingpolicies"]
  verbs: ["get", "list", "watch"]
# The workload of each request; watched so a finished Job's pool goes at once.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Several slices run as one JobSet (its Jobs are read to tell a lost node).
- apiGroups: ["jobset.x-k8s.io"]
  resources: ["jobsets"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Watched (ours carry the request label); read by name to tell a foreign one.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create", "delete"]
# Kueue's LocalQueues, watched: a request whose queue does not exist says so.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["localqueues"]
  verbs: ["get", "list", "watch"]
# Kueue's Workloads, watched: one Kueue deactivated (it gave up on it) is asked for again,
# or its request moves on, instead of waiting for nothing (never written).
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch"]
# The ProvisioningRequest Kueue made for a queued request, listed once the request has
# waited long enough that it may have stuck (never written: recovery goes through Kueue).
- apiGroups: ["autoscaling.x-k8s.io"]
  resources: ["provisioningrequests"]
  verbs: ["list"]
# An Event on every phase change (created, never patched).
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
