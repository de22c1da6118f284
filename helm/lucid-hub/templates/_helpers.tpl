{{- define "lucid-hub.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "lucid-hub.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lucid-hub.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "lucid-hub.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "lucid-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "lucid-hub.fullname" .) .Values.serviceAccount.name }}
{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "lucid-hub.databaseSecret" -}}
{{ default (printf "%s-database" (include "lucid-hub.fullname" .)) .Values.database.existingSecret }}
{{- end -}}

{{/* Restricted pod security: non-root, read-only root filesystem, no privileges. */}}
{{- define "lucid-hub.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "lucid-hub.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The environment every lucid-hub container gets. */}}
{{- define "lucid-hub.env" -}}
- name: LUCID_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "lucid-hub.databaseSecret" . }}
      key: database-url
{{- end -}}
