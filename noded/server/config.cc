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

// ------------------------------------------------------------ the table ---
//
// Every key is one row (common/config_table.h): its name, type and bounds,
// --help's section and text, and the Helm value that sets it. The parser,
// --help and docs/noded.md's reference come from these rows; the defaults
// from NodedConfig's initialisers.

using config_table::Address;
using config_table::Bool;
using config_table::Dur;
using config_table::OneOf;
using config_table::Raw;
using config_table::U32;
using config_table::U64;

// NOLINTBEGIN(bugprone-macro-parentheses)
#define NODED_FIELD(member) config_table::FieldOf<NodedConfig>([](auto& c) -> auto& { return c.member; })
// NOLINTEND(bugprone-macro-parentheses)

NodedConfigKey Custom(std::string name, std::string value_name, std::string accepted,
                      std::function<Status(const std::string&, NodedConfig*)> set,
                      std::function<std::string(const NodedConfig&)> show) {
  return config_table::Custom<NodedConfig>(std::move(name), std::move(value_name), std::move(accepted), std::move(set),
                                           std::move(show));
}

// An absolute path; `empty_ok`: or "" (off).
template <typename Get>
NodedConfigKey AbsolutePath(const std::string& name, Get get, std::string value_name, bool empty_ok,
                            const std::string& what = "an absolute path") {
  return Custom(
      name, std::move(value_name), what + (empty_ok ? ", or \"\"" : ""),
      [name, get, empty_ok, what](const std::string& v, NodedConfig* c) {
        if (v.empty() ? !empty_ok : v[0] != '/') {
          return InvalidArgument(name + ": must be " + what + (empty_ok ? ", or empty" : ""));
        }
        get(*c) = v;
        return Status::Ok();
      },
      config_table::AsText(get));
}

// A file the daemon reads (checked at start, where it is read): any text,
// "" unset.
template <typename Get>
NodedConfigKey File(const std::string& name, Get get, std::string value_name = "FILE") {
  return Raw(name, get, std::move(value_name), "a path (\"\": unset)");
}

// Where the chart cannot set a key but through a flag in noded.extraArgs.
constexpr const char* kExtraArgs = "noded.extraArgs (as a flag)";

std::vector<NodedConfigKey> MakeTable() {
  config_table::TableBuilder<NodedConfig> t("noded.config.");
  t.Section("The agent");
  t.Add(Address("server", NODED_FIELD(server)), "ClusterD's gRPC address",
        "noded.server (empty: the chart's ClusterD Service)");
  t.Add(Custom(
            "node_name", "NAME", "a node name (like every node name ClusterD takes)",
            [](const std::string& v, NodedConfig* c) {
              CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node_name", v));
              c->node_name = v;
              return Status::Ok();
            },
            [](const NodedConfig& c) { return c.node_name; }),
        "this node's name (unset: the host name)", "the pod's node (--node-name=$(NODE_NAME))");
  t.Add(Address("http_listen", NODED_FIELD(http_listen)),
        "HTTP address: /healthz, /readyz, /metrics, and in sim mode /v1/sim/faults; plaintext only on loopback or "
        "with http_insecure",
        "noded.httpPort (on 0.0.0.0)");
  t.Add(Custom(
            "state_dir", "DIR", "a non-empty path",
            [](const std::string& v, NodedConfig* c) {
              if (v.empty()) return InvalidArgument("state_dir: must not be empty");
              c->state_dir = v;
              return Status::Ok();
            },
            [](const NodedConfig& c) { return c.state_dir; }),
        "the durable outbox and the agent epoch", "/var/lib/noded, on the host at noded.stateHostPath");
  t.Add(Custom(
            "labels", "k=v,k2=v2", "key=value terms, comma-separated",
            [](const std::string& v, NodedConfig* c) {
              std::map<std::string, std::string> labels;
              size_t pos = 0;
              while (pos < v.size()) {
                size_t comma = v.find(',', pos);
                if (comma == std::string::npos) comma = v.size();
                std::string term = v.substr(pos, comma - pos);
                auto eq = term.find('=');
                if (eq == std::string::npos || eq == 0) {
                  return InvalidArgument("labels: \"" + term + "\" is not key=value");
                }
                CLUSTERD_RETURN_IF_ERROR(ValidateToken("labels key", term.substr(0, eq)));
                CLUSTERD_RETURN_IF_ERROR(ValidateToken("labels value", term.substr(eq + 1), true));
                labels[term.substr(0, eq)] = term.substr(eq + 1);
                pos = comma + 1;
              }
              c->labels = std::move(labels);
              return Status::Ok();
            },
            [](const NodedConfig& c) {
              std::string out;
              for (const auto& [k, v] : c.labels) out += (out.empty() ? "" : ",") + k + "=" + v;
              return out;
            }),
        "labels reported with the node", "noded.labels");
  t.Add(Dur("poll_interval", NODED_FIELD(poll_interval), std::chrono::milliseconds(50)), "collection round");
  t.Add(Dur("heartbeat_interval", NODED_FIELD(heartbeat_interval), std::chrono::milliseconds(50)),
        "heartbeat interval to ClusterD (well under its node_grace)");
  t.Add(Dur("metrics_interval", NODED_FIELD(metrics_interval), std::chrono::milliseconds(100)),
        "metric snapshots (coalesced: only the latest is sent)");
  t.Add(Custom(
            "log_level", "LEVEL", "trace, debug, info, warn, error, critical or off",
            [](const std::string& v, NodedConfig* c) { return SetLogLevel("log_level", v, &c->log_level); },
            [](const NodedConfig& c) { return c.log_level; }),
        "level of every logger");
  t.Add(Bool("probe", NODED_FIELD(probe), "", "true or false; alone as a flag: true"),
        "print what the accelerator backend sees (devices with their kubelet ids, one health reading, the driver "
        "versions, node faults) as one JSON object and exit: 0 when the devices could be listed, 1 otherwise; no "
        "outbox, no stream",
        "none: a command (noded --probe), not the agent");

  t.Section("Accelerators");
  t.Add(OneOf("accelerator", NODED_FIELD(accelerator), {"ascend", "nvml", "npu-smi", "sim", "none"}, "KIND"),
        "the accelerator backend", "noded.accelerator");
  t.Add(U32("sim_devices", NODED_FIELD(sim_devices), 0, 1024), "simulated devices in sim mode",
        "noded.simDevices (accelerator sim)");
  t.Add(File("dcmi_path", NODED_FIELD(dcmi_path)), "libdcmi.so to try before the driver's usual paths (ascend)",
        "noded.ascend.dcmiPath");
  t.Add(Custom(
            "npu_smi_command", "CMD", "a non-empty command line",
            [](const std::string& v, NodedConfig* c) {
              if (v.empty()) return InvalidArgument("npu_smi_command: must not be empty");
              c->npu_smi_command = v;
              return Status::Ok();
            },
            [](const NodedConfig& c) { return c.npu_smi_command; }),
        "command printing npu-smi info (the npu-smi backend; run without a shell)", "noded.npuSmi.command");
  t.Add(File("nvml_path", NODED_FIELD(nvml_path)), "libnvidia-ml.so.1 to try before the usual paths (nvml)",
        "noded.nvidia.nvmlPath");
  t.Add(Dur("nvml_call_timeout", NODED_FIELD(nvml_call_timeout), std::chrono::milliseconds(100)),
        "an NVML call not back by then makes the GPUs unreadable and raises NVML_UNRESPONSIVE", kExtraArgs);
  t.Add(Dur("nvml_xid_hold", NODED_FIELD(nvml_xid_hold), std::chrono::seconds(1)),
        "an Xid stays an active fault this long after it was last seen", kExtraArgs);

  t.Section("What it reads on the node");
  t.Add(AbsolutePath("root", NODED_FIELD(root), "DIR", false),
        "where the host's /proc, /sys and /etc are (/host in a container)",
        "/host, the host's noded.hostRootPath mounted read-only");
  t.Add(File("kmsg_path", NODED_FIELD(kmsg_path)), "kernel log to follow (\"\": off)",
        "noded.kmsg.enabled (/dev/kmsg, or \"\")");
  t.Add(AbsolutePath("mounts_file", NODED_FIELD(mounts_file), "FILE", true, "an absolute path (under root)"),
        "mount table under root (\"\": /proc/mounts when root is /, else /proc/1/mounts, the host's table)",
        kExtraArgs);
  t.Add(File("rules_file", NODED_FIELD(rules_file)), "JSON rules merged over the default rules",
        "noded.rules (written to rules.json)");
  t.Add(AbsolutePath("ascend_path", NODED_FIELD(ascend_path), "DIR", false, "an absolute path (under root)"),
        "where the Ascend driver and CANN are installed, under root (the software chain)", kExtraArgs);
  t.Add(U32("expected_chips", NODED_FIELD(expected_chips), 0, 1024),
        "NPUs the node should have (0: as many as the accelerator backend sees)", kExtraArgs);
  t.Add(Custom(
            "chain_interval", "DUR", "0, or at least 1s",
            [](const std::string& v, NodedConfig* c) {
              if (v == "0" || v == "0s") {
                c->chain_interval = std::chrono::nanoseconds(0);
                return Status::Ok();
              }
              return SetDuration("chain_interval", v, std::chrono::seconds(1), &c->chain_interval);
            },
            [](const NodedConfig& c) { return config_table::ShowDuration(c.chain_interval); }),
        "how often the software chain is read for its NODE_CHAIN_* faults (0: only at start, for the inventory, and "
        "no faults)",
        kExtraArgs);
  t.Add(AbsolutePath("progress_dir", NODED_FIELD(progress_dir), "DIR", true),
        "job progress files written by training processes (\"\": off)",
        "noded.progress.enabled (/run/clusterd/progress, or \"\")");
  t.Add(Dur("progress_interval", NODED_FIELD(progress_interval), std::chrono::seconds(1)),
        "how often the progress files are read and the changed ones sent", kExtraArgs);
  t.Add(AbsolutePath("pod_resources_socket", NODED_FIELD(pod_resources_socket), "FILE", true),
        "the kubelet's pod-resources socket, asked which devices each pod holds (\"\": off)",
        "noded.podResources.enabled, with a privileged NodeD (its socket, or \"\")");
  t.Add(Dur("pod_resources_interval", NODED_FIELD(pod_resources_interval), std::chrono::seconds(1)),
        "how often the kubelet is asked", kExtraArgs);
  t.Add(Custom(
            "pod_resources_resources", "LIST", "resource names, comma-separated, at least one",
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
            },
            [](const NodedConfig& c) { return JoinCommaList(c.pod_resources_resources); }),
        "the resources that are accelerators (a '*' suffix is a prefix)", kExtraArgs);

  t.Section("Validation, evidence and the pingmesh");
  t.Add(File("validation_commands_file", NODED_FIELD(validation_commands_file)),
        "the commands a validation runs before devices return to service, per vendor and model (docs/validation.md; "
        "\"\": only the built-in check)",
        kExtraArgs);
  t.Add(Bool("evidence", NODED_FIELD(evidence)),
        "collect an incident's evidence bundle when ClusterD asks (docs/domains.md): the kernel log, the "
        "accelerator readout, the chain, the metrics, the vendor tools",
        kExtraArgs);
  t.Add(File("evidence_commands_file", NODED_FIELD(evidence_commands_file)),
        "the vendor tools a bundle runs, each with a timeout and a size cap", kExtraArgs);
  t.Add(U64("evidence_max_bytes", NODED_FIELD(evidence_max_bytes), 1024, uint64_t{3} << 20),
        "a bundle at most (ClusterD's request may ask for less)", kExtraArgs);
  t.Add(Bool("pingmesh", NODED_FIELD(pingmesh)),
        "run ClusterD's probe plans: TCP connects to the planned peers' probe ports, results on the stream "
        "(docs/pingmesh.md)",
        kExtraArgs);
  t.Add(Custom(
            "probe_address", "ADDR", "ip:port (an IPv4 or [IPv6] literal), :port, or \"\"",
            [](const std::string& v, NodedConfig* c) {
              if (!v.empty() && !IsProbeAddressText(v)) {
                return InvalidArgument("probe_address: must be ip:port (an IPv4 or [IPv6] literal) or :port, not \"" +
                                       v + "\"");
              }
              c->probe_address = v;
              return Status::Ok();
            },
            [](const NodedConfig& c) { return c.probe_address; }),
        "where peers probe this node: ip:port, or :port (ClusterD takes the IP of the stream; \"\": :<the HTTP "
        "port>)",
        kExtraArgs);
  t.Add(AbsolutePath("hccn_conf", NODED_FIELD(hccn_conf), "FILE", true),
        "the NPU ports' addresses (address_<id>= lines) for the pingmesh's device plane (\"\" or a missing file: "
        "not on the device plane)",
        "noded.ascend.hccnConf (\"\": the chart leaves the device plane off)");
  t.Add(AbsolutePath("hccn_tool", NODED_FIELD(hccn_tool), "FILE", false),
        "the tool that pings from an NPU port (absent: the device plane is reported not probed)", kExtraArgs);
  t.Add(Dur("hccn_tool_timeout", NODED_FIELD(hccn_tool_timeout), std::chrono::milliseconds(100),
            std::chrono::seconds(60)),
        "one run of that tool at most (a run past it counts every packet lost)", kExtraArgs);

  t.Section("Transport security of the stream to ClusterD (docs/security.md)");
  t.Add(File("tls_ca_file", NODED_FIELD(tls_ca_file)),
        "CA bundle of ClusterD's certificate; TLS when any of the three files is set, plaintext otherwise (unset: "
        "$CLUSTERD_CA)",
        "tls.enabled");
  t.Add(File("tls_cert_file", NODED_FIELD(tls_cert_file)),
        "client certificate for mutual TLS: CN=system:node:<node_name> makes it this node's agent (unset: "
        "$CLUSTERD_CERT)",
        "tls.enabled");
  t.Add(File("tls_key_file", NODED_FIELD(tls_key_file)), "its private key (unset: $CLUSTERD_KEY)", "tls.enabled");
  t.Add(File("token_file", NODED_FIELD(token_file)),
        "bearer token (a projected, pod-bound service-account token), read again when it changes; TLS only (unset: "
        "$CLUSTERD_TOKEN_FILE, or the token itself in $CLUSTERD_TOKEN)",
        "auth.tokenReview (the pod's projected token)");
  t.Add(File("server_name", NODED_FIELD(server_name), "NAME"),
        "name to check ClusterD's certificate against, when it is not the host of server (unset: "
        "$CLUSTERD_SERVER_NAME)");

  t.Section("NodeD's HTTP port (docs/noded.md, \"Securing the HTTP port\")");
  t.Add(File("http_tls_cert_file", NODED_FIELD(http_tls_cert_file)),
        "HTTPS on http_listen with this certificate (PEM, chain allowed), re-read when it changes",
        "noded.http.tls (with tls.enabled)");
  t.Add(File("http_tls_key_file", NODED_FIELD(http_tls_key_file)), "its private key",
        "noded.http.tls (with tls.enabled)");
  t.Add(File("http_tls_client_ca_file", NODED_FIELD(http_tls_client_ca_file)),
        "CA bundle client certificates are verified against (when a client sends one); with it /metrics and the sim "
        "injection need a credential",
        "noded.http.auth");
  t.Add(Dur("http_tls_reload_interval", NODED_FIELD(http_tls_reload_interval), std::chrono::seconds(1)),
        "how often the certificate, key and client CA are looked at again (at most; when a connection comes)",
        kExtraArgs);
  t.Add(File("http_token_file", NODED_FIELD(http_token_file)),
        "the bearer token accepted on /metrics and the sim injection, re-read when it changes; with it those paths "
        "need a credential; TLS only",
        "noded.http.tokenSecret");
  t.Add(Bool("http_insecure", NODED_FIELD(http_insecure), "", "true or false; alone as a flag: true"),
        "allow plaintext HTTP on an address other than loopback (no TLS, no authentication)",
        "noded.http.tls: false, or tls.enabled: false");
  return t.Take();
}

#undef NODED_FIELD

const NodedConfigKey* FindKey(const std::string& name) {
  static const std::map<std::string, const NodedConfigKey*> index = config_table::IndexKeys(NodedConfigKeys());
  auto it = index.find(name);
  return it == index.end() ? nullptr : it->second;
}

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
  auto parsed = config_table::ParseArgs<NodedConfig>(
      args, FindKey, {}, [](const std::string& key) { return key == "probe" || key == "http_insecure"; }, help);
  if (!parsed.ok() || *help) return parsed;
  NodedConfig& cfg = *parsed;
  if (cfg.node_name.empty()) {
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) != 0) return InvalidArgument("node_name: not set and no host name");
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node_name (from the host name)", host));
    cfg.node_name = host;
  }
  CLUSTERD_RETURN_IF_ERROR(ApplySecurity(getenv, &cfg));
  CLUSTERD_RETURN_IF_ERROR(CheckHttpSecurity(cfg));
  return parsed;
}

Status CheckHttpTransport(const NodedConfig& cfg) {
  if (cfg.http_tls() || cfg.http_insecure || IsLoopbackListen(cfg.http_listen)) return Status::Ok();
  return FailedPrecondition("http_listen " + cfg.http_listen +
                            ": plaintext HTTP on an address other than loopback needs http_insecure: true; "
                            "or serve HTTPS (http_tls_cert_file, http_tls_key_file)");
}

const std::vector<NodedConfigKey>& NodedConfigKeys() {
  static const std::vector<NodedConfigKey> keys = MakeTable();
  return keys;
}

std::string NodedUsage() {
  return config_table::Usage(
      config_table::KeyDocs(NodedConfigKeys()),
      "usage: noded [--config FILE] [--flag value ...]\n\n"
      "Flags (the JSON config file takes the same keys with '_'; a flag overrides the file):\n",
      "Durations take a unit: 500ms, 10s, 2m, 1h. Every key: docs/noded.md.\n"
      "In sim mode, POST /v1/sim/faults {\"device\": 3, \"code\": \"80E01801\", \"state\": \"raise\"}\n"
      "injects a fault (\"clear\" clears it; no \"device\" for a node-level fault).\n");
}

std::string NodedConfigReference() { return config_table::Reference(config_table::KeyDocs(NodedConfigKeys())); }

}  // namespace clusterd::noded
