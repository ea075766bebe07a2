#include "clusterd/config/config.h"

#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "clusterd/auth/roles.h"
#include "common/config_util.h"
#include "common/duration.h"
#include "common/levels.h"

namespace clusterd {
namespace {

// A free-text setting: one printable line.
Status SetText(const std::string& v, std::string* out) {
  for (unsigned char ch : v) {
    if (ch < 0x20 || ch == 0x7f) return InvalidArgument("\"" + v + "\" has a control character");
  }
  *out = v;
  return Status::Ok();
}

// A list setting: JSON lists arrive joined with ',' (ApplyJsonObject), flags
// are written that way. Empty items are dropped.
std::vector<std::string> SplitList(const std::string& v) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(v);
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

using Setter = std::function<Status(const std::string& value, ClusterdConfig* cfg)>;

// One table of keys: the JSON file uses the key, flags use --key with '_' -> '-'.
const std::map<std::string, Setter>& Setters() {
  static const std::map<std::string, Setter> table = {
      {"listen", [](const std::string& v, ClusterdConfig* c) { return SetAddress("listen", v, &c->listen); }},
      {"http_listen",
       [](const std::string& v, ClusterdConfig* c) { return SetAddress("http_listen", v, &c->http_listen); }},
      {"min_free_bytes",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("min_free_bytes", v, 16ull << 20, 1ull << 40, &c->min_free_bytes);
       }},
      {"min_free_inodes",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("min_free_inodes", v, 16, 1'000'000'000, &c->min_free_inodes);
       }},
      {"data_dir",
       [](const std::string& v, ClusterdConfig* c) {
         if (v.empty()) return InvalidArgument("data_dir: must not be empty");
         c->data_dir = v;
         return Status::Ok();
       }},
      {"node_grace",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("node_grace", v, std::chrono::milliseconds(100), &c->node_grace);
       }},
      {"heartbeat_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("heartbeat_interval", v, std::chrono::milliseconds(10), &c->heartbeat_interval);
       }},
      {"catalog_file",
       [](const std::string& v, ClusterdConfig* c) {
         c->catalog_file = v;
         return Status::Ok();
       }},
      {"default_level",
       [](const std::string& v, ClusterdConfig* c) {
         auto level = ParseFaultLevel(v);
         if (!level) return InvalidArgument("default_level: \"" + v + "\" is not a fault level name");
         c->default_level = *level;
         return Status::Ok();
       }},
      {"retention_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("retention_events", v, 1000, UINT64_MAX, &c->retention_events);
       }},
      {"retention_age",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("retention_age", v, std::chrono::minutes(1), &c->retention_age);
       }},
      {"retention_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("retention_interval", v, std::chrono::milliseconds(100), &c->retention_interval);
       }},
      {"commit_delay",
       [](const std::string& v, ClusterdConfig* c) {
         CLUSTERD_RETURN_IF_ERROR(SetDuration("commit_delay", v, std::chrono::nanoseconds(0), &c->commit_delay));
         if (c->commit_delay > std::chrono::milliseconds(100)) {
           return InvalidArgument("commit_delay: " + v + " is longer than the maximum 100ms");
         }
         return Status::Ok();
       }},
      {"watch_cache_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("watch_cache_events", v, 16, 16'000'000, &c->watch_cache_events);
       }},
      {"watch_max_lag_events",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("watch_max_lag_events", v, 16, 16'000'000, &c->watch_max_lag_events);
       }},
      {"max_message_bytes",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_message_bytes", v, 4096, 64u << 20, &c->max_message_bytes);
       }},
      {"max_streams",
       [](const std::string& v, ClusterdConfig* c) { return SetU32("max_streams", v, 1, 1'000'000, &c->max_streams); }},
      {"max_inflight_per_stream",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_inflight_per_stream", v, 1, 65'536, &c->max_inflight_per_stream);
       }},
      {"hello_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("hello_timeout", v, std::chrono::milliseconds(10), &c->hello_timeout);
       }},
      {"max_streams_per_peer",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_streams_per_peer", v, 1, 1'000'000, &c->max_streams_per_peer);
       }},
      {"max_watch_streams",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_watch_streams", v, 1, 1'000'000, &c->max_watch_streams);
       }},
      {"max_watch_streams_per_peer",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_watch_streams_per_peer", v, 1, 1'000'000, &c->max_watch_streams_per_peer);
       }},
      {"max_http_connections",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_http_connections", v, 1, 1'000'000, &c->max_http_connections);
       }},
      {"max_http_connections_per_peer",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_http_connections_per_peer", v, 0, 1'000'000, &c->max_http_connections_per_peer);
       }},
      {"http_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("http_timeout", v, std::chrono::milliseconds(10), &c->http_timeout);
       }},
      {"grpc_handshake_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("grpc_handshake_timeout", v, std::chrono::milliseconds(100), &c->grpc_handshake_timeout);
       }},
      {"grpc_self_check_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("grpc_self_check_interval", v, std::chrono::nanoseconds(0), &c->grpc_self_check_interval);
       }},
      {"grpc_unhealthy_after",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("grpc_unhealthy_after", v, std::chrono::nanoseconds(0), &c->grpc_unhealthy_after);
       }},
      {"grpc_self_check_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("grpc_self_check_timeout", v, std::chrono::milliseconds(10), &c->grpc_self_check_timeout);
       }},
      {"max_job_ranks", [](const std::string& v,
                           ClusterdConfig* c) { return SetU32("max_job_ranks", v, 1, 16'777'216, &c->max_job_ranks); }},
      {"max_faults_per_node",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_faults_per_node", v, 16, 1'000'000, &c->max_faults_per_node);
       }},
      {"max_job_impacts",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_job_impacts", v, 1, 100'000, &c->max_job_impacts);
       }},
      {"log_level", [](const std::string& v, ClusterdConfig* c) { return SetLogLevel("log_level", v, &c->log_level); }},
      {"actuator",
       [](const std::string& v, ClusterdConfig* c) {
         // A name; ParseClusterdConfig checks it against ConfigChecks::actuators.
         CLUSTERD_RETURN_IF_ERROR(SetText(v, &c->actuator));
         return Status::Ok();
       }},
      {"actuator_command",
       [](const std::string& v, ClusterdConfig* c) {
         c->actuator_command = v;
         return Status::Ok();
       }},
      {"actuator_url",
       [](const std::string& v, ClusterdConfig* c) {
         c->actuator_url = v;
         return Status::Ok();
       }},
      {"integrations",
       [](const std::string& v, ClusterdConfig* c) {
         std::vector<std::string> names;
         size_t start = 0;
         while (start <= v.size() && !v.empty()) {
           size_t comma = v.find(',', start);
           std::string name = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
           if (!name.empty()) {
             // Names; ParseClusterdConfig checks them against ConfigChecks::integrations.
             CLUSTERD_RETURN_IF_ERROR(SetText(name, &name));
             if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
           }
           if (comma == std::string::npos) break;
           start = comma + 1;
         }
         c->integrations = std::move(names);
         return Status::Ok();
       }},
      {"kubeconfig", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.kubeconfig); }},
      {"kube_context", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.kube_context); }},
      {"k8s_namespace", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.namespace_); }},
      {"k8s_rank_annotation",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.rank_annotation); }},
      {"k8s_rank_env", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.rank_env); }},
      {"k8s_devices_annotation",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.devices_annotation); }},
      {"k8s_job_kind_label",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.job_kind_label); }},
      {"k8s_podgroups",
       [](const std::string& v, ClusterdConfig* c) { return SetBool("k8s_podgroups", v, &c->k8s.podgroups); }},
      {"k8s_taint_key", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.taint_key); }},
      {"k8s_taint_effect",
       [](const std::string& v, ClusterdConfig* c) {
         if (v != "NoSchedule" && v != "NoExecute") {
           return InvalidArgument("k8s_taint_effect: \"" + v + "\" is not NoSchedule or NoExecute");
         }
         c->k8s.taint_effect = v;
         return Status::Ok();
       }},
      {"k8s_node_condition",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->k8s.node_condition); }},
      {"k8s_node_not_ready_level",
       [](const std::string& v, ClusterdConfig* c) {
         auto level = ParseFaultLevel(v);
         if (!level) return InvalidArgument("k8s_node_not_ready_level: \"" + v + "\" is not a fault level name");
         c->k8s.node_not_ready_level = *level;
         return Status::Ok();
       }},
      {"k8s_eviction_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("k8s_eviction_timeout", v, std::chrono::seconds(1), &c->k8s.eviction_timeout);
       }},
      {"k8s_delete_fallback",
       [](const std::string& v, ClusterdConfig* c) {
         return SetBool("k8s_delete_fallback", v, &c->k8s.delete_fallback);
       }},
      {"k8s_condition_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("k8s_condition_interval", v, std::chrono::milliseconds(100),
                            &c->k8s.condition_interval);
       }},
      {"insecure", [](const std::string& v, ClusterdConfig* c) { return SetBool("insecure", v, &c->insecure); }},
      {"tls_cert_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->tls.cert_file); }},
      {"tls_key_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->tls.key_file); }},
      {"tls_client_ca_file",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->tls.client_ca_file); }},
      {"tls_client_auth",
       [](const std::string& v, ClusterdConfig* c) {
         if (v != "require" && v != "request" && v != "none") {
           return InvalidArgument("tls_client_auth: \"" + v + "\" is not require, request or none");
         }
         c->tls.client_auth = v;
         return Status::Ok();
       }},
      {"tls_reload_interval",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("tls_reload_interval", v, std::chrono::seconds(1), &c->tls.reload_interval);
       }},
      {"auth_token_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->auth.token_file); }},
      {"auth_token_review",
       [](const std::string& v, ClusterdConfig* c) { return SetBool("auth_token_review", v, &c->auth.token_review); }},
      {"auth_token_audience",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->auth.token_audience); }},
      {"auth_token_cache_ttl",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("auth_token_cache_ttl", v, std::chrono::seconds(1), &c->auth.token_cache_ttl);
       }},
      {"auth_agent_service_accounts",
       [](const std::string& v, ClusterdConfig* c) {
         c->auth.agent_service_accounts.clear();
         for (auto& sa : SplitList(v)) {
           auto slash = sa.find('/');
           if (slash == 0 || slash == std::string::npos || slash + 1 == sa.size() ||
               sa.find('/', slash + 1) != std::string::npos) {
             return InvalidArgument("auth_agent_service_accounts: \"" + sa + "\" is not namespace/name");
           }
           c->auth.agent_service_accounts.push_back(std::move(sa));
         }
         return Status::Ok();
       }},
      {"auth_bindings",
       [](const std::string& v, ClusterdConfig* c) {
         c->auth.bindings.clear();
         for (auto& b : SplitList(v)) {
           Status st = CheckRoleBinding(b);
           if (!st.ok()) return InvalidArgument("auth_bindings: " + st.message());
           c->auth.bindings.push_back(std::move(b));
         }
         return Status::Ok();
       }},
      {"metrics_auth",
       [](const std::string& v, ClusterdConfig* c) { return SetBool("metrics_auth", v, &c->auth.metrics_auth); }},
      {"pubfault_code_table",
       [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->pubfault.code_table_file); }},
      {"pubfault_resources",
       [](const std::string& v, ClusterdConfig* c) {
         auto names = SplitList(v);
         for (const auto& n : names) {
           if (n.size() > 64) return InvalidArgument("pubfault_resources: \"" + n.substr(0, 64) + "...\" is too long");
         }
         c->pubfault.resources = std::move(names);
         return Status::Ok();
       }},
      {"pubfault_rate",
       [](const std::string& v, ClusterdConfig* c) {
         char* end = nullptr;
         const double rate = std::strtod(v.c_str(), &end);
         if (v.empty() || end != v.c_str() + v.size() || !(rate > 0) || rate > 1e6) {
           return InvalidArgument("pubfault_rate: \"" + v + "\" is not a number of requests per second above 0");
         }
         c->pubfault.rate_per_second = rate;
         return Status::Ok();
       }},
      {"pubfault_burst",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("pubfault_burst", v, 1, 1'000'000, &c->pubfault.burst);
       }},
      {"pubfault_max_faults",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("pubfault_max_faults", v, 1, 10'000'000, &c->pubfault.max_faults);
       }},
      {"mindcluster_max_subscribers",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("mindcluster_max_subscribers", v, 1, 1'000'000, &c->mindcluster_max_subscribers);
       }},
      {"mindcluster_max_registrations_per_principal",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("mindcluster_max_registrations_per_principal", v, 1, 1'000'000,
                       &c->mindcluster_max_registrations_per_principal);
       }},
      {"mindcluster_registration_ttl_seconds",
       [](const std::string& v, ClusterdConfig* c) {
         uint32_t s = 0;
         if (Status st = SetU32("mindcluster_registration_ttl_seconds", v, 1, 604'800, &s); !st.ok()) return st;
         c->mindcluster_registration_ttl = std::chrono::seconds(s);
         return Status::Ok();
       }},
      {"etcd_endpoints",
       [](const std::string& v, ClusterdConfig* c) {
         c->ha.etcd_endpoints = SplitList(v);
         size_t tls = 0;
         for (const std::string& e : c->ha.etcd_endpoints) {
           const bool https = e.rfind("https://", 0) == 0;
           tls += https ? 1 : 0;
           std::string host_port = https ? e.substr(8) : e.rfind("http://", 0) == 0 ? e.substr(7) : e;
           if (host_port.find(':') == std::string::npos || host_port.find('/') != std::string::npos) {
             return InvalidArgument("etcd_endpoints: \"" + e + "\" is not http://host:port, https://host:port or host:port");
           }
         }
         if (tls != 0 && tls != c->ha.etcd_endpoints.size()) {
           return InvalidArgument("etcd_endpoints: either every endpoint is https:// or none");
         }
         return Status::Ok();
       }},
      {"etcd_ca_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->ha.etcd_ca_file); }},
      {"etcd_cert_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->ha.etcd_cert_file); }},
      {"etcd_key_file", [](const std::string& v, ClusterdConfig* c) { return SetText(v, &c->ha.etcd_key_file); }},
      {"ha_replica_id",
       [](const std::string& v, ClusterdConfig* c) {
         if (v.empty() || v.size() > 128 || v.find_first_of("/ \t\n") != std::string::npos) {
           return InvalidArgument("ha_replica_id: 1 to 128 characters, no '/' or spaces");
         }
         c->ha.replica_id = v;
         return Status::Ok();
       }},
      {"ha_key_prefix",
       [](const std::string& v, ClusterdConfig* c) {
         if (v.empty() || v.back() != '/') return InvalidArgument("ha_key_prefix: must end with '/'");
         c->ha.key_prefix = v;
         return Status::Ok();
       }},
      {"ha_lease_ttl",
       [](const std::string& v, ClusterdConfig* c) {
         CLUSTERD_RETURN_IF_ERROR(SetDuration("ha_lease_ttl", v, std::chrono::seconds(1), &c->ha.lease_ttl));
         if (c->ha.lease_ttl > std::chrono::minutes(1)) return InvalidArgument("ha_lease_ttl: at most 1m");
         return Status::Ok();
       }},
      {"ha_request_timeout",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("ha_request_timeout", v, std::chrono::milliseconds(100), &c->ha.request_timeout);
       }},
      {"ha_max_entry_bytes",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("ha_max_entry_bytes", v, 64 << 10, 64 << 20, &c->ha.max_entry_bytes);
       }},
      {"ha_log_retain_entries",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU64("ha_log_retain_entries", v, 0, 100'000'000, &c->ha.log_retain_entries);
       }},
      {"ha_advertise_address",
       [](const std::string& v, ClusterdConfig* c) {
         const size_t colon = v.rfind(':');
         if (colon == std::string::npos || colon == 0 || colon + 1 == v.size() ||
             v.find_first_of("/ \t\n") != std::string::npos ||
             v.substr(colon + 1).find_first_not_of("0123456789") != std::string::npos) {
           return InvalidArgument("ha_advertise_address: \"" + v + "\" is not host:port");
         }
         c->ha.advertise_address = v;
         return Status::Ok();
       }},
      {"ha_pod",
       [](const std::string& v, ClusterdConfig* c) {
         const size_t slash = v.find('/');
         const auto dns_label = [](const std::string& s) {
           return !s.empty() && s.size() <= 253 && s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-.") ==
                                                        std::string::npos;
         };
         if (slash == std::string::npos || !dns_label(v.substr(0, slash)) || !dns_label(v.substr(slash + 1))) {
           return InvalidArgument("ha_pod: \"" + v + "\" is not namespace/name");
         }
         c->ha.pod_namespace = v.substr(0, slash);
         c->ha.pod_name = v.substr(slash + 1);
         return Status::Ok();
       }},
      {"max_concurrent_recoveries",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_concurrent_recoveries", v, 1, 100'000, &c->max_concurrent_recoveries);
       }},
      {"max_isolated_node_percent",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("max_isolated_node_percent", v, 0, 100, &c->max_isolated_node_percent);
       }},
      {"recovery_budget_window",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("recovery_budget_window", v, std::chrono::minutes(1), &c->recovery_budget_window);
       }},
      {"recovery_retention_count",
       [](const std::string& v, ClusterdConfig* c) {
         return SetU32("recovery_retention_count", v, 10, 10'000'000, &c->recovery_retention_count);
       }},
      {"recovery_retention_age",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("recovery_retention_age", v, std::chrono::hours(1), &c->recovery_retention_age);
       }},
      {"recovery_resume_grace",
       [](const std::string& v, ClusterdConfig* c) {
         return SetDuration("recovery_resume_grace", v, std::chrono::seconds(1), &c->recovery_resume_grace);
       }},
  };
  return table;
}

bool KnownKey(const std::string& key) { return Setters().count(key) > 0; }

}  // namespace

Status ApplyClusterdConfigJson(std::string_view json_text, std::string_view origin, ClusterdConfig* cfg) {
  ClusterdConfig next = *cfg;
  CLUSTERD_RETURN_IF_ERROR(ApplyJsonObject(
      json_text, origin, KnownKey,
      [&](const std::string& key, const std::string& value) { return Setters().at(key)(value, &next); }));
  *cfg = next;
  return Status::Ok();
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
    if (cert || key || authn || !c.tls.client_auth.empty() || c.auth.metrics_auth) {
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
  if (c.auth.metrics_auth && c.auth.token_file.empty() && !c.auth.token_review) {
    return InvalidArgument("metrics_auth: needs auth_token_file or auth_token_review (a scraper sends a bearer token)");
  }
  if (!c.auth.agent_service_accounts.empty() && !c.auth.token_review) {
    return InvalidArgument("auth_agent_service_accounts: needs auth_token_review");
  }
  return ValidateEtcdTls(c);
}

StatusOr<ClusterdConfig> ParseClusterdConfig(const std::vector<std::string>& args, const ConfigChecks& checks,
                                             bool* help) {
  auto split = SplitFlags(
      args, [](const std::string& key) { return key == "catalog" || KnownKey(key); },
      [](const std::string& key) { return key == "insecure" || key == "auth_token_review" || key == "metrics_auth"; });
  if (!split.ok()) return split.status();
  *help = split->help;
  ClusterdConfig cfg;
  if (split->help) return cfg;
  if (!split->config_path.empty()) {
    auto text = ReadFileToString(split->config_path);
    if (!text.ok()) return InvalidArgument("--config: " + text.status().message());
    CLUSTERD_RETURN_IF_ERROR(ApplyClusterdConfigJson(*text, "config file " + split->config_path, &cfg));
  }
  for (auto [key, value] : split->flags) {
    if (key == "catalog") key = "catalog_file";
    Status st = Setters().at(key)(value, &cfg);
    if (!st.ok()) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      return InvalidArgument("--" + flag + ": " + st.message());
    }
  }
  CLUSTERD_RETURN_IF_ERROR(CheckNames(cfg, checks));
  CLUSTERD_RETURN_IF_ERROR(ValidateSecurity(cfg));
  return cfg;
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
  return R"(usage: clusterd [--config FILE] [--flag value ...]

Flags (the JSON config file takes the same keys with '_'):
  --listen ADDR               gRPC address (default 0.0.0.0:8899)
  --http-listen ADDR          HTTP /healthz /readyz /metrics (default 0.0.0.0:11253)
  --data-dir DIR              RocksDB directory (default ./clusterd-data)
  --min-free-bytes N          free-space reserve of the data dir: below it writes are refused
                              (UNAVAILABLE) until space returns (default 268435456, min 16777216)
  --min-free-inodes N         the same for free inodes (default 1024)
  --node-grace DUR            heartbeat silence before a node is lost (default 10s)
  --heartbeat-interval DUR    heartbeat interval advertised to agents (default 2s)
  --catalog FILE              fault-code catalog merged over the built-in one
  --default-level LEVEL       level of codes no catalog knows (default SUB_HEALTH)
  --retention-events N        keep at most N events in the history (default 1000000)
  --retention-age DUR         keep no event older than this (default 7d)
  --retention-interval DUR    how often retention runs (default 60s)
  --commit-delay DUR          under steady light load, hold a group commit this long
                              for more changes: one fdatasync for several (default 2ms, 0s: never)
  --watch-cache-events N      recent events kept in memory for watchers (default 65536)
  --watch-max-lag-events N    a live watcher further behind is ended (default 10000)
  --max-message-bytes N       largest accepted gRPC message (default 4194304)
  --max-streams N             most concurrent agent streams (default 20000)
  --max-inflight-per-stream N agent messages in flight before reading pauses (default 256)
Security (docs/security.md):
  --tls-cert-file FILE        server certificate (PEM); with --tls-key-file, gRPC is served over TLS
  --tls-key-file FILE         its private key
  --tls-client-ca-file FILE   CA bundle of client certificates (mutual TLS)
  --tls-client-auth MODE      require (default with a client CA), request or none
  --tls-reload-interval DUR   how often the certificate files are re-read (default 10s)
  --insecure                  plaintext gRPC, no authentication: every caller may do everything
                              (local development only; required when no certificate is given)
  --auth-token-file FILE      bearer tokens: token,user,uid,"group1,group2" (kube-apiserver form)
  --auth-token-review BOOL    check other tokens with the Kubernetes TokenReview API (default false)
  --auth-token-audience AUD   audience those tokens must carry (default clusterd)
  --auth-token-cache-ttl DUR  how long a TokenReview answer is reused (default 60s)
  --auth-agent-service-accounts LIST  namespace/name of NodeD's service accounts (pod-bound tokens)
  --auth-bindings LIST        ROLE=user:NAME or ROLE=group:NAME, comma-separated
  --metrics-auth BOOL         /metrics needs a viewer's bearer token (default false)
Connection limits:
  --hello-timeout DUR         an agent stream without a valid hello by then is ended (default 10s)
  --max-streams-per-peer N    agent streams from one IP address (default 1000)
  --max-watch-streams N       concurrent Watch streams (default 10000)
  --max-watch-streams-per-peer N  Watch streams from one IP address (default 1000)
  --max-http-connections N    open connections on the HTTP port (default 256); a quarter of
                              them, at most 16, is kept for /healthz, /readyz(/replica), /metrics
  --max-http-connections-per-peer N  HTTP connections from one IP address (default 64, 0: no
                              per-peer limit); at most half of --max-http-connections applies
  --http-timeout DUR          longest wait for a whole HTTP request or keep-alive idle (default 30s)
  --grpc-handshake-timeout DUR  a gRPC connection must finish its handshake by then (default 10s)
  --grpc-self-check-interval DUR  how often /readyz checks that a new gRPC connection is
                              accepted and answered (default 5s, 0s: never)
  --grpc-self-check-timeout DUR   deadline of that check (default 2s)
  --grpc-unhealthy-after DUR      /healthz fails once the self-check has failed this long
                                  without a break: a restart is what brings gRPC's listener
                                  back (default 60s, 0s: never)
Size limits:
  --max-job-ranks N           ranks per job; more is INVALID_ARGUMENT (default 131072)
  --max-faults-per-node N     active faults per node, agent and external counted apart;
                              a raise beyond is RESOURCE_EXHAUSTED (default 4096)
  --max-job-impacts N         impacts listed per job in an answer (default 1024)
  --log-level LEVEL           trace, debug, info, warn, error (default info)
High availability (docs/ha.md; without --etcd-endpoints: one process, no etcd):
  --etcd-endpoints LIST       etcd members, comma-separated http://host:port: this process
                              becomes one replica; the leader serves, standbys follow
  --etcd-ca-file F            TLS to etcd (https:// endpoints): CA bundle of the members
                              (default: the system's roots)
  --etcd-cert-file F, --etcd-key-file F   client certificate and key for etcd
  --ha-replica-id ID          unique per replica (default: the host name)
  --ha-key-prefix P           prefix of every etcd key (default /clusterd/)
  --ha-lease-ttl DUR          the leader's lease; failover takes about this long (default 2s)
  --ha-request-timeout DUR    deadline of every etcd request (default 2s)
  --ha-max-entry-bytes N      a group commit's change set stops growing past this (default 1048576)
  --ha-log-retain-entries N   log entries kept behind the slowest replica (default 10000)
  --ha-advertise-address A    host:port where peers fetch checkpoints from this replica's
                              HTTP port (default: http_listen's host, or the host name)
  --ha-pod NS/NAME            this replica's pod: labelled clusterd.io/ha-role=leader or
                              standby through the Kubernetes API (k8s_kubeconfig, or the
                              service account), for a Service that selects the leader
Recovery:
  --actuator KIND             )" +
         JoinNames(checks.actuators, " or ") +
         R"(: how cluster actions run (default none:
                              every cluster action fails and the recovery escalates)
  --actuator-command CMD      exec: run with /bin/sh -c, the action as JSON on stdin
  --actuator-url URL          webhook: http://host:port/path receives the JSON by POST
  --max-concurrent-recoveries N   recoveries running at once (default 4)
  --max-isolated-node-percent N   nodes isolated at most, in percent (default 10)
  --recovery-budget-window DUR    retry budgets count recoveries within (default 24h)
  --recovery-resume-grace DUR     after a restart, steps in flight get this long (default 30s)
  --recovery-retention-count N    finished recovery records kept at most (default 10000)
  --recovery-retention-age DUR    finished recovery records older than this go (default 30d);
                                  never a running one, a job's newest, or one within the
                                  budget window
MindCluster compatibility (docs/mindcluster.md):
  --pubfault-code-table FILE  public-fault codes {"SubHealthFault": ["010001001", ...]} merged over
                              MindCluster's default table
  --pubfault-resources LIST   resources allowed to send public faults (default CCAE,fd-online,
                              pingmesh,Netmind,dpcStorage,dtfsStorage)
  --pubfault-rate N           requests per second per resource, sustained (default 1)
  --pubfault-burst N          requests per resource in a burst (default 100)
  --pubfault-max-faults N     public faults active at once (default 50000)
  --mindcluster-max-subscribers N  fault.Fault registrations and subscription streams (default 1000)
  --mindcluster-max-registrations-per-principal N
                                  fault.Fault registrations one client holds: its authenticated
                                  principal, or its IP address with --insecure (default 100; the
                                  smaller of it and --mindcluster-max-subscribers applies)
  --mindcluster-registration-ttl-seconds N
                                  a fault.Fault registration without a stream expires after N s
                                  (default 300)
Kubernetes (docs/kubernetes.md):
  --integrations LIST         integrations to run, comma-separated: )" +
         JoinNames(checks.integrations, " or ") +
         R"( (default none)
  --kubeconfig FILE           kubeconfig of the API server (default: the pod's service account)
  --kube-context NAME         context of the kubeconfig (default: its current-context)
  --k8s-namespace NS          discover jobs in this namespace only (default: all)
  --k8s-rank-annotation KEY   pod annotation with the pod's rank (default hccl/rankIndex)
  --k8s-rank-env NAME         container env var with the rank when the annotation is absent
  --k8s-devices-annotation KEY  pod annotation listing its devices (default huawei.com/AscendReal)
  --k8s-job-kind-label KEY    pod/PodGroup label: training or inference (default clusterd.io/job-kind)
  --k8s-podgroups BOOL        follow Volcano PodGroups (default true)
  --k8s-taint-key KEY         taint put on an isolated node (default clusterd.io/fault)
  --k8s-taint-effect EFFECT   NoSchedule or NoExecute (default NoSchedule)
  --k8s-node-condition TYPE   Node condition kept in step with ClusterD's health
                              (default AcceleratorHealthy)
  --k8s-node-not-ready-level LEVEL  fault level of a Node whose Ready condition is not True
                              (default PRE_SEPARATE)
  --k8s-eviction-timeout DUR  how long an eviction may be refused (PodDisruptionBudget) (default 60s)
  --k8s-delete-fallback BOOL  delete the pod when eviction keeps being refused (default false)
  --k8s-condition-interval DUR  how often Node conditions are compared and written (default 5s)
Durations take a unit: 500ms, 10s, 2m, 1h, 7d.
)";
}

}  // namespace clusterd
