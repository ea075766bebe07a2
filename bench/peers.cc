// Scenario 10: etcd and the Kubernetes API server next to ClusterD's own
// figures of the same run (peers.h).
#include "peers.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <thread>

namespace clusterd::bench {
namespace {

bool Executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

// The value at a JSON path, or nullptr when a step is missing.
const json* Find(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return p;
}

// A number at a JSON path, NAN when any step is missing or not a number.
double At(const json& j, std::initializer_list<const char*> path) {
  const json* p = Find(j, path);
  return p && p->is_number() ? p->get<double>() : NAN;
}

std::string Ratio(double ours, double theirs, const char* note = "") {
  return std::isnan(ours) || std::isnan(theirs) || theirs == 0 ? "" : Fmt(ours / theirs, "x") + note;
}

std::string Ms2(double p50, double p99) { return Fmt(p50, " ms") + " / " + Fmt(p99, " ms"); }

// ClusterD's figures of this run that the peers are set against.
struct Ours {
  double ingest = NAN, ack_p50 = NAN, ack_p99 = NAN, fan_p50 = NAN, fan_p99 = NAN, fan_rate = NAN;
  double detect_p50 = NAN, detect_p99 = NAN;
  double slow_rate = NAN, slow_p99 = NAN;  // scenario 6's paced ingest without a stalled watcher
  explicit Ours(const json& out) {
    ingest = At(out, {"scenario1_durable_ingest", "acked_per_s"});
    ack_p50 = At(out, {"scenario2_ack_latency", "latency_ms", "p50"});
    ack_p99 = At(out, {"scenario2_ack_latency", "latency_ms", "p99"});
    fan_p50 = At(out, {"scenario6_fanout", "delivery_latency_ms", "p50"});
    fan_p99 = At(out, {"scenario6_fanout", "delivery_latency_ms", "p99"});
    fan_rate = At(out, {"scenario6_fanout", "deliveries_per_s"});
    detect_p50 = At(out, {"scenario4_detection", "fault_to_watch", "p50_ms"});
    detect_p99 = At(out, {"scenario4_detection", "fault_to_watch", "p99_ms"});
    slow_rate = At(out, {"scenario6_fanout", "stalled_watcher", "ingest_rate"});
    const json* without = Find(out, {"scenario6_fanout", "stalled_watcher", "ack_p99_without_ms"});
    if (without && without->is_array() && !without->empty()) {
      double sum = 0;
      for (const auto& v : *without) sum += v.get<double>();
      slow_p99 = sum / static_cast<double>(without->size());
    }
  }
};

// A peer's fan-out: watchers (`what`) fed by its writers (`verb`: put,
// updated); `f` holds events, duration_s, missing, delivery_p50/p99_ms,
// deliveries_per_s and the count named `ended`.
void FanoutRows(const char* peer, const char* what, const char* verb, const json& f, double offered, const char* ended,
                const Ours& us, std::vector<Row>* rows) {
  // The rate the writers got in while the watchers were served, not the offered one.
  const std::string shape = std::to_string(f.value("watchers", 0)) + " " + what + ", " +
                            Fmt(At(f, {"events"}) / At(f, {"duration_s"}), "/s") + " " + verb + " (offered " +
                            Fmt(offered, "/s") + ")";
  rows->push_back({peer, shape + ": missing / " + what + " ended",
                   std::to_string(static_cast<int64_t>(At(f, {"missing"}))) + " / " +
                       std::to_string(static_cast<int64_t>(At(f, {ended}))),
                   "", "", "", ""});
  const double p99 = At(f, {"delivery_p99_ms"}), rate = At(f, {"deliveries_per_s"});
  rows->push_back({peer, "watch delivery p50 / p99", Ms2(At(f, {"delivery_p50_ms"}), p99),
                   "ClusterD " + Ms2(us.fan_p50, us.fan_p99), Ratio(p99, us.fan_p99, " (p99)"), "", ""});
  rows->push_back({peer, "watch deliveries/s", Fmt(rate, "/s"), "ClusterD " + Fmt(us.fan_rate, "/s"),
                   Ratio(us.fan_rate, rate), "", ""});
}

void EtcdRows(const json& e, const Ours& us, std::vector<Row>* rows) {
  const double tput = At(e, {"throughput", "acked_per_s"});
  rows->push_back({"10 etcd", "fenced txn/s, 1 per transition (" + std::to_string(e.value("writers", 0)) + " writers)",
                   Fmt(tput, "/s"), "ClusterD " + Fmt(us.ingest, "/s"), Ratio(us.ingest, tput), "", ""});
  const double p50 = At(e, {"paced", "p50_ms"}), p99 = At(e, {"paced", "p99_ms"});
  rows->push_back({"10 etcd",
                   "txn ack p50 / p99, offered " + Fmt(At(e, {"paced", "offered_rate"}), "/s") + ", sent " +
                       Fmt(At(e, {"paced", "sent_per_s"}), "/s"),
                   Ms2(p50, p99), "ClusterD " + Ms2(us.ack_p50, us.ack_p99), Ratio(p99, us.ack_p99, " (p99)"), "", ""});
  const double slow99 = At(e, {"paced_fanout_rate", "p99_ms"});
  rows->push_back({"10 etcd", "txn ack p99 @" + Fmt(At(e, {"paced_fanout_rate", "offered_rate"}), "/s"),
                   Fmt(slow99, " ms"), "ClusterD " + Fmt(us.slow_p99, " ms") + " (6: no stall)",
                   Ratio(slow99, us.slow_p99), "", ""});
  const uint64_t failed = e["throughput"].value("failed", uint64_t{0}) + e["paced"].value("failed", uint64_t{0}) +
                          e["paced_fanout_rate"].value("failed", uint64_t{0});
  if (failed > 0) {
    rows->push_back(
        {"10 etcd", "transactions failed (timeouts, too many requests)", std::to_string(failed), "", "", "", ""});
  }
  if (e["fanout"].is_object()) {
    FanoutRows("10 etcd", "watchers", "put", e["fanout"], At(e, {"fanout", "offered_rate"}), "watches_ended", us, rows);
  }
}

void KubeRows(const json& k, const Ours& us, std::vector<Row>* rows) {
  const double tput = At(k, {"throughput", "updates_per_s"});
  rows->push_back({"10 kube", "ConfigMap updates/s (" + std::to_string(k.value("writers", 0)) + " writers)",
                   Fmt(tput, "/s"), "ClusterD " + Fmt(us.ingest, "/s"), Ratio(us.ingest, tput), "", ""});
  const double p50 = At(k, {"paced", "ack_p50_ms"}), p99 = At(k, {"paced", "ack_p99_ms"});
  rows->push_back({"10 kube",
                   "update ack p50 / p99 @" + Fmt(At(k, {"paced", "achieved_per_s"}), "/s") + " (offered " +
                       Fmt(At(k, {"paced", "offered_rate"}), "/s") + ")",
                   Ms2(p50, p99), "ClusterD " + Ms2(us.ack_p50, us.ack_p99), Ratio(p99, us.ack_p99, " (p99)"), "", ""});
  const double c50 = At(k, {"paced", "consumer_p50_ms"}), c99 = At(k, {"paced", "consumer_p99_ms"});
  rows->push_back({"10 kube",
                   "fault -> informer p50 / p99 (missing " +
                       std::to_string(static_cast<int64_t>(At(k, {"paced", "missing"}))) + ")",
                   Ms2(c50, c99), "ClusterD " + Ms2(us.detect_p50, us.detect_p99) + " fault -> Watch",
                   Ratio(c99, us.detect_p99, " (p99)"), "", ""});
  if (k["fanout"].is_object()) {
    FanoutRows("10 kube", "watches", "updated", k["fanout"], At(k, {"fanout", "rate"}), "watches_closed", us, rows);
  }
}

// Runs bench/kube-peer (a Go program: client-go is the client MindCluster
// uses) against a kube-apiserver and etcd it starts itself; its JSON, or an error.
std::string RunKubePeer(const Options& o, const TempDir& tmp, json* result) {
  const std::string dir = tmp.Sub("kube"), out = tmp.Sub("kube-peer.json");
  ::mkdir(dir.c_str(), 0700);
  const double fan_s = o.short_mode ? std::min(o.duration_s, 1.5) : o.duration_s;
  std::vector<std::string> args = {o.kube_peer,
                                   "--etcd",
                                   o.etcd,
                                   "--kube-apiserver",
                                   o.kube_apiserver,
                                   "--workdir",
                                   dir,
                                   "--json",
                                   out,
                                   "--writers",
                                   std::to_string(o.streams),
                                   "--duration",
                                   Fmt(o.duration_s),
                                   "--rate",
                                   Fmt(o.rate),
                                   "--watchers",
                                   std::to_string(o.watchers),
                                   "--fanout-rate",
                                   Fmt(o.fanout_rate),
                                   "--fanout-duration",
                                   Fmt(fan_s)};
  if (o.short_mode) args.push_back("--short");
  std::cerr << "[bench] scenario 10: " << o.kube_peer << " (kube-apiserver + etcd, client-go)\n";
  ChildProcess proc;
  if (auto err = proc.Spawn(args, tmp.Sub("kube-peer.log")); !err.empty()) return "scenario 10: " + err;
  const int64_t deadline = NowNs() + static_cast<int64_t>(900e9);
  while (!proc.Exited()) {
    if (NowNs() > deadline) {
      proc.Stop();
      return "scenario 10: kube-peer did not finish within 900 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::ifstream in(out);
  if (!in) {
    std::ifstream log(tmp.Sub("kube-peer.log"));
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    if (text.size() > 2000) text = text.substr(text.size() - 2000);
    return "scenario 10: kube-peer wrote no results; its log ends:\n" + text;
  }
  try {
    *result = json::parse(in);
  } catch (const std::exception& e) {
    return std::string("scenario 10: kube-peer results: ") + e.what();
  }
  return "";
}

}  // namespace

std::string RunPeers(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const Ours us(*out);
  json& s10 = (*out)["scenario10_peers"];
  if (!Executable(o.etcd)) {
    std::cerr << "[bench] scenario 10 skipped: no etcd binary (--etcd, or scripts/k8s-tools.sh builds one)\n";
    s10["skipped"] = "no etcd binary";
    return "";
  }
  if (auto err = RunEtcdPeer(o, tmp, &s10["etcd"]); !err.empty()) return err;
  EtcdRows(s10["etcd"], us, rows);
  if (!Executable(o.kube_apiserver) || !Executable(o.kube_peer)) {
    std::cerr << "[bench] scenario 10: Kubernetes API server peer skipped (needs --kube-apiserver and --kube-peer; "
                 "scripts/bench.sh builds both)\n";
    s10["kube_apiserver_skipped"] = "no kube-apiserver or kube-peer binary";
    return "";
  }
  if (auto err = RunKubePeer(o, tmp, &s10["kube_apiserver"]); !err.empty()) return err;
  KubeRows(s10["kube_apiserver"], us, rows);
  return "";
}

}  // namespace clusterd::bench
