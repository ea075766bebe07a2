// Scenario 13: the MindCluster stack, fault -> Volcano-visible (stack.h).
#include "stack.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "agents.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/informer.h"
#include "clusterd/mindcluster/cluster_info.h"
#include "clusterd/mindcluster/device_info.h"
#include "clusterd/mindcluster/node_info.h"
#include "kube.h"

namespace clusterd::bench {
namespace {

namespace mc = mindcluster;

constexpr int kChips = 16;
constexpr const char* kModel = "Ascend910B3";
constexpr const char* kType = "Ascend910";
constexpr const char* kUnhealthyKey = "huawei.com/Ascend910-Unhealthy";
// SEPARATE in the catalog: the chip leaves the available list.
constexpr const char* kNodeCode = "80E18402";
// The device plugin's entry for a chip it took out (an HBM multi-bit ECC error).
constexpr const char* kPluginCode = "80E01801";
constexpr const char* kOurNs = "mindx-dl";
// Where the modelled reference writes, so that it and clusterd never share a ConfigMap.
constexpr const char* kRefNs = "mindx-dl-reference";
constexpr const char* kPluginNs = "kube-system";
constexpr double kSampleTimeoutS = 15;
// Connections the churn's rewrites go over: each waits for its answer, so
// enough of them to offer 1,000 rewrites a second.
constexpr int kChurnWriters = 16;

std::string Collection(const std::string& ns) { return "/api/v1/namespaces/" + ns + "/configmaps"; }

int64_t WallSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t WallMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The device plugin's view of one node: kChips chips, `bad` (-1: none) taken
// out with an 80E01801 SeparateNPU entry, as the plugin writes it.
mc::NodeDeviceInfo PluginView(int bad) {
  mc::NodeDeviceInfo v;
  v.device_type = kType;
  for (int c = 0; c < kChips; ++c) {
    (c == bad ? v.unhealthy : v.available).push_back(mc::ChipName(kType, static_cast<uint32_t>(c)));
  }
  if (bad >= 0) {
    mc::DeviceFault f;
    f.fault_type = "CardUnhealthy";
    f.npu_name = mc::ChipName(kType, static_cast<uint32_t>(bad));
    f.large_model_fault_level = f.fault_level = f.fault_handling = "SeparateNPU";
    f.fault_code = kPluginCode;
    f.fault_time_and_level[kPluginCode] = {WallMillis(), "SeparateNPU"};
    v.faults.push_back(std::move(f));
  }
  v.update_time = WallSeconds();
  return v;
}

// The plugin's ConfigMap kube-system/mindx-dl-deviceinfo-<node>.
std::string PluginConfigMap(const std::string& node, int bad) {
  const std::string name = std::string(mc::kDeviceInfoPrefix) + node;
  const json cm = {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata", {{"name", name}, {"namespace", kPluginNs}, {"labels", {{std::string(mc::kCimLabel), "true"}}}}},
      {"data",
       {{std::string(mc::kDeviceInfoKey), mc::DeviceInfoCfgJson(PluginView(bad))}, {"ManuallySeparateNPU", ""}}}};
  return cm.dump();
}

std::string PluginName(const std::string& node) { return std::string(mc::kDeviceInfoPrefix) + node; }

std::unique_ptr<k8s::Client> ApiClient(const KubeCluster& kc, std::string* err) {
  k8s::ClientConfig c;
  c.host = "127.0.0.1";
  c.port = std::to_string(kc.port());
  c.ca_pem = kc.ca_pem();
  c.token = kc.token();
  c.user_agent = "clusterd-bench";
  auto client = k8s::Client::Create(std::move(c));
  if (!client.ok()) {
    *err = "API client: " + client.status().message();
    return nullptr;
  }
  return std::move(*client);
}

// Waits until clusterd's unlabelled series `metric` has not moved for
// quiet_s; its value, NAN at the deadline.
double WaitQuiet(const ClusterdProcess& cd, const std::string& metric, double quiet_s, double timeout_s) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  double last = cd.Metric(metric);
  int64_t since = NowNs();
  while (NowNs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const double v = cd.Metric(metric);
    if (v != last || std::isnan(v)) {
      last = v;
      since = NowNs();
    } else if (NowNs() - since >= static_cast<int64_t>(quiet_s * 1e9)) {
      return v;
    }
  }
  return NAN;
}

// Waits until `metric` has not moved for quiet_s (at most timeout_s); when it
// last moved (steady-clock ns; the call's start if it never did).
int64_t LastChange(const ClusterdProcess& cd, const std::string& metric, double quiet_s, double timeout_s) {
  const int64_t deadline = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  double last = cd.Metric(metric);
  int64_t since = NowNs();
  while (NowNs() < deadline && NowNs() - since < static_cast<int64_t>(quiet_s * 1e9)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double v = cd.Metric(metric);
    if (v != last) {
      last = v;
      since = NowNs();
    }
  }
  return since;
}

// ---------------------------------------------------------------- ChunkWatch

// A streaming GET on one namespace's ConfigMaps, as Volcano's informer
// watches the cluster-info ones, that times when a node's entry shows a chip
// in (or out of) huawei.com/Ascend910-Unhealthy. A line's arrival time is
// taken before it is parsed: decoding an 800 KiB chunk is the consumer's own
// cost, and only lines that name the armed node are decoded at all.
class ChunkWatch {
 public:
  ChunkWatch(const KubeCluster& kc, std::string ns) : kc_(kc), ns_(std::move(ns)) {}
  ~ChunkWatch() { Stop(); }
  ChunkWatch(const ChunkWatch&) = delete;
  ChunkWatch& operator=(const ChunkWatch&) = delete;

  // Lists for the current resourceVersion and watches from it on a thread.
  std::string Start() {
    std::string err;
    client_ = ApiClient(kc_, &err);
    if (!client_) return err;
    if (auto e = List(); !e.empty()) return e;
    thread_ = std::thread([this] { Run(); });
    return "";
  }
  void Stop() {
    stop_ = true;
    cancel_.Cancel();
    if (thread_.joinable()) thread_.join();
  }
  // Expects node's chip to become unhealthy (or healthy again); arm before
  // causing it.
  void Arm(const std::string& node, uint32_t chip, bool unhealthy) {
    std::lock_guard lock(mu_);
    ++generation_;
    needle_ = "\\\"" + PluginName(node) + "\\\":";  // the key inside the escaped value
    key_ = PluginName(node);
    chip_ = mc::ChipName(kType, chip);
    want_unhealthy_ = unhealthy;
    seen_ns_ = 0;
    armed_ = true;
  }
  // When the first event showing it arrived; 0 if none came within timeout_s.
  int64_t Wait(double timeout_s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [this] { return seen_ns_ != 0; });
    armed_ = false;
    return seen_ns_;
  }
  uint64_t events() const { return events_.load(); }
  uint64_t watches() const { return watches_.load(); }

 private:
  std::string List() {
    auto list = client_->Get(Collection(ns_) + "?limit=1");
    if (!list.ok()) return "list " + ns_ + " ConfigMaps: " + list.status().message();
    rv_ = k8s::StringAt(*list, {"metadata", "resourceVersion"});
    return "";
  }

  void Run() {
    while (!stop_) {
      ++watches_;
      const std::string target = Collection(ns_) + "?watch=1&timeoutSeconds=1800&resourceVersion=" + rv_;
      const Status st = client_->Stream(
          target, std::chrono::seconds(1900), [this](std::string_view line) { return OnLine(line); }, &cancel_);
      if (stop_) return;
      if (gone_ || (!st.ok() && st.code() == StatusCode::kOutOfRange)) {
        gone_ = false;
        if (!List().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
      } else if (!st.ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  bool OnLine(std::string_view line) {
    const int64_t now = NowNs();
    ++events_;
    // The object's metadata comes before its data: the first resourceVersion is its own.
    static constexpr std::string_view kRv = "\"resourceVersion\":\"";
    if (auto p = line.find(kRv); p != std::string_view::npos) {
      const auto q = line.find('"', p + kRv.size());
      if (q != std::string_view::npos) rv_ = std::string(line.substr(p + kRv.size(), q - p - kRv.size()));
    }
    if (line.find("\"type\":\"ERROR\"") != std::string_view::npos) {
      gone_ = true;  // 410 Gone: list again
      return false;
    }
    std::string needle, key, chip;
    bool want = false;
    uint64_t gen = 0;
    {
      std::lock_guard lock(mu_);
      if (!armed_ || seen_ns_ != 0) return true;
      needle = needle_, key = key_, chip = chip_, want = want_unhealthy_, gen = generation_;
    }
    if (line.find(needle) == std::string_view::npos) return true;
    if (Shows(line, key, chip) != want) return true;
    std::lock_guard lock(mu_);
    if (armed_ && gen == generation_ && seen_ns_ == 0) {
      seen_ns_ = now;
      cv_.notify_all();
    }
    return true;
  }

  // Whether the event's ConfigMap lists `chip` of the node `key` unhealthy.
  static bool Shows(std::string_view line, const std::string& key, const std::string& chip) {
    const json ev = json::parse(line, nullptr, false);
    if (!ev.is_object() || !ev.contains("object")) return false;
    const json& data = ev["object"].value("data", json::object());
    for (auto it = data.begin(); it != data.end(); ++it) {
      if (!it->is_string()) continue;
      const json chunk = json::parse(it->get<std::string>(), nullptr, false);
      if (!chunk.is_object() || !chunk.contains(key)) continue;
      const std::string list = chunk[key].value("DeviceList", json::object()).value(kUnhealthyKey, "");
      std::istringstream names(list);
      for (std::string n; std::getline(names, n, ',');) {
        if (n == chip) return true;
      }
      return false;
    }
    return false;
  }

  const KubeCluster& kc_;
  const std::string ns_;
  std::unique_ptr<k8s::Client> client_;
  k8s::StreamCancel cancel_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::string rv_;     // the watch thread's (and Start's before it)
  bool gone_ = false;  // the watch thread's
  std::atomic<uint64_t> events_{0}, watches_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  uint64_t generation_ = 0;
  std::string needle_, key_, chip_;
  bool want_unhealthy_ = false;
  int64_t seen_ns_ = 0;
};

// ---------------------------------------------------------------- the reference, modelled

// MindCluster's ClusterD on the path from the device plugin's ConfigMap to
// Volcano's (../shared/data/mindcluster-k8s-contracts.md §1.2 and §2.3;
// clusterd/pkg/application/resource/report.go and
// faultmanager/fault_process_center.go in its sources): an informer on the
// plugin's ConfigMaps; a processing pass every 1 s over what they hold; after
// each pass a report that rewrites every cluster-info-device-<i> (Update,
// Create on NotFound, in index order) and cluster-info-node-cm; a 1 s pause
// before the first report. Its limit of 5 reports a second never binds at one
// pass a second. The entries are built by ClusterD's own pure code
// (MergeForVolcano with nothing of ClusterD's merged in, the same 800 KiB
// chunks), so the two differ only in cadence and in what is written; the
// writes go over one keep-alive connection, as client-go's would.
class ReferenceModel {
 public:
  ReferenceModel(const KubeCluster& kc, const std::vector<std::string>& nodes, std::string ns)
      : kc_(kc), ns_(std::move(ns)), conn_(kc) {
    // Every node as the plugin would list it healthy; the plugin's own
    // ConfigMaps (the probes') override their node's entry.
    mc::NodeState healthy;
    healthy.device_type = kType;
    for (int c = 0; c < kChips; ++c) healthy.chips.push_back(static_cast<uint32_t>(c));
    const mc::NodeDeviceInfo entry = mc::MergeForVolcano(nullptr, healthy);
    const int64_t now = WallSeconds();
    for (const auto& n : nodes) (void)publisher_.Set(n, entry, now);
  }
  ~ReferenceModel() { Stop(); }
  ReferenceModel(const ReferenceModel&) = delete;
  ReferenceModel& operator=(const ReferenceModel&) = delete;

  // Starts the informer and the loop; returns after the first report.
  std::string Start() {
    std::string err;
    client_ = ApiClient(kc_, &err);
    if (!client_) return err;
    k8s::InformerOptions io;
    io.name = "reference-deviceinfo";
    io.path = Collection(kPluginNs);
    io.label_selector = std::string(mc::kCimLabel) + "=true";
    informer_ = std::make_unique<k8s::Informer>(client_.get(), io, k8s::Informer::Handlers{}, nullptr);
    informer_->Start();
    if (!informer_->WaitSynced(std::chrono::seconds(60))) return "reference model: the informer did not sync in 60 s";
    thread_ = std::thread([this] { Run(); });
    const int64_t deadline = NowNs() + static_cast<int64_t>(120e9);
    while (reports_.load() == 0 && error().empty()) {
      if (NowNs() > deadline) return "reference model: no report within 120 s";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return error();
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (informer_) informer_->Stop();
  }
  uint64_t writes() const { return writes_.load(); }
  uint64_t reports() const { return reports_.load(); }
  size_t chunks() const { return chunks_.load(); }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  bool SleepUntil(int64_t t) {
    std::unique_lock lock(mu_);
    return !cv_.wait_until(lock, Clock::time_point(std::chrono::nanoseconds(t)), [this] { return stop_; });
  }

  void Run() {
    constexpr int64_t kPass = 1'000'000'000;
    int64_t next = NowNs() + kPass;
    bool first = true;
    while (SleepUntil(next)) {
      Process();
      if (first && !SleepUntil(NowNs() + kPass)) return;  // "when informer begin, frequent add messages"
      first = false;
      Report();
      // The ticker ticks on: a pass that overran skips the ticks it missed.
      next += kPass;
      while (next <= NowNs()) next += kPass;
    }
  }

  void Process() {
    const int64_t now = WallSeconds();
    for (const json& cm : informer_->List()) {
      const std::string name = k8s::StringAt(cm, {"metadata", "name"});
      if (name.rfind(mc::kDeviceInfoPrefix, 0) != 0) continue;
      const std::string text = k8s::StringAt(cm, {"data", mc::kDeviceInfoKey});
      auto view = mc::ParseDeviceInfoCfg(text);
      if (!view.ok()) continue;  // the reference keeps the last good one too
      (void)publisher_.Set(name.substr(mc::kDeviceInfoPrefix.size()), mc::MergeForVolcano(&*view, mc::NodeState{}),
                           now);
    }
  }

  void Report() {
    const mc::ClusterInfoPublisher::Plan plan = publisher_.Pending(/*all=*/true);
    for (const auto& w : plan.writes) Write(w.name, w.value);
    Write(std::string(mc::kClusterInfoNodeName), "");
    publisher_.Written(plan);
    chunks_ = publisher_.chunks();
    ++reports_;
  }

  void Write(const std::string& name, const std::string& value) {
    const json cm = {
        {"apiVersion", "v1"},
        {"kind", "ConfigMap"},
        {"metadata", {{"name", name}, {"namespace", ns_}, {"labels", {{std::string(mc::kVolcanoLabel), "true"}}}}},
        {"data", {{name, value}}}};
    if (auto err = conn_.Upsert(Collection(ns_), name, cm.dump()); !err.empty()) {
      std::lock_guard lock(mu_);
      if (error_.empty()) error_ = "reference model: " + err;
      return;
    }
    ++writes_;
  }

  const KubeCluster& kc_;
  const std::string ns_;
  KubeConn conn_;  // the loop's
  std::unique_ptr<k8s::Client> client_;
  std::unique_ptr<k8s::Informer> informer_;
  mc::ClusterInfoPublisher publisher_;  // the loop's after the constructor
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::string error_;  // guarded by mu_
  std::atomic<uint64_t> writes_{0}, reports_{0};
  std::atomic<size_t> chunks_{0};
};

// ---------------------------------------------------------------- samples

struct Samples {
  std::vector<int64_t> raise, clear;  // ns from the trigger's acknowledgement to the watch event
  int missed = 0;                     // raises or clears never seen within kSampleTimeoutS
  double wall_s = 0;
  // Per raise: its latency and the ConfigMap writes made while it was
  // waited for (more than one: it shared the writes with other changes, such
  // as the periodic rewrite of every chunk).
  json raises = json::array();
  json Json() const {
    json j = {{"raise", LatencyJson(raise)},
              {"clear", LatencyJson(clear)},
              {"missed", missed},
              {"wall_s", wall_s},
              {"raises", raises}};
    return j;
  }
};

struct Probe {
  std::string node;
  uint32_t chip = 0;
};

// Causes the change and returns when its cause was acknowledged (0: never;
// *err says why).
using Trigger = std::function<int64_t(const Probe& p, bool raise, std::string* err)>;

// Probes one at a time: a random gap in [0, gap_s) (so the faults fall at
// every phase of the loop that publishes them), raise, wait until the watch
// shows it, gap, clear, wait again; n probes, or as many as start before
// `until` (steady-clock ns). `writes` counts the publisher's ConfigMap writes.
std::string Sample(ChunkWatch* watch, const std::vector<Probe>& probes, int n, double gap_s, const Trigger& trigger,
                   const std::function<double()>& writes, Samples* s, int64_t until = INT64_MAX) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<double> gap(0, gap_s);
  const int64_t t0 = NowNs();
  for (int k = 0; k < n && NowNs() < until; ++k) {
    const Probe& p = probes[static_cast<size_t>(k) % probes.size()];
    for (bool raise : {true, false}) {
      std::this_thread::sleep_for(std::chrono::duration<double>(gap(rng)));
      watch->Arm(p.node, p.chip, raise);
      const double w0 = writes();
      std::string err;
      const int64_t acked = trigger(p, raise, &err);
      if (acked == 0) return err;
      const int64_t seen = watch->Wait(kSampleTimeoutS);
      if (seen == 0) {
        ++s->missed;
        continue;
      }
      (raise ? s->raise : s->clear).push_back(seen - acked);
      if (raise) s->raises.push_back({{"ms", static_cast<double>(seen - acked) / 1e6}, {"writes", writes() - w0}});
    }
  }
  s->wall_s = static_cast<double>(NowNs() - t0) / 1e9;
  return "";
}

// The device plugin's write of a probe's ConfigMap; its acknowledgement.
Trigger PluginTrigger(KubeConn* conn) {
  return [conn](const Probe& p, bool raise, std::string* err) -> int64_t {
    const std::string body = PluginConfigMap(p.node, raise ? static_cast<int>(p.chip) : -1);
    *err = conn->Upsert(Collection(kPluginNs), PluginName(p.node), body);
    return err->empty() ? NowNs() : 0;
  };
}

// ---------------------------------------------------------------- churn

struct Churn {
  uint64_t rewrites = 0, failed = 0;
  std::string error;
};

// Rewrites each node's plugin ConfigMap once a second for `seconds` from
// `threads` keep-alive connections: node j's k-th rewrite at start + k +
// j/N, alternately taking chip (k/2 + j) % 16 out and putting it back, so
// every rewrite is a change (the plugin writes on change, at most once a
// second). A writer that falls behind does not skip; what it did not get to
// in the window is not done.
Churn RunChurnWriters(const KubeCluster& kc, const std::vector<std::string>& nodes, double seconds, int threads) {
  Churn result;
  std::atomic<uint64_t> done{0}, failed{0};
  std::mutex mu;
  const int64_t start = NowNs(), end = start + static_cast<int64_t>(seconds * 1e9);
  const size_t n = nodes.size();
  std::vector<std::thread> ts;
  ts.reserve(static_cast<size_t>(threads));
  for (int w = 0; w < threads; ++w) {
    ts.emplace_back([&, w] {
      KubeConn conn(kc, 10);
      for (int64_t k = 0;; ++k) {
        for (size_t j = static_cast<size_t>(w); j < n; j += static_cast<size_t>(threads)) {
          const int64_t at =
              start + k * 1'000'000'000 + static_cast<int64_t>(j) * 1'000'000'000 / static_cast<int64_t>(n);
          if (at >= end || NowNs() >= end) return;
          SleepUntilNs(at);
          const int bad = k % 2 == 0 ? static_cast<int>((k / 2 + static_cast<int64_t>(j)) % kChips) : -1;
          if (auto err = conn.Upsert(Collection(kPluginNs), PluginName(nodes[j]), PluginConfigMap(nodes[j], bad));
              !err.empty()) {
            ++failed;
            std::lock_guard lock(mu);
            if (result.error.empty()) result.error = err;
            continue;
          }
          ++done;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  result.rewrites = done.load();
  result.failed = failed.load();
  return result;
}

// Creates (or resets to healthy) the nodes' plugin ConfigMaps from `threads`
// connections; "" or the first error.
std::string CreatePluginConfigMaps(const KubeCluster& kc, const std::vector<std::string>& nodes, int threads) {
  std::string first;
  std::mutex mu;
  std::vector<std::thread> ts;
  ts.reserve(static_cast<size_t>(threads));
  for (int w = 0; w < threads; ++w) {
    ts.emplace_back([&, w] {
      KubeConn conn(kc);
      for (size_t j = static_cast<size_t>(w); j < nodes.size(); j += static_cast<size_t>(threads)) {
        if (auto err = conn.Upsert(Collection(kPluginNs), PluginName(nodes[j]), PluginConfigMap(nodes[j], -1));
            !err.empty()) {
          std::lock_guard lock(mu);
          if (first.empty()) first = err;
          return;
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  return first;
}

std::string Ms2(const json& lat) {
  if (!lat.contains("p50_ms")) return "n/a";
  return Fmt(lat["p50_ms"].get<double>(), " ms") + " / " + Fmt(lat["p99_ms"].get<double>(), " ms");
}

double P99(const json& lat) { return lat.contains("p99_ms") ? lat["p99_ms"].get<double>() : NAN; }

std::string CreateNamespace(KubeConn* conn, const std::string& ns) {
  KubeConn::Reply r;
  const json body = {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}};
  if (auto err = conn->Do("POST", "/api/v1/namespaces", body.dump(), &r); !err.empty()) return err;
  if (r.status != 201 && r.status != 409) return "create namespace " + ns + ": HTTP " + std::to_string(r.status);
  return "";
}

// Restores the device count and model the other scenarios use.
class DeviceShape {
 public:
  DeviceShape() : devices_(DevicesPerNode()), model_(DeviceModel()) {
    SetDevicesPerNode(kChips);
    SetDeviceModel(kModel);
  }
  ~DeviceShape() {
    SetDevicesPerNode(devices_);
    SetDeviceModel(model_);
  }
  DeviceShape(const DeviceShape&) = delete;
  DeviceShape& operator=(const DeviceShape&) = delete;

 private:
  int devices_;
  const char* model_;
};

bool OnPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace

std::string RunStack(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  json& s13 = (*out)["scenario13_stack"];
  const bool have_etcd = !o.etcd.empty() && ::access(o.etcd.c_str(), X_OK) == 0;
  const bool have_api = !o.kube_apiserver.empty() && ::access(o.kube_apiserver.c_str(), X_OK) == 0;
  if (!have_etcd || !have_api || !OnPath("openssl")) {
    std::cerr << "[bench] scenario 13 skipped: needs --etcd and --kube-apiserver (scripts/k8s-tools.sh builds both) "
                 "and openssl on PATH\n";
    s13["skipped"] = "no etcd, kube-apiserver or openssl binary";
    return "";
  }
  const DeviceShape shape;
  const int n = o.stack_nodes;
  const std::vector<std::string> names = NodeNames("bench-mc-", n);
  s13["nodes"] = n;
  s13["chips_per_node"] = kChips;
  s13["device"] = {{"vendor", "huawei"}, {"model", kModel}};

  // The API server.
  KubeCluster kc(o.etcd, o.kube_apiserver, tmp.Sub("stack-k8s"));
  std::cerr << "[bench] scenario 13: starting etcd and kube-apiserver\n";
  int64_t t = NowNs();
  if (auto err = kc.Start(); !err.empty()) return "scenario 13: " + err;
  s13["apiserver_start_s"] = static_cast<double>(NowNs() - t) / 1e9;
  KubeConn conn(kc);
  for (const char* ns : {kOurNs, kRefNs, kPluginNs}) {
    if (auto err = CreateNamespace(&conn, ns); !err.empty()) return "scenario 13: " + err;
  }
  // The probes of the plugin's path: nodes spread over the chunks, each with
  // the plugin's ConfigMap (healthy); the NodeD path's probes likewise.
  const int plugin_probes = std::min(o.stack_samples, 8);
  std::vector<Probe> node_probes, plugin_probe_list;
  std::vector<std::string> probe_nodes;
  for (int k = 0; k < o.stack_samples; ++k) {
    node_probes.push_back(
        {names[static_cast<size_t>(static_cast<int64_t>(k) * n / o.stack_samples)], static_cast<uint32_t>(k % kChips)});
  }
  for (int k = 0; k < plugin_probes; ++k) {
    const std::string& node =
        names[static_cast<size_t>((2 * static_cast<int64_t>(k) + 1) * n / (2 * static_cast<int64_t>(plugin_probes)))];
    probe_nodes.push_back(node);
    for (int c = 0; c < kChips; c += kChips / 2) plugin_probe_list.push_back({node, static_cast<uint32_t>(c + k % 8)});
  }
  if (auto err = CreatePluginConfigMaps(kc, probe_nodes, 1); !err.empty()) return "scenario 13: " + err;

  // Baseline: the reference's cadence, modelled, alone on the API server.
  Samples ref;
  json& rj = s13["reference_model"];
  {
    std::cerr << "[bench] scenario 13: the reference's cadence (modelled), " << n << " nodes x " << kChips << " chips, "
              << o.stack_samples << " plugin faults\n";
    ChunkWatch watch(kc, kRefNs);
    if (auto err = watch.Start(); !err.empty()) return "scenario 13: " + err;
    ReferenceModel model(kc, names, kRefNs);
    t = NowNs();
    if (auto err = model.Start(); !err.empty()) return "scenario 13: " + err;
    rj["first_report_s"] = static_cast<double>(NowNs() - t) / 1e9;
    const uint64_t w0 = model.writes(), r0 = model.reports();
    const int64_t m0 = NowNs();
    const auto model_writes = [&model] { return static_cast<double>(model.writes()); };
    if (auto err = Sample(&watch, plugin_probe_list, o.stack_samples, 1.0, PluginTrigger(&conn), model_writes, &ref);
        !err.empty()) {
      return "scenario 13: " + err;
    }
    const double secs = static_cast<double>(NowNs() - m0) / 1e9;
    rj["writes_per_s"] = static_cast<double>(model.writes() - w0) / secs;
    rj["reports_per_s"] = static_cast<double>(model.reports() - r0) / secs;
    rj["chunks"] = model.chunks();
    rj["watch_events"] = watch.events();
    model.Stop();
    if (auto err = model.error(); !err.empty()) return "scenario 13: " + err;
  }
  rj["plugin_fault"] = ref.Json();
  rj["cadence"] = {{"process_period_s", 1},
                   {"writes", "every cluster-info-device chunk and cluster-info-node-cm, each pass"},
                   {"first_write_pause_s", 1},
                   {"max_reports_per_s", 5}};

  // clusterd with the integration, its agents and the watch.
  // The probes fault the same chips again and again: no separation.
  std::vector<std::string> flags = {"--integrations=mindcluster", "--kubeconfig=" + kc.kubeconfig(),
                                    "--separation-enabled=false"};
  if (o.stack_chunk_kib > 0) {
    flags.push_back("--mindcluster-cluster-info-chunk-bytes=" + std::to_string(o.stack_chunk_kib * 1024));
  }
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-stack"), flags);
  std::cerr << "[bench] scenario 13: starting " << o.clusterd << " --integrations mindcluster\n";
  if (auto err = cd.Start(); !err.empty()) return "scenario 13: " + err;
  ChunkWatch watch(kc, kOurNs);
  if (auto err = watch.Start(); !err.empty()) return "scenario 13: " + err;
  AgentPool pool(cd.target(), names, o.short_mode ? 4 : o.agent_channels);
  t = NowNs();
  if (auto err = pool.Connect(300); !err.empty()) return "scenario 13: " + err;
  json& setup = s13["clusterd_setup"];
  setup["agents_connect_s"] = static_cast<double>(NowNs() - t) / 1e9;
  const int64_t deadline = NowNs() + static_cast<int64_t>(300e9);
  while (cd.Metric("clusterd_mindcluster_cluster_info_nodes") < n) {
    if (NowNs() > deadline) return "scenario 13: clusterd did not list every node in cluster-info within 300 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (std::isnan(WaitQuiet(cd, "clusterd_mindcluster_cluster_info_writes_total", 1.0, 300))) {
    return "scenario 13: clusterd's cluster-info writes did not settle within 300 s";
  }
  setup["all_nodes_published_s"] = static_cast<double>(NowNs() - t) / 1e9 - 1.0;
  setup["chunks"] = cd.Metric("clusterd_mindcluster_cluster_info_chunks");
  setup["writes"] = cd.Metric("clusterd_mindcluster_cluster_info_writes_total");
  const double chunks = setup["chunks"].get<double>();
  std::cerr << "[bench]   " << n << " agents connected in " << Fmt(setup["agents_connect_s"].get<double>(), " s")
            << ", " << static_cast<int>(chunks) << " cluster-info-device chunks written\n";

  // (a) NodeD's faults.
  Samples nd;
  std::cerr << "[bench] scenario 13: " << o.stack_samples << " NodeD chip faults -> Volcano-visible\n";
  const auto cd_writes = [&cd] { return cd.Metric("clusterd_mindcluster_cluster_info_writes_total"); };
  const Trigger agent = [&pool](const Probe& p, bool raise, std::string* err) -> int64_t {
    const int i = pool.IndexOf(p.node);
    const uint64_t seq =
        pool.Send(static_cast<size_t>(i), raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR, p.chip,
                  kNodeCode, v1::FAULT_LEVEL_SEPARATE);
    const int64_t until = NowNs() + static_cast<int64_t>(30e9);
    for (;;) {
      if (const int64_t a = pool.AckedNs(static_cast<size_t>(i), seq); a != 0) return a;
      if (NowNs() > until) {
        *err = "a transition of " + p.node + " was not acknowledged within 30 s";
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  };
  {
    const double w0 = cd_writes();
    if (auto err = Sample(&watch, node_probes, o.stack_samples, 0.25, agent, cd_writes, &nd); !err.empty()) {
      return "scenario 13: " + err;
    }
    s13["noded_fault"] = nd.Json();
    s13["noded_fault"]["writes"] = cd_writes() - w0;
  }
  // (a) The device plugin's faults, as the baseline's.
  Samples pl;
  std::cerr << "[bench] scenario 13: " << o.stack_samples << " device-plugin chip faults -> Volcano-visible\n";
  {
    const double w0 = cd_writes();
    if (auto err = Sample(&watch, plugin_probe_list, o.stack_samples, 0.25, PluginTrigger(&conn), cd_writes, &pl);
        !err.empty()) {
      return "scenario 13: " + err;
    }
    s13["plugin_fault"] = pl.Json();
    s13["plugin_fault"]["writes"] = cd_writes() - w0;
  }

  // (b) Churn of the plugin's ConfigMaps.
  const int churn_n = std::min(o.stack_churn_nodes, n);
  std::vector<std::string> churn_nodes;
  churn_nodes.reserve(static_cast<size_t>(churn_n));
  for (int j = 0; j < churn_n; ++j)
    churn_nodes.push_back(names[static_cast<size_t>(static_cast<int64_t>(j) * n / churn_n)]);
  json& cj = s13["churn"];
  std::cerr << "[bench] scenario 13: " << churn_n << " device-plugin ConfigMaps, each rewritten once a second for "
            << o.stack_churn_s << " s\n";
  t = NowNs();
  if (auto err = CreatePluginConfigMaps(kc, churn_nodes, kChurnWriters); !err.empty()) return "scenario 13: " + err;
  cj["create_s"] = static_cast<double>(NowNs() - t) / 1e9;
  WaitQuiet(cd, "clusterd_mindcluster_cluster_info_writes_total", 1.0, 120);
  const auto metric = [&cd](const char* m) { return cd.Metric(m); };
  // The figures over the writers' window, taken by their thread as they
  // start and as they stop.
  struct Snapshot {
    int64_t at = 0;
    double writes = 0, errors = 0, reports = 0, cpu = 0, api_cpu = 0, etcd_cpu = 0, events = 0;
  };
  const auto snap = [&] {
    Snapshot x;
    x.at = NowNs();
    x.writes = metric("clusterd_mindcluster_cluster_info_writes_total");
    x.errors = metric("clusterd_mindcluster_cluster_info_write_errors_total");
    x.reports = metric("clusterd_mindcluster_deviceinfo_reports_total");
    x.cpu = cd.CpuSeconds();
    x.api_cpu = ProcessCpuSeconds(kc.apiserver_pid());
    x.etcd_cpu = ProcessCpuSeconds(kc.etcd_pid());
    x.events = static_cast<double>(watch.events());
    return x;
  };
  // NodeD faults timed while the plugin's ConfigMaps churn: what the churn
  // does to the publishing of everything else.
  Churn churn;
  Snapshot s0, s1;
  std::thread writers([&] {
    s0 = snap();
    churn = RunChurnWriters(kc, churn_nodes, o.stack_churn_s, kChurnWriters);
    s1 = snap();
  });
  // On nodes whose plugin ConfigMap does not churn (the next one by name
  // from each probe that does), in the same ConfigMaps as churning ones.
  const std::set<std::string> churning(churn_nodes.begin(), churn_nodes.end());
  std::vector<Probe> quiet_probes;
  for (const Probe& p : node_probes) {
    size_t i = static_cast<size_t>(std::find(names.begin(), names.end(), p.node) - names.begin());
    while (i < names.size() && churning.count(names[i])) ++i;
    if (i < names.size()) quiet_probes.push_back({names[i], p.chip});
  }
  if (quiet_probes.empty()) return "scenario 13: every node churns: no node to probe during the churn";
  Samples during;
  const std::string probe_err = Sample(&watch, quiet_probes, INT32_MAX, 0.25, agent, cd_writes, &during,
                                       NowNs() + static_cast<int64_t>(o.stack_churn_s * 1e9));
  writers.join();
  if (!probe_err.empty()) return "scenario 13: " + probe_err;
  cj["noded_fault_during"] = during.Json();
  const double win = static_cast<double>(s1.at - s0.at) / 1e9;
  const double writes = s1.writes - s0.writes, cpu = s1.cpu - s0.cpu;
  cj["nodes"] = churn_n;
  cj["offered_rewrites_per_s"] = churn_n;
  cj["rewrites"] = churn.rewrites;
  cj["rewrites_failed"] = churn.failed;
  if (!churn.error.empty()) cj["first_error"] = churn.error;
  cj["window_s"] = win;
  cj["rewrites_per_s"] = static_cast<double>(churn.rewrites) / win;
  cj["clusterd_writes"] = writes;
  cj["clusterd_writes_per_s"] = writes / win;
  cj["clusterd_write_errors"] = s1.errors - s0.errors;
  cj["clusterd_reports"] = s1.reports - s0.reports;
  cj["clusterd_cpu_s"] = cpu;
  cj["clusterd_cpu_cores"] = cpu / win;
  cj["apiserver_cpu_cores"] = (s1.api_cpu - s0.api_cpu) / win;
  cj["etcd_cpu_cores"] = (s1.etcd_cpu - s0.etcd_cpu) / win;
  cj["watch_events_per_s"] = (s1.events - s0.events) / win;
  // How long after the writers stopped clusterd still raised, cleared and
  // wrote what they had changed.
  const int64_t last_report = LastChange(cd, "clusterd_mindcluster_deviceinfo_reports_total", 1.0, 120);
  const int64_t last_write = LastChange(cd, "clusterd_mindcluster_cluster_info_writes_total", 1.0, 120);
  cj["drain_s"] = static_cast<double>(std::max<int64_t>(std::max(last_report, last_write) - s1.at, 0)) / 1e9;
  cj["clusterd_reports_after_drain"] = metric("clusterd_mindcluster_deviceinfo_reports_total") - s0.reports;
  s13["clusterd_rss_mib"] = ProcessRssKiB(cd.pid()) / 1024;

  watch.Stop();
  if (auto err = pool.Close(60); !err.empty()) return "scenario 13: " + err;
  cd.Stop();
  kc.Stop();

  // Rows.
  const std::string sc = "13 stack";
  const json& ndr = s13["noded_fault"]["raise"];
  const json& plr = s13["plugin_fault"]["raise"];
  const json& rfr = rj["plugin_fault"]["raise"];
  const double nd99 = P99(ndr), pl99 = P99(plr), rf99 = P99(rfr);
  const std::string shape_s = std::to_string(n) + " nodes x " + std::to_string(kChips) + " chips, " +
                              std::to_string(static_cast<int>(chunks)) + " chunks";
  rows->push_back({sc,
                   "reference cadence (modelled): plugin fault -> Volcano p50 / p99 (" +
                       std::to_string(ref.raise.size()) + ", missed " + std::to_string(ref.missed) + ")",
                   Ms2(rfr), "", "", "", ""});
  rows->push_back({sc,
                   "NodeD fault -> Volcano-visible p50 / p99 (" + std::to_string(nd.raise.size()) + ", " + shape_s +
                       ", missed " + std::to_string(nd.missed) + ")",
                   Ms2(ndr), "reference " + Ms2(rfr),
                   std::isnan(nd99) || std::isnan(rf99) ? "" : Fmt(nd99 / rf99, "x (p99)"), "p99 <= 1 s",
                   Met(nd.missed == 0 && nd99 <= 1000)});
  rows->push_back({sc,
                   "device-plugin fault -> Volcano-visible p50 / p99 (" + std::to_string(pl.raise.size()) +
                       ", missed " + std::to_string(pl.missed) + ")",
                   Ms2(plr), "reference " + Ms2(rfr),
                   std::isnan(pl99) || std::isnan(rf99) ? "" : Fmt(pl99 / rf99, "x (p99)"), "p99 <= 1 s",
                   Met(pl.missed == 0 && pl99 <= 1000)});
  rows->push_back({sc, "NodeD clear -> Volcano-visible p50 / p99", Ms2(s13["noded_fault"]["clear"]), "", "", "", ""});
  const std::string sc_b = "13 churn";
  rows->push_back({sc_b,
                   std::to_string(churn_n) + " plugin ConfigMaps rewritten/s (offered " + std::to_string(churn_n) +
                       "/s, " + Fmt(win, " s") + ")",
                   Fmt(cj["rewrites_per_s"].get<double>(), "/s"), "", "", "", ""});
  const double ref_w = rj["writes_per_s"].get<double>();
  rows->push_back({sc_b, "clusterd API writes/s (limit 5/s, the default)", Fmt(writes / win, "/s"),
                   "reference " + Fmt(ref_w, "/s") + " (every pass)", ref_w > 0 ? Fmt((writes / win) / ref_w, "x") : "",
                   "", ""});
  const json& dur = cj["noded_fault_during"]["raise"];
  rows->push_back({sc_b,
                   "NodeD fault -> Volcano-visible p50 / p99 during the churn (" + std::to_string(during.raise.size()) +
                       ", missed " + std::to_string(during.missed) + ")",
                   Ms2(dur), "", "", "p99 <= 1 s", Met(during.missed == 0 && P99(dur) <= 1000)});
  rows->push_back(
      {sc_b,
       "clusterd CPU over the window (plugin faults raised/cleared: " + Fmt(cj["clusterd_reports"].get<double>()) + ")",
       Fmt(cpu, " s") + " (" + Fmt(cpu / win, " cores") + ")", "", "", "", ""});
  return "";
}

}  // namespace clusterd::bench
