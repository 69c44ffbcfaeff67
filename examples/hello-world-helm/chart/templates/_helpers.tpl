{{- define "hello.name" -}}
{{- printf "%s-hook" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hello.labels" -}}
app.kubernetes.io/name: hello-world-hook
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
