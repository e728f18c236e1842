{{/* Names ------------------------------------------------------------------------------ */}}

{{- define "kyai-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: <release>-<chart>, or the release name when it already holds the chart's. */}}
{{- define "kyai-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kyai-operator.metricsServiceName" -}}
{{- printf "%s-metrics" (include "kyai-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kyai-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kyai-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "kyai-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Labels ----------------------------------------------------------------------------- */}}

{{- define "kyai-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kyai-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "kyai-operator.labels" -}}
helm.sh/chart: {{ include "kyai-operator.chart" . }}
{{ include "kyai-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kyai
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Images ----------------------------------------------------------------------------- */}}

{{/* repository@digest when image.digest is set, else repository:tag. */}}
{{- define "kyai-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The workers run the operator's image (digest included) unless workerImage names another. */}}
{{- define "kyai-operator.workerImage" -}}
{{- if or .Values.workerImage.repository .Values.workerImage.tag }}
{{- $repository := default .Values.image.repository .Values.workerImage.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) .Values.workerImage.tag }}
{{- printf "%s:%s" $repository $tag }}
{{- else }}
{{- include "kyai-operator.image" . }}
{{- end }}
{{- end }}

{{/* Whether to render the ServiceMonitor: true, false, or "auto" (when the cluster serves
     monitoring.coreos.com/v1 ServiceMonitors; `helm template` needs
     --api-versions monitoring.coreos.com/v1/ServiceMonitor or enabled=true). */}}
{{- define "kyai-operator.serviceMonitorEnabled" -}}
{{- $enabled := .Values.metrics.serviceMonitor.enabled }}
{{- if eq (toString $enabled) "auto" }}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" }}true{{ end }}
{{- else if $enabled }}true{{ end }}
{{- end }}

{{- define "kyai-operator.lmEvalWorkerImage" -}}
{{- $repository := default (default .Values.image.repository .Values.workerImage.repository) .Values.lmEvalWorkerImage.repository }}
{{- $workerTag := default (default .Chart.AppVersion .Values.image.tag) .Values.workerImage.tag }}
{{- $tag := default (printf "%s-lm-eval" $workerTag) .Values.lmEvalWorkerImage.tag }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}

{{/* RBAC: the rules the operator needs, shared by the ClusterRole and the per-namespace Roles.
     Keep in sync with config/rbac/role.yaml (a test compares them). */}}

{{- define "kyai-operator.namespacedRules" -}}
- apiGroups: ["kyai.io"]
  resources:
    - engineargssets
    - engineargssets/status
    - workloads
    - workloads/status
    - snapshots
    - snapshots/status
    - evaluationruns
    - evaluationruns/status
  verbs: ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
# EvaluationSweeps: watched and their status written; users create and delete them.
- apiGroups: ["kyai.io"]
  resources:
    - evaluationsweeps
    - evaluationsweeps/status
  verbs: ["get", "list", "patch", "watch"]
# EvaluationSchedules: watched, their status written and their kyai.io/run-now annotation
# removed once acted on; users create and delete them.
- apiGroups: ["kyai.io"]
  resources:
    - evaluationschedules
    - evaluationschedules/status
  verbs: ["get", "list", "patch", "update", "watch"]
# Children are created with blockOwnerDeletion: the API server then requires update on the
# owner's finalizers subresource.
- apiGroups: ["kyai.io"]
  resources:
    - engineargssets/finalizers
    - workloads/finalizers
    - snapshots/finalizers
    - evaluationruns/finalizers
    - evaluationsweeps/finalizers
    - evaluationschedules/finalizers
  verbs: ["update"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
# A Workload on several nodes (spec.nodes > 1) is a LeaderWorkerSet (kubernetes-sigs/lws).
# Harmless where LeaderWorkerSet is not installed.
- apiGroups: ["leaderworkerset.x-k8s.io"]
  resources: ["leaderworkersets"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
- apiGroups: [""]
  resources: ["services", "persistentvolumeclaims", "configmaps", "serviceaccounts"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
- apiGroups: ["rbac.authorization.k8s.io"]
  resources: ["roles", "rolebindings"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "delete", "get", "list", "patch", "update", "watch"]
# Check that the Secrets a run names exist before its Job is made (never create one: the
# default judge's key stays in the release namespace, behind the judge gateway).
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get"]
- apiGroups: [""]
  resources: ["pods", "pods/log"]
  verbs: ["get", "list", "watch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
# Read what Kueue says of a queued Job or engine pod (WaitingForQuota, Preempted); the
# operator never writes a Kueue object. Harmless where Kueue is not installed.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch"]
{{- end }}

{{- define "kyai-operator.clusterRules" -}}
- apiGroups: ["apiextensions.k8s.io"]
  resources: ["customresourcedefinitions"]
  verbs: ["get", "list", "watch"]
# Namespaces: the watched ones, and the labels defaultJudge.namespaceSelector is checked on.
- apiGroups: [""]
  resources: ["namespaces"]
  verbs: ["get", "list", "watch"]
{{- end }}
