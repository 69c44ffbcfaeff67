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

{{/*
PromQL label matchers of this release's series: prometheusRule.selector (default
job="<fullname>") and the extra matchers given, as "{a, b}". Called with a list: the root
context, then the extra matchers.
*/}}
{{- define "metacontroller.promSelector" -}}
{{- $root := first . }}
{{- $selector := $root.Values.prometheusRule.selector | default (printf "job=%q" (include "metacontroller.fullname" $root)) }}
{{- $matchers := prepend (rest .) $selector }}
{{- printf "{%s}" (join ", " (compact $matchers)) }}
{{- end }}

{{/*
The memory limit the memoryNearLimit alert compares with, in bytes: its limitBytes, else
resources.limits.memory (a Kubernetes quantity: plain, k/M/G/T or Ki/Mi/Gi/Ti); empty
when neither is set.
*/}}
{{- define "metacontroller.memoryLimitBytes" -}}
{{- $alert := .Values.prometheusRule.alerts.memoryNearLimit }}
{{- $quantity := toString (((.Values.resources).limits).memory | default "") }}
{{- if $alert.limitBytes }}
{{- $alert.limitBytes | int64 }}
{{- else if $quantity }}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $quantity }}
{{- $unit := trimPrefix $number $quantity }}
{{- if or (not $number) (not (hasKey $units $unit)) }}
{{- fail (printf "prometheusRule.alerts.memoryNearLimit: cannot read resources.limits.memory %q; set limitBytes" $quantity) }}
{{- end }}
{{- mulf (float64 $number) (index $units $unit) | int64 }}
{{- end }}
{{- end }}

{{/*
The rate of the latency buckets of the three hook families, each with a `hook` label and a
`runtime` label read from `url` (jsonnet:..., wasm:..., else webhook). Called with a list:
the selector ("{...}") and the rate window.
*/}}
{{- define "metacontroller.hookBucketRates" -}}
{{- $s := index . 0 }}
{{- $w := index . 1 -}}
label_replace(label_replace(
    label_replace(rate(metacontroller_sync_request_duration_histogram_seconds_bucket{{ $s }}[{{ $w }}]), "hook", "sync", "", "")
  or label_replace(rate(metacontroller_finalize_request_duration_histogram_seconds_bucket{{ $s }}[{{ $w }}]), "hook", "finalize", "", "")
  or label_replace(rate(metacontroller_customize_request_duration_histogram_seconds_bucket{{ $s }}[{{ $w }}]), "hook", "customize", "", ""),
  "runtime", "webhook", "", ""), "runtime", "$1", "url", "(jsonnet|wasm):.*")
{{- end }}

{{/*
The end of one alerting rule: `for`, labels (severity and prometheusRule.alertLabels) and
annotations (summary, description, runbook_url). Called with a dict: root, alert (its
values), name, summary, description.
*/}}
{{- define "metacontroller.alertTail" -}}
{{- $rule := .root.Values.prometheusRule }}
for: {{ .alert.for }}
labels:
  severity: {{ .alert.severity }}
  {{- with $rule.alertLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
annotations:
  summary: {{ .summary | quote }}
  description: {{ .description | quote }}
  runbook_url: {{ printf "%s#%s" $rule.runbookUrl (lower .name) | quote }}
{{- end }}
