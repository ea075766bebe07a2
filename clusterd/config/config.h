// ClusterD configuration: defaults, a JSON file (--config) and flags, parsed
// in one place. A flag overrides the file; every error names the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/config_table.h"
#include "common/status.h"

namespace clusterd {

struct ClusterdConfig {
  std::string listen = "0.0.0.0:8899";
  std::string http_listen = "0.0.0.0:11253";
  // A second HTTP port, always plaintext, serving the kubelet's probes only
  // (/healthz, /readyz, /readyz/writes, /readyz/replica; no data): "" none.
  // With TLS on http_listen a probe cannot present a client certificate.
  std::string probe_listen;
  std::string data_dir = "./clusterd-data";
  // Free-space reserve of the data dir's filesystem: below it (bytes or
  // inodes) client writes are refused with UNAVAILABLE and the store is
  // opened read-only at start, so that RocksDB never meets ENOSPC (its WAL
  // asserts on one); writes resume by themselves when space returns. It also
  // covers RocksDB's own memtable flushes and compactions.
  uint64_t min_free_bytes = 256ull << 20;
  uint64_t min_free_inodes = 1024;
  std::chrono::nanoseconds node_grace = std::chrono::seconds(10);
  // After a restart or a takeover, how much longer than node_grace the
  // agents still to come back are given while others keep coming back
  // (EngineOptions::reattach_grace); 0s: off.
  std::chrono::nanoseconds reattach_grace = std::chrono::minutes(2);
  // Advertised to agents in the Welcome.
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(2);
  std::string catalog_file;  // optional override, merged over the built-in catalog
  v1::FaultLevel default_level = v1::FAULT_LEVEL_SUB_HEALTH;
  // External reporters whose levels win over the built-in catalog's
  // (ClusterState::set_reporter_levels).
  std::vector<std::string> reporter_levels = {"ascend-device-plugin", "mindcluster-noded"};
  // Event-log retention: keep at most this many events, none older than this.
  uint64_t retention_events = 1'000'000;
  std::chrono::nanoseconds retention_age = std::chrono::hours(24 * 7);
  std::chrono::nanoseconds retention_interval = std::chrono::seconds(60);
  // Under a steady light load a group commit may wait this long for more
  // changes (EngineOptions::commit_delay); 0 never waits.
  std::chrono::nanoseconds commit_delay = std::chrono::milliseconds(2);
  // Watchers: recent events kept in memory, and how far a live watcher may
  // fall behind before it is ended with RESOURCE_EXHAUSTED.
  uint32_t watch_cache_events = 65'536;
  // ... and at most this many bytes of them (encoded): large events (a node
  // with its whole inventory) fill it by bytes long before by count.
  uint64_t watch_cache_bytes = uint64_t{64} << 20;
  uint32_t watch_max_lag_events = 10'000;
  // A live watcher's next response starts no sooner than this after its
  // previous one: under a high event rate each response carries more events
  // (fewer writes for server and client), at the cost of up to this much
  // delivery latency; a watcher idle that long is written to at once.
  std::chrono::nanoseconds watch_coalesce{0};
  uint32_t max_message_bytes = 4 << 20;
  uint32_t max_streams = 20'000;
  // Messages of one agent stream accepted but not yet durable before reading pauses.
  uint32_t max_inflight_per_stream = 256;
  // Connection admission (fds and slots a client may hold): an agent stream
  // that sends no valid Hello within hello_timeout is ended; one peer address
  // may hold at most max_streams_per_peer agent streams and
  // max_watch_streams_per_peer Watch streams; max_watch_streams in all.
  std::chrono::nanoseconds hello_timeout = std::chrono::seconds(10);
  // At most one inventory update (PodDevicesUpdate, ChainUpdate) per agent
  // stream applied per interval; sooner ones are coalesced (AgentServiceOptions).
  std::chrono::nanoseconds inventory_update_interval = std::chrono::seconds(1);
  uint32_t max_streams_per_peer = 1'000;
  uint32_t max_watch_streams = 10'000;
  uint32_t max_watch_streams_per_peer = 1'000;
  // HTTP port: most connections open at once, most of them from one IP
  // address (0: no per-peer limit; else below max_http_connections), and the
  // longest wait for a whole request (also the keep-alive idle time). A
  // share of the connections is kept for the probe paths (server_parts.h:
  // MakeHttpServerOptions).
  uint32_t max_http_connections = 256;
  uint32_t max_http_connections_per_peer = 64;
  std::chrono::nanoseconds http_timeout = std::chrono::seconds(30);
  // gRPC port: a connection that has not finished the HTTP/2 handshake
  // within this is closed; and how often /readyz's self-check opens a new
  // loopback connection and calls Health/Check, with what deadline
  // (interval 0 turns the check off).
  std::chrono::nanoseconds grpc_handshake_timeout = std::chrono::seconds(10);
  std::chrono::nanoseconds grpc_self_check_interval = std::chrono::seconds(5);
  std::chrono::nanoseconds grpc_self_check_timeout = std::chrono::seconds(2);
  // /healthz fails (so a liveness probe restarts the process) once the
  // self-check has failed without a break for this long: gRPC 1.51 never
  // brings a listener back after accept() failed. 0: never.
  std::chrono::nanoseconds grpc_unhealthy_after = std::chrono::seconds(60);
  // At shutdown, how long unary calls in flight may finish before every
  // call still open (agent streams, watches) is cancelled.
  std::chrono::nanoseconds shutdown_grace = std::chrono::seconds(2);
  // Size limits that keep every computation and answer bounded: ranks per
  // job (16,000 nodes x 16 devices = 256,000 ranks fit), active faults per
  // node (counted apart for the agent and for external reporters) and
  // impacts listed per job in an answer.
  uint32_t max_job_ranks = 131'072;
  uint32_t max_faults_per_node = 4096;
  uint32_t max_job_impacts = 1024;
  std::string log_level = "info";
  // Recovery: how cluster actions are carried out ("none", "exec", "webhook").
  std::string actuator = "none";
  std::string actuator_command;  // exec: run with /bin/sh -c, the action as JSON on stdin
  std::string actuator_url;      // webhook: http://host:port/path or https://...
  // webhook over https: the CA bundle the receiver's certificate must chain
  // to (empty: the system's roots), and a client certificate and key to
  // present (both or neither).
  std::string actuator_ca_file;
  std::string actuator_cert_file;
  std::string actuator_key_file;
  // Integrations to run alongside ClusterD, by registered name
  // (integration.h: BuiltinIntegrations): "kubernetes" discovers jobs from
  // pods and PodGroups, follows Node readiness and keeps a Node condition.
  std::vector<std::string> integrations;
  // The Kubernetes API (integration and actuator "kubernetes";
  // docs/kubernetes.md). Empty kubeconfig: the pod's service account.
  struct Kubernetes {
    std::string kubeconfig;
    std::string kube_context;
    std::string namespace_;  // "" = every namespace
    std::string rank_annotation = "hccl/rankIndex";
    // Without the annotation: the first of these present as a pod label or
    // annotation (Indexed Jobs, StatefulSets).
    std::vector<std::string> rank_index_keys = {"batch.kubernetes.io/job-completion-index",
                                                "apps.kubernetes.io/pod-index"};
    std::string rank_env;  // e.g. "RANK" (PyTorchJob) when neither is there
    std::string devices_annotation = "huawei.com/AscendReal";
    std::string job_kind_label = "clusterd.io/job-kind";
    bool podgroups = true;  // follow Volcano PodGroups
    // How often a resource that is not served (PodGroups without Volcano's
    // CRD) is looked for again.
    std::chrono::nanoseconds crd_recheck = std::chrono::seconds(30);
    std::string taint_key = "clusterd.io/fault";
    std::string taint_effect = "NoSchedule";
    std::string node_condition = "AcceleratorHealthy";
    v1::FaultLevel node_not_ready_level = v1::FAULT_LEVEL_PRE_SEPARATE;
    std::chrono::nanoseconds eviction_timeout = std::chrono::seconds(60);
    bool delete_fallback = false;
    // isolate_device's fallback: a device whose isolation no scheduler of
    // the job sees (no Volcano cluster-info, no DRA DeviceTaintRule, the
    // node's allocatable unchanged) taints its Node
    // <domain>/isolated-device-<id>:NoSchedule while it is isolated.
    bool device_fallback_taint = true;
    // How often the Node conditions are compared with ClusterD's health.
    std::chrono::nanoseconds condition_interval = std::chrono::seconds(5);
    // How long the kubelet's allocatable NPUs must stay below the chips
    // NodeD sees usable before NODE_ALLOCATABLE_MISMATCH is raised.
    std::chrono::nanoseconds allocatable_hold = std::chrono::seconds(60);
    // DRA device taints: which ResourceSlice device is ClusterD's device id
    // (k8s::DraMatch): the drivers counted (empty: all), an int attribute
    // that is the id, else names with "{id}" in them.
    std::vector<std::string> dra_drivers;
    std::string dra_device_attribute = "index";
    std::vector<std::string> dra_device_names = {"npu-{id}", "gpu-{id}"};
  } k8s;
  // Transport security and authentication (docs/security.md). Without a
  // server certificate ClusterD starts only when `insecure` says so: then
  // the gRPC port is plaintext and every caller may do everything, recorded
  // under the actor it claims (local development, the demo).
  bool insecure = false;
  struct Tls {
    std::string cert_file;
    std::string key_file;
    // CA bundle that signs client certificates; client_auth says whether a
    // client must present one ("require": mutual TLS, the default with a CA),
    // may ("request") or is not asked ("none", the default without one).
    std::string client_ca_file;
    std::string client_auth;
    // How often the certificate, key and CA files are re-read (rotation).
    std::chrono::nanoseconds reload_interval = std::chrono::seconds(10);
  } tls;
  struct Auth {
    // Bearer tokens in kube-apiserver --token-auth-file form.
    std::string token_file;
    // Tokens not in the file are checked with the Kubernetes TokenReview API
    // (kubeconfig above, or the pod's service account) for this audience.
    bool token_review = false;
    std::string token_audience = "clusterd";
    std::chrono::nanoseconds token_cache_ttl = std::chrono::seconds(60);
    // "namespace/name" of service accounts whose pod-bound tokens are NodeD
    // agents (the node is the token's node-name).
    std::vector<std::string> agent_service_accounts;
    // "ROLE=user:NAME" or "ROLE=group:NAME".
    std::vector<std::string> bindings;
    // /metrics needs a bearer token or client certificate of a principal
    // with metrics_role ("viewer": viewer, operator or admin; "operator";
    // "admin").
    bool metrics_auth = false;
    std::string metrics_role = "viewer";
  } auth;
  // MindCluster's PubFault.SendPublicFault (docs/mindcluster.md): a code
  // table merged over the built-in one, the resources allowed, their rate
  // limit and the most public faults active at once.
  struct PubFault {
    std::string code_table_file;
    std::vector<std::string> resources = {"CCAE", "fd-online", "pingmesh", "Netmind", "dpcStorage", "dtfsStorage"};
    double rate_per_second = 1.0;
    uint32_t burst = 100;
    uint32_t max_faults = 50'000;
  } pubfault;
  // MindCluster's fault.Fault: registrations, and subscription streams, at
  // most (RESOURCE_EXHAUSTED beyond).
  uint32_t mindcluster_max_subscribers = 1000;
  // fault.Fault registrations one client (authenticated principal, or IP
  // address without authentication) holds at most; no more than
  // mindcluster_max_subscribers.
  uint32_t mindcluster_max_registrations_per_principal = 100;
  // A fault.Fault registration with no stream open for this long expires.
  std::chrono::seconds mindcluster_registration_ttl{300};
  // MindIO's wait for ClusterD's next signal (the job's
  // MINDIO_WAIT_MINDX_TIME, the reference's 30 s): TaskD's Recover exchange
  // keeps its own waits inside it (RecoverServiceOptions::mindio_wait).
  std::chrono::seconds mindcluster_taskd_wait{30};
  // The Recover service's NIC switch and stress test: each of TaskD's answers
  // waited for this long (the reference's 15 minutes).
  std::chrono::seconds mindcluster_om_wait{900};
  // MindCluster's TrainingDataTrace: jobs whose profiling switches are kept,
  // and subscription streams in all and per job (RESOURCE_EXHAUSTED beyond).
  uint32_t datatrace_max_jobs = 10000;
  uint32_t datatrace_max_subscribers = 10000;
  uint32_t datatrace_max_subscribers_per_job = 8;
  // The "mindcluster" integration (docs/mindcluster.md, "The stack's
  // ConfigMaps"): where the device plugin's ConfigMaps are read and
  // Volcano's cluster-info ConfigMaps written, how often all of these are
  // rewritten with a fresh UpdateTime, and the API writes per second at most.
  struct MindClusterStack {
    std::string device_info_namespace = "kube-system";
    std::string cluster_info_namespace = "mindx-dl";
    std::chrono::nanoseconds refresh_interval = std::chrono::seconds(45);
    uint32_t writes_per_second = 5;
    // A cluster-info ConfigMap's value at most (the reference's 800 KiB is
    // the most): smaller ones make each fault's rewrite cheaper.
    uint64_t chunk_bytes = 200 * 1024;
    // Namespaces whose public-fault ConfigMaps are read ("*": all); none by
    // default (all needs a ClusterRole that reads every ConfigMap).
    std::vector<std::string> public_fault_namespaces;
    // The "mindcluster-jobs" integration (mindcluster/k8s/job_summaries.h):
    // job-summary ConfigMap writes per second at most, and how long a deleted
    // job's ConfigMaps stay (with operator "delete") before they are deleted.
    uint32_t job_summary_writes_per_second = 5;
    std::chrono::nanoseconds job_summary_delete_after = std::chrono::seconds(60);
    // MindCluster's operators' ConfigMaps in `system_namespace`
    // (docs/mindcluster.md, "Separation through ConfigMaps"): the separation
    // policy of clusterd-config-cm honoured over separation_*; the
    // separated chips written to clusterd-manual-info-cm (at most once per
    // `manual_info_interval`), an entry deleted there released; the
    // observability ConfigMaps (statistic-fault-info and
    // current-job-statistic; scheduling-exception-report), rewritten at
    // most once per `statistics_interval`. Each off by default: it needs RBAC
    // in that namespace.
    std::string system_namespace = "cluster-system";
    bool separation_policy_cm = false;
    bool manual_info_cm = false;
    std::chrono::nanoseconds manual_info_interval = std::chrono::seconds(15);
    bool statistics_cms = false;
    bool scheduling_exception_cm = false;
    std::chrono::nanoseconds statistics_interval = std::chrono::seconds(60);
    // super-pod-<id> ConfigMaps in `system_namespace` for MindCluster NodeD's
    // pingmesh, from the device plugin's Node annotations. Off by default: it
    // needs RBAC there and a read of every Node.
    bool super_pod_cms = false;
  } mindcluster_stack;
  // High availability (docs/ha.md): with etcd endpoints, this process is one
  // replica of several; etcd holds the replicated commit log and the
  // election. Empty (the default): one process, RocksDB only, as always.
  struct Ha {
    // "http://host:port" or "host:port", any member of one etcd cluster; or
    // "https://host:port" (TLS) for every member.
    std::vector<std::string> etcd_endpoints;
    // TLS to etcd (https endpoints): the CA bundle the members' certificates
    // chain to (empty: the system's roots), and a client certificate and key
    // for an etcd with --client-cert-auth (both or neither). Read at start.
    std::string etcd_ca_file;
    std::string etcd_cert_file;
    std::string etcd_key_file;
    // Unique per replica (the pod name on Kubernetes); default: the host name.
    std::string replica_id;
    // Every key ClusterD writes in etcd starts with it, so installations can
    // share an etcd cluster.
    std::string key_prefix = "/clusterd/";
    // The leader's lease: a replica that stops renewing it for this long is
    // no longer the leader and another takes over.
    std::chrono::nanoseconds lease_ttl = std::chrono::seconds(2);
    // Every etcd request ends within this, so a lost etcd leader or member
    // never hangs a write for longer.
    std::chrono::nanoseconds request_timeout = std::chrono::seconds(2);
    // A group commit's change set stops growing past this (one etcd
    // transaction carries it; etcd's --max-request-bytes must be larger).
    uint64_t max_entry_bytes = 1 << 20;
    // Store the log's entries zstd-compressed (log_entry.h). Off only while
    // a rolling upgrade still runs replicas that cannot read them.
    bool log_compression = true;
    // Log entries kept in etcd behind the slowest live replica, so that a
    // replica that was away briefly catches up from the log.
    uint64_t log_retain_entries = 10'000;
    // "host:port" where peers reach this replica's HTTP port for a checkpoint
    // of its store (a replica that rebuilds fetches one). Empty: the
    // http_listen address when it names one host, else the host name and the
    // HTTP port.
    std::string advertise_address;
    // "namespace/name" of this replica's pod. Set: the replica labels it
    // clusterd.io/ha-role=leader or standby through the Kubernetes API (the
    // k8s_kubeconfig, or the pod's service account), so a Service selecting
    // the label follows the leader while every healthy replica is Ready
    // (/readyz/replica). Replica ids must then be pod names.
    std::string pod_namespace;
    std::string pod_name;
    // Who may fetch a checkpoint of this replica's store, by the Subject CN
    // of the client certificate it presents (a peer presents its own
    // tls_cert_file). Empty: the CN of this replica's own certificate (the
    // replicas share one). Checked when the HTTP port verifies client
    // certificates (tls_client_ca_file), besides the checkpoint token.
    std::vector<std::string> peer_names;
  } ha;
  // Blast radius: at most this many recoveries running at once, and at most
  // this percentage of nodes isolated.
  uint32_t max_concurrent_recoveries = 4;
  uint32_t max_isolated_node_percent = 10;
  // Retry budgets count recoveries started within this window.
  std::chrono::nanoseconds recovery_budget_window = std::chrono::hours(24);
  // After a restart, steps in flight get at least this long to be answered.
  std::chrono::nanoseconds recovery_resume_grace = std::chrono::seconds(30);
  // A job with no agent attached (and none since the start) gets this long
  // from a recovery's start to attach one; then its agent commands are
  // skipped (RecoveryPolicy.require_agent: wait for it instead).
  std::chrono::nanoseconds recovery_agent_attach_grace = std::chrono::seconds(30);
  // Job progress (docs/recovery.md, "Progress"): Job.progress is stored at
  // most this often unless its state changes; at most this many jobs are
  // tracked at once.
  std::chrono::nanoseconds progress_snapshot_interval = std::chrono::minutes(5);
  uint32_t progress_max_jobs = 10'000;
  // Repeat offenders (docs/recovery.md): a node whose faults started more
  // than this many recoveries within the window (since its last cordon or
  // uncordon) is cordoned for inspection; 0: off.
  uint32_t repeat_offender_recoveries = 0;
  std::chrono::nanoseconds repeat_offender_window = std::chrono::hours(24);
  // Finished recovery records kept: at most this many in all, none that ended
  // longer ago than this (never a running one, a job's newest, or one within
  // the budget window).
  uint32_t recovery_retention_count = 10'000;
  std::chrono::nanoseconds recovery_retention_age = std::chrono::hours(24 * 30);
  // The separation policy (docs/recovery.md, MindCluster's defaults): a
  // device with `separation_threshold` counted faults within
  // `separation_window` is separated until it has been fault-free for
  // `separation_release_after` (0: only an operator releases it).
  bool separation_enabled = true;
  // The pingmesh (docs/pingmesh.md): the probe plan every interval over the
  // fault domains (domain_levels), the attribution every window.
  bool pingmesh_enabled = true;
  std::chrono::nanoseconds pingmesh_interval = std::chrono::seconds(10);
  uint32_t pingmesh_peers_per_node = 4;
  uint32_t pingmesh_max_probes_per_round = 200'000;
  uint32_t pingmesh_attempts = 3;
  std::chrono::nanoseconds pingmesh_probe_timeout = std::chrono::seconds(1);
  std::chrono::nanoseconds pingmesh_window = std::chrono::minutes(1);
  uint32_t pingmesh_raise_after = 2;
  uint32_t pingmesh_clear_after = 3;
  uint32_t pingmesh_suspect_probes = 3;
  uint32_t pingmesh_max_suspects = 1000;
  // The node label naming a node's pool for the software chain's version
  // drift (docs/faults.md); "": the model of the node's first device.
  std::string chain_pool_label;
  // CHAIN_VERSION_DRIFT's level per pool, "POOL=LEVEL" (ParseChainDriftLevel);
  // other pools SUB_HEALTH.
  std::vector<std::string> chain_drift_levels;
  // Whether a node goes back into service only with a healthy software
  // chain (no BROKEN link, the kubelet's allocatable not short):
  // "automatic" (the automatic release of a separated chip waits), "always"
  // (UncordonNode too, unless forced), "never".
  std::string release_chain_check = "automatic";
  uint32_t separation_threshold = 3;
  std::chrono::nanoseconds separation_window = std::chrono::hours(24);
  std::chrono::nanoseconds separation_release_after = std::chrono::hours(48);
  std::chrono::nanoseconds separation_settle = std::chrono::seconds(30);
  // Return to service, proven (docs/validation.md): an isolated or separated
  // device or node whose faults cleared (or whose separation is due, or that
  // an operator releases without force) is validated by its node's agent
  // before it returns. Off: they return as before.
  bool validation_enabled = false;
  // Validations asked of one node's agent, and of all agents, at once; the
  // rest queue in order.
  uint32_t validation_max_per_node = 1;
  uint32_t validation_max_in_flight = 64;
  // A validation with no result this long after it was asked fails.
  std::chrono::nanoseconds validation_timeout = std::chrono::minutes(10);
  // The built-in check: the devices' health stable this long.
  std::chrono::nanoseconds validation_stable_window = std::chrono::minutes(1);
  // Whether the agent runs its configured commands too.
  bool validation_commands = true;
  // The flap budget: a target that fails validation, or returns and faults
  // again, this many times within the window is HELD (MindCluster: 3 in 24 h).
  uint32_t validation_flap_limit = 3;
  std::chrono::nanoseconds validation_flap_window = std::chrono::hours(24);
  // Finished validations kept (oldest go first); each holds at most 8
  // checks of 16 KiB evidence.
  uint32_t validation_retention_count = 1000;
  // Fault domains and incidents (docs/domains.md): the topology levels,
  // broadest first, each "level=node-label-key"; faults within
  // incident_window on incident_min_nodes nodes (or incident_min_devices
  // chips) of one domain form an incident; more than
  // incident_isolate_percent of a domain's nodes hit isolates it (0: never),
  // at most incident_max_isolated_domains domains at once.
  // Empty: the built-in levels (DefaultDomainLevels, state/domains.h:
  // MindCluster's SuperPoD and rack labels, NVIDIA's NVLink clique); "none":
  // no domains.
  std::vector<std::string> domain_levels;
  bool incidents_enabled = true;
  std::chrono::nanoseconds incident_window = std::chrono::seconds(10);
  uint32_t incident_min_nodes = 3;
  uint32_t incident_min_devices = 4;
  uint32_t incident_isolate_percent = 50;
  uint32_t incident_max_isolated_domains = 1;
  // Evidence bundles (docs/domains.md, state/evidence.h): the member nodes
  // of a new incident are asked for a diagnostic bundle, at most
  // evidence_max_in_flight at once, each answering within evidence_timeout
  // with at most evidence_max_bundle_bytes; stored bundles expire after
  // evidence_max_age and past evidence_max_total_bytes (the oldest first).
  bool evidence_enabled = true;
  uint64_t evidence_max_bundle_bytes = uint64_t{512} << 10;
  uint64_t evidence_max_total_bytes = uint64_t{64} << 20;
  std::chrono::nanoseconds evidence_max_age = std::chrono::hours(24 * 7);
  std::chrono::nanoseconds evidence_timeout = std::chrono::minutes(2);
  uint32_t evidence_max_in_flight = 16;
  std::chrono::nanoseconds evidence_log_before = std::chrono::minutes(1);
};

// One row of the table of keys (config.cc): everything about a setting is
// said once there, and the parser, --help, the checks and the reference
// table of docs/configuration.md come from it (common/config_table.h, shared
// with NodeD's table). The default is what `show` prints for a
// default-constructed ClusterdConfig.
using ConfigKey = ConfigKeyOf<ClusterdConfig>;

// The table, in --help's order.
const std::vector<ConfigKey>& ClusterdConfigKeys();

// One chain_drift_levels entry: "POOL=LEVEL" (a level name of docs/faults.md).
StatusOr<std::pair<std::string, v1::FaultLevel>> ParseChainDriftLevel(std::string_view entry);

// What the configuration cannot know by itself: the names --actuator and
// --integrations may take, and what each actuator kind needs of the rest of
// the configuration. The registries' owner gives them (the composition root,
// server/registries.h: BuiltinConfigChecks), so that the config knows no
// registry and sits below everything that reads it.
struct ConfigChecks {
  std::vector<std::string> actuators;
  std::vector<std::string> integrations;
  // E.g. exec needs --actuator-command; empty: nothing more to check.
  std::function<Status(const ClusterdConfig&)> validate_actuator;
};

// Parses flags (argv[1..]) and the --config file they name, if any. Returns
// InvalidArgument naming the flag or key on any bad value, or a name outside
// `checks` (CheckNames). `help` is set when --help was given.
StatusOr<ClusterdConfig> ParseClusterdConfig(const std::vector<std::string>& args, const ConfigChecks& checks,
                                             bool* help);

// cfg's actuator and integrations are among `checks`' names, and the
// actuator's own check passes.
Status CheckNames(const ClusterdConfig& cfg, const ConfigChecks& checks);

// Applies a JSON object over cfg. `origin` prefixes error messages.
Status ApplyClusterdConfigJson(std::string_view json_text, std::string_view origin, ClusterdConfig* cfg);

// The transport-security settings fit together: a server certificate or
// `insecure` (never both), a client CA when client certificates are asked
// for, a token source for metrics_auth. Also checked by ClusterdServer::Start.
Status ValidateSecurity(const ClusterdConfig& cfg);

// --help, from the table, with the names `checks` allows.
std::string ClusterdUsage(const ConfigChecks& checks);

// The reference tables of docs/configuration.md (markdown, one table per
// section), from the table; a test keeps the document in step.
std::string ClusterdConfigReference(const ConfigChecks& checks);

}  // namespace clusterd
