{{/*
Labels of every templated object. deploy/ labels its objects
app.kubernetes.io/managed-by: nodeexec and part-of: nodeexec; here managed-by
is the release service (Helm, as Helm expects), and instance, version and
helm.sh/chart are added. charts/chart_test.go ignores exactly these when it
compares the chart with deploy/.
*/}}
{{- define "nodeexec.labels" -}}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodeexec
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The watcher's image: REPOSITORY@DIGEST, else REPOSITORY:TAG (TAG: appVersion when empty). */}}
{{- define "nodeexec.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* The ServiceAccount the watcher's bindings name. */}}
{{- define "nodeexec.subject" -}}
- kind: ServiceAccount
  name: nodeexec-watcher
  namespace: {{ .Values.namespace }}
{{- end }}

{{/* The namespaces where run pods may be created (policy parameter). */}}
{{- define "nodeexec.allowedNamespaces" -}}
{{- if .Values.policy.allowedNamespaces -}}
{{ join "," .Values.policy.allowedNamespaces }}
{{- else -}}
{{ .Values.namespace }}
{{- end -}}
{{- end }}
