#include "noded/server/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

#include "common/config_util.h"
#include "common/validation.h"

namespace clusterd::noded {
namespace {

// A file name or a name: any string ("" = unset); files are checked by ApplySecurity.
Status SetString(const std::string& v, std::string* out) {
  *out = v;
  return Status::Ok();
}

const ConfigSetters<NodedConfig>& Setters() {
  static const ConfigSetters<NodedConfig> table = {
      {"server", [](const std::string& v, NodedConfig* c) { return SetAddress("server", v, &c->server); }},
      {"node_name",
       [](const std::string& v, NodedConfig* c) {
         CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node_name", v));
         c->node_name = v;
         return Status::Ok();
       }},
      {"http_listen",
       [](const std::string& v, NodedConfig* c) { return SetAddress("http_listen", v, &c->http_listen); }},
      {"state_dir",
       [](const std::string& v, NodedConfig* c) {
         if (v.empty()) return InvalidArgument("state_dir: must not be empty");
         c->state_dir = v;
         return Status::Ok();
       }},
      {"accelerator",
       [](const std::string& v, NodedConfig* c) {
         if (v != "ascend" && v != "nvml" && v != "npu-smi" && v != "sim" && v != "none") {
           return InvalidArgument("accelerator: \"" + v + "\" is not one of ascend, nvml, npu-smi, sim, none");
         }
         c->accelerator = v;
         return Status::Ok();
       }},
      {"sim_devices",
       [](const std::string& v, NodedConfig* c) { return SetU32("sim_devices", v, 0, 1024, &c->sim_devices); }},
      {"dcmi_path",
       [](const std::string& v, NodedConfig* c) {
         c->dcmi_path = v;
         return Status::Ok();
       }},
      {"nvml_path",
       [](const std::string& v, NodedConfig* c) {
         c->nvml_path = v;
         return Status::Ok();
       }},
      {"nvml_call_timeout",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("nvml_call_timeout", v, std::chrono::milliseconds(100), &c->nvml_call_timeout);
       }},
      {"nvml_xid_hold",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("nvml_xid_hold", v, std::chrono::seconds(1), &c->nvml_xid_hold);
       }},
      {"npu_smi_command",
       [](const std::string& v, NodedConfig* c) {
         if (v.empty()) return InvalidArgument("npu_smi_command: must not be empty");
         c->npu_smi_command = v;
         return Status::Ok();
       }},
      {"root",
       [](const std::string& v, NodedConfig* c) {
         if (v.empty() || v[0] != '/') return InvalidArgument("root: must be an absolute path");
         c->root = v;
         return Status::Ok();
       }},
      {"kmsg_path",
       [](const std::string& v, NodedConfig* c) {
         c->kmsg_path = v;
         return Status::Ok();
       }},
      {"mounts_file",
       [](const std::string& v, NodedConfig* c) {
         if (!v.empty() && v[0] != '/') return InvalidArgument("mounts_file: must be an absolute path (under root)");
         c->mounts_file = v;
         return Status::Ok();
       }},
      {"rules_file",
       [](const std::string& v, NodedConfig* c) {
         c->rules_file = v;
         return Status::Ok();
       }},
      {"validation_commands_file",
       [](const std::string& v, NodedConfig* c) {
         c->validation_commands_file = v;
         return Status::Ok();
       }},
      {"evidence", [](const std::string& v, NodedConfig* c) { return SetBool("evidence", v, &c->evidence); }},
      {"evidence_commands_file",
       [](const std::string& v, NodedConfig* c) {
         c->evidence_commands_file = v;
         return Status::Ok();
       }},
      {"evidence_max_bytes",
       [](const std::string& v, NodedConfig* c) {
         return SetU64("evidence_max_bytes", v, 1024, uint64_t{3} << 20, &c->evidence_max_bytes);
       }},
      {"ascend_path",
       [](const std::string& v, NodedConfig* c) {
         if (v.empty() || v[0] != '/') return InvalidArgument("ascend_path: must be an absolute path (under root)");
         c->ascend_path = v;
         return Status::Ok();
       }},
      {"expected_chips",
       [](const std::string& v, NodedConfig* c) { return SetU32("expected_chips", v, 0, 1024, &c->expected_chips); }},
      {"chain_interval",
       [](const std::string& v, NodedConfig* c) {
         if (v == "0") {
           c->chain_interval = std::chrono::nanoseconds(0);
           return Status::Ok();
         }
         return SetDuration("chain_interval", v, std::chrono::seconds(1), &c->chain_interval);
       }},
      {"progress_dir",
       [](const std::string& v, NodedConfig* c) {
         if (!v.empty() && v[0] != '/') return InvalidArgument("progress_dir: must be an absolute path, or empty");
         c->progress_dir = v;
         return Status::Ok();
       }},
      {"progress_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("progress_interval", v, std::chrono::seconds(1), &c->progress_interval);
       }},
      {"probe", [](const std::string& v, NodedConfig* c) { return SetBool("probe", v, &c->probe); }},
      {"pingmesh", [](const std::string& v, NodedConfig* c) { return SetBool("pingmesh", v, &c->pingmesh); }},
      {"probe_address",
       [](const std::string& v, NodedConfig* c) {
         if (!v.empty() && !IsProbeAddressText(v)) {
           return InvalidArgument("probe_address: must be ip:port (an IPv4 or [IPv6] literal) or :port, not \"" + v +
                                  "\"");
         }
         c->probe_address = v;
         return Status::Ok();
       }},
      {"hccn_conf",
       [](const std::string& v, NodedConfig* c) {
         if (!v.empty() && v[0] != '/') return InvalidArgument("hccn_conf: must be an absolute path, or empty");
         c->hccn_conf = v;
         return Status::Ok();
       }},
      {"hccn_tool",
       [](const std::string& v, NodedConfig* c) {
         if (v.empty() || v[0] != '/') return InvalidArgument("hccn_tool: must be an absolute path");
         c->hccn_tool = v;
         return Status::Ok();
       }},
      {"hccn_tool_timeout",
       [](const std::string& v, NodedConfig* c) {
         CLUSTERD_RETURN_IF_ERROR(
             SetDuration("hccn_tool_timeout", v, std::chrono::milliseconds(100), &c->hccn_tool_timeout));
         if (c->hccn_tool_timeout > std::chrono::seconds(60)) return InvalidArgument("hccn_tool_timeout: at most 60s");
         return Status::Ok();
       }},
      {"pod_resources_socket",
       [](const std::string& v, NodedConfig* c) {
         if (!v.empty() && v[0] != '/') {
           return InvalidArgument("pod_resources_socket: must be an absolute path, or empty");
         }
         c->pod_resources_socket = v;
         return Status::Ok();
       }},
      {"pod_resources_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("pod_resources_interval", v, std::chrono::seconds(1), &c->pod_resources_interval);
       }},
      {"pod_resources_resources",
       [](const std::string& v, NodedConfig* c) {
         std::vector<std::string> names;
         size_t pos = 0;
         while (pos <= v.size() && !v.empty()) {
           size_t comma = v.find(',', pos);
           if (comma == std::string::npos) comma = v.size();
           std::string name = v.substr(pos, comma - pos);
           std::string bare = name;
           if (!bare.empty() && bare.back() == '*') bare.pop_back();
           if (bare.empty() || bare.size() > 253 || bare.find_first_of(" \t,=") != std::string::npos) {
             return InvalidArgument("pod_resources_resources: \"" + name + "\" is not a resource name");
           }
           names.push_back(std::move(name));
           pos = comma + 1;
         }
         if (names.empty()) return InvalidArgument("pod_resources_resources: must name at least one resource");
         c->pod_resources_resources = std::move(names);
         return Status::Ok();
       }},
      {"labels",
       [](const std::string& v, NodedConfig* c) {
         std::map<std::string, std::string> labels;
         size_t pos = 0;
         while (pos < v.size()) {
           size_t comma = v.find(',', pos);
           if (comma == std::string::npos) comma = v.size();
           std::string term = v.substr(pos, comma - pos);
           auto eq = term.find('=');
           if (eq == std::string::npos || eq == 0) return InvalidArgument("labels: \"" + term + "\" is not key=value");
           CLUSTERD_RETURN_IF_ERROR(ValidateToken("labels key", term.substr(0, eq)));
           CLUSTERD_RETURN_IF_ERROR(ValidateToken("labels value", term.substr(eq + 1), true));
           labels[term.substr(0, eq)] = term.substr(eq + 1);
           pos = comma + 1;
         }
         c->labels = std::move(labels);
         return Status::Ok();
       }},
      {"poll_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("poll_interval", v, std::chrono::milliseconds(50), &c->poll_interval);
       }},
      {"heartbeat_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("heartbeat_interval", v, std::chrono::milliseconds(50), &c->heartbeat_interval);
       }},
      {"metrics_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("metrics_interval", v, std::chrono::milliseconds(100), &c->metrics_interval);
       }},
      {"log_level", [](const std::string& v, NodedConfig* c) { return SetLogLevel("log_level", v, &c->log_level); }},
      {"tls_ca_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->tls_ca_file); }},
      {"tls_cert_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->tls_cert_file); }},
      {"tls_key_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->tls_key_file); }},
      {"token_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->token_file); }},
      {"server_name", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->server_name); }},
      {"http_tls_cert_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->http_tls_cert_file); }},
      {"http_tls_key_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->http_tls_key_file); }},
      {"http_tls_client_ca_file",
       [](const std::string& v, NodedConfig* c) { return SetString(v, &c->http_tls_client_ca_file); }},
      {"http_tls_reload_interval",
       [](const std::string& v, NodedConfig* c) {
         return SetDuration("http_tls_reload_interval", v, std::chrono::seconds(1), &c->http_tls_reload_interval);
       }},
      {"http_token_file", [](const std::string& v, NodedConfig* c) { return SetString(v, &c->http_token_file); }},
      {"http_insecure",
       [](const std::string& v, NodedConfig* c) { return SetBool("http_insecure", v, &c->http_insecure); }},
  };
  return table;
}

bool KnownKey(const std::string& key) { return Setters().count(key) > 0; }

// The CLUSTERD_* variables of every client (common/grpc/credentials.h) for the
// keys the file and flags left empty, then the checks of
// ValidateClientSecurity, but naming config keys (and the variable a value
// came from) rather than clusterctl's flags.
Status ApplySecurity(GetEnvFn getenv, NodedConfig* c) {
  std::map<std::string, std::string> source;  // key -> "tls_ca_file (from CLUSTERD_CA)"
  auto env = [&](const char* var, const char* key, std::string* field) {
    source[key] = key;
    if (!field->empty()) return;
    if (const char* v = getenv(var); v != nullptr && *v != '\0') {
      *field = v;
      source[key] = std::string(key) + " (from " + var + ")";
    }
  };
  env("CLUSTERD_CA", "tls_ca_file", &c->tls_ca_file);
  env("CLUSTERD_CERT", "tls_cert_file", &c->tls_cert_file);
  env("CLUSTERD_KEY", "tls_key_file", &c->tls_key_file);
  env("CLUSTERD_SERVER_NAME", "server_name", &c->server_name);
  // The token and the token file are one setting: a configured token_file
  // wins over both variables.
  source["token"] = "CLUSTERD_TOKEN";
  if (c->token_file.empty()) {
    env("CLUSTERD_TOKEN_FILE", "token_file", &c->token_file);
    const char* t = getenv("CLUSTERD_TOKEN");
    if (t != nullptr && *t != '\0') {
      if (!c->token_file.empty()) return InvalidArgument("CLUSTERD_TOKEN and CLUSTERD_TOKEN_FILE: set one");
      c->token = t;
    }
  } else {
    source["token_file"] = "token_file";
  }

  const bool tls = !c->tls_ca_file.empty() || !c->tls_cert_file.empty() || !c->tls_key_file.empty();
  if (c->tls_cert_file.empty() != c->tls_key_file.empty()) {
    return InvalidArgument(c->tls_cert_file.empty() ? source["tls_key_file"] + ": needs tls_cert_file"
                                                    : source["tls_cert_file"] + ": needs tls_key_file");
  }
  if (!tls && (!c->token_file.empty() || !c->token.empty())) {
    return InvalidArgument((c->token.empty() ? source["token_file"] : source["token"]) +
                           ": a bearer token is only sent over TLS (set tls_ca_file)");
  }
  if (!tls && !c->server_name.empty()) return InvalidArgument(source["server_name"] + ": needs TLS (set tls_ca_file)");
  for (const auto& [key, path] : {std::pair<const char*, const std::string&>{"tls_ca_file", c->tls_ca_file},
                                  {"tls_cert_file", c->tls_cert_file},
                                  {"tls_key_file", c->tls_key_file},
                                  {"token_file", c->token_file}}) {
    if (path.empty()) continue;
    auto text = ReadFileToString(path);
    if (!text.ok()) return InvalidArgument(source[key] + ": cannot read " + path);
  }
  return Status::Ok();
}

// The HTTP port's settings go together: a key and its certificate, a client
// CA or a token only over TLS, and TLS or the insecure switch, not both.
Status CheckHttpSecurity(const NodedConfig& c) {
  if (c.http_tls_cert_file.empty() != c.http_tls_key_file.empty()) {
    return InvalidArgument(c.http_tls_cert_file.empty() ? "http_tls_key_file: needs http_tls_cert_file"
                                                        : "http_tls_cert_file: needs http_tls_key_file");
  }
  if (!c.http_tls()) {
    if (!c.http_tls_client_ca_file.empty()) {
      return InvalidArgument("http_tls_client_ca_file: client certificates need TLS (set http_tls_cert_file)");
    }
    if (!c.http_token_file.empty()) {
      return InvalidArgument("http_token_file: a bearer token is only accepted over TLS (set http_tls_cert_file)");
    }
  } else if (c.http_insecure) {
    return InvalidArgument("http_insecure: contradicts http_tls_cert_file (plaintext or TLS: choose one)");
  }
  for (const auto& [key, path] :
       {std::pair<const char*, const std::string&>{"http_tls_cert_file", c.http_tls_cert_file},
        {"http_tls_key_file", c.http_tls_key_file},
        {"http_tls_client_ca_file", c.http_tls_client_ca_file},
        {"http_token_file", c.http_token_file}}) {
    if (path.empty()) continue;
    auto text = ReadFileToString(path);
    if (!text.ok()) return InvalidArgument(std::string(key) + ": cannot read " + path);
  }
  return Status::Ok();
}

bool IsLoopbackListen(const std::string& listen) {
  const std::string host = listen.substr(0, listen.rfind(':'));
  return host == "localhost" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

const char* SystemGetenv(const char* name) { return std::getenv(name); }

}  // namespace

StatusOr<NodedConfig> ParseNodedConfig(const std::vector<std::string>& args, bool* help, GetEnvFn getenv) {
  if (getenv == nullptr) getenv = SystemGetenv;
  auto split =
      SplitFlags(args, KnownKey, [](const std::string& key) { return key == "probe" || key == "http_insecure"; });
  if (!split.ok()) return split.status();
  *help = split->help;
  NodedConfig cfg;
  if (split->help) return cfg;
  if (!split->config_path.empty()) {
    auto text = ReadFileToString(split->config_path);
    if (!text.ok()) return InvalidArgument("--config: " + text.status().message());
    CLUSTERD_RETURN_IF_ERROR(
        ApplyJsonObject(*text, "config file " + split->config_path, KnownKey,
                        [&](const std::string& k, const std::string& v) { return Setters().at(k)(v, &cfg); }));
  }
  for (const auto& [key, value] : split->flags) {
    Status st = Setters().at(key)(value, &cfg);
    if (!st.ok()) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      return InvalidArgument("--" + flag + ": " + st.message());
    }
  }
  if (cfg.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) return InvalidArgument("node_name: not set and no host name");
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node_name (from the host name)", host));
    cfg.node_name = host;
  }
  CLUSTERD_RETURN_IF_ERROR(ApplySecurity(getenv, &cfg));
  CLUSTERD_RETURN_IF_ERROR(CheckHttpSecurity(cfg));
  return cfg;
}

Status CheckHttpTransport(const NodedConfig& cfg) {
  if (cfg.http_tls() || cfg.http_insecure || IsLoopbackListen(cfg.http_listen)) return Status::Ok();
  return FailedPrecondition("http_listen " + cfg.http_listen +
                            ": plaintext HTTP on an address other than loopback needs http_insecure: true; "
                            "or serve HTTPS (http_tls_cert_file, http_tls_key_file)");
}

std::string NodedUsage() {
  return R"(usage: noded [--config FILE] [--flag value ...]

Flags (the JSON config file takes the same keys with '_'):
  --server ADDR             ClusterD gRPC address (default 127.0.0.1:8899)
  --node-name NAME          this node's name (default: the host name)
  --http-listen ADDR        HTTP /healthz /readyz /metrics (default 0.0.0.0:11255)
  --state-dir DIR           durable outbox and epoch (default /var/lib/noded)
  --accelerator KIND        ascend, nvml, npu-smi, sim or none (default none)
  --sim-devices N           simulated devices in sim mode (default 8)
  --dcmi-path FILE          libdcmi.so to try first (ascend)
  --nvml-path FILE          libnvidia-ml.so.1 to try first (nvml)
  --nvml-call-timeout DUR   an NVML call not back by then: NVML_UNRESPONSIVE (default 10s)
  --nvml-xid-hold DUR       an Xid stays an active fault this long after it was last seen
                            (default 10m)
  --npu-smi-command CMD     command printing npu-smi info (default "npu-smi info")
  --root DIR                where /proc and /sys are mounted (default /)
  --kmsg-path FILE          kernel log to follow (default /dev/kmsg; "" disables)
  --mounts-file FILE        mount table under root (default /proc/mounts, or
                            /proc/1/mounts when --root is not /: the host's table)
  --rules-file FILE         JSON rules merged over the defaults
  --validation-commands-file FILE
                            commands a validation runs per vendor and model (docs/validation.md)
  --evidence BOOL           collect incidents' evidence bundles when ClusterD asks (default true;
                            docs/domains.md)
  --evidence-commands-file FILE
                            vendor tools a bundle runs, each with a timeout and a size cap
  --evidence-max-bytes N    a bundle at most (default 524288)
  --ascend-path DIR         where Ascend's driver and CANN are installed, under root
                            (default /usr/local/Ascend)
  --expected-chips N        NPUs the node should have (default 0: the backend's count)
  --chain-interval DUR      software chain read for its NODE_CHAIN_* faults (default 30s;
                            0: only at start, for the inventory)
  --progress-dir DIR        job progress files written by training processes
                            (default /run/clusterd/progress; "" disables)
  --progress-interval DUR   how often they are read and sent (default 10s)
  --pod-resources-socket FILE  the kubelet's pod-resources socket, asked which devices each
                            pod holds (default /var/lib/kubelet/pod-resources/kubelet.sock;
                            "" disables)
  --pod-resources-interval DUR  how often it is asked (default 10s)
  --pod-resources-resources LIST  accelerator resources, comma-separated, '*' suffix a prefix
                            (default nvidia.com/gpu,nvidia.com/mig-*,huawei.com/Ascend910,
                            huawei.com/Ascend310P,huawei.com/Ascend310,huawei.com/npu)
  --labels k=v,k2=v2        labels reported with the node
  --probe                   print what the accelerator backend sees (devices, one health
                            reading, versions, node faults) as JSON and exit: 0 when it
                            could list the devices, 1 otherwise
  --poll-interval DUR       collection interval (default 1s)
  --heartbeat-interval DUR  heartbeat interval (default 2s)
  --metrics-interval DUR    metric snapshot interval (default 10s)
  --pingmesh BOOL           run ClusterD's probe plans (default true; docs/pingmesh.md)
  --probe-address ADDR      where peers probe this node: ip:port or :port (default
                            :<the HTTP port>; ClusterD takes the IP of the stream)
  --log-level LEVEL         trace, debug, info, warn, error, critical, off (default info)
Transport security of the stream to ClusterD (TLS when any of the three files is set;
each falls back to the environment variable named, which a flag or the file overrides):
  --tls-ca-file FILE        CA bundle of ClusterD's certificate (CLUSTERD_CA)
  --tls-cert-file FILE      client certificate for mutual TLS (CLUSTERD_CERT)
  --tls-key-file FILE       its private key (CLUSTERD_KEY)
  --token-file FILE         bearer token, re-read when it changes; TLS only
                            (CLUSTERD_TOKEN_FILE; or the token itself in CLUSTERD_TOKEN)
  --server-name NAME        name to verify ClusterD's certificate against (CLUSTERD_SERVER_NAME)
NodeD's HTTP port (plaintext on an address other than loopback only with --http-insecure):
  --http-tls-cert-file FILE HTTPS with this certificate (PEM, chain allowed), re-read when it changes
  --http-tls-key-file FILE  its private key
  --http-tls-client-ca-file FILE  CA bundle client certificates are verified against (when sent)
  --http-tls-reload-interval DUR  how often the three files are looked at again (default 10s)
  --http-token-file FILE    bearer token accepted on /metrics and /v1/sim/faults, re-read when it
                            changes. With it or a client CA, those paths need the token or a
                            verified client certificate; /healthz and /readyz stay open
  --http-insecure           allow plaintext HTTP on an address other than loopback
In sim mode, POST /v1/sim/faults {"device": 3, "code": "80E01801", "state": "raise"}
injects a fault ("clear" clears it; no "device" for a node-level fault).
)";
}

}  // namespace clusterd::noded
