{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "clusterd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the resource name prefix. Components append -clusterd / -noded,
so it is truncated to leave room for them.
*/}}
{{- define "clusterd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
ClusterD's objects (Deployment, Service, ConfigMap) carry the prefix itself; NodeD's add -noded.
*/}}
{{- define "clusterd.clusterd.fullname" -}}
{{- include "clusterd.fullname" . }}
{{- end }}

{{- define "clusterd.noded.fullname" -}}
{{- printf "%s-noded" (include "clusterd.fullname" .) }}
{{- end }}

{{- define "clusterd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object. Call with (dict "ctx" $ "component" "clusterd").
*/}}
{{- define "clusterd.labels" -}}
helm.sh/chart: {{ include "clusterd.chart" .ctx }}
{{ include "clusterd.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: clusterd
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels (immutable on Deployments and DaemonSets: never add to them).
*/}}
{{- define "clusterd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "clusterd.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "clusterd.image" -}}
{{- $img := .Values.image }}
{{- if $img.digest }}
{{- printf "%s@%s" $img.repository $img.digest }}
{{- else }}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag) }}
{{- end }}
{{- end }}

{{- define "clusterd.clusterd.serviceAccountName" -}}
{{- if .Values.clusterd.serviceAccount.create }}
{{- default (include "clusterd.clusterd.fullname" .) .Values.clusterd.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.clusterd.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "clusterd.noded.serviceAccountName" -}}
{{- if .Values.noded.serviceAccount.create }}
{{- default (include "clusterd.noded.fullname" .) .Values.noded.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.noded.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Renders a flat map as one JSON object with sorted keys, leaving out null values. Numbers are
printed as integers: Helm reads YAML numbers as float64, and toJson would print 1000000 as
1e+06, which the daemons' config parsers reject. The schema only allows integers there.
*/}}
{{- define "clusterd.flatJson" -}}
{{- $out := list }}
{{- range $k := keys . | sortAlpha }}
{{- $v := get $ $k }}
{{- if not (kindIs "invalid" $v) }}
{{- if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) }}
{{- $out = append $out (printf "%s: %d" (toJson $k) (int64 $v)) }}
{{- else }}
{{- $out = append $out (printf "%s: %s" (toJson $k) (toJson $v)) }}
{{- end }}
{{- end }}
{{- end }}
{{- printf "{\n  %s\n}" (join ",\n  " $out) }}
{{- end }}

{{/*
Whether the catalog override file is rendered.
*/}}
{{- define "clusterd.hasCatalog" -}}
{{- if or .Values.clusterd.catalog.codes (not (kindIs "invalid" .Values.clusterd.catalog.defaultLevel)) }}true{{ end }}
{{- end }}

{{/*
ClusterD's config.json content.
*/}}
{{- define "clusterd.clusterdConfig" -}}
{{- $c := deepCopy .Values.clusterd.config }}
{{- $_ := set $c "listen" (printf "0.0.0.0:%d" (int .Values.clusterd.ports.grpc)) }}
{{- $_ = set $c "http_listen" (printf "0.0.0.0:%d" (int .Values.clusterd.ports.http)) }}
{{- $_ = set $c "data_dir" "/var/lib/clusterd/data" }}
{{- if include "clusterd.hasCatalog" . }}
{{- $_ = set $c "catalog_file" "/etc/clusterd/catalog.json" }}
{{- end }}
{{- $k := .Values.kubernetes }}
{{- if $k.enabled }}
{{- /* No kubeconfig key: in-cluster config from the mounted ServiceAccount token. */}}
{{- $_ = set $c "integrations" (list "kubernetes") }}
{{- $_ = set $c "k8s_namespace" $k.namespace }}
{{- $_ = set $c "k8s_rank_annotation" $k.rankAnnotation }}
{{- $_ = set $c "k8s_devices_annotation" $k.devicesAnnotation }}
{{- $_ = set $c "k8s_job_kind_label" $k.jobKindLabel }}
{{- $_ = set $c "k8s_taint_key" $k.taintKey }}
{{- $_ = set $c "k8s_taint_effect" $k.taintEffect }}
{{- $_ = set $c "k8s_node_condition" $k.nodeCondition }}
{{- $_ = set $c "k8s_node_not_ready_level" $k.nodeNotReadyLevel }}
{{- $_ = set $c "k8s_eviction_timeout" $k.evictionTimeout }}
{{- $_ = set $c "k8s_delete_fallback" $k.deleteFallback }}
{{- end }}
{{- with include "clusterd.actuator" . }}
{{- $_ = set $c "actuator" . }}
{{- end }}
{{- include "clusterd.flatJson" $c }}
{{- end }}

{{/*
The actuator ClusterD runs with: clusterd.config.actuator when set, else "kubernetes" when
kubernetes.enabled and kubernetes.actuator, else "" (the key is left out: the binary's none).
*/}}
{{- define "clusterd.actuator" -}}
{{- $a := .Values.clusterd.config.actuator }}
{{- if not (kindIs "invalid" $a) }}
{{- $a }}
{{- else if and .Values.kubernetes.enabled .Values.kubernetes.actuator }}kubernetes
{{- end }}
{{- end }}

{{/*
"true" when ClusterD acts through the Kubernetes API (the write rules of its ClusterRole).
*/}}
{{- define "clusterd.kubernetes.actuates" -}}
{{- if and .Values.kubernetes.enabled (eq (include "clusterd.actuator" .) "kubernetes") }}true{{ end }}
{{- end }}

{{/*
Name of the ClusterRole and ClusterRoleBinding: cluster-scoped, so the release namespace is
part of it (two releases of the same name in two namespaces do not collide).
*/}}
{{- define "clusterd.kubernetes.clusterRoleName" -}}
{{- printf "%s-%s" .Release.Namespace (include "clusterd.clusterd.fullname" .) | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/*
The catalog override file.
*/}}
{{- define "clusterd.catalogJson" -}}
{{- $cat := dict "codes" (default list .Values.clusterd.catalog.codes) }}
{{- if not (kindIs "invalid" .Values.clusterd.catalog.defaultLevel) }}
{{- $_ := set $cat "default_level" .Values.clusterd.catalog.defaultLevel }}
{{- end }}
{{- toPrettyJson $cat }}
{{- end }}

{{/*
"true" when NodeD runs privileged: forced by noded.privileged, or (null) needed by the
kernel log or an accelerator backend that opens the driver's device nodes.
*/}}
{{- define "clusterd.noded.privileged" -}}
{{- $p := .Values.noded.privileged }}
{{- if kindIs "bool" $p }}
{{- if $p }}true{{ end }}
{{- else if or .Values.noded.kmsg.enabled (has .Values.noded.accelerator (list "ascend" "npu-smi")) }}true
{{- end }}
{{- end }}

{{- define "clusterd.noded.server" -}}
{{- if .Values.noded.server }}
{{- .Values.noded.server }}
{{- else }}
{{- printf "%s.%s.svc:%d" (include "clusterd.clusterd.fullname" .) .Release.Namespace (int .Values.clusterd.ports.grpc) }}
{{- end }}
{{- end }}

{{/*
NodeD's config.json content. node_name comes from the downward API as a flag.
*/}}
{{- define "clusterd.nodedConfig" -}}
{{- $n := .Values.noded }}
{{- $c := deepCopy $n.config }}
{{- $_ := set $c "server" (include "clusterd.noded.server" .) }}
{{- $_ = set $c "http_listen" (printf "0.0.0.0:%d" (int $n.httpPort)) }}
{{- $_ = set $c "state_dir" "/var/lib/noded" }}
{{- $_ = set $c "accelerator" $n.accelerator }}
{{- $_ = set $c "root" "/host" }}
{{- if eq $n.accelerator "sim" }}
{{- $_ = set $c "sim_devices" $n.simDevices }}
{{- end }}
{{- if and (eq $n.accelerator "ascend") $n.ascend.dcmiPath }}
{{- $_ = set $c "dcmi_path" $n.ascend.dcmiPath }}
{{- end }}
{{- if eq $n.accelerator "npu-smi" }}
{{- $_ = set $c "npu_smi_command" $n.npuSmi.command }}
{{- end }}
{{- $_ = set $c "kmsg_path" (ternary "/dev/kmsg" "" $n.kmsg.enabled) }}
{{- if $n.rules }}
{{- $_ = set $c "rules_file" "/etc/noded/rules.json" }}
{{- end }}
{{- if $n.labels }}
{{- $terms := list }}
{{- range $k := keys $n.labels | sortAlpha }}
{{- $terms = append $terms (printf "%s=%v" $k (get $n.labels $k)) }}
{{- end }}
{{- $_ = set $c "labels" (join "," $terms) }}
{{- end }}
{{- include "clusterd.flatJson" $c }}
{{- end }}

{{/*
A nodeSelector as "k=v,k2=v2" for NOTES.txt ("any node" when empty).
*/}}
{{- define "clusterd.selectorText" -}}
{{- $terms := list }}
{{- range $k, $v := . }}
{{- $terms = append $terms (printf "%s=%s" $k $v) }}
{{- end }}
{{- if $terms }}{{ join "," $terms }}{{ else }}(any node){{ end }}
{{- end }}
