{{/* The judge gateway (kyai judge-gateway): names, labels and whether it runs. */}}

{{/* It runs whenever a default judge is set. */}}
{{- define "kyai-operator.gateway.enabled" -}}
{{- if .Values.defaultJudge.endpoint }}true{{ end }}
{{- end }}

{{- define "kyai-operator.gateway.fullname" -}}
{{- printf "%s-judge-gateway" (include "kyai-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kyai-operator.gateway.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- default (include "kyai-operator.gateway.fullname" .) .Values.gateway.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.gateway.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "kyai-operator.gateway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kyai-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: judge-gateway
{{- end }}

{{- define "kyai-operator.gateway.labels" -}}
helm.sh/chart: {{ include "kyai-operator.chart" . }}
{{ include "kyai-operator.gateway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: kyai
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The gateway's base URL as judge workers reach it (the operator's KYAI_DEFAULT_JUDGE_GATEWAY). */}}
{{- define "kyai-operator.gateway.url" -}}
{{- printf "http://%s.%s.svc:%v/v1" (include "kyai-operator.gateway.fullname" .) .Release.Namespace .Values.gateway.port }}
{{- end }}

{{/* The gateway's check route on its metrics port, where the operator checks the default judge
before a run generates (the operator's KYAI_DEFAULT_JUDGE_GATEWAY_CHECK). */}}
{{- define "kyai-operator.gateway.checkUrl" -}}
{{- printf "http://%s.%s.svc:%v/upstream/v1" (include "kyai-operator.gateway.fullname" .) .Release.Namespace .Values.gateway.metricsPort }}
{{- end }}

{{/* Where the judge's key is mounted in the gateway pod. */}}
{{- define "kyai-operator.gateway.keyDir" -}}/etc/kyai/judge-key{{- end }}
