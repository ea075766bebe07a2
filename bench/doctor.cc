#include "doctor.h"

#include <iostream>
#include <thread>

#include "agents.h"

namespace clusterd::bench {
namespace {

constexpr char kPrefix[] = "bench-doc-";
constexpr int kChanges = 5;  // nodes attached one at a time for the CPU per change

// Node i's chain: every fifth node on an older driver than its pool.
void ChainOf(v1::Hello* h) {
  const std::string& name = h->node_name();
  const int i = std::atoi(name.c_str() + name.rfind('-') + 1);
  auto link = [&](const char* n, const std::string& version, const std::string& evidence) {
    auto* l = h->mutable_inventory()->add_chain();
    l->set_name(n);
    l->set_state(v1::CHAIN_LINK_STATE_OK);
    l->set_version(version);
    l->set_evidence(evidence);
  };
  link("driver", i % 5 == 0 ? "24.1.rc2" : "24.1.rc3", "Version= in /usr/local/Ascend/driver/version.info");
  link("cann", "8.0.RC3", "version= in /usr/local/Ascend/ascend-toolkit/latest/version.cfg");
  link("device_plugin", "", "registered: Ascend910.sock next to kubelet.sock");
}

// The doctor's cluster answer: its findings' total ("total" when cut), or -1.
int64_t DoctorTotal(int http_port, size_t* bytes = nullptr) {
  const std::string body = HttpGet(http_port, "/api/v1/doctor");
  if (bytes != nullptr) *bytes = body.size();
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("findings")) return -1;
  return doc.value("total", static_cast<int64_t>(doc["findings"].size()));
}

// Node `node` has its CHAIN_VERSION_DRIFT (one node's faults: a cheap read,
// so that waiting costs clusterd little next to what is measured).
bool WaitDrift(int http_port, const std::string& node, double timeout_s) {
  const int64_t end = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  while (NowNs() < end) {
    if (HttpGet(http_port, "/api/v1/faults?node=" + node + "&active_only=true").find("CHAIN_VERSION_DRIFT") !=
        std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

bool WaitTotal(int http_port, int64_t want, double timeout_s) {
  const int64_t end = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  while (NowNs() < end) {
    if (DoctorTotal(http_port) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

std::string RunDoctor(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const int n = o.doctor_nodes;
  const int64_t drifted = (n + 4) / 5;  // nodes 0, 5, 10, ...
  std::cerr << "[bench] scenario 15: the chain doctor, " << n << " nodes, " << drifted << " drifted\n";
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-doctor"));
  if (std::string err = cd.Start(); !err.empty()) return "scenario 15: clusterd: " + err;
  SetHelloEdit(ChainOf);
  std::string err;
  json result;
  {
    AgentPool pool(cd.target(), NodeNames(kPrefix, n), o.short_mode ? 4 : o.agent_channels);
    err = pool.Connect(300);
    const int64_t attached = NowNs();
    if (err.empty() && !WaitTotal(cd.http_port(), drifted, 300)) err = "the doctor never named every drifted node";
    const int64_t settled = NowNs();
    // The answer, timed.
    std::vector<int64_t> answer;
    size_t bytes = 0;
    for (int i = 0; i < 50 && err.empty(); ++i) {
      const int64_t t0 = NowNs();
      if (DoctorTotal(cd.http_port(), &bytes) != drifted) err = "the doctor's answer changed";
      answer.push_back(NowNs() - t0);
    }
    // CPU: idle, then kChanges drifted nodes attached one at a time.
    double idle_cpu = 0, change_cpu = 0, change_s = 0;
    if (err.empty()) {
      const double c0 = cd.CpuSeconds();
      const int64_t t0 = NowNs();
      std::this_thread::sleep_for(std::chrono::seconds(3));  // measuring idle CPU over a fixed time
      idle_cpu = (cd.CpuSeconds() - c0) / (static_cast<double>(NowNs() - t0) / 1e9);
      std::vector<std::unique_ptr<AgentPool>> more;
      const double c1 = cd.CpuSeconds();
      const int64_t t1 = NowNs();
      for (int k = 0; k < kChanges && err.empty(); ++k) {
        // Drifted too (a multiple of 5): each new node adds one finding.
        const std::string name = std::string(kPrefix) + "new-" + std::to_string(5 * (k + 1));
        more.push_back(std::make_unique<AgentPool>(cd.target(), std::vector<std::string>{name}, 1));
        err = more.back()->Connect(60);
        if (err.empty() && !WaitDrift(cd.http_port(), name, 60)) err = "a new node's drift was not raised";
      }
      change_s = static_cast<double>(NowNs() - t1) / 1e9;
      change_cpu = cd.CpuSeconds() - c1;
      if (err.empty() && DoctorTotal(cd.http_port()) != drifted + kChanges) err = "the doctor missed a new node";
      for (auto& p : more) p->Close();
    }
    const double per_change_ms = std::max(0.0, change_cpu - idle_cpu * change_s) / kChanges * 1000;
    result = {{"nodes", n},
              {"drifted", drifted},
              {"attached_to_named_ms", static_cast<double>(settled - attached) / 1e6},
              {"doctor_answer", LatencyJson(answer)},
              {"doctor_answer_bytes", bytes},
              {"cpu_per_change_ms", per_change_ms},
              {"idle_cores", idle_cpu}};
    pool.Close();
  }
  SetHelloEdit(nullptr);
  cd.Stop();
  if (!err.empty()) return "scenario 15: " + err;
  (*out)["scenario15_doctor"] = result;
  const json& a = result["doctor_answer"];
  const std::string size = std::to_string(n) + " nodes, " + std::to_string(drifted) + " drifted";
  rows->push_back({"15 doctor", "GET /api/v1/doctor p50 / p99 (" + size + ")",
                   Fmt(a["p50_ms"].get<double>(), " ms") + " / " + Fmt(a["p99_ms"].get<double>(), " ms") + ", " +
                       Fmt(static_cast<double>(result["doctor_answer_bytes"].get<size_t>()) / 1024, " KiB"),
                   "", "", "", ""});
  rows->push_back({"15 doctor", "last agent attached -> every drifted node named (" + size + ")",
                   Fmt(result["attached_to_named_ms"].get<double>(), " ms"), "", "", "", ""});
  rows->push_back({"15 doctor", "clusterd CPU per chain change (a node attaching, the drift compared)",
                   Fmt(result["cpu_per_change_ms"].get<double>(), " ms"), "", "", "", ""});
  return "";
}

}  // namespace clusterd::bench
