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
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The labels of the pods (podLabels beside the chart's). */}}
{{- define "lucid-hub.podLabels" -}}
{{ include "lucid-hub.labels" . }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "lucid-hub.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* registry/repository, then @digest or :tag (Bitnami's convention; global.imageRegistry wins).
A repository that names its registry (values before 0.3: ghcr.io/lucid-hub/lucid-hub) is taken whole. */}}
{{- define "lucid-hub.imageRepository" -}}
{{- $registry := (.Values.global | default dict).imageRegistry | default .Values.image.registry -}}
{{- if and $registry (not (regexMatch "^[^/]*[.:][^/]*/" .Values.image.repository)) }}{{ $registry }}/{{ end }}{{ .Values.image.repository }}
{{- end -}}

{{- define "lucid-hub.image" -}}
{{ include "lucid-hub.imageRepository" . }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}{{ else }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ end }}
{{- end -}}

{{/* Image pull secrets: the chart's and global.imagePullSecrets. */}}
{{- define "lucid-hub.pullSecrets" -}}
{{- $secrets := concat (.Values.imagePullSecrets | default list) ((.Values.global | default dict).imagePullSecrets | default list) -}}
{{- with $secrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* What the operator adds to every lucid-hub container: environment and mounts. */}}
{{- define "lucid-hub.extraEnvFrom" -}}
{{- with .Values.extraEnvVarsCM }}
- configMapRef: {name: {{ . }}}
{{- end }}
{{- with .Values.extraEnvVarsSecret }}
- secretRef: {name: {{ . }}}
{{- end }}
{{- end -}}

{{- define "lucid-hub.extraEnv" -}}
{{- with .Values.extraEnvVars }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The workers' autoscaling and disruption budget: workers.*, or the top-level names before 0.3. */}}
{{- define "lucid-hub.workersAutoscaling" -}}
{{- if .Values.workers.autoscaling -}}{{ toJson .Values.workers.autoscaling }}{{- else -}}{{ toJson .Values.autoscaling }}{{- end -}}
{{- end -}}
{{- define "lucid-hub.workersPdb" -}}
{{- if .Values.workers.podDisruptionBudget -}}{{ toJson .Values.workers.podDisruptionBudget }}{{- else -}}{{ toJson .Values.podDisruptionBudget }}{{- end -}}
{{- end -}}

{{- define "lucid-hub.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "lucid-hub.fullname" .) .Values.serviceAccount.name }}
{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "lucid-hub.databaseSecret" -}}
{{ default (printf "%s-database" (include "lucid-hub.fullname" .)) .Values.database.existingSecret }}
{{- end -}}

{{/* Restricted pod security by default (non-root, read-only root filesystem, no privileges);
podSecurityContext and containerSecurityContext replace them. */}}
{{- define "lucid-hub.podSecurityContext" -}}
{{ toYaml .Values.podSecurityContext }}
{{- end -}}

{{- define "lucid-hub.containerSecurityContext" -}}
{{ toYaml .Values.containerSecurityContext }}
{{- end -}}

{{/* The environment every lucid-hub container gets. */}}
{{- define "lucid-hub.env" -}}
{{- $db := .Values.database -}}
{{- if $db.host }}
- {name: LUCID_DATABASE_HOST, value: {{ $db.host | quote }}}
- {name: LUCID_DATABASE_PORT, value: {{ $db.port | int | quote }}}
- {name: LUCID_DATABASE_NAME, value: {{ $db.name | quote }}}
- {name: LUCID_DATABASE_USER, value: {{ $db.user | quote }}}
{{- with $db.existingSecret }}
- name: LUCID_DATABASE_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ . }}, key: {{ $db.existingSecretPasswordKey }}}}
{{- end }}
{{- with $db.sslmode }}
- {name: LUCID_DATABASE_SSLMODE, value: {{ . | quote }}}
{{- end }}
{{- if $db.sslRootCert.existingSecret }}
- {name: LUCID_DATABASE_SSLROOTCERT, value: {{ printf "/etc/lucid-hub/database/%s" $db.sslRootCert.key | quote }}}
{{- end }}
{{- else }}
- name: LUCID_DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "lucid-hub.databaseSecret" . }}
      key: {{ if $db.existingSecret }}{{ $db.existingSecretUrlKey }}{{ else }}database-url{{ end }}
{{- end }}
{{- end -}}

{{/* The database's CA, where the parts name one (mounted read-only for libpq). */}}
{{- define "lucid-hub.databaseVolumeMounts" -}}
{{- if and .Values.database.host .Values.database.sslRootCert.existingSecret }}
- {name: database-ca, mountPath: /etc/lucid-hub/database, readOnly: true}
{{- end }}
{{- end -}}

{{- define "lucid-hub.databaseVolumes" -}}
{{- if and .Values.database.host .Values.database.sslRootCert.existingSecret }}
- name: database-ca
  secret: {secretName: {{ .Values.database.sslRootCert.existingSecret }}, defaultMode: 0444}
{{- end }}
{{- end -}}

{{/* Kafka's security for the containers that use the patch log: settings, secrets from the
operator's Secrets (never in the ConfigMap), PEM and properties files mounted read-only. */}}
{{- define "lucid-hub.kafkaEnv" -}}
{{- $k := .Values.kafka -}}
{{- if $k.bootstrap }}
{{- with $k.securityProtocol }}
- {name: LUCID_KAFKA_SECURITY_PROTOCOL, value: {{ . | quote }}}
{{- end }}
{{- if $k.tls.existingSecret }}
- {name: LUCID_KAFKA_SSL_CA_FILE, value: {{ printf "/etc/lucid-hub/kafka/tls/%s" $k.tls.caKey | quote }}}
{{- if $k.tls.certKey }}
- {name: LUCID_KAFKA_SSL_CERT_FILE, value: {{ printf "/etc/lucid-hub/kafka/tls/%s" $k.tls.certKey | quote }}}
- {name: LUCID_KAFKA_SSL_KEY_FILE, value: {{ printf "/etc/lucid-hub/kafka/tls/%s" $k.tls.keyKey | quote }}}
{{- end }}
{{- end }}
{{- if not $k.tls.checkHostname }}
- {name: LUCID_KAFKA_SSL_CHECK_HOSTNAME, value: "false"}
{{- end }}
{{- with $k.sasl.mechanism }}
- {name: LUCID_KAFKA_SASL_MECHANISM, value: {{ . | quote }}}
{{- end }}
{{- with $k.sasl.username }}
- {name: LUCID_KAFKA_SASL_USERNAME, value: {{ . | quote }}}
{{- end }}
{{- with $k.sasl.existingSecret }}
- name: LUCID_KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ . }}, key: {{ $k.sasl.passwordKey }}}}
{{- end }}
{{- with $k.oauth.tokenUrl }}
- {name: LUCID_KAFKA_OAUTH_TOKEN_URL, value: {{ . | quote }}}
- {name: LUCID_KAFKA_OAUTH_CLIENT_ID, value: {{ required "kafka.oauth.clientId is required with kafka.oauth.tokenUrl" $k.oauth.clientId | quote }}}
- name: LUCID_KAFKA_OAUTH_CLIENT_SECRET
  valueFrom: {secretKeyRef: {name: {{ required "kafka.oauth.existingSecret is required with kafka.oauth.tokenUrl" $k.oauth.existingSecret }}, key: {{ $k.oauth.clientSecretKey }}}}
{{- with $k.oauth.scope }}
- {name: LUCID_KAFKA_OAUTH_SCOPE, value: {{ . | quote }}}
{{- end }}
{{- end }}
{{- if $k.properties.existingSecret }}
- {name: LUCID_KAFKA_PROPERTIES_FILE, value: "/etc/lucid-hub/kafka/client.properties"}
{{- end }}
{{- end }}
{{- end -}}

{{- define "lucid-hub.kafkaVolumeMounts" -}}
{{- $k := .Values.kafka -}}
{{- if and $k.bootstrap $k.tls.existingSecret }}
- {name: kafka-tls, mountPath: /etc/lucid-hub/kafka/tls, readOnly: true}
{{- end }}
{{- if and $k.bootstrap $k.properties.existingSecret }}
- {name: kafka-properties, mountPath: /etc/lucid-hub/kafka/client.properties, subPath: {{ $k.properties.key }}, readOnly: true}
{{- end }}
{{- end -}}

{{- define "lucid-hub.kafkaVolumes" -}}
{{- $k := .Values.kafka -}}
{{- if and $k.bootstrap $k.tls.existingSecret }}
- name: kafka-tls
  secret: {secretName: {{ $k.tls.existingSecret }}, defaultMode: 0400}
{{- end }}
{{- if and $k.bootstrap $k.properties.existingSecret }}
- name: kafka-properties
  secret: {secretName: {{ $k.properties.existingSecret }}, defaultMode: 0400}
{{- end }}
{{- end -}}

{{/* Spark: the image with a JVM (the Dockerfile's spark target), its service account, settings. */}}
{{- define "lucid-hub.sparkImage" -}}
{{ default (printf "%s-spark" (include "lucid-hub.imageRepository" .)) .Values.spark.image.repository }}:{{ .Values.spark.image.tag | default .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "lucid-hub.sparkServiceAccountName" -}}
{{- if or .Values.spark.operator.enabled (hasPrefix "k8s://" .Values.spark.job.master) -}}
{{ include "lucid-hub.fullname" . }}-spark
{{- else -}}
{{ include "lucid-hub.serviceAccountName" . }}
{{- end -}}
{{- end -}}

{{- define "lucid-hub.sparkConf" -}}
spark.local.dir=/tmp{{ with .Values.spark.conf }},{{ . }}{{ end }}
{{- end -}}

{{/* The hub client the Spark publish uses (a client with graphs:write on the graph). */}}
{{- define "lucid-hub.sparkClientSecret" -}}
{{- if .Values.spark.client.existingSecret -}}{{ .Values.spark.client.existingSecret }}
{{- else if and .Values.spark.client.id .Values.spark.client.secret -}}{{ include "lucid-hub.fullname" . }}-spark-client
{{- else -}}{{ fail "spark.client is required: existingSecret (keys client-id, client-secret), or id and secret" }}
{{- end -}}
{{- end -}}

{{- define "lucid-hub.sparkClientEnv" -}}
{{- $secret := include "lucid-hub.sparkClientSecret" . -}}
- name: LUCID_CLIENT_ID
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: client-id}}
- name: LUCID_CLIENT_SECRET
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: client-secret}}
{{- end -}}

{{/* Several hub replicas (a StatefulSet, a store each) rather than one pod (a Deployment): "true" or "". */}}
{{- define "lucid-hub.replicated" -}}
{{- if or (gt (int .Values.hub.replicas) 1) .Values.hub.autoscaling.enabled }}true{{ end -}}
{{- end -}}

{{/* The operator's own triple store (docs/stores.md), for the hub's pods: endpoints and modes
as settings, credentials from the operator's Secret (never in the ConfigMap), its CA mounted. */}}
{{- define "lucid-hub.storeEnv" -}}
{{- $s := .Values.store -}}
{{- if or $s.queryUrl $s.updateUrl }}
- {name: LUCID_STORE_QUERY_URL, value: {{ required "store.queryUrl is required with store.updateUrl" $s.queryUrl | quote }}}
- {name: LUCID_STORE_UPDATE_URL, value: {{ required "store.updateUrl is required with store.queryUrl" $s.updateUrl | quote }}}
{{- with $s.gspUrl }}
- {name: LUCID_STORE_GSP_URL, value: {{ . | quote }}}
{{- end }}
- {name: LUCID_STORE_GRAPHS, value: {{ $s.graphs | quote }}}
- {name: LUCID_STORE_BLANK_NODES, value: {{ $s.blankNodes | quote }}}
{{- with $s.skolemBase }}
- {name: LUCID_STORE_SKOLEM_BASE, value: {{ . | quote }}}
{{- end }}
- {name: LUCID_STORE_TIMEOUT, value: {{ $s.timeout | quote }}}
- {name: LUCID_STORE_CAPTURE_SECONDS, value: {{ $s.captureSeconds | quote }}}
- {name: LUCID_STORE_AUTH, value: {{ $s.auth.scheme | quote }}}
{{- with $s.auth.user }}
- {name: LUCID_STORE_USER, value: {{ . | quote }}}
- name: LUCID_STORE_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ required "store.auth.existingSecret is required with store.auth.user" $s.auth.existingSecret }}, key: {{ $s.auth.passwordKey }}}}
{{- end }}
{{- if $s.auth.tokenKey }}
- name: LUCID_STORE_TOKEN
  valueFrom: {secretKeyRef: {name: {{ required "store.auth.existingSecret is required with store.auth.tokenKey" $s.auth.existingSecret }}, key: {{ $s.auth.tokenKey }}}}
{{- end }}
{{- if $s.ca.existingSecret }}
- {name: LUCID_STORE_CA_FILE, value: {{ printf "/etc/lucid-hub/store/%s" $s.ca.key | quote }}}
{{- end }}
{{- end }}
{{- end -}}

{{- define "lucid-hub.storeVolumeMounts" -}}
{{- if and (or .Values.store.queryUrl .Values.store.updateUrl) .Values.store.ca.existingSecret }}
- {name: store-ca, mountPath: /etc/lucid-hub/store, readOnly: true}
{{- end }}
{{- end -}}

{{- define "lucid-hub.storeVolumes" -}}
{{- if and (or .Values.store.queryUrl .Values.store.updateUrl) .Values.store.ca.existingSecret }}
- name: store-ca
  secret: {secretName: {{ .Values.store.ca.existingSecret }}, defaultMode: 0400}
{{- end }}
{{- end -}}

{{/* MQTT, client registration and the default graph (docs/queries.md, docs/auth.md,
docs/http-api.md): settings as values, secrets from the operator's Secrets. */}}
{{- define "lucid-hub.channelsEnv" -}}
{{- $m := .Values.mqtt -}}
{{- if $m.url }}
- {name: LUCID_MQTT_URL, value: {{ $m.url | quote }}}
- {name: LUCID_MQTT_TOPIC_PREFIX, value: {{ $m.topicPrefix | quote }}}
{{- with $m.user }}
- {name: LUCID_MQTT_USER, value: {{ . | quote }}}
- name: LUCID_MQTT_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ required "mqtt.existingSecret is required with mqtt.user" $m.existingSecret }}, key: {{ $m.passwordKey }}}}
{{- end }}
{{- end }}
{{- $r := .Values.registration -}}
{{- if ne $r.mode "off" }}
- {name: LUCID_DCR, value: {{ $r.mode | quote }}}
- {name: LUCID_DCR_GROUPS, value: {{ $r.groups | quote }}}
- {name: LUCID_DCR_SCOPES, value: {{ $r.scopes | quote }}}
{{- if eq $r.mode "token" }}
- name: LUCID_DCR_TOKEN
  valueFrom: {secretKeyRef: {name: {{ required "registration.existingSecret is required with registration.mode token" $r.existingSecret }}, key: {{ $r.tokenKey }}}}
{{- end }}
{{- end }}
{{- with .Values.defaultGraph }}
- {name: LUCID_DEFAULT_GRAPH, value: {{ . | quote }}}
{{- end }}
{{- end -}}
