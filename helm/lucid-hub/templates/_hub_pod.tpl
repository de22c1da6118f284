{{/* The hub's pod template: one Deployment (one replica) or a StatefulSet (several). */}}
{{- define "lucid-hub.hubPod" -}}
template:
  metadata:
    labels:
      {{- include "lucid-hub.podLabels" . | nindent 6 }}
      app.kubernetes.io/component: hub
    annotations:
      checksum/config: {{ include (print $.Template.BasePath "/configmap.yaml") . | sha256sum }}
      checksum/secret: {{ include (print $.Template.BasePath "/secret.yaml") . | sha256sum }}
      {{- with .Values.podAnnotations }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
  spec:
    serviceAccountName: {{ include "lucid-hub.serviceAccountName" . }}
    automountServiceAccountToken: false
    securityContext:
      {{- include "lucid-hub.podSecurityContext" . | nindent 6 }}
    {{- include "lucid-hub.pullSecrets" . | nindent 4 }}
    terminationGracePeriodSeconds: 45   # serve's graceful timeout is 30 s
    containers:
      - name: hub
        image: {{ include "lucid-hub.image" . | quote }}
        imagePullPolicy: {{ .Values.image.pullPolicy }}
        args: ["serve"]   # threads, graceful timeout, logs and metrics port from the ConfigMap
        ports:
          - name: http
            containerPort: 8080
            protocol: TCP
          - name: metrics
            containerPort: {{ .Values.metrics.port }}
            protocol: TCP
        envFrom:
          - configMapRef:
              name: {{ include "lucid-hub.fullname" . }}
          {{- include "lucid-hub.extraEnvFrom" . | nindent 10 }}
        env:
          {{- include "lucid-hub.env" . | nindent 10 }}
          {{- include "lucid-hub.kafkaEnv" . | nindent 10 }}
          {{- include "lucid-hub.storeEnv" . | nindent 10 }}
          {{- include "lucid-hub.channelsEnv" . | nindent 10 }}
          {{- include "lucid-hub.extraEnv" . | nindent 10 }}
        livenessProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 10
          failureThreshold: 6
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 5
          failureThreshold: 3
        startupProbe:
          httpGet: {path: /healthz, port: http}
          periodSeconds: 5
          failureThreshold: 60   # a first start may repair the store from the archive
        securityContext:
          {{- include "lucid-hub.containerSecurityContext" . | nindent 10 }}
        resources:
          {{- toYaml .Values.hub.resources | nindent 10 }}
        volumeMounts:
          - {name: data, mountPath: /data}
          - {name: tmp, mountPath: /tmp}
          - {name: policies, mountPath: /etc/lucid-hub/policies, readOnly: true}
          {{- if .Values.signingKey.existingSecret }}
          - {name: signing-key, mountPath: /data/keys/signing-key.pem, subPath: signing-key.pem, readOnly: true}
          {{- end }}
          {{- if include "lucid-hub.replicated" . }}
          - {name: session-secret, mountPath: /data/keys/session-secret, subPath: session-secret, readOnly: true}
          {{- end }}
          {{- include "lucid-hub.kafkaVolumeMounts" . | nindent 10 }}
          {{- include "lucid-hub.storeVolumeMounts" . | nindent 10 }}
          {{- include "lucid-hub.databaseVolumeMounts" . | nindent 10 }}
          {{- with .Values.extraVolumeMounts }}
          {{- toYaml . | nindent 10 }}
          {{- end }}
    volumes:
      {{- if not (include "lucid-hub.replicated" .) }}
      - name: data
        persistentVolumeClaim:
          claimName: {{ include "lucid-hub.fullname" . }}-data
      {{- end }}
      - name: tmp
        emptyDir: {}
      - name: policies
        configMap:
          name: {{ include "lucid-hub.fullname" . }}
          items:
            - {key: policies.ttl, path: policies.ttl}
      {{- with .Values.signingKey.existingSecret }}
      - name: signing-key
        secret:
          secretName: {{ . }}
          defaultMode: 0400
      {{- end }}
      {{- if include "lucid-hub.replicated" . }}
      - name: session-secret   # admin sessions valid on every replica
        secret:
          secretName: {{ include "lucid-hub.fullname" . }}-session
          defaultMode: 0400
      {{- end }}
      {{- include "lucid-hub.kafkaVolumes" . | nindent 6 }}
      {{- include "lucid-hub.storeVolumes" . | nindent 6 }}
      {{- include "lucid-hub.databaseVolumes" . | nindent 6 }}
      {{- with .Values.extraVolumes }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- with .Values.nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .Values.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- if .Values.affinity }}
    affinity:
      {{- toYaml .Values.affinity | nindent 6 }}
    {{- else if include "lucid-hub.replicated" . }}
    affinity:   # replicas on different nodes where the scheduler can
      podAntiAffinity:
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 100
            podAffinityTerm:
              topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels:
                  {{- include "lucid-hub.selector" (dict "root" . "component" "hub") | nindent 18 }}
    {{- end }}
{{- end -}}
