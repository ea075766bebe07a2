#include "clusterd/config/config.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "clusterd/auth/roles.h"
#include "common/config_table.h"
#include "common/config_util.h"
#include "common/duration.h"
#include "common/levels.h"
#include "common/validation.h"

namespace clusterd {
namespace {

// ------------------------------------------------------------ the table ---
//
// Every key is one row: its name (the JSON key; the flag is --name with '_'
// written '-'), its type and bounds (the maker: U32, Dur, ...; common's
// config_table.h), the section and text of --help, and the Helm value that
// sets it. The parser, --help, the checks and the reference table of
// docs/configuration.md all come from these rows; the defaults come from
// ClusterdConfig's initialisers (shown through each row's `show`), so each is
// written once.

using config_table::Address;
using config_table::Bool;
using config_table::Dur;
using config_table::List;
using config_table::OneOf;
using config_table::Raw;
using config_table::SetText;
using config_table::Text;
using config_table::U32;
using config_table::U64;

// Reads and writes a field of a (const or not) ClusterdConfig. (`member` is a
// member path, not an expression: it cannot be parenthesised.)
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CLUSTERD_FIELD(member) config_table::FieldOf<ClusterdConfig>([](auto& c) -> auto& { return c.member; })
// NOLINTEND(bugprone-macro-parentheses)

ConfigKey Custom(std::string name, std::string value_name, std::string accepted,
                 std::function<Status(const std::string&, ClusterdConfig*)> set,
                 std::function<std::string(const ClusterdConfig&)> show) {
  return config_table::Custom<ClusterdConfig>(std::move(name), std::move(value_name), std::move(accepted),
                                              std::move(set), std::move(show));
}

template <typename Get>
ConfigKey Level(const std::string& name, Get get) {
  return Custom(
      name, "LEVEL", "a fault level name (SUB_HEALTH, RESTART_BUSINESS, SEPARATE, ...), any case",
      [name, get](const std::string& v, ClusterdConfig* c) {
        auto level = ParseFaultLevel(v);
        if (!level) return InvalidArgument(name + ": \"" + v + "\" is not a fault level name");
        get(*c) = *level;
        return Status::Ok();
      },
      [get](const ClusterdConfig& c) { return ShortLevelName(get(c)); });
}

// The table in order: Section() starts a --help section, Add() a row with
// its help text and the Helm value that sets it ("" where the chart sets it
// from elsewhere: say so in `chart`; nullptr: clusterd.config.<key>).
using TableBuilder = config_table::TableBuilder<ClusterdConfig>;

// A k8s_* key the chart's kubernetes.* values do not set: clusterd.config
// refuses k8s_* keys (values.schema.json), so the chart cannot set it yet.
constexpr const char* kNoChartValue = "none yet (clusterd.config refuses the Kubernetes keys)";

std::vector<ConfigKey> MakeTable() {
  TableBuilder t("clusterd.config.");
  t.Section("Server");
  t.Add(Address("listen", CLUSTERD_FIELD(listen)), "gRPC address", "clusterd.ports.grpc (on 0.0.0.0)");
  t.Add(Address("http_listen", CLUSTERD_FIELD(http_listen)),
        "HTTP address: /healthz, /readyz, /metrics, the API and the status page (TLS unless insecure)",
        "clusterd.ports.http (on 0.0.0.0)");
  t.Add(Custom(
            "probe_listen", "ADDR", "host:port, or \"\" for none",
            [](const std::string& v, ClusterdConfig* c) {
              if (v.empty()) {
                c->probe_listen.clear();
                return Status::Ok();
              }
              return SetAddress("probe_listen", v, &c->probe_listen);
            },
            [](const ClusterdConfig& c) { return c.probe_listen; }),
        "a plaintext HTTP port for the kubelet's probes only (/healthz, /readyz; no data, no /metrics); \"\" = none",
        "clusterd.ports.probe (on 0.0.0.0, with tls.enabled)");
  t.Add(Custom(
            "data_dir", "DIR", "a non-empty path",
            [](const std::string& v, ClusterdConfig* c) {
              if (v.empty()) return InvalidArgument("data_dir: must not be empty");
              c->data_dir = v;
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return c.data_dir; }),
        "RocksDB directory (created if missing)", "the data volume (clusterd.persistence)");
  t.Add(U64("min_free_bytes", CLUSTERD_FIELD(min_free_bytes), 16ull << 20, 1ull << 40),
        "free-space reserve of the data dir, in bytes: below it writes are refused (UNAVAILABLE) and a start "
        "opens the store read-only; writes resume by themselves when space returns");
  t.Add(U64("min_free_inodes", CLUSTERD_FIELD(min_free_inodes), 16, 1'000'000'000), "the same for free inodes");
  t.Add(Dur("node_grace", CLUSTERD_FIELD(node_grace), std::chrono::milliseconds(100)),
        "heartbeat silence before a node is lost (also sent to agents in Welcome)");
  t.Add(Dur("reattach_grace", CLUSTERD_FIELD(reattach_grace), std::chrono::nanoseconds(0), std::chrono::hours(1)),
        "after a restart or a takeover, how much longer than node_grace a node whose agent has not come back yet is "
        "not declared lost while other agents keep coming back (a large fleet's reattach); 0s: off");
  t.Add(Dur("heartbeat_interval", CLUSTERD_FIELD(heartbeat_interval), std::chrono::milliseconds(10)),
        "heartbeat interval advertised to agents");
  t.Add(Raw("catalog_file", CLUSTERD_FIELD(catalog_file), "FILE", "a readable JSON file"),
        "fault-code catalog merged over the built-in one (the flag is also --catalog)", "clusterd.catalog");
  t.Add(Level("default_level", CLUSTERD_FIELD(default_level)),
        "level of codes no catalog knows when the reporter gives none (a catalog file's default_level wins)");
  t.Add(List("reporter_levels", CLUSTERD_FIELD(reporter_levels), "reporter names, comma-separated",
             [](const std::string& n) { return ValidateToken("reporter_levels", n); }),
        "external reporters whose levels are their own: a level they give wins over the built-in catalog's (not "
        "over catalog_file's); MindCluster's device plugin and NodeD by default, public faults always");
  t.Add(U64("retention_events", CLUSTERD_FIELD(retention_events), 1000, UINT64_MAX),
        "keep at most this many events in the history");
  t.Add(Dur("retention_age", CLUSTERD_FIELD(retention_age), std::chrono::minutes(1)), "keep no event older than this");
  t.Add(Dur("retention_interval", CLUSTERD_FIELD(retention_interval), std::chrono::milliseconds(100)),
        "how often retention runs");
  t.Add(Dur("commit_delay", CLUSTERD_FIELD(commit_delay), std::chrono::nanoseconds(0), std::chrono::milliseconds(100)),
        "under a steady light load, hold a group commit this long for more changes: one fdatasync for several "
        "(0s: never)");
  t.Add(U32("watch_cache_events", CLUSTERD_FIELD(watch_cache_events), 16, 16'000'000),
        "recent events kept in memory for watchers");
  t.Add(U64("watch_cache_bytes", CLUSTERD_FIELD(watch_cache_bytes), uint64_t{1} << 20, uint64_t{1} << 40),
        "the most bytes (encoded) of recent events kept in memory for watchers; older ones are read from the store");
  t.Add(U32("watch_max_lag_events", CLUSTERD_FIELD(watch_max_lag_events), 16, 16'000'000),
        "a live watcher further behind the head than this while its client holds it back is ended");
  t.Add(Dur("watch_coalesce", CLUSTERD_FIELD(watch_coalesce), std::chrono::nanoseconds(0), std::chrono::seconds(1)),
        "a live watcher's next response starts no sooner than this after its previous one: more events per "
        "response under a high rate, up to this much more delivery latency (0s: at once)");
  t.Add(U32("max_message_bytes", CLUSTERD_FIELD(max_message_bytes), 4096, 64u << 20),
        "largest accepted gRPC request message, in bytes");
  t.Add(U32("max_streams", CLUSTERD_FIELD(max_streams), 1, 1'000'000), "most concurrent agent streams");
  t.Add(U32("max_inflight_per_stream", CLUSTERD_FIELD(max_inflight_per_stream), 1, 65'536),
        "agent messages accepted but not yet durable before reading the stream pauses");
  t.Add(Custom(
            "log_level", "LEVEL", "trace, debug, info, warn, error, critical or off",
            [](const std::string& v, ClusterdConfig* c) { return SetLogLevel("log_level", v, &c->log_level); },
            [](const ClusterdConfig& c) { return c.log_level; }),
        "level of every logger");

  t.Section("Security (docs/security.md)");
  t.Add(Bool("insecure", CLUSTERD_FIELD(insecure), "", "true or false; alone as a flag: true"),
        "plaintext gRPC without authentication: every caller may do everything (local development only; "
        "required when no certificate is given)",
        "tls.enabled: false");
  t.Add(Text("tls_cert_file", CLUSTERD_FIELD(tls.cert_file), "FILE"),
        "server certificate (PEM); with tls_key_file, gRPC is served over TLS", "tls.enabled");
  t.Add(Text("tls_key_file", CLUSTERD_FIELD(tls.key_file), "FILE"), "its private key", "tls.enabled");
  t.Add(Text("tls_client_ca_file", CLUSTERD_FIELD(tls.client_ca_file), "FILE"),
        "CA bundle of client certificates (mutual TLS)", "tls.enabled");
  t.Add(OneOf("tls_client_auth", CLUSTERD_FIELD(tls.client_auth), {"require", "request", "none"}, "MODE"),
        "whether a client certificate is asked for (default: require with a client CA, else none)", "tls.mutual");
  t.Add(Dur("tls_reload_interval", CLUSTERD_FIELD(tls.reload_interval), std::chrono::seconds(1)),
        "how often the certificate, key and CA files are read again (rotation without a restart)");
  t.Add(Text("auth_token_file", CLUSTERD_FIELD(auth.token_file), "FILE"),
        "bearer tokens: token,user,uid,\"group1,group2\" (kube-apiserver's --token-auth-file form); re-read when "
        "it changes",
        "auth.tokenFile.existingSecret");
  t.Add(Bool("auth_token_review", CLUSTERD_FIELD(auth.token_review), "BOOL", "true or false; alone as a flag: true"),
        "check other bearer tokens with the Kubernetes TokenReview API", "auth.tokenReview");
  t.Add(Text("auth_token_audience", CLUSTERD_FIELD(auth.token_audience), "AUD"), "audience those tokens must carry",
        "auth.tokenAudience");
  t.Add(Dur("auth_token_cache_ttl", CLUSTERD_FIELD(auth.token_cache_ttl), std::chrono::seconds(1)),
        "how long a TokenReview answer is reused (a refusal at most 10s)");
  t.Add(List("auth_agent_service_accounts", CLUSTERD_FIELD(auth.agent_service_accounts),
             "namespace/name, comma-separated; needs auth_token_review",
             [](const std::string& sa) {
               const size_t slash = sa.find('/');
               if (slash == 0 || slash == std::string::npos || slash + 1 == sa.size() ||
                   sa.find('/', slash + 1) != std::string::npos) {
                 return InvalidArgument("\"" + sa + "\" is not namespace/name");
               }
               return Status::Ok();
             }),
        "service accounts whose pod-bound tokens are the NodeD agent of the token's node",
        "NodeD's service account, with auth.tokenReview");
  t.Add(List("auth_bindings", CLUSTERD_FIELD(auth.bindings), "ROLE=user:NAME or ROLE=group:NAME, comma-separated",
             CheckRoleBinding),
        "roles (viewer, reporter, operator, admin) for existing users and groups", "auth.bindings");
  t.Add(Bool("metrics_auth", CLUSTERD_FIELD(auth.metrics_auth), "BOOL",
             "true or false; alone as a flag: true; needs a token source"),
        "/metrics needs a bearer token or client certificate of a principal with metrics_role", "metrics.auth");
  t.Add(OneOf("metrics_role", CLUSTERD_FIELD(auth.metrics_role), {"viewer", "operator", "admin"}, "ROLE"),
        "the role /metrics needs with metrics_auth (viewer: viewer, operator or admin)", "metrics.role");

  t.Section("Connection limits");
  t.Add(Dur("hello_timeout", CLUSTERD_FIELD(hello_timeout), std::chrono::milliseconds(10)),
        "an agent stream without a valid Hello by then is ended (DEADLINE_EXCEEDED)");
  t.Add(Dur("inventory_update_interval", CLUSTERD_FIELD(inventory_update_interval), std::chrono::nanoseconds(0),
            std::chrono::minutes(1)),
        "an agent's inventory updates (pod devices, software chain) are applied at most once per interval; a newer "
        "one replaces one still waiting (0s: each at once)");
  t.Add(U32("max_streams_per_peer", CLUSTERD_FIELD(max_streams_per_peer), 1, 1'000'000),
        "agent streams from one IP address; more are RESOURCE_EXHAUSTED");
  t.Add(U32("max_watch_streams", CLUSTERD_FIELD(max_watch_streams), 1, 1'000'000),
        "concurrent Watch streams; more are RESOURCE_EXHAUSTED");
  t.Add(U32("max_watch_streams_per_peer", CLUSTERD_FIELD(max_watch_streams_per_peer), 1, 1'000'000),
        "Watch streams from one IP address");
  t.Add(U32("max_http_connections", CLUSTERD_FIELD(max_http_connections), 1, 1'000'000),
        "open connections on the HTTP port; a quarter of them, at most 16, is kept for /healthz, /readyz, "
        "/readyz/replica and /metrics");
  t.Add(U32("max_http_connections_per_peer", CLUSTERD_FIELD(max_http_connections_per_peer), 0, 1'000'000),
        "HTTP connections from one IP address (0: no per-peer limit); at most half of max_http_connections "
        "applies");
  t.Add(Dur("http_timeout", CLUSTERD_FIELD(http_timeout), std::chrono::milliseconds(10)),
        "longest wait for a whole HTTP request, and the keep-alive idle time");
  t.Add(Dur("grpc_handshake_timeout", CLUSTERD_FIELD(grpc_handshake_timeout), std::chrono::milliseconds(100)),
        "a gRPC connection must finish its HTTP/2 handshake by then");
  t.Add(Dur("grpc_self_check_interval", CLUSTERD_FIELD(grpc_self_check_interval), std::chrono::nanoseconds(0)),
        "how often /readyz checks that a new loopback connection to the gRPC port is accepted (a slow answer "
        "passes: the server is busy) (0s: never)");
  t.Add(Dur("grpc_self_check_timeout", CLUSTERD_FIELD(grpc_self_check_timeout), std::chrono::milliseconds(10)),
        "deadline of that check");
  t.Add(Dur("grpc_unhealthy_after", CLUSTERD_FIELD(grpc_unhealthy_after), std::chrono::nanoseconds(0)),
        "/healthz fails once the self-check has failed this long without a break: a restart is what brings "
        "gRPC's listener back (0s: never)");
  t.Add(Dur("shutdown_grace", CLUSTERD_FIELD(shutdown_grace), std::chrono::nanoseconds(0), std::chrono::minutes(1)),
        "at shutdown, how long gRPC calls in flight may finish before those still open (agent streams, watches) "
        "are cancelled");

  t.Section("Size limits");
  t.Add(U32("max_job_ranks", CLUSTERD_FIELD(max_job_ranks), 1, 16'777'216), "ranks per job; more is INVALID_ARGUMENT");
  t.Add(U32("max_faults_per_node", CLUSTERD_FIELD(max_faults_per_node), 16, 1'000'000),
        "active faults per node, agent and external reporters counted apart; a raise beyond is "
        "RESOURCE_EXHAUSTED");
  t.Add(U32("max_job_impacts", CLUSTERD_FIELD(max_job_impacts), 1, 100'000),
        "impacts listed per job in an answer (also at most 512 KiB)");

  t.Section("High availability (docs/ha.md; without etcd_endpoints: one process, no etcd)");
  t.Add(Custom(
            "etcd_endpoints", "LIST", "http://host:port, https://host:port or host:port, comma-separated",
            [](const std::string& v, ClusterdConfig* c) {
              c->ha.etcd_endpoints = SplitCommaList(v);
              size_t tls = 0;
              for (const std::string& e : c->ha.etcd_endpoints) {
                const bool https = e.rfind("https://", 0) == 0;
                tls += https ? 1 : 0;
                std::string host_port = https ? e.substr(8) : e.rfind("http://", 0) == 0 ? e.substr(7) : e;
                if (host_port.find(':') == std::string::npos || host_port.find('/') != std::string::npos) {
                  return InvalidArgument("etcd_endpoints: \"" + e +
                                         "\" is not http://host:port, https://host:port or host:port");
                }
              }
              if (tls != 0 && tls != c->ha.etcd_endpoints.size()) {
                return InvalidArgument("etcd_endpoints: either every endpoint is https:// or none");
              }
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return JoinCommaList(c.ha.etcd_endpoints); }),
        "etcd members: this process becomes one replica; the leader serves, standbys follow", "ha.enabled, ha.etcd");
  t.Add(Text("etcd_ca_file", CLUSTERD_FIELD(ha.etcd_ca_file), "FILE"),
        "TLS to etcd (https:// endpoints): CA bundle of the members (default: the system's roots)",
        "ha.etcd's TLS secret");
  t.Add(Text("etcd_cert_file", CLUSTERD_FIELD(ha.etcd_cert_file), "FILE"),
        "client certificate for etcd (with etcd_key_file)", "ha.etcd's TLS secret");
  t.Add(Text("etcd_key_file", CLUSTERD_FIELD(ha.etcd_key_file), "FILE"), "its private key", "ha.etcd's TLS secret");
  t.Add(Custom(
            "ha_replica_id", "ID", "1 to 128 characters, no '/' or spaces",
            [](const std::string& v, ClusterdConfig* c) {
              if (v.empty() || v.size() > 128 || v.find_first_of("/ \t\n") != std::string::npos) {
                return InvalidArgument("ha_replica_id: 1 to 128 characters, no '/' or spaces");
              }
              c->ha.replica_id = v;
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return c.ha.replica_id; }),
        "unique per replica (default: the host name)", "the pod name");
  t.Add(Custom(
            "ha_key_prefix", "PREFIX", "ends with '/'",
            [](const std::string& v, ClusterdConfig* c) {
              if (v.empty() || v.back() != '/') return InvalidArgument("ha_key_prefix: must end with '/'");
              c->ha.key_prefix = v;
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return c.ha.key_prefix; }),
        "prefix of every etcd key ClusterD writes (installations can share an etcd)", "ha.keyPrefix");
  t.Add(Dur("ha_lease_ttl", CLUSTERD_FIELD(ha.lease_ttl), std::chrono::seconds(1), std::chrono::minutes(1)),
        "the leader's lease: failover takes about this long", "ha.leaseTtl");
  t.Add(Dur("ha_request_timeout", CLUSTERD_FIELD(ha.request_timeout), std::chrono::milliseconds(100)),
        "deadline of every etcd request", "ha.requestTimeout");
  t.Add(U64("ha_max_entry_bytes", CLUSTERD_FIELD(ha.max_entry_bytes), 64 << 10, 64 << 20),
        "a group commit's change set stops growing past this (etcd's --max-request-bytes must be larger)",
        "ha.maxEntryBytes");
  t.Add(Bool("ha_log_compression", CLUSTERD_FIELD(ha.log_compression), "BOOL", "true or false; alone as a flag: true"),
        "store the replicated log's entries zstd-compressed (turn off only while replicas older than this release "
        "still run: they cannot read them)",
        "ha.logCompression");
  t.Add(U64("ha_log_retain_entries", CLUSTERD_FIELD(ha.log_retain_entries), 0, 100'000'000),
        "log entries kept in etcd behind the slowest live replica", "ha.logRetainEntries");
  t.Add(Custom(
            "ha_advertise_address", "ADDR", "host:port",
            [](const std::string& v, ClusterdConfig* c) {
              const size_t colon = v.rfind(':');
              if (colon == std::string::npos || colon == 0 || colon + 1 == v.size() ||
                  v.find_first_of("/ \t\n") != std::string::npos ||
                  v.substr(colon + 1).find_first_not_of("0123456789") != std::string::npos) {
                return InvalidArgument("ha_advertise_address: \"" + v + "\" is not host:port");
              }
              c->ha.advertise_address = v;
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return c.ha.advertise_address; }),
        "where peers fetch checkpoints from this replica's HTTP port (default: http_listen's host, or the host "
        "name)",
        "the pod IP and clusterd.ports.http");
  t.Add(Custom(
            "ha_pod", "NS/NAME", "namespace/name",
            [](const std::string& v, ClusterdConfig* c) {
              const size_t slash = v.find('/');
              const auto dns_label = [](const std::string& s) {
                return !s.empty() && s.size() <= 253 &&
                       s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") == std::string::npos;
              };
              if (slash == std::string::npos || !dns_label(v.substr(0, slash)) || !dns_label(v.substr(slash + 1))) {
                return InvalidArgument("ha_pod: \"" + v + "\" is not namespace/name");
              }
              c->ha.pod_namespace = v.substr(0, slash);
              c->ha.pod_name = v.substr(slash + 1);
              return Status::Ok();
            },
            [](const ClusterdConfig& c) {
              return c.ha.pod_name.empty() ? std::string() : c.ha.pod_namespace + "/" + c.ha.pod_name;
            }),
        "this replica's pod: labelled clusterd.io/ha-role=leader or standby through the Kubernetes API, for a "
        "Service that selects the leader",
        "the pod");
  t.Add(List("ha_peer_names", CLUSTERD_FIELD(ha.peer_names), "certificate common names, comma-separated",
             [](const std::string& name) {
               if (name.empty() || name.size() > 253) return InvalidArgument("\"" + name + "\" is not a name");
               return Status::Ok();
             }),
        "who may fetch a checkpoint: the Subject CN of the client certificate a peer replica presents (checked "
        "with tls_client_ca_file); default: the CN of this replica's own tls_cert_file",
        "the chart's server certificate");

  t.Section("Recovery (docs/recovery.md)");
  t.Add(Custom(
            "actuator", "KIND", "a registered actuator kind",
            [](const std::string& v, ClusterdConfig* c) {
              // A name; ParseClusterdConfig checks it against ConfigChecks::actuators.
              return SetText(v, &c->actuator);
            },
            [](const ClusterdConfig& c) { return c.actuator; }),
        "how recoveries carry out cluster actions (none: every cluster action fails and the recovery escalates)",
        "clusterd.config.actuator, else kubernetes.actuator");
  t.Add(Raw("actuator_command", CLUSTERD_FIELD(actuator_command), "CMD", "any; required with exec"),
        "exec: run with /bin/sh -c, the action as JSON on stdin");
  t.Add(Raw("actuator_url", CLUSTERD_FIELD(actuator_url), "URL",
            "http://host:port/path or https://...; required with webhook"),
        "webhook: receives each action as JSON by POST");
  t.Add(U32("max_concurrent_recoveries", CLUSTERD_FIELD(max_concurrent_recoveries), 1, 100'000),
        "blast radius: recoveries running at once");
  t.Add(U32("max_isolated_node_percent", CLUSTERD_FIELD(max_isolated_node_percent), 0, 100),
        "blast radius: nodes isolated at most, in percent");
  t.Add(Dur("recovery_budget_window", CLUSTERD_FIELD(recovery_budget_window), std::chrono::minutes(1)),
        "retry budgets count recoveries started within it");
  t.Add(Dur("recovery_resume_grace", CLUSTERD_FIELD(recovery_resume_grace), std::chrono::seconds(1)),
        "after a restart, steps in flight get at least this long to be answered");
  t.Add(Dur("recovery_agent_attach_grace", CLUSTERD_FIELD(recovery_agent_attach_grace), std::chrono::seconds(0),
            std::chrono::hours(1)),
        "a job with no agent attached (none since the start) gets this long from a recovery's start to attach "
        "one; then its agent commands are skipped and the cluster actions run (policy require_agent: wait)");
  t.Add(Dur("progress_snapshot_interval", CLUSTERD_FIELD(progress_snapshot_interval), std::chrono::seconds(1),
            std::chrono::hours(24)),
        "a job's progress (Job.progress: ETTR, lost time) is stored at most this often unless its state changes");
  t.Add(U32("progress_max_jobs", CLUSTERD_FIELD(progress_max_jobs), 1, 1'000'000),
        "jobs whose progress is tracked at once; a report for one more is refused");
  t.Add(U32("repeat_offender_recoveries", CLUSTERD_FIELD(repeat_offender_recoveries), 0, 1'000'000),
        "a node whose faults started more than this many recoveries within repeat_offender_window (since its last "
        "cordon or uncordon) is cordoned for inspection, with the recoveries named; 0: off");
  t.Add(Dur("repeat_offender_window", CLUSTERD_FIELD(repeat_offender_window), std::chrono::minutes(1),
            std::chrono::hours(24 * 30)),
        "the window repeat offenders are counted in (also GetNode's recoveries_caused)");
  t.Add(U32("recovery_retention_count", CLUSTERD_FIELD(recovery_retention_count), 10, 10'000'000),
        "finished recovery records kept at most (oldest go first; never a running one, a job's newest, or one "
        "within the budget window)");
  t.Add(Dur("recovery_retention_age", CLUSTERD_FIELD(recovery_retention_age), std::chrono::hours(1)),
        "finished recovery records that ended longer ago go (same exceptions)");
  t.Add(Bool("pingmesh_enabled", CLUSTERD_FIELD(pingmesh_enabled)),
        "the pingmesh (docs/pingmesh.md): NodeDs probe peers of their fault domains (domain_levels), ClusterD "
        "names the node, link or domain at fault");
  t.Add(Dur("pingmesh_interval", CLUSTERD_FIELD(pingmesh_interval), std::chrono::seconds(1), std::chrono::hours(1)),
        "a probe round is planned this often");
  t.Add(U32("pingmesh_peers_per_node", CLUSTERD_FIELD(pingmesh_peers_per_node), 1, 64),
        "peers a node probes per round in each probe domain");
  t.Add(U32("pingmesh_max_probes_per_round", CLUSTERD_FIELD(pingmesh_max_probes_per_round), 1, 10'000'000),
        "probes planned per round cluster-wide (past it: fewer peers, then nodes take turns)");
  t.Add(U32("pingmesh_attempts", CLUSTERD_FIELD(pingmesh_attempts), 1, 10), "TCP connects per peer per round");
  t.Add(Dur("pingmesh_probe_timeout", CLUSTERD_FIELD(pingmesh_probe_timeout), std::chrono::milliseconds(10),
            std::chrono::seconds(10)),
        "a connect not done within it is lost (attempts x timeout must be shorter than the interval)");
  t.Add(Dur("pingmesh_window", CLUSTERD_FIELD(pingmesh_window), std::chrono::seconds(1), std::chrono::hours(1)),
        "results are summed over this long and judged by majority");
  t.Add(U32("pingmesh_raise_after", CLUSTERD_FIELD(pingmesh_raise_after), 1, 100),
        "windows in a row that raise a finding");
  t.Add(U32("pingmesh_clear_after", CLUSTERD_FIELD(pingmesh_clear_after), 1, 100),
        "windows in a row without a finding that clear it");
  t.Add(U32("pingmesh_suspect_probes", CLUSTERD_FIELD(pingmesh_suspect_probes), 0, 16),
        "a direction that lost a round's probes is probed again each round, both ways, with this many more peers "
        "probing its target and probed by its source, so that every window judges it (0: off)");
  t.Add(U32("pingmesh_max_suspects", CLUSTERD_FIELD(pingmesh_max_suspects), 0, 100'000),
        "suspect directions probed again at most (past it: counted in clusterd_pingmesh_suspects_dropped)");
  t.Add(Text("chain_pool_label", CLUSTERD_FIELD(chain_pool_label), "LABEL"),
        "the node label whose value names a node's pool for the software chain's version drift (CHAIN_VERSION_DRIFT "
        "on a node whose driver, firmware or CANN version differs from its pool's majority); empty: the chip model");
  t.Add(List("chain_drift_levels", CLUSTERD_FIELD(chain_drift_levels), "POOL=LEVEL, comma-separated",
             [](const std::string& e) { return ParseChainDriftLevel(e).status(); }),
        "CHAIN_VERSION_DRIFT's level for the nodes of a pool (e.g. a3-train=PRE_SEPARATE keeps new work off a "
        "drifted node of that pool); other pools and a job's nodes: SUB_HEALTH");
  t.Add(OneOf("release_chain_check", CLUSTERD_FIELD(release_chain_check), {"automatic", "always", "never"}, "WHEN"),
        "a node goes back into service only with a healthy software chain (no BROKEN link, the kubelet's "
        "allocatable NPUs not short): automatic (the release of a separated chip waits for it), always "
        "(UncordonNode too, unless forced), never");
  t.Add(Bool("separation_enabled", CLUSTERD_FIELD(separation_enabled)),
        "separate a device whose faults keep coming back (off: nothing is counted or released by itself; devices "
        "already separated stay so until an operator releases them)");
  t.Add(U32("separation_threshold", CLUSTERD_FIELD(separation_threshold), 1, 50),
        "counted faults within separation_window that separate a device");
  t.Add(Dur("separation_window", CLUSTERD_FIELD(separation_window), std::chrono::hours(1), std::chrono::hours(720)),
        "the window the faults are counted in");
  t.Add(Dur("separation_release_after", CLUSTERD_FIELD(separation_release_after), std::chrono::seconds(0),
            std::chrono::hours(240)),
        "a separated device fault-free this long returns to service (0s: only an operator releases it, "
        "AdminService.ReleaseDevice; else at least 1h)");
  t.Add(Dur("separation_settle", CLUSTERD_FIELD(separation_settle), std::chrono::seconds(0), std::chrono::minutes(10)),
        "a fault is counted after this long, unless its code hit another device of the same job meanwhile (the "
        "job's fault, not the devices')");
  t.Add(Text("actuator_ca_file", CLUSTERD_FIELD(actuator_ca_file), "FILE"),
        "webhook over https: CA bundle of the receiver's certificate (default: the system's roots); its host name "
        "is verified");
  t.Add(Text("actuator_cert_file", CLUSTERD_FIELD(actuator_cert_file), "FILE"),
        "webhook over https: client certificate to present (with actuator_key_file)");
  t.Add(Text("actuator_key_file", CLUSTERD_FIELD(actuator_key_file), "FILE"), "its private key");
  t.Add(Bool("validation_enabled", CLUSTERD_FIELD(validation_enabled)),
        "return to service only after a validation (docs/validation.md): an isolated or separated device or node "
        "whose faults cleared, whose separation is due, or that an operator releases without force is VALIDATING "
        "(still out) until its node's agent passes it");
  t.Add(U32("validation_max_per_node", CLUSTERD_FIELD(validation_max_per_node), 1, 64),
        "validations asked of one node's agent at once; the rest queue in order");
  t.Add(U32("validation_max_in_flight", CLUSTERD_FIELD(validation_max_in_flight), 1, 100'000),
        "validations asked of all agents at once; the rest queue in order");
  t.Add(Dur("validation_timeout", CLUSTERD_FIELD(validation_timeout), std::chrono::seconds(1), std::chrono::hours(24)),
        "a validation with no result this long after it was asked fails");
  t.Add(Dur("validation_stable_window", CLUSTERD_FIELD(validation_stable_window), std::chrono::seconds(0),
            std::chrono::hours(1)),
        "the built-in check: no new fault of the devices, readings and the software chain OK this long (below "
        "validation_timeout)");
  t.Add(Bool("validation_commands", CLUSTERD_FIELD(validation_commands)),
        "the agent also runs its configured validation commands for the devices' vendor and model");
  t.Add(U32("validation_flap_limit", CLUSTERD_FIELD(validation_flap_limit), 1, 50),
        "failed validations and returns that faulted again within validation_flap_window that hold a device or "
        "node out (HELD) until an operator releases it with force");
  t.Add(Dur("validation_flap_window", CLUSTERD_FIELD(validation_flap_window), std::chrono::hours(1),
            std::chrono::hours(720)),
        "the window flaps are counted in");
  t.Add(U32("validation_retention_count", CLUSTERD_FIELD(validation_retention_count), 100, 1'000'000),
        "finished validation records kept at most (oldest go first)");

  t.Section("MindCluster compatibility (docs/mindcluster.md)");
  t.Add(Text("pubfault_code_table", CLUSTERD_FIELD(pubfault.code_table_file), "FILE"),
        "public-fault codes {\"SubHealthFault\": [\"010001001\", ...]} merged over MindCluster's default table",
        "mindcluster.pubfault.codeTable");
  t.Add(
      List("pubfault_resources", CLUSTERD_FIELD(pubfault.resources), "names of at most 64 characters, comma-separated",
           [](const std::string& n) {
             if (n.size() > 64) return InvalidArgument("\"" + n.substr(0, 64) + "...\" is too long");
             return Status::Ok();
           }),
      "resources allowed to send public faults", "mindcluster.pubfault.resources");
  t.Add(Custom(
            "pubfault_rate", "N", "a number above 0, at most 1000000",
            [](const std::string& v, ClusterdConfig* c) {
              char* end = nullptr;
              const double rate = std::strtod(v.c_str(), &end);
              if (v.empty() || end != v.c_str() + v.size() || !(rate > 0) || rate > 1e6) {
                return InvalidArgument("pubfault_rate: \"" + v + "\" is not a number of requests per second above 0");
              }
              c->pubfault.rate_per_second = rate;
              return Status::Ok();
            },
            [](const ClusterdConfig& c) {
              std::ostringstream out;
              out << c.pubfault.rate_per_second;
              return out.str();
            }),
        "public-fault requests per second per resource, sustained", "mindcluster.pubfault.rate");
  t.Add(U32("pubfault_burst", CLUSTERD_FIELD(pubfault.burst), 1, 1'000'000),
        "public-fault requests per resource in a burst", "mindcluster.pubfault.burst");
  t.Add(U32("pubfault_max_faults", CLUSTERD_FIELD(pubfault.max_faults), 1, 10'000'000), "public faults active at once",
        "mindcluster.pubfault.maxFaults");
  t.Add(U32("mindcluster_max_subscribers", CLUSTERD_FIELD(mindcluster_max_subscribers), 1, 1'000'000),
        "fault.Fault registrations, and apart its subscription streams; more is RESOURCE_EXHAUSTED (also "
        "job.Job's clients and config.Config's registrations, each apart)",
        "mindcluster.maxSubscribers");
  t.Add(U32("mindcluster_max_registrations_per_principal", CLUSTERD_FIELD(mindcluster_max_registrations_per_principal),
            1, 1'000'000),
        "fault.Fault registrations one client holds: its authenticated principal, or its IP address with "
        "insecure (the smaller of it and mindcluster_max_subscribers applies; also job.Job's clients)",
        "mindcluster.maxRegistrationsPerPrincipal");
  t.Add(Custom(
            "mindcluster_registration_ttl_seconds", "N", "1 to 604800",
            [](const std::string& v, ClusterdConfig* c) {
              uint32_t s = 0;
              CLUSTERD_RETURN_IF_ERROR(SetU32("mindcluster_registration_ttl_seconds", v, 1, 604'800, &s));
              c->mindcluster_registration_ttl = std::chrono::seconds(s);
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return std::to_string(c.mindcluster_registration_ttl.count()); }),
        "a fault.Fault (job.Job, config.Config) registration with no stream open for this many seconds expires",
        "none yet (clusterd.config refuses the mindcluster_* keys)");
  t.Add(Custom(
            "mindcluster_taskd_wait_seconds", "N", "2 to 3600",
            [](const std::string& v, ClusterdConfig* c) {
              uint32_t s = 0;
              CLUSTERD_RETURN_IF_ERROR(SetU32("mindcluster_taskd_wait_seconds", v, 2, 3600, &s));
              c->mindcluster_taskd_wait = std::chrono::seconds(s);
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return std::to_string(c.mindcluster_taskd_wait.count()); }),
        "MindIO's wait for ClusterD's next signal (the jobs' MINDIO_WAIT_MINDX_TIME): a signal sent to TaskD again "
        "and unanswered this long fails its step, and the strategy after a pod move goes out 10 s before it ends",
        "mindcluster.taskdWait");
  t.Add(Custom(
            "mindcluster_om_wait_seconds", "N", "1 to 86400",
            [](const std::string& v, ClusterdConfig* c) {
              uint32_t s = 0;
              CLUSTERD_RETURN_IF_ERROR(SetU32("mindcluster_om_wait_seconds", v, 1, 86400, &s));
              c->mindcluster_om_wait = std::chrono::seconds(s);
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return std::to_string(c.mindcluster_om_wait.count()); }),
        "how long a NIC switch or stress test of the Recover service waits for each of TaskD's answers (the "
        "reference's 15 minutes); past it the operation fails and the job's ranks get a process fault",
        "none yet (clusterd.config refuses the mindcluster_* keys)");
  t.Add(U32("datatrace_max_jobs", CLUSTERD_FIELD(datatrace_max_jobs), 1, 1'000'000),
        "jobs whose TrainingDataTrace profiling switch is kept; a new job's beyond is RESOURCE_EXHAUSTED unless "
        "a kept job is gone",
        "clusterd.config.datatrace_max_jobs");
  t.Add(U32("datatrace_max_subscribers", CLUSTERD_FIELD(datatrace_max_subscribers), 1, 1'000'000),
        "TrainingDataTrace subscription streams at once; more is RESOURCE_EXHAUSTED",
        "clusterd.config.datatrace_max_subscribers");
  t.Add(U32("datatrace_max_subscribers_per_job", CLUSTERD_FIELD(datatrace_max_subscribers_per_job), 1, 1'000'000),
        "TrainingDataTrace subscription streams of one job at once; more is RESOURCE_EXHAUSTED",
        "clusterd.config.datatrace_max_subscribers_per_job");
  t.Add(
      Text("mindcluster_device_info_namespace", CLUSTERD_FIELD(mindcluster_stack.device_info_namespace), "NS"),
      "namespace of the device plugin's mindx-dl-deviceinfo-<node> ConfigMaps (the mindcluster integration reads them)",
      "mindcluster.volcano.deviceInfoNamespace");
  t.Add(Text("mindcluster_cluster_info_namespace", CLUSTERD_FIELD(mindcluster_stack.cluster_info_namespace), "NS"),
        "namespace of the cluster-info ConfigMaps Volcano reads (the mindcluster integration writes them)",
        "mindcluster.volcano.clusterInfoNamespace");
  t.Add(Dur("mindcluster_cluster_info_refresh", CLUSTERD_FIELD(mindcluster_stack.refresh_interval),
            std::chrono::seconds(1), std::chrono::hours(1)),
        "every cluster-info ConfigMap rewritten with a fresh UpdateTime this often (Volcano rebuilds its cache "
        "when an entry has not grown for a minute)",
        "mindcluster.volcano.refresh");
  t.Add(U32("mindcluster_cluster_info_writes_per_second", CLUSTERD_FIELD(mindcluster_stack.writes_per_second), 1, 1000),
        "cluster-info ConfigMap writes per second at most (creates and updates together)",
        "mindcluster.volcano.writesPerSecond");
  t.Add(U32("mindcluster_job_summary_writes_per_second",
            CLUSTERD_FIELD(mindcluster_stack.job_summary_writes_per_second), 1, 1000),
        "job-summary ConfigMap writes per second at most (the mindcluster-jobs integration; the reference's 5)",
        "none yet (clusterd.config refuses the mindcluster_* keys)");
  t.Add(Dur("mindcluster_job_summary_delete_after", CLUSTERD_FIELD(mindcluster_stack.job_summary_delete_after),
            std::chrono::seconds(1), std::chrono::hours(24)),
        "a deleted job's job-summary ConfigMaps stay this long with operator \"delete\" before they are deleted (the "
        "reference's 60 s)",
        "none yet (clusterd.config refuses the mindcluster_* keys)");
  t.Add(U64("mindcluster_cluster_info_chunk_bytes", CLUSTERD_FIELD(mindcluster_stack.chunk_bytes), uint64_t{64} << 10,
            uint64_t{800} << 10),
        "a cluster-info ConfigMap's value at most, in bytes (the reference's 800 KiB is the most): a fault rewrites "
        "the ConfigMap that holds its node, so smaller ones reach Volcano sooner, at the cost of more ConfigMaps",
        "mindcluster.volcano.chunkBytes");
  t.Add(List("mindcluster_public_fault_namespaces", CLUSTERD_FIELD(mindcluster_stack.public_fault_namespaces),
             "namespaces, comma-separated, or *",
             [](const std::string& n) {
               const bool name = !n.empty() && n.size() <= 63 && std::all_of(n.begin(), n.end(), [](char c) {
                 return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
               });
               if (n == "*" || name) return Status::Ok();
               return InvalidArgument("\"" + n.substr(0, 64) + "\" is not a namespace name or *");
             }),
        "namespaces whose public-fault ConfigMaps (label mc-consumer-publicfault=true) the mindcluster integration "
        "applies as PubFault requests (* for all; none by default)",
        "mindcluster.volcano.publicFaultNamespaces");
  t.Add(Text("mindcluster_system_namespace", CLUSTERD_FIELD(mindcluster_stack.system_namespace), "NS"),
        "namespace of the ConfigMaps MindCluster's operators use (clusterd-config-cm, clusterd-manual-info-cm, "
        "statistic-fault-info, scheduling-exception-report)",
        "mindcluster.volcano.systemNamespace");
  t.Add(Bool("mindcluster_separation_policy_cm", CLUSTERD_FIELD(mindcluster_stack.separation_policy_cm), "BOOL",
             "true or false; alone as a flag: true"),
        "honour the separation policy of clusterd-config-cm (key manually_separate_policy.conf) over the "
        "separation_* settings while it holds a valid one",
        "mindcluster.volcano.separationPolicyConfigMap");
  t.Add(Bool("mindcluster_manual_info_cm", CLUSTERD_FIELD(mindcluster_stack.manual_info_cm), "BOOL",
             "true or false; alone as a flag: true"),
        "write the separated chips to clusterd-manual-info-cm; a chip an operator deletes there is released",
        "mindcluster.volcano.manualInfoConfigMap");
  t.Add(Dur("mindcluster_manual_info_interval", CLUSTERD_FIELD(mindcluster_stack.manual_info_interval),
            std::chrono::seconds(1), std::chrono::minutes(10)),
        "clusterd-manual-info-cm is rewritten at most this often (the reference: every 15 s)",
        "mindcluster.volcano.manualInfoInterval");
  t.Add(Bool("mindcluster_statistics_cms", CLUSTERD_FIELD(mindcluster_stack.statistics_cms), "BOOL",
             "true or false; alone as a flag: true"),
        "write the observability ConfigMaps statistic-fault-info (system namespace) and current-job-statistic "
        "(cluster-info namespace)",
        "mindcluster.volcano.statisticsConfigMaps");
  t.Add(Bool("mindcluster_scheduling_exception_cm", CLUSTERD_FIELD(mindcluster_stack.scheduling_exception_cm), "BOOL",
             "true or false; alone as a flag: true"),
        "write scheduling-exception-report (system namespace): why jobs' pods could not be scheduled",
        "mindcluster.volcano.schedulingExceptionConfigMap");
  t.Add(Dur("mindcluster_statistics_interval", CLUSTERD_FIELD(mindcluster_stack.statistics_interval),
            std::chrono::seconds(1), std::chrono::hours(1)),
        "each observability ConfigMap is rewritten at most this often, and only when its content changed",
        "mindcluster.volcano.statisticsInterval");
  t.Add(Bool("mindcluster_super_pod_cms", CLUSTERD_FIELD(mindcluster_stack.super_pod_cms), "BOOL",
             "true or false; alone as a flag: true"),
        "write super-pod-<id> (system namespace, label app=pingmesh) from the device plugin's Node annotations, so "
        "that MindCluster NodeD's pingmesh finds its peers; a SuperPoD's ConfigMap goes with its last node",
        "mindcluster.volcano.superPodConfigMaps");

  t.Section("Kubernetes (docs/kubernetes.md)");
  t.Add(Custom(
            "integrations", "LIST", "registered integration names, comma-separated",
            [](const std::string& v, ClusterdConfig* c) {
              std::vector<std::string> names;
              for (auto& name : SplitCommaList(v)) {
                // Names; ParseClusterdConfig checks them against ConfigChecks::integrations.
                CLUSTERD_RETURN_IF_ERROR(SetText(name, &name));
                if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
              }
              c->integrations = std::move(names);
              return Status::Ok();
            },
            [](const ClusterdConfig& c) { return JoinCommaList(c.integrations); }),
        "integrations to run alongside ClusterD", "kubernetes.enabled");
  t.Add(Text("kubeconfig", CLUSTERD_FIELD(k8s.kubeconfig), "FILE"),
        "kubeconfig of the API server (default: the pod's service account)", "in-cluster: the service account");
  t.Add(Text("kube_context", CLUSTERD_FIELD(k8s.kube_context), "NAME"),
        "context of the kubeconfig (default: its current-context)", "in-cluster: the service account");
  t.Add(Text("k8s_namespace", CLUSTERD_FIELD(k8s.namespace_), "NS"),
        "discover jobs in this namespace only (default: all)", "kubernetes.namespace");
  t.Add(Text("k8s_rank_annotation", CLUSTERD_FIELD(k8s.rank_annotation), "KEY"), "pod annotation with the pod's rank",
        "kubernetes.rankAnnotation");
  t.Add(List("k8s_rank_index_keys", CLUSTERD_FIELD(k8s.rank_index_keys), "label or annotation keys, comma-separated",
             [](const std::string& key) {
               return key.empty() || key.size() > 253 ? InvalidArgument("'" + key + "' is not a label key")
                                                      : Status::Ok();
             }),
        "without the rank annotation: the first of these pod labels (else annotations) gives the rank (Indexed Jobs, "
        "StatefulSets; \"\": none)",
        kNoChartValue);
  t.Add(Text("k8s_rank_env", CLUSTERD_FIELD(k8s.rank_env), "NAMES"),
        "container env vars with the rank when neither the annotation nor an index is there, comma-separated, the "
        "first found (e.g. RANK,PET_NODE_RANK; a value from the pod's own label or annotation is resolved)",
        kNoChartValue);
  t.Add(Text("k8s_devices_annotation", CLUSTERD_FIELD(k8s.devices_annotation), "KEY"),
        "pod annotation listing its devices", "kubernetes.devicesAnnotation");
  t.Add(Text("k8s_job_kind_label", CLUSTERD_FIELD(k8s.job_kind_label), "KEY"),
        "pod or PodGroup label: training or inference", "kubernetes.jobKindLabel");
  t.Add(Bool("k8s_podgroups", CLUSTERD_FIELD(k8s.podgroups)), "follow Volcano PodGroups", kNoChartValue);
  t.Add(Dur("k8s_crd_recheck", CLUSTERD_FIELD(k8s.crd_recheck), std::chrono::seconds(1)),
        "how often a resource the API server does not serve (PodGroups without Volcano) is looked for again",
        kNoChartValue);
  t.Add(Text("k8s_taint_key", CLUSTERD_FIELD(k8s.taint_key), "KEY"), "taint put on an isolated node",
        "kubernetes.taintKey");
  t.Add(OneOf("k8s_taint_effect", CLUSTERD_FIELD(k8s.taint_effect), {"NoSchedule", "NoExecute"}, "EFFECT"),
        "effect of that taint (NoExecute: Kubernetes evicts every pod without a toleration)", "kubernetes.taintEffect");
  t.Add(Text("k8s_node_condition", CLUSTERD_FIELD(k8s.node_condition), "TYPE"),
        "Node condition kept in step with ClusterD's health", "kubernetes.nodeCondition");
  t.Add(Level("k8s_node_not_ready_level", CLUSTERD_FIELD(k8s.node_not_ready_level)),
        "fault level of a Node whose Ready condition is not True", "kubernetes.nodeNotReadyLevel");
  t.Add(Dur("k8s_eviction_timeout", CLUSTERD_FIELD(k8s.eviction_timeout), std::chrono::seconds(1)),
        "how long an eviction may be refused (PodDisruptionBudget)", "kubernetes.evictionTimeout");
  t.Add(Bool("k8s_delete_fallback", CLUSTERD_FIELD(k8s.delete_fallback)),
        "delete the pod when its eviction keeps being refused", "kubernetes.deleteFallback");
  t.Add(Bool("k8s_device_fallback_taint", CLUSTERD_FIELD(k8s.device_fallback_taint)),
        "taint the Node <domain>/isolated-device-<id>:NoSchedule while a device is isolated that no scheduler of "
        "the job sees isolated (no Volcano cluster-info, DRA DeviceTaintRule or lowered allocatable)",
        "kubernetes.deviceFallbackTaint");
  t.Add(Dur("k8s_condition_interval", CLUSTERD_FIELD(k8s.condition_interval), std::chrono::milliseconds(100)),
        "how often Node conditions are compared with ClusterD's health and written", kNoChartValue);
  t.Add(Dur("k8s_allocatable_hold", CLUSTERD_FIELD(k8s.allocatable_hold), std::chrono::seconds(1)),
        "how long a Node's allocatable NPUs must stay below the chips NodeD sees usable before "
        "NODE_ALLOCATABLE_MISMATCH (a device plugin restarting is not a fault)",
        kNoChartValue);
  t.Add(List("k8s_dra_drivers", CLUSTERD_FIELD(k8s.dra_drivers), "DRA driver names, comma-separated",
             [](const std::string&) { return Status::Ok(); }),
        "DRA device taints: only these drivers' ResourceSlices name devices (default: every driver)", kNoChartValue);
  t.Add(Text("k8s_dra_device_attribute", CLUSTERD_FIELD(k8s.dra_device_attribute), "NAME"),
        "DRA device taints: the int device attribute that is ClusterD's device id (\"\": names only)", kNoChartValue);
  t.Add(List("k8s_dra_device_names", CLUSTERD_FIELD(k8s.dra_device_names), "names with {id}, comma-separated",
             [](const std::string& n) {
               if (n.find("{id}") == std::string::npos) return InvalidArgument("\"" + n + "\" has no {id}");
               return Status::Ok();
             }),
        "DRA device taints: device names of ClusterD's device {id}, for devices without that attribute", kNoChartValue);

  t.Section("Fault domains and incidents (docs/domains.md)");
  t.Add(List("domain_levels", CLUSTERD_FIELD(domain_levels), "LEVEL=LABEL-KEY, comma-separated, broadest first",
             [](const std::string& e) {
               if (e == "none") return Status::Ok();
               const size_t eq = e.find('=');
               if (eq == std::string::npos || eq == 0 || eq + 1 == e.size()) {
                 return InvalidArgument("\"" + e + "\" is not level=label-key");
               }
               return Status::Ok();
             }),
        "the fault-domain levels: each a name and the node label whose value names the node's domain at that level "
        "(empty: the built-in superpod=huawei.com/topotree.superpodid, rack=huawei.com/topotree.rackid, "
        "nvlink=nvidia.com/gpu.clique; none: no domains)");
  t.Add(Bool("incidents_enabled", CLUSTERD_FIELD(incidents_enabled)),
        "form incidents from faults that land together within a domain");
  t.Add(Dur("incident_window", CLUSTERD_FIELD(incident_window), std::chrono::milliseconds(100), std::chrono::hours(1)),
        "faults of one domain count together when they land within this window");
  t.Add(U32("incident_min_nodes", CLUSTERD_FIELD(incident_min_nodes), 2, 100'000),
        "an incident opens when the window's faults hit this many nodes of one domain");
  t.Add(U32("incident_min_devices", CLUSTERD_FIELD(incident_min_devices), 2, 1'000'000),
        "... or this many chips of one domain (a lone chip fault stays a chip fault)");
  t.Add(U32("incident_isolate_percent", CLUSTERD_FIELD(incident_isolate_percent), 0, 100),
        "an incident that hits more than this percentage of its domain's nodes isolates the domain as a whole "
        "(subject to max_isolated_node_percent and incident_max_isolated_domains; dry-run records it only); 0: never");
  t.Add(U32("incident_max_isolated_domains", CLUSTERD_FIELD(incident_max_isolated_domains), 0, 100'000),
        "blast radius: at most this many domains isolated by open incidents at once");
  t.Add(Bool("evidence_enabled", CLUSTERD_FIELD(evidence_enabled)),
        "ask the member nodes of a new incident for a diagnostic bundle (kernel log, accelerator readout, chain, "
        "link counters, vendor tools)");
  t.Add(U64("evidence_max_bundle_bytes", CLUSTERD_FIELD(evidence_max_bundle_bytes), 1024, uint64_t{3} << 20),
        "one member's bundle at most (encoded); larger ones are refused. Keep it under ha_max_entry_bytes with HA");
  t.Add(U64("evidence_max_total_bytes", CLUSTERD_FIELD(evidence_max_total_bytes), 1024, uint64_t{1} << 40),
        "all stored bundles at most: the oldest are deleted past it (at least evidence_max_bundle_bytes)");
  t.Add(Dur("evidence_max_age", CLUSTERD_FIELD(evidence_max_age), std::chrono::seconds(1)),
        "a stored bundle is deleted this long after it was stored");
  t.Add(Dur("evidence_timeout", CLUSTERD_FIELD(evidence_timeout), std::chrono::seconds(1), std::chrono::hours(1)),
        "an asked member's bundle comes within this (and a queued member's agent connects within it), or it failed");
  t.Add(U32("evidence_max_in_flight", CLUSTERD_FIELD(evidence_max_in_flight), 1, 10'000),
        "members asked for evidence at once, over all incidents (the rest wait in order)");
  t.Add(
      Dur("evidence_log_before", CLUSTERD_FIELD(evidence_log_before), std::chrono::seconds(0), std::chrono::hours(24)),
      "the kernel-log excerpt starts this long before the member's first fault of the incident");
  return t.Take();
}

#undef CLUSTERD_FIELD

const ConfigKey* FindKey(const std::string& name) {
  static const std::map<std::string, const ConfigKey*> index = config_table::IndexKeys(ClusterdConfigKeys());
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

// May be given alone as a flag ("--insecure"), meaning true.
bool IsSwitch(const std::string& key) {
  return key == "insecure" || key == "auth_token_review" || key == "metrics_auth";
}

// The table's text for --help and the reference, with the names the
// registries give for the two keys whose values are names.
std::vector<config_table::KeyDoc> Docs(const ConfigChecks& checks) {
  std::vector<config_table::KeyDoc> docs = config_table::KeyDocs(ClusterdConfigKeys());
  for (config_table::KeyDoc& d : docs) {
    if (d.name == "actuator") d.accepted = JoinNames(checks.actuators, " or ");
    if (d.name == "integrations") d.accepted = JoinNames(checks.integrations, " or ") + ", comma-separated";
    if (d.name == "actuator" || d.name == "integrations") d.accepted_in_help = true;
  }
  return docs;
}

}  // namespace

StatusOr<std::pair<std::string, v1::FaultLevel>> ParseChainDriftLevel(std::string_view entry) {
  const size_t eq = entry.find('=');
  if (eq == 0 || eq == std::string_view::npos || eq + 1 == entry.size()) {
    return InvalidArgument("\"" + std::string(entry) + "\" is not POOL=LEVEL");
  }
  auto level = ParseFaultLevel(entry.substr(eq + 1));
  if (!level || *level == v1::FAULT_LEVEL_UNSPECIFIED) {
    return InvalidArgument("\"" + std::string(entry) + "\": " + std::string(entry.substr(eq + 1)) +
                           " is not a fault level");
  }
  return std::make_pair(std::string(entry.substr(0, eq)), *level);
}

const std::vector<ConfigKey>& ClusterdConfigKeys() {
  static const std::vector<ConfigKey> keys = MakeTable();
  return keys;
}

Status ApplyClusterdConfigJson(std::string_view json_text, std::string_view origin, ClusterdConfig* cfg) {
  return config_table::ApplyJson(json_text, origin, FindKey, cfg);
}

// TLS to etcd: files only with https endpoints, a certificate with its key.
static Status ValidateEtcdTls(const ClusterdConfig& c) {
  const auto& ha = c.ha;
  const bool https = !ha.etcd_endpoints.empty() && ha.etcd_endpoints.front().rfind("https://", 0) == 0;
  if (!https && (!ha.etcd_ca_file.empty() || !ha.etcd_cert_file.empty() || !ha.etcd_key_file.empty())) {
    return InvalidArgument("etcd_ca_file, etcd_cert_file and etcd_key_file need https:// etcd_endpoints");
  }
  if (ha.etcd_cert_file.empty() != ha.etcd_key_file.empty()) {
    return InvalidArgument(ha.etcd_cert_file.empty() ? "etcd_key_file: needs etcd_cert_file"
                                                     : "etcd_cert_file: needs etcd_key_file");
  }
  return Status::Ok();
}

Status ValidateSecurity(const ClusterdConfig& c) {
  const bool cert = !c.tls.cert_file.empty(), key = !c.tls.key_file.empty();
  const bool authn = !c.auth.token_file.empty() || c.auth.token_review || !c.tls.client_ca_file.empty();
  if (c.insecure) {
    if (cert || key || authn || !c.tls.client_auth.empty() || c.auth.metrics_auth || c.auth.metrics_role != "viewer") {
      return InvalidArgument(
          "insecure: plaintext without authentication cannot be combined with tls_* or auth_* "
          "settings (drop --insecure to serve TLS)");
    }
    return ValidateEtcdTls(c);
  }
  if (!cert && !key) {
    return InvalidArgument(
        "no server certificate: give tls_cert_file and tls_key_file (--tls-cert-file, "
        "--tls-key-file), or --insecure for plaintext without authentication (local development "
        "only; docs/security.md)");
  }
  if (cert != key)
    return InvalidArgument(cert ? "tls_cert_file: needs tls_key_file" : "tls_key_file: needs tls_cert_file");
  if (!authn) {
    return InvalidArgument(
        "TLS without a way to authenticate clients: give tls_client_ca_file (client "
        "certificates), auth_token_file or auth_token_review");
  }
  if ((c.tls.client_auth == "require" || c.tls.client_auth == "request") && c.tls.client_ca_file.empty()) {
    return InvalidArgument("tls_client_auth: \"" + c.tls.client_auth + "\" needs tls_client_ca_file");
  }

  if (!c.auth.agent_service_accounts.empty() && !c.auth.token_review) {
    return InvalidArgument("auth_agent_service_accounts: needs auth_token_review");
  }
  return ValidateEtcdTls(c);
}

StatusOr<ClusterdConfig> ParseClusterdConfig(const std::vector<std::string>& args, const ConfigChecks& checks,
                                             bool* help) {
  auto parsed = config_table::ParseArgs<ClusterdConfig>(args, FindKey, {{"catalog", "catalog_file"}}, IsSwitch, help);
  if (!parsed.ok() || *help) return parsed;
  ClusterdConfig& cfg = *parsed;
  CLUSTERD_RETURN_IF_ERROR(CheckNames(cfg, checks));
  CLUSTERD_RETURN_IF_ERROR(ValidateSecurity(cfg));
  if (cfg.separation_release_after.count() && cfg.separation_release_after < std::chrono::hours(1)) {
    return InvalidArgument("separation_release_after: 0s (only an operator releases) or 1h to 240h");
  }
  if (cfg.validation_stable_window >= cfg.validation_timeout) {
    return InvalidArgument("validation_stable_window: must be below validation_timeout (" +
                           std::to_string(cfg.validation_timeout.count() / 1'000'000'000) + "s)");
  }
  return parsed;
}

Status CheckNames(const ClusterdConfig& cfg, const ConfigChecks& checks) {
  auto known = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (!known(checks.actuators, cfg.actuator)) {
    return InvalidArgument("--actuator: \"" + cfg.actuator + "\" is not one of " + JoinNames(checks.actuators));
  }
  for (const std::string& name : cfg.integrations) {
    if (!known(checks.integrations, name)) {
      return InvalidArgument("--integrations: \"" + name + "\" is not one of " + JoinNames(checks.integrations));
    }
  }
  // What each actuator kind needs (e.g. exec: --actuator-command) is its own
  // registration's check.
  if (checks.validate_actuator) return checks.validate_actuator(cfg);
  return Status::Ok();
}

std::string ClusterdUsage(const ConfigChecks& checks) {
  return config_table::Usage(Docs(checks),
                             "usage: clusterd [--config FILE] [--flag value ...]\n\n"
                             "Flags (the JSON config file takes the same keys with '_'; a flag overrides the file):\n",
                             "Durations take a unit: 500ms, 10s, 2m, 1h, 7d. Every key: docs/configuration.md.\n");
}

std::string ClusterdConfigReference(const ConfigChecks& checks) { return config_table::Reference(Docs(checks)); }

}  // namespace clusterd
