#include "noded/server/noded_server.h"

#include <atomic>
#include <map>
#include <set>
#include <limits>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/tls_context.h"
#include "common/token_file.h"
#include "common/config_util.h"
#include "noded/agent.h"
#include "noded/outbox.h"
#include "noded/server/pod_resources.h"
#include "noded/server/stream_client.h"
#include "noded/evidence.h"
#include "noded/validator.h"

namespace clusterd::noded {

struct NodedServer::Impl {
  NodedConfig config;
  MetricsRegistry metrics;
  std::unique_ptr<Outbox> outbox;
  std::unique_ptr<AcceleratorBackend> backend;
  FaultInjector* injector = nullptr;  // the backend's, when it takes injected faults
  std::unique_ptr<Agent> agent;
  std::unique_ptr<ProgressFiles> progress;  // job progress files, read by the stream
  // Runs ClusterD's validation requests; outlives the stream that feeds it.
  std::unique_ptr<Validator> validator;
  // Collects incidents' evidence bundles; null when off.
  std::unique_ptr<EvidenceCollector> evidence;
  std::unique_ptr<StreamClient> stream;
  std::unique_ptr<PodResourcesWatcher> pod_resources;  // null when disabled
  std::unique_ptr<WatchedTokenFile> http_token;        // http_token_file; null without it
  Counter* http_refused = nullptr;
  std::unique_ptr<HttpServer> http;          // made in Start (its TLS comes from the config)
  std::unique_ptr<PingmeshWorker> pingmesh;  // null when disabled

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool wake = false;
  std::atomic<bool> polled_once{false};
  std::thread poller;
  bool shut_down = false;

  Counter* polls = nullptr;
  Counter* recorded = nullptr;
  Histogram* poll_seconds = nullptr;

  // The validation of devices before they return to service
  // (docs/validation.md): the built-in check asks what NodeD already
  // watches (active faults, readings, the chain); the commands come from
  // validation_commands_file.
  Status MakeValidator() {
    ValidatorOptions vo;
    if (!config.validation_commands_file.empty()) {
      auto text = ReadFileToString(config.validation_commands_file);
      if (!text.ok()) return InvalidArgument("validation_commands_file: " + text.status().message());
      auto commands = ParseValidationCommands(*text);
      if (!commands.ok()) return InvalidArgument("validation_commands_file: " + commands.status().message());
      vo.commands = std::move(*commands);
    }
    std::map<uint32_t, std::pair<std::string, std::string>> models;
    if (auto devices = backend->Devices(); devices.ok()) {
      for (const DeviceInfo& d : *devices) models[static_cast<uint32_t>(d.id)] = {d.vendor, d.model};
    }
    auto probe = [this](const std::vector<uint32_t>& devices, bool whole_node) {
      ValidationSample sample;
      const std::set<uint32_t> wanted(devices.begin(), devices.end());
      for (const auto& f : outbox->Take().active) {
        const bool hits = f.has_device_id() ? wanted.count(f.device_id()) > 0 : whole_node;
        if (!hits) continue;
        sample.problems.push_back("fault " + f.code() + " active" +
                                  (f.has_device_id() ? " on device " + std::to_string(f.device_id()) : " on the node"));
      }
      // The backend's latest readings (the agent's poll): health, ECC and
      // Xid counters, error codes.
      AddReadings(
          devices, [this](int32_t id) { return agent->DeviceReading(id); }, &sample);
      uint64_t version = 0;
      const v1::ChainUpdate chain = agent->Chain(&version);
      for (const auto& link : chain.links()) {
        if (link.state() == v1::CHAIN_LINK_STATE_BROKEN) {
          sample.problems.push_back("chain link " + link.name() + " BROKEN");
        }
      }
      return sample;
    };
    auto model = [models](uint32_t id) {
      auto it = models.find(id);
      return it == models.end() ? std::pair<std::string, std::string>{} : it->second;
    };
    auto node_devices = [models] {
      std::vector<uint32_t> out;
      out.reserve(models.size());
      for (const auto& [id, m] : models) out.push_back(id);
      return out;
    };
    validator = std::make_unique<Validator>(std::move(vo), probe, model, node_devices, [this] {
      if (stream) stream->Notify();
    });
    metrics.AddCallbackGauge("noded_validations_running", "Validations running on this node.",
                             [this] { return static_cast<double>(validator->running()); });
    metrics.AddCallbackGauge("noded_validation_duplicates", "Validation requests asked again (answered, not rerun).",
                             [this] { return static_cast<double>(validator->duplicates()); });
    return Status::Ok();
  }

  // Incidents' evidence bundles (docs/domains.md): the kernel log from
  // kmsg_path, the agent's readout, the vendor tools of
  // evidence_commands_file.
  Status MakeEvidence() {
    if (!config.evidence) return Status::Ok();
    EvidenceCollectorOptions eo;
    eo.kmsg_path = config.kmsg_path;
    eo.max_bytes = config.evidence_max_bytes;
    if (!config.evidence_commands_file.empty()) {
      auto text = ReadFileToString(config.evidence_commands_file);
      if (!text.ok()) return InvalidArgument("evidence_commands_file: " + text.status().message());
      auto commands = ParseEvidenceCommands(*text);
      if (!commands.ok()) return InvalidArgument("evidence_commands_file: " + commands.status().message());
      eo.commands = std::move(*commands);
    }
    const Agent* a = agent.get();
    evidence = std::make_unique<EvidenceCollector>(
        std::move(eo), [a] { return a->EvidenceReadout(); },
        [this] {
          if (stream) stream->Notify();
        });
    metrics.AddCallbackGauge("noded_evidence_bundles_collected", "Incident evidence bundles collected.",
                             [this] { return static_cast<double>(evidence->collected()); });
    metrics.AddCallbackGauge("noded_evidence_requests_dropped", "Incident evidence requests dropped: too many waiting.",
                             [this] { return static_cast<double>(evidence->dropped()); });
    return Status::Ok();
  }

  void PollLoop() {
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      const int n = agent->PollOnce();
      poll_seconds->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      polls->Inc();
      polled_once = true;
      if (n > 0) {
        recorded->Inc(n);
        stream->Notify();
      }
      std::unique_lock lock(mu);
      cv.wait_for(lock, config.poll_interval, [&] { return stop || wake; });
      if (stop) return;
      wake = false;
    }
  }

  void Wake() {
    {
      std::lock_guard lock(mu);
      wake = true;
    }
    cv.notify_all();
  }

  // Empty when `req` may have `what` ("GET /metrics"): no credential is
  // configured, or it carries the token of http_token_file, or (without an
  // Authorization header) a client certificate the handshake verified
  // against http_tls_client_ca_file. Otherwise the 401, counted and audited
  // (the "audit" logger, as ClusterD's refusals).
  std::optional<HttpResponse> Refuse(const HttpRequest& req, std::string_view what) {
    if (!config.http_auth()) return std::nullopt;
    std::string why;
    // The audit names the client certificate's CN when one came with a refused token.
    std::string who = req.client_certificate_pem.empty() ? "" : CertificateCommonName(req.client_certificate_pem);
    if (who.empty()) who = "-";
    if (!req.authorization.empty()) {
      const std::string_view presented = BearerToken(req.authorization);
      const std::string expected = http_token ? http_token->Current() : std::string();
      if (presented.empty()) {
        why = "Authorization is not \"Bearer <token>\"";
      } else if (expected.empty()) {
        why = "no bearer token is accepted here (http_token_file is not set or empty)";
      } else if (!ConstantTimeEquals(presented, expected)) {
        why = "the bearer token is not the one of http_token_file";
      } else {
        return std::nullopt;
      }
    } else if (!req.client_certificate_pem.empty()) {
      return std::nullopt;
    } else {
      why = "no client certificate or bearer token";
    }
    http_refused->Inc();
    GetLogger("audit")->warn("deny principal={} method=\"{}\" peer={} reason=\"{}\"", who, what, req.peer, why);
    return HttpResponse{401, "text/plain; charset=utf-8",
                        std::string(what) + " needs a bearer token or a client certificate: " + why + "\n"};
  }

  HttpResponse InjectSimFault(const HttpRequest& req) {
    auto bad = [](const std::string& why) {
      return HttpResponse{400, "application/json", nlohmann::json{{"error", why}}.dump() + "\n"};
    };
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) return bad("body must be a JSON object");
    for (auto it = body.begin(); it != body.end(); ++it) {
      if (it.key() != "device" && it.key() != "code" && it.key() != "state")
        return bad("unknown field \"" + it.key() + "\"");
    }
    if (!body.contains("code") || !body["code"].is_string()) return bad("code: required string");
    if (!body.contains("state") || !body["state"].is_string()) return bad("state: required, \"raise\" or \"clear\"");
    const std::string state = body["state"].get<std::string>();
    if (state != "raise" && state != "clear") return bad("state: must be \"raise\" or \"clear\"");
    std::optional<uint32_t> device;
    if (body.contains("device") && !body["device"].is_null()) {
      if (!body["device"].is_number_unsigned()) return bad("device: must be a non-negative integer");
      // Read it whole: get<uint32_t>() would wrap 4294967299 to device 3.
      const uint64_t id = body["device"].get<uint64_t>();
      if (id > UINT32_MAX) return bad("device: " + std::to_string(id) + " is not a device id");
      device = static_cast<uint32_t>(id);
    }
    Status st = injector->Inject(device, body["code"].get<std::string>(),
                                 state == "raise" ? InjectAction::kRaise : InjectAction::kClear);
    if (!st.ok()) return bad(st.message());
    Wake();  // report it now, not at the next tick
    return HttpResponse{200, "application/json", "{\"ok\": true}\n"};
  }
};

namespace {

BackendOptions BackendOptionsOf(const NodedConfig& cfg) {
  BackendOptions bo;
  bo.kind = cfg.accelerator;
  if (!cfg.dcmi_path.empty()) bo.dcmi_paths.push_back(cfg.dcmi_path);
  bo.npu_smi_command = cfg.npu_smi_command;
  if (!cfg.nvml_path.empty()) bo.nvml_paths.push_back(cfg.nvml_path);
  bo.nvml_call_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.nvml_call_timeout);
  bo.nvml_xid_hold = std::chrono::duration_cast<std::chrono::seconds>(cfg.nvml_xid_hold);
  bo.sim_devices = static_cast<int>(cfg.sim_devices);
  return bo;
}

}  // namespace

int RunProbe(const NodedConfig& cfg, std::ostream& out) {
  nlohmann::json j;
  j["accelerator"] = cfg.accelerator;
  auto print = [&](int rc) {
    out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return rc;
  };
  auto backend = MakeBackend(BackendOptionsOf(cfg));
  if (!backend.ok()) {
    j["error"] = backend.status().ToString();
    return print(1);
  }
  AcceleratorBackend& b = **backend;
  j["backend"] = b.name();
  if (Status st = b.Init(); !st.ok()) {
    j["error"] = st.ToString();
    return print(1);
  }
  auto devices = b.Devices();
  if (!devices.ok()) {
    j["error"] = devices.status().ToString();
    return print(1);
  }
  j["devices"] = nlohmann::json::array();
  for (const auto& d : *devices) {
    j["devices"].push_back({{"id", d.id},
                            {"vendor", d.vendor},
                            {"model", d.model},
                            {"serial", d.serial},
                            {"location", d.location},
                            {"kubelet_ids", d.kubelet_ids}});
  }
  auto health = b.Poll();
  if (health.ok()) {
    j["health"] = nlohmann::json::array();
    for (const auto& h : *health) {
      nlohmann::json e = {{"id", h.id}, {"healthy", h.healthy}, {"codes", h.error_codes}};
      if (h.temperature_c) e["temperature_celsius"] = *h.temperature_c;
      if (h.power_w) e["power_watts"] = *h.power_w;
      if (!h.read_error.empty()) e["read_error"] = h.read_error;
      j["health"].push_back(std::move(e));
    }
  } else {
    j["health_error"] = health.status().ToString();
  }
  j["versions"] = nlohmann::json::object();
  for (const auto& [link, version] : b.ChainVersions()) j["versions"][link] = version;
  j["node_faults"] = b.reports_node_faults() ? b.NodeFaults() : std::vector<std::string>{};
  return print(0);
}

NodedServer::NodedServer(NodedConfig config) : impl_(std::make_unique<Impl>()) { impl_->config = std::move(config); }

NodedServer::~NodedServer() { Shutdown(); }

Status NodedServer::Start() {
  Impl& s = *impl_;
  const NodedConfig& cfg = s.config;
  auto log = GetLogger("noded");

  // The HTTP port first (nothing is opened when its settings do not hold):
  // HTTPS when a certificate is configured (re-read when it changes, as
  // ClusterD's), plaintext on loopback or with http_insecure.
  CLUSTERD_RETURN_IF_ERROR(CheckHttpTransport(cfg));
  HttpServer::Options ho;
  ho.metrics = &s.metrics;
  ho.metrics_prefix = "noded";
  if (cfg.http_tls()) {
    TlsServerFiles files;
    files.cert_file = cfg.http_tls_cert_file;
    files.key_file = cfg.http_tls_key_file;
    files.client_ca_file = cfg.http_tls_client_ca_file;
    // Verified when sent, never required: the kubelet's probes send none.
    files.client_auth = cfg.http_tls_client_ca_file.empty() ? "none" : "request";
    files.reload_interval = cfg.http_tls_reload_interval;
    auto tls = ReloadingTlsContext::Create(std::move(files));
    if (!tls.ok()) return InvalidArgument("HTTP port: " + tls.status().message());
    ho.tls = [tls = std::move(*tls)] { return tls->Current(); };
  }
  auto outbox = Outbox::Open(cfg.state_dir);
  if (!outbox.ok()) return outbox.status();
  s.outbox = std::move(*outbox);

  auto backend = MakeBackend(BackendOptionsOf(cfg));
  if (!backend.ok()) return backend.status();
  s.backend = std::move(*backend);
  CLUSTERD_RETURN_IF_ERROR(s.backend->Init());
  s.injector = s.backend->injector();

  AgentOptions ao;
  ao.node_name = cfg.node_name;
  ao.labels = cfg.labels;
  ao.root = cfg.root;
  ao.kmsg_path = cfg.kmsg_path;
  ao.mounts_file = cfg.mounts_file;
  ao.chain.ascend_path = cfg.ascend_path;
  ao.chain.expected_chips = cfg.expected_chips;
  ao.chain_interval = cfg.chain_interval;
  if (!cfg.rules_file.empty()) {
    auto rules = LoadRulesFile(cfg.rules_file);
    if (!rules.ok()) return rules.status();
    ao.rules = std::move(*rules);
  }
  s.agent = std::make_unique<Agent>(ao, s.outbox.get(), s.backend.get(), &SystemClock::Instance());
  CLUSTERD_RETURN_IF_ERROR(s.agent->Init());

  s.polls = &s.metrics.AddCounter("noded_polls_total", "Collection rounds.");
  s.recorded = &s.metrics.AddCounter("noded_transitions_recorded_total", "Fault transitions recorded in the outbox.");
  s.poll_seconds = &s.metrics.AddHistogram("noded_poll_duration_seconds", "Duration of one collection round.",
                                           ExponentialBuckets(0.0005, 2, 14));
  s.metrics.AddCallbackGauge("noded_outbox_pending", "Fault transitions not yet acknowledged by ClusterD.",
                             [&s] { return static_cast<double>(s.outbox->pending_count()); });
  s.metrics.AddCallbackGauge("noded_agent_epoch", "This agent run's epoch.",
                             [&s] { return static_cast<double>(s.outbox->epoch()); });
  // Each accelerator device as the backend reads it, NPUs and GPUs alike
  // (labels device, vendor, model; NaN until read or when the source has no
  // such sensor).
  if (auto devices = s.backend->Devices(); devices.ok()) {
    const Agent* agent = s.agent.get();
    for (const DeviceInfo& d : *devices) {
      const MetricLabels labels = {{"device", std::to_string(d.id)}, {"vendor", d.vendor}, {"model", d.model}};
      const int32_t id = d.id;
      auto reading = [agent, id](auto value) {
        return [agent, id, value] {
          auto r = agent->DeviceReading(id);
          return r ? value(*r) : std::numeric_limits<double>::quiet_NaN();
        };
      };
      s.metrics.AddCallbackGauge("noded_accelerator_temperature_celsius", "Device temperature.",
                                 reading([](const DeviceStatus& r) {
                                   return r.temperature_c.value_or(std::numeric_limits<double>::quiet_NaN());
                                 }),
                                 labels);
      s.metrics.AddCallbackGauge(
          "noded_accelerator_power_watts", "Device power draw.",
          reading([](const DeviceStatus& r) { return r.power_w.value_or(std::numeric_limits<double>::quiet_NaN()); }),
          labels);
      s.metrics.AddCallbackGauge("noded_accelerator_healthy",
                                 "1 when the device was read completely with no active code, else 0.",
                                 reading([](const DeviceStatus& r) { return r.healthy ? 1.0 : 0.0; }), labels);
      s.metrics.AddCallbackGauge(
          "noded_accelerator_active_codes", "Fault codes the device reports now (Ascend codes, XID_<n>, GPU_*).",
          reading([](const DeviceStatus& r) { return static_cast<double>(r.error_codes.size()); }), labels);
    }
  }

  CLUSTERD_RETURN_IF_ERROR(s.MakeValidator());
  StreamOptions so;
  CLUSTERD_RETURN_IF_ERROR(s.MakeEvidence());
  so.evidence = s.evidence.get();
  so.validator = s.validator.get();
  so.node_name = cfg.node_name;
  so.server = cfg.server;
  so.heartbeat_interval = cfg.heartbeat_interval;
  so.metrics_interval = cfg.metrics_interval;
  if (!cfg.progress_dir.empty()) {
    ProgressFileOptions po;
    po.dir = cfg.progress_dir;
    s.progress = std::make_unique<ProgressFiles>(po);
    so.progress = s.progress.get();
    so.progress_interval = cfg.progress_interval;
  }
  so.security.ca_file = cfg.tls_ca_file;
  so.security.cert_file = cfg.tls_cert_file;
  so.security.key_file = cfg.tls_key_file;
  so.security.token = cfg.token;
  so.security.token_file = cfg.token_file;
  so.security.server_name = cfg.server_name;
  if (cfg.pingmesh) {
    // The device plane: this node's NPU ports, if it has any (a missing file
    // is a node without them; one that does not parse is logged and left out).
    DevicePlaneOptions device;
    device.tool = cfg.hccn_tool;
    device.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(cfg.hccn_tool_timeout);
    if (!cfg.hccn_conf.empty()) {
      if (auto ports = ReadHccnConf(cfg.hccn_conf); ports.ok()) {
        device.ports = std::move(*ports);
        GetLogger("pingmesh")->info("device plane: {} NPU ports from {}", device.ports.size(), cfg.hccn_conf);
      } else if (ports.status().code() != StatusCode::kNotFound) {
        GetLogger("pingmesh")->warn("device plane off: {}", ports.status().ToString());
      }
    }
    // Its reports wake the stream's sender (set below, before either starts).
    s.pingmesh = std::make_unique<PingmeshWorker>(
        [&s] {
          if (s.stream) s.stream->Notify();
        },
        &s.metrics, std::move(device));
    so.pingmesh = s.pingmesh.get();
  }
  // ParseNodedConfig checked these under their key names; this fails only if
  // a file went away since.
  auto stream = StreamClient::Create(so, s.agent.get(), s.outbox.get(), &s.metrics);
  if (!stream.ok()) return InvalidArgument("connection to ClusterD: " + stream.status().message());
  s.stream = std::move(*stream);

  if (!cfg.http_token_file.empty()) s.http_token = std::make_unique<WatchedTokenFile>(cfg.http_token_file);
  s.http_refused = &s.metrics.AddCounter("noded_http_requests_refused_total",
                                         "HTTP requests refused for want of an accepted token or client certificate.");
  s.http = std::make_unique<HttpServer>(ho);
  HttpServer& http = *s.http;
  http.Handle("GET", "/healthz", [](const HttpRequest&) { return HttpResponse{200, "text/plain", "ok\n"}; });
  http.Handle("GET", "/readyz", [&s](const HttpRequest&) {
    if (!s.polled_once.load()) return HttpResponse{503, "text/plain", "first collection pending\n"};
    return HttpResponse{200, "text/plain", s.stream->connected() ? "ready\n" : "ready (clusterd not connected)\n"};
  });
  http.Handle("GET", "/metrics", [&s](const HttpRequest& req) {
    if (auto refused = s.Refuse(req, "GET /metrics")) return *refused;
    return HttpResponse{200, MetricsRegistry::kContentType, s.metrics.Render()};
  });
  if (s.injector) {
    http.Handle("POST", "/v1/sim/faults", [&s](const HttpRequest& req) {
      if (auto refused = s.Refuse(req, "POST /v1/sim/faults")) return *refused;
      return s.InjectSimFault(req);
    });
  }
  CLUSTERD_RETURN_IF_ERROR(http.Start(cfg.http_listen));
  // Peers probe the HTTP port unless the operator named another address.
  if (s.pingmesh) {
    s.stream->set_probe_address(cfg.probe_address.empty() ? ":" + std::to_string(http.port()) : cfg.probe_address);
  }

  if (!cfg.pod_resources_socket.empty()) {
    PodResourcesOptions po;
    po.socket = cfg.pod_resources_socket;
    po.interval = cfg.pod_resources_interval;
    po.mapping.resources = cfg.pod_resources_resources;
    StreamClient* stream_client = s.stream.get();
    s.pod_resources = std::make_unique<PodResourcesWatcher>(
        po, s.agent.get(), [stream_client] { stream_client->Notify(); }, &s.metrics);
  }

  s.poller = std::thread([&s] { s.PollLoop(); });
  if (s.pingmesh) s.pingmesh->Start();
  s.stream->Start();
  if (s.pod_resources) s.pod_resources->Start();
  const char* transport = !so.security.tls()               ? "plaintext"
                          : so.security.has_token()        ? "TLS, bearer token"
                          : !so.security.cert_file.empty() ? "mutual TLS"
                                                           : "TLS";
  log->info("noded {} (epoch {}, accelerator {}) reporting to {} ({}); {} on port {}{}", cfg.node_name,
            s.outbox->epoch(), s.backend->name(), cfg.server, transport, cfg.http_tls() ? "HTTPS" : "HTTP",
            s.http->port(), cfg.http_auth() ? " (/metrics needs a token or client certificate)" : "");
  return Status::Ok();
}

void NodedServer::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  if (s.poller.joinable()) s.poller.join();
  if (s.pod_resources) s.pod_resources->Stop();
  if (s.pingmesh) s.pingmesh->Stop();
  if (s.stream) s.stream->Stop();
  if (s.http) s.http->Stop();
}

int NodedServer::http_port() const { return impl_->http ? impl_->http->port() : 0; }

}  // namespace clusterd::noded
