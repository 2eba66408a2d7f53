{{- define "kernelserve.jobStoreSecret" -}}
{{- if .Values.jobStore.existingSecret -}}{{ .Values.jobStore.existingSecret }}{{- else -}}{{ .Release.Name }}-job-store{{- end -}}
{{- end -}}

{{- define "kernelserve.jobStoreUrl" -}}
{{- if .Values.jobStore.url -}}{{ .Values.jobStore.url }}{{- else -}}postgres://kernelserve@{{ .Release.Name }}-postgres:5432/kernelserve{{- end -}}
{{- end -}}
