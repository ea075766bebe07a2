#include "pingmesh.h"

#include <atomic>
#include <cmath>
#include <iostream>
#include <thread>

#include "agents.h"

namespace clusterd::bench {
namespace {

constexpr char kPmPrefix[] = "bench-pm-";
constexpr char kPmLabel[] = "bench.superpod";
constexpr int kPmSuperPod = 48;  // MindCluster's SuperPoD size
constexpr int kPmFanout = 4;     // pingmesh_peers_per_node's default
constexpr uint32_t kPmRttUs = 80;

int PmNodeIndex(const std::string& name) { return std::atoi(name.c_str() + sizeof(kPmPrefix) - 1); }

// Every node in SuperPoD index / 48, probed at the address its stream comes from.
void PmHello(v1::Hello* h) {
  (*h->mutable_labels())[kPmLabel] = std::to_string(PmNodeIndex(h->node_name()) / kPmSuperPod);
  h->set_probe_address(":11255");
}

// Answers every probe plan at once: every probe answered, except both
// directions of the cut pair (cut_a, cut_b), which lose every probe.
class PmResponder {
 public:
  explicit PmResponder(AgentPool* pool) : pool_(pool) {}
  void Cut(int a, int b) {
    cut_b_ = b;
    cut_a_ = a;
  }
  void operator()(size_t i, const v1::ConnectResponse& msg) {
    if (!msg.has_probe_plan()) return;
    const v1::ProbePlan& plan = msg.probe_plan();
    v1::ConnectRequest req;
    v1::ProbeReport* report = req.mutable_probes();
    report->set_round(plan.round());
    const int self = static_cast<int>(i);
    for (const auto& t : plan.targets()) {
      const int peer = pool_->IndexOf(t.node());
      const bool cut =
          (self == cut_a_.load() && peer == cut_b_.load()) || (self == cut_b_.load() && peer == cut_a_.load());
      v1::PeerProbeResult* r = report->add_peers();
      r->set_node(t.node());
      r->set_sent(plan.attempts());
      r->set_lost(cut ? plan.attempts() : 0);
      if (!cut) {
        for (auto* d : {r->mutable_rtt_min(), r->mutable_rtt_mean(), r->mutable_rtt_max()})
          d->set_nanos(kPmRttUs * 1000);
      }
    }
    plans_.fetch_add(1);
    pool_->SendMessage(i, std::move(req));
  }
  uint64_t plans() const { return plans_.load(); }

 private:
  AgentPool* pool_;
  std::atomic<int> cut_a_{-1}, cut_b_{-1};
  std::atomic<uint64_t> plans_{0};
};

struct PmPhase {
  double cpu_cores = 0;
  double results_per_s = 0;
  double plans_per_s = 0;
  double round_probes = 0;
  double rss_mib = 0;
  double cut_to_fault_s = NAN;
};

// True once `node` carries LINK_PINGMESH_LOSS (one node's faults: a cheap read).
bool PmHasLinkFault(int http_port, const std::string& node) {
  return HttpGet(http_port, "/api/v1/faults?node=" + node + "&active_only=true").find("LINK_PINGMESH_LOSS") !=
         std::string::npos;
}

// One clusterd with `args`, the agents connected and heartbeating every 2 s;
// measures for `measure_s` after `warmup_s`; with `cut`, then cuts the path
// between nodes 0 and 1 and waits (at most `cut_timeout_s`) for its fault.
std::string PmRunPhase(const Options& o, const TempDir& tmp, const std::string& dir, std::vector<std::string> args,
                       int n, double warmup_s, double measure_s, bool cut, double cut_timeout_s, PmPhase* out) {
  args.push_back(std::string("--domain-levels=superpod=") + kPmLabel);
  ClusterdProcess cd(o.clusterd, tmp.Sub(dir), std::move(args));
  if (std::string err = cd.Start(); !err.empty()) return "clusterd: " + err;
  std::string err;
  {
    AgentPool pool(cd.target(), NodeNames(kPmPrefix, n), o.short_mode ? 4 : o.agent_channels);
    PmResponder responder(&pool);
    pool.set_on_message([&responder](size_t i, const v1::ConnectResponse& m) { responder(i, m); });
    err = pool.Connect(300);
    if (err.empty()) {
      pool.StartHeartbeats(2.0);
      std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));  // the warm-up is a fixed time
      const double c0 = cd.CpuSeconds();
      const double r0 = cd.Metric("clusterd_pingmesh_results");
      const uint64_t p0 = responder.plans();
      const int64_t t0 = NowNs();
      std::this_thread::sleep_for(std::chrono::duration<double>(measure_s));  // measuring over a fixed time
      const double s = static_cast<double>(NowNs() - t0) / 1e9;
      out->cpu_cores = (cd.CpuSeconds() - c0) / s;
      out->results_per_s = (std::max(0.0, cd.Metric("clusterd_pingmesh_results")) - std::max(0.0, r0)) / s;
      out->plans_per_s = static_cast<double>(responder.plans() - p0) / s;
      out->round_probes = cd.Metric("clusterd_pingmesh_round_probes");
      out->rss_mib = ProcessRssKiB(cd.pid()) / 1024;
      if (cut) {
        const int64_t cut_ns = NowNs();
        responder.Cut(0, 1);
        const int64_t end = cut_ns + static_cast<int64_t>(cut_timeout_s * 1e9);
        const std::string a = pool.name(0), b = pool.name(1);
        while (NowNs() < end && !(PmHasLinkFault(cd.http_port(), a) && PmHasLinkFault(cd.http_port(), b))) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        if (PmHasLinkFault(cd.http_port(), a) && PmHasLinkFault(cd.http_port(), b)) {
          out->cut_to_fault_s = static_cast<double>(NowNs() - cut_ns) / 1e9;
        } else {
          err = "the cut path between " + a + " and " + b + " was not named within " + Fmt(cut_timeout_s, " s");
        }
      }
      pool.StopHeartbeats();
    }
    pool.Close();
  }
  cd.Stop();
  return err;
}

json PmPhaseJson(const PmPhase& p) {
  json j = {{"cpu_cores", p.cpu_cores},
            {"results_per_s", p.results_per_s},
            {"plans_per_s", p.plans_per_s},
            {"round_probes", p.round_probes},
            {"rss_mib", p.rss_mib}};
  if (!std::isnan(p.cut_to_fault_s)) j["cut_to_fault_s"] = p.cut_to_fault_s;
  return j;
}

}  // namespace

std::string RunPingmesh(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const int n = o.pingmesh_nodes;
  const double warmup_s = o.short_mode ? 5 : 12;   // past the first round's plans
  const double measure_s = o.short_mode ? 5 : 30;  // three rounds at the default interval
  std::cerr << "[bench] scenario 19: the pingmesh, " << n << " nodes in SuperPoDs of " << kPmSuperPod << "\n";
  SetHelloEdit(PmHello);
  PmPhase base, steady, cut;
  // At the defaults a round every 10 s; --short every 2 s (its measurement is short).
  const double steady_interval_s = o.short_mode ? 2 : 10;
  std::string err =
      PmRunPhase(o, tmp, "clusterd-pm-off", {"--pingmesh-enabled=false"}, n, warmup_s, measure_s, false, 0, &base);
  if (err.empty()) {
    std::vector<std::string> args;
    if (o.short_mode) args = {"--pingmesh-interval=2s", "--pingmesh-probe-timeout=500ms"};
    err = PmRunPhase(o, tmp, "clusterd-pm-on", args, n, warmup_s, measure_s, false, 0, &steady);
  }
  // The cut: rounds every 2 s and a 12 s window (--short: 1 s and 4 s),
  // raised after 2 judged windows; once without suspect re-probing, once at
  // its default (3 more peers at each end of a direction that lost a round).
  const double interval_s = o.short_mode ? 1 : 2, window_s = o.short_mode ? 4 : 12;
  const int raise_after = 2;
  const int members = std::min(n, kPmSuperPod);
  const double coverage_s = std::ceil(static_cast<double>(members - 1) / kPmFanout) * interval_s;
  // Each judged window needs a probe of the pair, at worst one per coverage
  // period: raise_after of them, the window that judges the last, a round.
  const double bound_s = raise_after * coverage_s + window_s + interval_s;
  // With suspects: the first probe of the pair (a coverage period), then a
  // probe every round, so raise_after windows in a row judge it, and a round.
  const double suspect_bound_s = coverage_s + raise_after * window_s + interval_s;
  auto secs = [](double s) { return std::to_string(std::lround(s)) + "s"; };
  const std::vector<std::string> cut_args = {"--pingmesh-interval=" + secs(interval_s),
                                             "--pingmesh-window=" + secs(window_s), "--pingmesh-raise-after=2",
                                             "--pingmesh-probe-timeout=200ms"};
  PmPhase plain_cut;
  if (err.empty()) {
    auto args = cut_args;
    args.push_back("--pingmesh-suspect-probes=0");
    err = PmRunPhase(o, tmp, "clusterd-pm-cut-plain", args, n, warmup_s, o.short_mode ? 2 : 10, true, 3 * bound_s,
                     &plain_cut);
  }
  if (err.empty()) {
    err = PmRunPhase(o, tmp, "clusterd-pm-cut", cut_args, n, warmup_s, o.short_mode ? 2 : 10, true, 3 * bound_s, &cut);
  }
  SetHelloEdit(nullptr);
  if (!err.empty()) return "scenario 19: " + err;
  json result = {{"nodes", n},
                 {"superpod", kPmSuperPod},
                 {"steady_interval_s", steady_interval_s},
                 {"cut_interval_s", interval_s},
                 {"cut_window_s", window_s},
                 {"pingmesh_off", PmPhaseJson(base)},
                 {"pingmesh_on", PmPhaseJson(steady)},
                 {"pingmesh_cut", PmPhaseJson(cut)},
                 {"pingmesh_cut_without_suspects", PmPhaseJson(plain_cut)},
                 {"cut_bound_s", suspect_bound_s},
                 {"cut_bound_without_suspects_s", bound_s}};
  (*out)["scenario19_pingmesh"] = result;
  const std::string size = std::to_string(n) + " nodes / SuperPoDs of " + std::to_string(kPmSuperPod);
  const std::string every = "a round every " + secs(steady_interval_s);
  const double cpu_ratio = base.cpu_cores > 0 ? steady.cpu_cores / base.cpu_cores : NAN;
  rows->push_back({"19 pingmesh", "clusterd CPU, pingmesh on (" + size + ", " + every + ", hb 2 s)",
                   Fmt(steady.cpu_cores, " cores"), Fmt(base.cpu_cores, " cores pingmesh off"), Fmt(cpu_ratio, "x"), "",
                   ""});
  rows->push_back({"19 pingmesh", "probe results taken / plans answered per second (" + every + ")",
                   Fmt(steady.results_per_s, "/s") + " / " + Fmt(steady.plans_per_s, "/s"),
                   Fmt(steady.round_probes, " probes per round"), "", "", ""});
  const std::string cut_setup = "(a round every " + secs(interval_s) + ", window " + secs(window_s);
  rows->push_back(
      {"19 pingmesh", "path cut -> LINK_PINGMESH_LOSS on both ends, no suspect re-probing " + cut_setup + ")",
       Fmt(plain_cut.cut_to_fault_s, " s"), Fmt(bound_s, " s bound (2 coverage periods + a window + a round)"),
       Fmt(plain_cut.cut_to_fault_s / bound_s, "x"), "<= 1x bound", Met(plain_cut.cut_to_fault_s <= bound_s)});
  rows->push_back(
      {"19 pingmesh", "path cut -> LINK_PINGMESH_LOSS on both ends, suspects re-probed " + cut_setup + ")",
       Fmt(cut.cut_to_fault_s, " s"), Fmt(suspect_bound_s, " s bound (a coverage period + 2 windows + a round)"),
       Fmt(cut.cut_to_fault_s / suspect_bound_s, "x"), "<= 1x bound", Met(cut.cut_to_fault_s <= suspect_bound_s)});
  return "";
}

}  // namespace clusterd::bench
