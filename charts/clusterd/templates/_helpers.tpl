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
{{- if or .Values.clusterd.catalog.codes .Values.clusterd.catalog.firmwareDriverPairs (not (kindIs "invalid" .Values.clusterd.catalog.defaultLevel)) }}true{{ end }}
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
{{- /* No kubeconfig key: both integrations use the in-cluster config, the mounted ServiceAccount
token. Each name once; with neither, the key is left out (the binary runs none). */}}
{{- $integrations := list }}
{{- if $k.enabled }}
{{- $integrations = append $integrations "kubernetes" }}
{{- end }}
{{- if include "clusterd.mindcluster.volcano" . }}
{{- $integrations = append $integrations "mindcluster" }}
{{- end }}
{{- if include "clusterd.mindcluster.jobSummary" . }}
{{- $integrations = append $integrations "mindcluster-jobs" }}
{{- end }}
{{- with $integrations }}
{{- $_ = set $c "integrations" . }}
{{- end }}
{{- if $k.enabled }}
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
{{- $_ = set $c "k8s_device_fallback_taint" $k.deviceFallbackTaint }}
{{- end }}
{{- with include "clusterd.actuator" . }}
{{- $_ = set $c "actuator" . }}
{{- end }}
{{- /* MindCluster compatibility: always written, like the other keys with a chart default. */}}
{{- $pf := .Values.mindcluster.pubfault }}
{{- $_ = set $c "pubfault_resources" (default list $pf.resources) }}
{{- /* flatJson prints numbers as integers and the config parser takes no JSON fractions:
a fractional rate goes in as text ("0.5"), which the binary parses as a number. */}}
{{- if eq (float64 $pf.rate) (floor $pf.rate) }}
{{- $_ = set $c "pubfault_rate" $pf.rate }}
{{- else }}
{{- $_ = set $c "pubfault_rate" (toString $pf.rate) }}
{{- end }}
{{- $_ = set $c "pubfault_burst" $pf.burst }}
{{- $_ = set $c "pubfault_max_faults" $pf.maxFaults }}
{{- if $pf.codeTable }}
{{- $_ = set $c "pubfault_code_table" "/etc/clusterd/pubfault-codes.json" }}
{{- end }}
{{- $_ = set $c "mindcluster_max_subscribers" .Values.mindcluster.maxSubscribers }}
{{- $_ = set $c "mindcluster_max_registrations_per_principal" .Values.mindcluster.maxRegistrationsPerPrincipal }}
{{- /* Written only away from ClusterD's default (30), so that the default values and values from
an older chart render the same config. */}}
{{- $taskdWait := int (dig "taskd" "wait" 30 .Values.mindcluster) }}
{{- if ne $taskdWait 30 }}
{{- $_ = set $c "mindcluster_taskd_wait_seconds" $taskdWait }}
{{- end }}
{{- if include "clusterd.mindcluster.volcano" . }}
{{- /* The "mindcluster" integration's keys: written only with it, so that a binary without it
still takes the default config. */}}
{{- $v := .Values.mindcluster.volcano }}
{{- $_ = set $c "mindcluster_device_info_namespace" $v.deviceInfoNamespace }}
{{- $_ = set $c "mindcluster_cluster_info_namespace" $v.clusterInfoNamespace }}
{{- $_ = set $c "mindcluster_cluster_info_refresh" $v.refresh }}
{{- $_ = set $c "mindcluster_cluster_info_writes_per_second" $v.writesPerSecond }}
{{- with $v.chunkBytes }}
{{- $_ = set $c "mindcluster_cluster_info_chunk_bytes" . }}
{{- end }}
{{- /* A JSON list, like pubfault_resources; left out when empty (the binary reads none). */}}
{{- with include "clusterd.mindcluster.publicFaultNamespaces" . | fromJsonArray }}
{{- $_ = set $c "mindcluster_public_fault_namespaces" . }}
{{- end }}
{{- /* MindCluster's operators' ConfigMaps: each key only when on. */}}
{{- if include "clusterd.mindcluster.system" . }}
{{- $_ = set $c "mindcluster_system_namespace" (include "clusterd.mindcluster.systemNamespace" .) }}
{{- end }}
{{- if $v.separationPolicyConfigMap }}
{{- $_ = set $c "mindcluster_separation_policy_cm" true }}
{{- end }}
{{- if $v.manualInfoConfigMap }}
{{- $_ = set $c "mindcluster_manual_info_cm" true }}
{{- $_ = set $c "mindcluster_manual_info_interval" ($v.manualInfoInterval | default "15s") }}
{{- end }}
{{- if $v.statisticsConfigMaps }}
{{- $_ = set $c "mindcluster_statistics_cms" true }}
{{- end }}
{{- if $v.schedulingExceptionConfigMap }}
{{- $_ = set $c "mindcluster_scheduling_exception_cm" true }}
{{- end }}
{{- if or $v.statisticsConfigMaps $v.schedulingExceptionConfigMap }}
{{- $_ = set $c "mindcluster_statistics_interval" ($v.statisticsInterval | default "60s") }}
{{- end }}
{{- if $v.superPodConfigMaps }}
{{- $_ = set $c "mindcluster_super_pod_cms" true }}
{{- end }}
{{- end }}
{{- $ha := .Values.ha }}
{{- if $ha.enabled }}
{{- /* High availability: etcd and the election; ha_replica_id is per pod (--ha-replica-id). */}}
{{- $_ = set $c "etcd_endpoints" (include "clusterd.ha.etcdEndpoints" . | fromJsonArray) }}
{{- if include "clusterd.ha.etcdSecret" . }}
{{- $dir := include "clusterd.ha.etcdTlsDir" . }}
{{- $_ = set $c "etcd_ca_file" (printf "%s/ca.crt" $dir) }}
{{- if include "clusterd.ha.etcdClientCert" . }}
{{- $_ = set $c "etcd_cert_file" (printf "%s/tls.crt" $dir) }}
{{- $_ = set $c "etcd_key_file" (printf "%s/tls.key" $dir) }}
{{- end }}
{{- end }}
{{- $_ = set $c "ha_lease_ttl" $ha.leaseTtl }}
{{- $_ = set $c "ha_key_prefix" $ha.keyPrefix }}
{{- $_ = set $c "ha_request_timeout" $ha.requestTimeout }}
{{- $_ = set $c "ha_max_entry_bytes" $ha.maxEntryBytes }}
{{- $_ = set $c "ha_log_retain_entries" $ha.logRetainEntries }}
{{- $_ = set $c "ha_log_compression" $ha.logCompression }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $dir := include "clusterd.tls.dir" . }}
{{- $_ = set $c "tls_cert_file" (printf "%s/tls.crt" $dir) }}
{{- $_ = set $c "tls_key_file" (printf "%s/tls.key" $dir) }}
{{- $_ = set $c "tls_client_ca_file" (printf "%s/ca.crt" $dir) }}
{{- $_ = set $c "tls_client_auth" (ternary "require" "request" .Values.tls.mutual) }}
{{- /* The HTTP port speaks TLS too: the kubelet's probes use the plaintext probe-only port. */}}
{{- $_ = set $c "probe_listen" (printf "0.0.0.0:%d" (int .Values.clusterd.ports.probe)) }}
{{- if include "clusterd.auth.tokenReview" . }}
{{- $_ = set $c "auth_token_review" true }}
{{- $_ = set $c "auth_token_audience" .Values.auth.tokenAudience }}
{{- if .Values.noded.enabled }}
{{- $_ = set $c "auth_agent_service_accounts" (list (printf "%s/%s" .Release.Namespace (include "clusterd.noded.serviceAccountName" .))) }}
{{- end }}
{{- end }}
{{- if .Values.auth.tokenFile.existingSecret }}
{{- $_ = set $c "auth_token_file" (include "clusterd.auth.tokenFileMount" .) }}
{{- end }}
{{- with .Values.auth.bindings }}
{{- $_ = set $c "auth_bindings" . }}
{{- end }}
{{- if include "clusterd.metrics.auth" . }}
{{- $_ = set $c "metrics_auth" true }}
{{- if ne .Values.metrics.role "viewer" }}
{{- $_ = set $c "metrics_role" .Values.metrics.role }}
{{- end }}
{{- end }}
{{- else }}
{{- /* Plaintext, no authentication: ClusterD refuses to start without a certificate or this. */}}
{{- $_ = set $c "insecure" true }}
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
{{- with .Values.clusterd.catalog.firmwareDriverPairs }}
{{- $_ := set $cat "firmware_driver_pairs" . }}
{{- end }}
{{- if not (kindIs "invalid" .Values.clusterd.catalog.defaultLevel) }}
{{- $_ := set $cat "default_level" .Values.clusterd.catalog.defaultLevel }}
{{- end }}
{{- toPrettyJson $cat }}
{{- end }}

{{/*
MindCluster's public-fault code override (mindcluster.pubfault.codeTable), merged over the
built-in table: {"SubHealthFault": ["010001001", ...], ...}.
*/}}
{{- define "clusterd.pubfaultCodesJson" -}}
{{- toPrettyJson .Values.mindcluster.pubfault.codeTable }}
{{- end }}

{{/*
The Service name MindCluster's clients have hard-coded (clusterd-grpc-svc.mindx-dl.svc...:8899).
*/}}
{{- define "clusterd.mindcluster.serviceName" -}}clusterd-grpc-svc{{- end }}
{{- define "clusterd.mindcluster.namespace" -}}mindx-dl{{- end }}
{{- define "clusterd.mindcluster.port" -}}8899{{- end }}

{{/*
"true" when the "mindcluster" integration runs (mindcluster.volcano.enabled): ClusterD reads the
device plugin's ConfigMaps and writes Volcano's cluster-info ConfigMaps. dig: values reused from
a chart without mindcluster.volcano (helm upgrade --reuse-values) leave it off.
*/}}
{{- define "clusterd.mindcluster.volcano" -}}
{{- if dig "volcano" "enabled" false .Values.mindcluster }}true{{ end }}
{{- end }}

{{/*
"true" when the "mindcluster-jobs" integration runs (mindcluster.jobSummary.enabled): ClusterD
writes MindCluster's job-summary-<job> ConfigMaps into each job's namespace.
*/}}
{{- define "clusterd.mindcluster.jobSummary" -}}
{{- if dig "jobSummary" "enabled" false .Values.mindcluster }}true{{ end }}
{{- end }}

{{/*
Names of the Roles (and RoleBindings) of the "mindcluster" integration: one in the device
plugin's namespace, one in Volcano's cluster-info namespace.
*/}}
{{- define "clusterd.mindcluster.deviceInfoRoleName" -}}
{{- printf "%s-mindcluster-deviceinfo" (include "clusterd.clusterd.fullname" .) }}
{{- end }}
{{- define "clusterd.mindcluster.clusterInfoRoleName" -}}
{{- printf "%s-mindcluster-clusterinfo" (include "clusterd.clusterd.fullname" .) }}
{{- end }}

{{/*
mindcluster.volcano.publicFaultNamespaces as a JSON list ([] when the integration is off or the
value is absent: values reused from a chart without it read none). ["*"]: every namespace.
*/}}
{{- define "clusterd.mindcluster.publicFaultNamespaces" -}}
{{- if include "clusterd.mindcluster.volcano" . }}
{{- dig "volcano" "publicFaultNamespaces" (list) .Values.mindcluster | default (list) | toJson }}
{{- else }}[]
{{- end }}
{{- end }}

{{/*
Name of the Roles (and RoleBindings) on the public-fault ConfigMaps, one in each namespace of
mindcluster.volcano.publicFaultNamespaces; with ["*"], of the ClusterRole (and
ClusterRoleBinding): cluster-scoped, so the release namespace is part of it, as in
clusterd.kubernetes.clusterRoleName.
*/}}
{{- /* MindCluster's operators' ConfigMaps: non-empty when one of them is on. */}}
{{- define "clusterd.mindcluster.system" -}}
{{- $v := .Values.mindcluster.volcano }}
{{- if or $v.separationPolicyConfigMap $v.manualInfoConfigMap $v.statisticsConfigMaps $v.schedulingExceptionConfigMap $v.superPodConfigMaps }}true{{- end }}
{{- end }}
{{- define "clusterd.mindcluster.systemNamespace" -}}
{{- .Values.mindcluster.volcano.systemNamespace | default "cluster-system" }}
{{- end }}
{{- define "clusterd.mindcluster.systemRoleName" -}}
{{- printf "%s-mindcluster-system" (include "clusterd.clusterd.fullname" .) }}
{{- end }}
{{- define "clusterd.mindcluster.publicFaultRoleName" -}}
{{- printf "%s-mindcluster-publicfault" (include "clusterd.clusterd.fullname" .) }}
{{- end }}
{{- define "clusterd.mindcluster.nodesClusterRoleName" -}}
{{- printf "%s-%s-mindcluster-nodes" .Release.Namespace (include "clusterd.clusterd.fullname" .) | trunc 253 | trimSuffix "-" }}
{{- end }}
{{- define "clusterd.mindcluster.publicFaultClusterRoleName" -}}
{{- printf "%s-%s-mindcluster-publicfault" .Release.Namespace (include "clusterd.clusterd.fullname" .) | trunc 253 | trimSuffix "-" }}
{{- end }}

{{/*
"true" when NodeD runs privileged: forced by noded.privileged, or (null) needed by the
kernel log or an accelerator backend that opens the driver's device nodes.
*/}}
{{- define "clusterd.noded.privileged" -}}
{{- $p := .Values.noded.privileged }}
{{- if kindIs "bool" $p }}
{{- if $p }}true{{ end }}
{{- else if or .Values.noded.kmsg.enabled (has .Values.noded.accelerator (list "ascend" "nvml" "npu-smi")) }}true
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
{{- if and (has $n.accelerator (list "ascend" "npu-smi")) $n.ascend.hccnConf }}
{{- $_ = set $c "hccn_conf" $n.ascend.hccnConf }}
{{- end }}
{{- if eq $n.accelerator "npu-smi" }}
{{- $_ = set $c "npu_smi_command" $n.npuSmi.command }}
{{- end }}
{{- if and (eq $n.accelerator "nvml") $n.nvidia.nvmlPath }}
{{- $_ = set $c "nvml_path" $n.nvidia.nvmlPath }}
{{- end }}
{{- $_ = set $c "kmsg_path" (ternary "/dev/kmsg" "" $n.kmsg.enabled) }}
{{- $_ = set $c "progress_dir" (ternary "/run/clusterd/progress" "" $n.progress.enabled) }}
{{- $pods := and $n.podResources.enabled (include "clusterd.noded.privileged" .) }}
{{- $_ = set $c "pod_resources_socket" (ternary "/var/lib/kubelet/pod-resources/kubelet.sock" "" (not (not $pods))) }}
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
{{- if .Values.tls.enabled }}
{{- $dir := include "clusterd.noded.tls.dir" . }}
{{- $_ = set $c "tls_ca_file" (printf "%s/ca.crt" $dir) }}
{{- $_ = set $c "tls_cert_file" (printf "%s/tls.crt" $dir) }}
{{- $_ = set $c "tls_key_file" (printf "%s/tls.key" $dir) }}
{{- if include "clusterd.noded.projectedToken" . }}
{{- $_ = set $c "token_file" (include "clusterd.noded.tokenFile" .) }}
{{- end }}
{{- end }}
{{- if include "clusterd.noded.httpTls" . }}
{{- /* NodeD's HTTPS port: its certificate (CN and DNS name clusterd-agents); with
noded.http.auth, /metrics needs a client certificate of the CA or the token. */}}
{{- $dir := include "clusterd.noded.tls.dir" . }}
{{- $_ = set $c "http_tls_cert_file" (printf "%s/tls.crt" $dir) }}
{{- $_ = set $c "http_tls_key_file" (printf "%s/tls.key" $dir) }}
{{- if .Values.noded.http.auth }}
{{- $_ = set $c "http_tls_client_ca_file" (printf "%s/ca.crt" $dir) }}
{{- if .Values.noded.http.tokenSecret.name }}
{{- $_ = set $c "http_token_file" (include "clusterd.noded.httpTokenFile" .) }}
{{- end }}
{{- end }}
{{- else }}
{{- /* Plaintext on the node's address: only with the explicit switch. */}}
{{- $_ = set $c "http_insecure" true }}
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

{{/*
---- TLS and authentication (docs/deploy.md, "TLS and authentication") ----
Where the daemons find their credentials: one projected volume per pod carries the ConfigMap
and the Secrets, so the files sit under the config directory without a mount inside a
read-only mount, and Secret updates (cert-manager renewals) reach the running pod.
*/}}
{{- define "clusterd.tls.dir" -}}/etc/clusterd/tls{{- end }}
{{- define "clusterd.noded.tls.dir" -}}/etc/noded/tls{{- end }}
{{- define "clusterd.noded.tokenFile" -}}/etc/noded/token/token{{- end }}
{{- define "clusterd.noded.httpTokenFile" -}}/etc/noded/http-token/token{{- end }}

{{/*
"true" when NodeD's HTTP port serves HTTPS: tls.enabled and noded.http.tls.
*/}}
{{- define "clusterd.noded.httpTls" -}}
{{- if and .Values.tls.enabled .Values.noded.http.tls }}true{{ end }}
{{- end }}

{{/*
"true" when ClusterD's /metrics needs a credential (metrics_auth): metrics.auth, or with
metrics.auth null (the default) whenever tls.enabled.
*/}}
{{- define "clusterd.metrics.auth" -}}
{{- if kindIs "bool" .Values.metrics.auth }}{{ if .Values.metrics.auth }}true{{ end }}
{{- else if .Values.tls.enabled }}true{{ end }}
{{- end }}
{{- define "clusterd.auth.tokenFileMount" -}}/etc/clusterd/auth/tokens.csv{{- end }}

{{/*
Name of the Secret with ClusterD's certificate (tls.crt, tls.key, ca.crt = client CA).
*/}}
{{- define "clusterd.tls.serverSecret" -}}
{{- if eq .Values.tls.source "existingSecret" }}
{{- .Values.tls.existingSecret.server }}
{{- else }}
{{- printf "%s-tls" (include "clusterd.clusterd.fullname" .) }}
{{- end }}
{{- end }}

{{/*
Name of the Secret with NodeD's client certificate (tls.crt, tls.key, ca.crt = server CA).
*/}}
{{- define "clusterd.tls.agentsSecret" -}}
{{- if eq .Values.tls.source "existingSecret" }}
{{- .Values.tls.existingSecret.agents }}
{{- else }}
{{- printf "%s-tls" (include "clusterd.noded.fullname" .) }}
{{- end }}
{{- end }}

{{/*
The generated CA (tls.source=generate): ca.crt, tls.crt (the same certificate) and tls.key.
Not mounted anywhere; it signs client certificates for people and tools (NOTES.txt).
*/}}
{{/*
The issuerRef of the certManager Certificates (JSON): tls.certManager.issuerRef, or without a
name the chart's own CA Issuer (tls-certificates.yaml).
*/}}
{{- define "clusterd.tls.certManagerIssuer" -}}
{{- $ref := .Values.tls.certManager.issuerRef }}
{{- if $ref.name }}
{{- dict "name" $ref.name "kind" $ref.kind "group" $ref.group | toJson }}
{{- else }}
{{- dict "name" (include "clusterd.tls.caSecret" .) "kind" "Issuer" "group" "cert-manager.io" | toJson }}
{{- end }}
{{- end }}

{{- define "clusterd.tls.caSecret" -}}
{{- printf "%s-ca" (include "clusterd.clusterd.fullname" .) }}
{{- end }}

{{/*
DNS names ClusterD's certificate covers: the Service in every form a client may use,
localhost (port-forward, the /readyz self-check) and tls.extraDnsNames. As JSON (a list).
*/}}
{{- define "clusterd.tls.dnsNames" -}}
{{- $svc := include "clusterd.clusterd.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) "localhost" }}
{{- toJson (concat $names .Values.tls.extraDnsNames | uniq) }}
{{- end }}

{{- define "clusterd.tls.ipAddresses" -}}
{{- toJson (concat (list "127.0.0.1") .Values.tls.extraIpAddresses | uniq) }}
{{- end }}

{{/*
"true" when ClusterD checks tokens with the TokenReview API: auth.tokenReview, with TLS.
*/}}
{{- define "clusterd.auth.tokenReview" -}}
{{- if and .Values.tls.enabled .Values.auth.tokenReview }}true{{ end }}
{{- end }}

{{/*
"true" when NodeD gets the projected token (TokenReview on and NodeD deployed).
*/}}
{{- define "clusterd.noded.projectedToken" -}}
{{- if and (include "clusterd.auth.tokenReview" .) .Values.noded.enabled }}true{{ end }}
{{- end }}

{{/*
"true" when ClusterD's pod needs its ServiceAccount token: the Kubernetes integration, the
mindcluster integration (mindcluster.volcano.enabled), TokenReview, or the leader label of ha
(ha.leaderLabel).
*/}}
{{- define "clusterd.clusterd.apiAccess" -}}
{{- if or .Values.kubernetes.enabled (include "clusterd.mindcluster.volcano" .) (include "clusterd.mindcluster.jobSummary" .) (include "clusterd.auth.tokenReview" .) (include "clusterd.ha.leaderLabel" .) }}true{{ end }}
{{- end }}

{{/*
Combinations the schema cannot express well; fails with a message that names the values.
Included by the ConfigMap (always rendered).
*/}}
{{- define "clusterd.validate" -}}
{{- $t := .Values.tls }}
{{- if not $t.enabled }}
{{- if or .Values.auth.tokenFile.existingSecret .Values.auth.bindings .Values.metrics.auth }}
{{- fail "auth.tokenFile.existingSecret, auth.bindings and metrics.auth need tls.enabled=true: without TLS ClusterD runs insecure and authenticates nobody" }}
{{- end }}
{{- else if eq $t.source "existingSecret" }}
{{- if not $t.existingSecret.server }}
{{- fail "tls.source=existingSecret needs tls.existingSecret.server (a Secret with tls.crt, tls.key and ca.crt)" }}
{{- end }}
{{- if and .Values.noded.enabled (not $t.existingSecret.agents) }}
{{- fail "tls.source=existingSecret needs tls.existingSecret.agents (NodeD's client certificate: tls.crt, tls.key and ca.crt)" }}
{{- end }}
{{- end }}
{{- if and .Values.mindcluster.service.enabled (eq (include "clusterd.clusterd.fullname" .) (include "clusterd.mindcluster.serviceName" .)) }}
{{- fail "mindcluster.service.enabled: the release's own Service is already named clusterd-grpc-svc; choose another release name or fullnameOverride" }}
{{- end }}
{{- if and .Values.metrics.auth (not .Values.auth.tokenFile.existingSecret) (not (include "clusterd.auth.tokenReview" .)) (not .Values.metrics.clientCertSecret) }}
{{- fail "metrics.auth needs a token source: auth.tokenFile.existingSecret or auth.tokenReview (or metrics.clientCertSecret: the scraper's client certificate)" }}
{{- end }}
{{- if and (include "clusterd.metrics.auth" .) .Values.monitoring.serviceMonitor.enabled (not .Values.metrics.bearerTokenSecret.name) (not .Values.metrics.bearerTokenFile) (not .Values.metrics.clientCertSecret) }}
{{- fail "metrics.auth (on by default with tls.enabled) with monitoring.serviceMonitor.enabled needs metrics.bearerTokenSecret.name or metrics.bearerTokenFile (the token Prometheus sends) or metrics.clientCertSecret (its client certificate)" }}
{{- end }}
{{- $ha := .Values.ha }}
{{- if $ha.enabled }}
{{- $e := $ha.etcd }}
{{- if and (not $e.endpoints) (eq (toString $e.deploy) "false") }}
{{- fail "ha.enabled needs etcd: set ha.etcd.endpoints (the members of an existing etcd cluster) or ha.etcd.deploy=true (the chart deploys one)" }}
{{- end }}
{{- if and $e.endpoints (eq (toString $e.deploy) "true") }}
{{- fail "ha.etcd.endpoints and ha.etcd.deploy=true exclude each other: give the endpoints of an existing etcd cluster, or let the chart deploy one (no endpoints)" }}
{{- end }}
{{- $https := 0 }}
{{- range $e.endpoints }}{{ if hasPrefix "https://" . }}{{ $https = add1 $https }}{{ end }}{{ end }}
{{- if and (gt $https 0) (lt $https (len $e.endpoints)) }}
{{- fail (printf "ha.etcd.endpoints: either every endpoint is https:// or none (host:port without a scheme is plaintext): %s" (join ", " $e.endpoints)) }}
{{- end }}
{{- $existing := dig "tls" "existingSecret" "" $e }}
{{- if and $existing (include "clusterd.ha.etcdDeploy" .) }}
{{- fail "ha.etcd.tls.existingSecret is for an existing etcd (https:// ha.etcd.endpoints); the chart generates the certificates of the etcd it deploys (ha.etcd.tls.enabled)" }}
{{- end }}
{{- if and $existing $e.endpoints (eq $https 0) }}
{{- fail "ha.etcd.tls.existingSecret needs https:// ha.etcd.endpoints (plaintext endpoints use no certificates)" }}
{{- end }}
{{- if and .Values.clusterd.persistence.enabled .Values.clusterd.persistence.existingClaim }}
{{- fail "ha.enabled: clusterd.persistence.existingClaim cannot be shared by the replicas (each gets a volume of its own from the StatefulSet's volumeClaimTemplates); leave it empty" }}
{{- end }}
{{- if and (include "clusterd.ha.etcdDeploy" .) (ge (int64 (default 1048576 $ha.maxEntryBytes)) (int64 $e.maxRequestBytes)) }}
{{- fail "ha.maxEntryBytes (default 1048576) must stay below ha.etcd.maxRequestBytes: one group commit is one etcd request" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
---- High availability (ha.enabled) ----
The headless Service of ClusterD's StatefulSet (its serviceName; every replica, Ready or not).
*/}}
{{- define "clusterd.ha.headlessName" -}}
{{- printf "%s-headless" (include "clusterd.clusterd.fullname" .) }}
{{- end }}

{{/*
"true" when the replicas label their pods clusterd.io/ha-role=leader or standby (--ha-pod):
ha.enabled and ha.leaderLabel. Then every healthy replica is Ready (/readyz/replica) and the
clusterd Service selects the label instead of readiness.
*/}}
{{- define "clusterd.ha.leaderLabel" -}}
{{- if and .Values.ha.enabled .Values.ha.leaderLabel }}true{{ end }}
{{- end }}

{{/*
The pod label the leader carries, and the clusterd Service selects, with ha.leaderLabel.
*/}}
{{- define "clusterd.ha.roleLabel" -}}clusterd.io/ha-role{{- end }}

{{/*
The StatefulSet's updateStrategy (YAML): ha.updateStrategy when set, else RollingUpdate with
ha.leaderLabel (every healthy replica is Ready) and OnDelete without it (only the leader is
Ready: a RollingUpdate would stop at the first standby).
*/}}
{{- define "clusterd.ha.updateStrategy" -}}
{{- $u := .Values.ha.updateStrategy }}
{{- if kindIs "invalid" $u }}
{{- $u = dict "type" (ternary "RollingUpdate" "OnDelete" (eq (include "clusterd.ha.leaderLabel" .) "true")) }}
{{- end }}
{{- toYaml $u }}
{{- end }}

{{/*
The deployed etcd: StatefulSet and headless Service name.
*/}}
{{- define "clusterd.etcd.fullname" -}}
{{- printf "%s-etcd" (include "clusterd.fullname" .) }}
{{- end }}

{{/*
"true" when the chart deploys etcd: ha.enabled, and ha.etcd.deploy (null: no endpoints given).
*/}}
{{- define "clusterd.ha.etcdDeploy" -}}
{{- $e := .Values.ha.etcd }}
{{- if .Values.ha.enabled }}
{{- if kindIs "bool" $e.deploy }}
{{- if $e.deploy }}true{{ end }}
{{- else if not $e.endpoints }}true
{{- end }}
{{- end }}
{{- end }}

{{/*
The etcd member's DNS name (<pod>.<headless service>.<namespace>.svc) for ordinal .i.
Call with (dict "ctx" $ "i" N).
*/}}
{{- define "clusterd.etcd.memberHost" -}}
{{- $name := include "clusterd.etcd.fullname" .ctx }}
{{- printf "%s-%d.%s.%s.svc" $name (int .i) $name .ctx.Release.Namespace }}
{{- end }}

{{/*
etcd_endpoints as JSON (a list): ha.etcd.endpoints, or every member of the deployed etcd.
*/}}
{{- define "clusterd.ha.etcdEndpoints" -}}
{{- $e := .Values.ha.etcd }}
{{- if include "clusterd.ha.etcdDeploy" . }}
{{- $out := list }}
{{- range $i := until (int $e.replicas) }}
{{- $out = append $out (printf "%s://%s:2379" (include "clusterd.etcd.scheme" $) (include "clusterd.etcd.memberHost" (dict "ctx" $ "i" $i))) }}
{{- end }}
{{- toJson $out }}
{{- else }}
{{- toJson (default list $e.endpoints) }}
{{- end }}
{{- end }}

{{/*
---- TLS to etcd (ha.etcd.tls) ----
"true" when the deployed etcd serves TLS (ha.etcd.tls.enabled; a release upgraded with
--reuse-values from a chart without the value keeps its plaintext etcd).
*/}}
{{- define "clusterd.etcd.tls" -}}
{{- if and (include "clusterd.ha.etcdDeploy" .) (dig "tls" "enabled" false .Values.ha.etcd) }}true{{ end }}
{{- end }}

{{/*
The deployed etcd's URL scheme (client and peer ports).
*/}}
{{- define "clusterd.etcd.scheme" -}}
{{- ternary "https" "http" (eq (include "clusterd.etcd.tls" .) "true") }}
{{- end }}

{{/*
Where the deployed etcd finds its certificate (Secret <etcd>-tls: tls.crt, tls.key, ca.crt).
*/}}
{{- define "clusterd.etcd.tlsDir" -}}/etc/etcd/tls{{- end }}

{{- define "clusterd.etcd.caSecret" -}}
{{- printf "%s-ca" (include "clusterd.etcd.fullname" .) }}
{{- end }}

{{- define "clusterd.etcd.serverSecret" -}}
{{- printf "%s-tls" (include "clusterd.etcd.fullname" .) }}
{{- end }}

{{/*
The Secret with ClusterD's etcd TLS files (ca.crt; tls.crt and tls.key when
clusterd.ha.etcdClientCert), mounted under clusterd.ha.etcdTlsDir: the generated client
certificate of the deployed etcd, or ha.etcd.tls.existingSecret. Empty: none (plaintext, or
https:// endpoints trusted through the system's roots).
*/}}
{{- define "clusterd.ha.etcdSecret" -}}
{{- if include "clusterd.etcd.tls" . }}
{{- printf "%s-client-tls" (include "clusterd.etcd.fullname" .) }}
{{- else if and .Values.ha.enabled (not (include "clusterd.ha.etcdDeploy" .)) }}
{{- dig "tls" "existingSecret" "" .Values.ha.etcd }}
{{- end }}
{{- end }}

{{- define "clusterd.ha.etcdClientCert" -}}
{{- if include "clusterd.etcd.tls" . }}true
{{- else if and (include "clusterd.ha.etcdSecret" .) (dig "tls" "clientCertificate" true .Values.ha.etcd) }}true
{{- end }}
{{- end }}

{{- define "clusterd.ha.etcdTlsDir" -}}/etc/clusterd/etcd-tls{{- end }}

{{/*
"true" when ClusterD reaches etcd over TLS (https:// endpoints).
*/}}
{{- define "clusterd.ha.etcdHttps" -}}
{{- $eps := include "clusterd.ha.etcdEndpoints" . | fromJsonArray }}
{{- if and $eps (hasPrefix "https://" (first $eps)) }}true{{ end }}
{{- end }}

{{/*
DNS names of the deployed etcd's certificate (every member as
<pod>.<headless>.<ns>.svc[.cluster.local], the headless Service, localhost), as JSON.
*/}}
{{- define "clusterd.etcd.dnsNames" -}}
{{- $name := include "clusterd.etcd.fullname" . }}
{{- $ns := .Release.Namespace }}
{{- $names := list }}
{{- range $i := until (int .Values.ha.etcd.replicas) }}
{{- $host := include "clusterd.etcd.memberHost" (dict "ctx" $ "i" $i) }}
{{- $names = append $names $host }}
{{- $names = append $names (printf "%s.cluster.local" $host) }}
{{- end }}
{{- $names = concat $names (list $name (printf "%s.%s" $name $ns) (printf "%s.%s.svc" $name $ns) (printf "%s.%s.svc.cluster.local" $name $ns) "localhost") }}
{{- toJson $names }}
{{- end }}

{{/*
A pod's affinity under ha: the user's affinity, plus a podAntiAffinity over
kubernetes.io/hostname against the pods of the same component (mode required or preferred)
unless the user's affinity has a podAntiAffinity of its own. Empty when there is none.
Call with (dict "ctx" $ "component" "clusterd" "affinity" ... "mode" ...).
*/}}
{{- define "clusterd.ha.affinity" -}}
{{- $a := deepCopy (default dict .affinity) }}
{{- if and (not (hasKey $a "podAntiAffinity")) (ne .mode "none") }}
{{- $term := dict "labelSelector" (dict "matchLabels" (include "clusterd.selectorLabels" (dict "ctx" .ctx "component" .component) | fromYaml)) "topologyKey" "kubernetes.io/hostname" }}
{{- if eq .mode "required" }}
{{- $_ := set $a "podAntiAffinity" (dict "requiredDuringSchedulingIgnoredDuringExecution" (list $term)) }}
{{- else }}
{{- $_ := set $a "podAntiAffinity" (dict "preferredDuringSchedulingIgnoredDuringExecution" (list (dict "weight" 100 "podAffinityTerm" $term))) }}
{{- end }}
{{- end }}
{{- if $a }}
{{- toYaml $a }}
{{- end }}
{{- end }}

{{/*
An etcd flag's number: YAML numbers arrive as float64 (8589934592 would print as
8.589934592e+09); strings (a periodic retention such as 1h) as they are.
*/}}
{{- define "clusterd.etcd.num" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ int64 . }}{{ end }}
{{- end }}
