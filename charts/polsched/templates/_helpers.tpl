{{/*
The operator's selector and labels: the same as `polsched render operator`
(manifests/templates/operator.yaml.j2), so that an install made with kubectl apply -k can
be taken over by the chart without a new Deployment selector.
*/}}
{{- define "polsched.selector" -}}
app.kubernetes.io/name: polsched-operator
{{- end }}

{{/* What Helm adds to every object, on top of render's labels. */}}
{{- define "polsched.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
{{- end }}

{{- define "polsched.labels" -}}
{{ include "polsched.selector" . }}
app.kubernetes.io/part-of: polsched
{{ include "polsched.helmLabels" . }}
{{- end }}

{{- define "polsched.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/*
Objects read from files/ (symlinks to manifests/rbac and crds/, their one source), one
YAML document each: moved to the release's namespace and labelled as Helm's.
Arguments: (list $ObjectMap $root).
*/}}
{{- define "polsched.fromSource" -}}
{{- $obj := index . 0 }}
{{- $root := index . 1 }}
{{- if hasKey $obj "Error" }}
{{- fail (printf "charts/polsched/files: not YAML: %s" $obj.Error) }}
{{- end }}
{{- if eq (dig "metadata" "namespace" "" $obj) "polsched-system" }}
{{- $_ := set $obj.metadata "namespace" $root.Release.Namespace }}
{{- end }}
{{- range $s := $obj.subjects | default list }}
{{- if eq ($s.namespace | default "") "polsched-system" }}
{{- $_ := set $s "namespace" $root.Release.Namespace }}
{{- end }}
{{- end }}
{{- $labels := merge (fromYaml (include "polsched.helmLabels" $root)) ($obj.metadata.labels | default dict) }}
{{- $_ := set $obj.metadata "labels" $labels }}
{{- toYaml $obj }}
{{- end }}
