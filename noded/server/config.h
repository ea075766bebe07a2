// NodeD configuration: defaults, a JSON file (--config) and flags; a flag
// overrides the file; every error names the key.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/config_table.h"
#include "common/status.h"

namespace clusterd::noded {

struct NodedConfig {
  std::string server = "127.0.0.1:8899";
  std::string node_name;  // default: the host name
  std::string http_listen = "0.0.0.0:11255";
  std::string state_dir = "/var/lib/noded";
  std::string accelerator = "none";  // ascend, nvml, npu-smi, sim, none
  uint32_t sim_devices = 8;
  std::string dcmi_path;  // tried before the driver's usual paths
  std::string npu_smi_command = "npu-smi info";
  // nvml: a libnvidia-ml.so.1 tried before the usual paths, the watchdog of
  // its calls, how long an Xid stays active.
  std::string nvml_path;
  std::chrono::nanoseconds nvml_call_timeout = std::chrono::seconds(10);
  std::chrono::nanoseconds nvml_xid_hold = std::chrono::minutes(10);
  std::string root = "/";               // where /proc and /sys are (a fixture tree in tests)
  std::string kmsg_path = "/dev/kmsg";  // "" disables the kernel-log collector
  std::string mounts_file;              // relative to root; "" picks (see AgentOptions)
  std::string rules_file;               // JSON rules merged over the defaults
  // The commands a validation runs per vendor and model (docs/validation.md);
  // "": only the built-in check.
  std::string validation_commands_file;
  // Evidence bundles of incidents (docs/domains.md): collected when ClusterD
  // asks (kernel log from kmsg_path, the accelerator readout, chain,
  // metrics, and the vendor tools of evidence_commands_file), at most
  // evidence_max_bytes a bundle.
  bool evidence = true;
  std::string evidence_commands_file;
  uint64_t evidence_max_bytes = uint64_t{512} << 10;
  // The accelerator software chain (docs/noded.md): where Ascend is
  // installed (under root), the chips expected (0: the backend's count), how
  // often it is read for its faults (0: only at start, no faults).
  std::string ascend_path = "/usr/local/Ascend";
  uint32_t expected_chips = 0;
  std::chrono::nanoseconds chain_interval = std::chrono::seconds(30);
  // Job progress files (docs/noded.md, "Job progress"): the directory the
  // training processes write into ("" disables), and how often it is read.
  std::string progress_dir = "/run/clusterd/progress";
  std::chrono::nanoseconds progress_interval = std::chrono::seconds(10);
  // The kubelet's pod-resources API (docs/noded.md, "Which devices a pod
  // holds"): its unix socket ("" disables), how often it is asked, and the
  // resources that are accelerators ('*' suffix: a prefix).
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  std::chrono::nanoseconds pod_resources_interval = std::chrono::seconds(10);
  std::vector<std::string> pod_resources_resources = {"nvidia.com/gpu",       "nvidia.com/mig-*",
                                                      "huawei.com/Ascend910", "huawei.com/Ascend310P",
                                                      "huawei.com/Ascend310", "huawei.com/npu"};
  // Print what the accelerator backend sees and exit (RunProbe).
  bool probe = false;
  // The pingmesh (docs/pingmesh.md): probe plans from ClusterD run, and the
  // address peers probe this node at: "ip:port", ":port" (ClusterD takes the
  // IP its stream comes from), or "" for ":<the HTTP port>".
  bool pingmesh = true;
  std::string probe_address;
  // The pingmesh's device plane: the NPU ports' addresses (address_<id>=
  // lines; "" or a missing file: not on the device plane), the tool that
  // pings from a port, and how long one run may take.
  std::string hccn_conf = "/etc/hccn.conf";
  std::string hccn_tool = "/usr/local/Ascend/driver/tools/hccn_tool";
  std::chrono::nanoseconds hccn_tool_timeout = std::chrono::seconds(5);
  std::map<std::string, std::string> labels;
  std::chrono::nanoseconds poll_interval = std::chrono::seconds(1);
  std::chrono::nanoseconds heartbeat_interval = std::chrono::seconds(2);
  std::chrono::nanoseconds metrics_interval = std::chrono::seconds(10);
  std::string log_level = "info";
  // Transport security of the stream to ClusterD (docs/security.md). TLS when
  // any of the three files is set; each falls back to its CLUSTERD_*
  // environment variable (CLUSTERD_CA, CLUSTERD_CERT, CLUSTERD_KEY,
  // CLUSTERD_TOKEN_FILE, CLUSTERD_SERVER_NAME).
  std::string tls_ca_file;
  std::string tls_cert_file;  // client certificate (mutual TLS), with tls_key_file
  std::string tls_key_file;
  std::string token_file;   // bearer token, re-read when it changes (a projected service-account token)
  std::string server_name;  // name to verify ClusterD's certificate against
  // Only from CLUSTERD_TOKEN (when no token file is configured): a secret has
  // no place in a config file or on a command line.
  std::string token;
  // NodeD's own HTTP port (docs/noded.md, "Securing the HTTP port"): HTTPS
  // with this certificate and key (re-read when they change, at most every
  // http_tls_reload_interval), client certificates verified against
  // http_tls_client_ca_file when a client sends one. With a client CA or a
  // token file, /metrics and /v1/sim/faults need a verified client
  // certificate or the token (401 otherwise); /healthz and /readyz stay open
  // for the kubelet. Plaintext on an address other than loopback only with
  // http_insecure.
  std::string http_tls_cert_file;
  std::string http_tls_key_file;
  std::string http_tls_client_ca_file;
  std::chrono::nanoseconds http_tls_reload_interval = std::chrono::seconds(10);
  std::string http_token_file;  // the bearer token accepted, re-read when it changes
  bool http_insecure = false;

  bool http_tls() const { return !http_tls_cert_file.empty(); }
  // Whether /metrics and /v1/sim/faults need a credential.
  bool http_auth() const { return !http_tls_client_ca_file.empty() || !http_token_file.empty(); }
};

// Plaintext HTTP on an address other than loopback without http_insecure:
// FAILED_PRECONDITION naming the keys (NodedServer::Start refuses to listen).
Status CheckHttpTransport(const NodedConfig& cfg);

// One row of NodeD's table of keys (config.cc; common/config_table.h): the
// parser, --help and docs/noded.md's reference come from the rows, the
// defaults from NodedConfig's initialisers.
using NodedConfigKey = ConfigKeyOf<NodedConfig>;

// The table, in --help's order.
const std::vector<NodedConfigKey>& NodedConfigKeys();

// The reference tables of docs/noded.md (markdown, one per section), from the
// table; a test keeps the document in step.
std::string NodedConfigReference();

using GetEnvFn = const char* (*)(const char*);

// `getenv` (default std::getenv) is where the CLUSTERD_* fallbacks are read;
// for tests.
StatusOr<NodedConfig> ParseNodedConfig(const std::vector<std::string>& args, bool* help, GetEnvFn getenv = nullptr);
std::string NodedUsage();

}  // namespace clusterd::noded
