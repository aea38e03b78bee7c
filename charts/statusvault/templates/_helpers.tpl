{{/*
Names and labels are `statusvault controller install`'s (statusvault/controller/install.py): fixed names in the
release's namespace, cluster-scoped ones suffixed with that namespace, so that one release per namespace is the rule.
*/}}
{{- define "statusvault.controller" -}}statusvault-controller{{- end -}}
{{- define "statusvault.backupAccount" -}}statusvault-backup{{- end -}}
{{- define "statusvault.caConfigMap" -}}statusvault-s3-ca{{- end -}}

{{/* A cluster-scoped object's name: one per install's namespace. */}}
{{- define "statusvault.clusterName" -}}{{ .name }}-{{ .root.Release.Namespace }}{{- end -}}

{{- define "statusvault.selectorLabels" -}}
app.kubernetes.io/name: statusvault
app.kubernetes.io/component: restore-controller
{{- end -}}

{{/* install's labels, then Helm's standard ones. */}}
{{- define "statusvault.labels" -}}
{{ include "statusvault.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "statusvault.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "statusvault.storage" -}}
{{- $storage := required "storage is required: s3://bucket/prefix (a pod's filesystem does not last)" .Values.storage -}}
{{- if not (hasPrefix "s3://" $storage) -}}
{{- fail (printf "storage must be s3://bucket/prefix (a pod's filesystem does not last), not %q" $storage) -}}
{{- end -}}
{{- $storage -}}
{{- end -}}

{{/*
The types the controller may restore, as JSON {"types": [{"group": ..., "resource": ...}]}: restoreTypes, else every
custom resource of a served, established CRD (as `controller install` discovers them), the controller's own excepted.
`helm template` has no cluster to look at: it renders none.
*/}}
{{- define "statusvault.types" -}}
{{- $own := list "restores.statusvault.dev" "backups.statusvault.dev" "backupschedules.statusvault.dev" -}}
{{- $types := list -}}
{{- if .Values.restoreTypes -}}
{{- range .Values.restoreTypes -}}
{{- $resource := first (splitList "." .) -}}
{{- $group := ternary (regexReplaceAll "^[^.]*\\." . "") "" (contains "." .) -}}
{{- $types = append $types (dict "group" $group "resource" $resource) -}}
{{- end -}}
{{- else -}}
{{- range (lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "").items | default list -}}
{{- $served := false -}}
{{- range .spec.versions -}}{{- if .served -}}{{- $served = true -}}{{- end -}}{{- end -}}
{{- $established := false -}}
{{- range (.status | default dict).conditions -}}
{{- if and (eq .type "Established") (eq .status "True") -}}{{- $established = true -}}{{- end -}}
{{- end -}}
{{- if and $served $established (not (has .metadata.name $own)) -}}
{{- $types = append $types (dict "group" .spec.group "resource" .spec.names.plural) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- dict "types" $types | toJson -}}
{{- end -}}

{{/*
rules: {"groups": {group: [resource, ...]}, "verbs": [...]} as one rule per API group, groups and resources sorted
(install's rules_for and restore_rules).
*/}}
{{- define "statusvault.rulesByGroup" -}}
{{- $rules := list -}}
{{- range $group := keys .groups | sortAlpha -}}
{{- $rules = append $rules (dict "apiGroups" (list $group) "resources" (get $.groups $group | uniq | sortAlpha) "verbs" $.verbs) -}}
{{- end -}}
{{- toYaml $rules -}}
{{- end -}}
