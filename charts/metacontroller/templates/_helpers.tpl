{{/* Chart name, or nameOverride; at most 63 characters (a DNS label). */}}
{{- define "metacontroller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Object name: fullnameOverride, else "<release>-<name>", or just the release name when it
already contains the name (release "metacontroller" gives "metacontroller").
*/}}
{{- define "metacontroller.fullname" -}}
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

{{/* "<chart>-<version>" for the helm.sh/chart label. */}}
{{- define "metacontroller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Namespace of the namespaced objects: namespaceOverride, else the release namespace. */}}
{{- define "metacontroller.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "metacontroller.labels" -}}
helm.sh/chart: {{ include "metacontroller.chart" . }}
{{ include "metacontroller.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the controller's pods. */}}
{{- define "metacontroller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "metacontroller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The service account the pods run as. */}}
{{- define "metacontroller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "metacontroller.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Whether commandArgs already decide leader election ("--leader-election" or
"--leader-election=<bool>"); the chart then leaves it alone.
*/}}
{{- define "metacontroller.leaderElectionGiven" -}}
{{- range .Values.commandArgs }}
{{- if or (eq (toString .) "--leader-election") (hasPrefix "--leader-election=" (toString .)) }}true{{ end }}
{{- end }}
{{- end }}

{{/*
Container args: commandArgs, plus --leader-election when more than one replica runs and the
user did not decide it, so two replicas never reconcile the same objects at once; with
sharding.enabled, --sharding --shards=N instead (every replica active, parents split).
*/}}
{{- define "metacontroller.args" -}}
{{- $args := list }}
{{- range .Values.commandArgs }}
{{- $args = append $args . }}
{{- end }}
{{- if (.Values.sharding).enabled }}
{{- $args = append $args "--sharding" }}
{{- $args = append $args (printf "--shards=%d" (int .Values.sharding.shards)) }}
{{- else if and (gt (int .Values.replicas) 1) (not (include "metacontroller.leaderElectionGiven" .)) }}
{{- $args = append $args "--leader-election" }}
{{- end }}
{{- with .Values.watchNamespaces }}
{{- $args = append $args (printf "--watch-namespaces=%s" (join "," .)) }}
{{- end }}
{{- with (.Values.inprocessHooks).memoryBudget }}
{{- $args = append $args (printf "--inprocess-hook-memory-budget=%s" .) }}
{{- end }}
{{- toYaml $args }}
{{- end }}

{{/* Service ports: service.ports, else the metrics port. */}}
{{- define "metacontroller.servicePorts" -}}
{{- if .Values.service.ports }}
{{- toYaml .Values.service.ports }}
{{- else }}
- name: metrics
  port: {{ .Values.metrics.port }}
  protocol: TCP
  targetPort: metrics
{{- end }}
{{- end }}
