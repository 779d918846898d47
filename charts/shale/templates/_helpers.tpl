{{/* Names, labels and images shared by the templates. */}}

{{- define "shale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
RELEASE-shale, or just RELEASE when the release name already contains the
chart name; fullnameOverride replaces it. At most 52 characters, so that
suffixes such as -leader-election still fit in 63.
*/}}
{{- define "shale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "shale.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object of the release. */}}
{{- define "shale.labels" -}}
helm.sh/chart: {{ include "shale.chart" . }}
app.kubernetes.io/name: {{ include "shale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shale
{{- end -}}

{{/* Selector of the operator's Pods (never changes across upgrades). */}}
{{- define "shale.operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The operator's selector as a label-selector flag (k=v,k=v). */}}
{{- define "shale.operator.selectorFlag" -}}
{{- $parts := list -}}
{{- range $k, $v := include "shale.operator.selectorLabels" . | fromYaml -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{- define "shale.minio.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: demo-minio
{{- end -}}

{{- define "shale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shale.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
shale.image: REPOSITORY:TAG of an image value, its tag defaulting to
.Values.imageTag and then to the chart's appVersion.
Usage: include "shale.image" (list . .Values.operator.image)
*/}}
{{- define "shale.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $tag := $img.tag | default $root.Values.imageTag | default $root.Chart.AppVersion -}}
{{- printf "%s:%s" $img.repository (toString $tag) -}}
{{- end -}}
