// MindClusterStack: the ConfigMaps MindCluster's operators use
// (docs/mindcluster.md, "Separation through ConfigMaps"): the separation
// policy of clusterd-config-cm, and clusterd-manual-info-cm, where ClusterD
// lists the chips it separated and an operator releases one by deleting it.
#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/object.h"
#include "clusterd/mindcluster/k8s/stack.h"
#include "common/logging.h"

namespace clusterd {

namespace {

using nlohmann::json;
namespace mc = mindcluster;

bool SamePolicy(const SeparationPolicy& a, const SeparationPolicy& b) {
  return a.enabled == b.enabled && a.threshold == b.threshold && a.window == b.window &&
         a.release_after == b.release_after && a.settle == b.settle;
}

std::string Describe(const SeparationPolicy& p) {
  const auto hours = [](std::chrono::nanoseconds d) {
    return std::to_string(std::chrono::duration_cast<std::chrono::hours>(d).count()) + "h";
  };
  return std::string(p.enabled ? "on" : "off") + ", " + std::to_string(p.threshold) + " faults within " +
         hours(p.window) + ", released " +
         (p.release_after ? "after " + hours(*p.release_after) + " fault-free" : "by hand only");
}

// Who last wrote the object, as far as the object says: the field manager of
// its newest managedFields entry other than ClusterD's own (its user agent,
// "clusterd"): kubectl's "kubectl-edit", "kubectl-patch", ... The API server
// does not record the user there, and times have seconds only (a tie goes to
// the later entry). Made a token (printable ASCII without spaces), at most
// 64 characters; "" when unknown.
std::string LastManager(const json& object) {
  const json fields = object.contains("metadata") ? object["metadata"].value("managedFields", json()) : json();
  std::string best_time, manager;
  for (const json& f : fields.is_array() ? fields : json::array()) {
    if (!f.is_object()) continue;
    const std::string time = f.value("time", "");
    const std::string m = f.value("manager", "");
    if (m.empty() || m == "clusterd" || time < best_time) continue;
    best_time = time;
    manager = m;
  }
  std::string out;
  for (char c : manager.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.' || c == ':';
    out += ok ? c : '_';
  }
  return out;
}

std::optional<uint32_t> ChipNumber(const std::string& name) {
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos || dash + 1 >= name.size() || name.size() - dash > 6) return std::nullopt;
  uint32_t id = 0;
  for (size_t i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    id = id * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  if (id > mc::kMaxChipId) return std::nullopt;
  return id;
}

}  // namespace

void MindClusterStack::StartOperatorMetrics(MetricsRegistry* m) {
  if (m == nullptr) return;
  if (options_.separation_policy_cm) {
    const std::string total = "clusterd_mindcluster_separation_policy_cm_total";
    const std::string help =
        "Versions of clusterd-config-cm's manually_separate_policy.conf handled, by result (refused: the last good "
        "policy kept).";
    policy_applied_ = &m->AddCounter(total, help, {{"result", "applied"}});
    policy_unchanged_ = &m->AddCounter(total, help, {{"result", "unchanged"}});
    policy_refused_ = &m->AddCounter(total, help, {{"result", "refused"}});
    policy_from_cm_gauge_ =
        &m->AddGauge("clusterd_mindcluster_separation_policy_from_configmap",
                     "1 while the separation policy is clusterd-config-cm's, 0 while it is ClusterD's own settings.");
    policy_threshold_ = &m->AddGauge("clusterd_mindcluster_separation_policy_threshold",
                                     "The separation policy in force: counted faults that separate a chip.");
    policy_window_hours_ = &m->AddGauge("clusterd_mindcluster_separation_policy_window_hours",
                                        "The separation policy in force: its fault window, in hours.");
    policy_release_hours_ =
        &m->AddGauge("clusterd_mindcluster_separation_policy_release_hours",
                     "The separation policy in force: fault-free hours before a release (-1: by hand only).");
  }
  if (options_.statistics_cms || options_.scheduling_exception_cm) {
    stats_writes_ = &m->AddCounter("clusterd_mindcluster_observability_writes_total",
                                   "Writes of statistic-fault-info, current-job-statistic and "
                                   "scheduling-exception-report (each when it changed).");
    stats_write_errors_ = &m->AddCounter("clusterd_mindcluster_observability_write_errors_total",
                                         "Failed writes of the observability ConfigMaps (retried).");
  }
  if (options_.manual_info_cm) {
    manual_writes_ = &m->AddCounter("clusterd_mindcluster_manual_info_writes_total",
                                    "clusterd-manual-info-cm writes (created, updated, deleted when empty).");
    manual_write_errors_ = &m->AddCounter("clusterd_mindcluster_manual_info_write_errors_total",
                                          "Failed clusterd-manual-info-cm writes (retried).");
    manual_released_ = &m->AddCounter("clusterd_mindcluster_manual_info_released_total",
                                      "Chips released because an operator deleted them from clusterd-manual-info-cm.");
    manual_refused_ = &m->AddCounter(
        "clusterd_mindcluster_manual_info_refused_total",
        "clusterd-manual-info-cm versions that did not parse (nothing released; rewritten with ClusterD's list).");
  }
}

// ---- clusterd-config-cm ----

void MindClusterStack::ReadSeparationPolicy() {
  const std::string where = options_.system_namespace + "/" + std::string(mc::kConfigCmName);
  const auto cm = system_cms_->Get(where);
  const std::string rv = cm ? k8s::ResourceVersionOf(*cm) : "";
  if (policy_read_ && rv == policy_version_) return;  // each version once
  policy_version_ = rv;
  std::optional<SeparationPolicy> want;
  bool from_cm = false;
  if (!cm) {
    // No ConfigMap: ClusterD's own settings (separation_*).
    want = options_.separation_default;
  } else {
    const std::string key(mc::kSeparatePolicyKey);
    const json data = cm->value("data", json());
    StatusOr<mc::ManualSeparatePolicy> parsed = InvalidArgument("it has no key " + key);
    if (data.is_object() && data.contains(key)) {
      parsed = data[key].is_string() ? mc::ParseManualSeparatePolicy(data[key].get_ref<const std::string&>())
                                     : StatusOr<mc::ManualSeparatePolicy>(InvalidArgument(key + " is not a string"));
    }
    if (parsed.ok()) {
      want = mc::ToSeparationPolicy(*parsed, options_.separation_default);
      from_cm = true;
    } else {
      if (policy_refused_ != nullptr) policy_refused_->Inc();
      Warn("policy", "mindcluster: " + where + " refused: " + parsed.status().message() +
                         "; keeping the separation policy " +
                         (policy_sent_ ? "in force (" + Describe(*policy_sent_) + ")" : "of ClusterD's settings"));
      // Nothing good was seen yet: ClusterD's own settings are in force.
      if (policy_read_) return;
      want = options_.separation_default;
    }
  }
  policy_read_ = true;
  if (policy_sent_ && SamePolicy(*policy_sent_, *want) && policy_from_cm_ == from_cm) {
    if (policy_unchanged_ != nullptr && from_cm) policy_unchanged_->Inc();
    return;
  }
  auto set = AwaitReply<bool>([&](auto reply) { env_.commands->SetSeparationPolicy(*want, reply); });
  if (!set.ok()) {
    if (policy_refused_ != nullptr) policy_refused_->Inc();
    Warn("policy", "mindcluster: the separation policy of " + where + " was not applied: " + set.status().message() +
                       " (retried)");
    policy_read_ = false;  // read again at the next pass
    return;
  }
  if (from_cm && policy_applied_ != nullptr) policy_applied_->Inc();
  warned_.erase("policy");
  policy_sent_ = want;
  policy_from_cm_ = from_cm;
  GetLogger("mindcluster")
      ->info("separation policy from {}: {}", from_cm ? where : "ClusterD's settings (no " + where + ")",
             Describe(*want));
  if (policy_from_cm_gauge_ != nullptr) {
    policy_from_cm_gauge_->Set(from_cm ? 1 : 0);
    policy_threshold_->Set(want->threshold);
    policy_window_hours_->Set(
        static_cast<double>(std::chrono::duration_cast<std::chrono::hours>(want->window).count()));
    policy_release_hours_->Set(
        want->release_after
            ? static_cast<double>(std::chrono::duration_cast<std::chrono::hours>(*want->release_after).count())
            : -1);
  }
}

// ---- clusterd-manual-info-cm ----

size_t MindClusterStack::SyncManualInfo(TimePoint now, bool* pending) {
  const std::string name(mc::kManualInfoCmName);
  const std::string where = options_.system_namespace + "/" + name;
  const auto cm = system_cms_->Get(where);
  const std::string rv = cm ? k8s::ResourceVersionOf(*cm) : "";
  if (!manual_loaded_) {
    // What ClusterD listed there before it (re)started: its annotation.
    const std::string listed =
        cm ? k8s::StringAt(*cm, {"metadata", "annotations", std::string(kManualInfoListedAnnotation)}) : "";
    if (!listed.empty()) {
      if (auto l = mc::ParseListingJson(listed); l.ok()) manual_written_ = std::move(*l);
    }
    manual_loaded_ = true;
  }
  auto handled = [this](const std::string& version) {
    return std::find(manual_handled_.begin(), manual_handled_.end(), version) != manual_handled_.end();
  };
  auto handle = [this](const std::string& version) {
    manual_handled_.push_back(version);
    while (manual_handled_.size() > 16) manual_handled_.pop_front();
  };

  // 1. A version someone else wrote: the chips it no longer lists that
  // ClusterD listed are released (a deleted ConfigMap lists none, as the
  // reference takes it). One that does not parse releases nothing.
  // A version the informer brings late (older than our last write) is waited
  // out. Absent: nothing to look at, unless we wrote one since the start and
  // the API server says it is gone (deleted: the informer may lag behind our
  // create as well).
  const bool stale = cm && manual_own_ && rv != *manual_own_ && handled(rv);
  bool fresh = cm && !handled(rv);
  if (!cm && manual_own_ && !manual_own_->empty()) {
    const std::string path =
        "/api/v1/namespaces/" + k8s::UrlEncode(options_.system_namespace) + "/configmaps/" + k8s::UrlEncode(name);
    auto got = client_->Get(path);
    if (got.ok()) return 0;  // created and not yet seen
    if (got.status().code() != StatusCode::kNotFound) return 0;
    fresh = true;
    manual_own_ = "";
  }
  if (fresh) {
    handle(rv);
    {
      StatusOr<std::map<std::string, std::set<std::string>>> totals = std::map<std::string, std::set<std::string>>{};
      if (cm) totals = mc::ParseManualInfoTotals(cm->value("data", json()).dump());
      if (!totals.ok()) {
        if (manual_refused_ != nullptr) manual_refused_->Inc();
        Warn("manual-info", "mindcluster: " + where + " refused: " + totals.status().message() +
                                "; nothing released, ClusterD's list is written again");
      } else {
        warned_.erase("manual-info");
        const std::string manager = cm ? LastManager(*cm) : "";
        for (auto node = manual_written_.begin(); node != manual_written_.end();) {
          const auto kept = totals->find(node->first);
          for (auto chip = node->second.begin(); chip != node->second.end();) {
            if (kept != totals->end() && kept->second.count(*chip)) {
              ++chip;
              continue;
            }
            const auto id = ChipNumber(*chip);
            auto ours = ours_.find(node->first);
            if (id && ours != ours_.end() && ours->second.separated.count(*id)) {
              const std::string reason = "deleted from " + where + (cm ? "" : " (the ConfigMap was deleted)") +
                                         (manager.empty() ? "" : " by field manager " + manager);
              auto released = AwaitReply<v1::Device>(
                  [&](auto reply) { env_.commands->ReleaseDevice(node->first, *id, manager, reason, reply); });
              if (released.ok()) {
                if (manual_released_ != nullptr) manual_released_->Inc();
                GetLogger("mindcluster")->warn("node {} chip {} released: {}", node->first, *chip, reason);
                // Not listed again before ClusterD's state says so.
                ours->second.separated.erase(*id);
                ours->second.state.chip_state[*id].separated = false;
              } else {
                Warn("release/" + node->first + "/" + *chip, "mindcluster: node " + node->first + " chip " + *chip +
                                                                 " deleted from " + where +
                                                                 " was not released: " + released.status().message());
              }
            }
            chip = node->second.erase(chip);
          }
          node = node->second.empty() ? manual_written_.erase(node) : std::next(node);
        }
      }
    }
  }

  // 2. ClusterD's separations, when they differ from what is there; not
  // before the informer has brought our last write.
  if (stale) return 0;
  mc::ManualInfo want;
  std::map<std::string, std::set<std::string>> listing;
  for (const auto& [node, ours] : ours_) {
    for (const auto& [id, chip] : ours.separated) {
      want[node].push_back(chip);
      listing[node].insert(chip.name);
    }
  }
  const std::map<std::string, std::string> data = mc::ManualInfoCmData(want);
  const std::string listed = mc::ListingJson(listing);
  bool same = false;
  if (cm) {
    const json have = cm->value("data", json());
    same = have.is_object() && have.size() == data.size() &&
           std::all_of(data.begin(), data.end(),
                       [&](const auto& kv) {
                         return have.contains(kv.first) && have[kv.first].is_string() && have[kv.first] == kv.second;
                       }) &&
           k8s::StringAt(*cm, {"metadata", "annotations", std::string(kManualInfoListedAnnotation)}) == listed;
  } else {
    same = data.empty();
  }
  if (same) {
    manual_written_ = listing;
    return 0;
  }
  if (now < manual_next_write_ || !TakeToken(now)) {
    *pending = true;
    return 0;
  }
  manual_next_write_ = now + std::chrono::duration_cast<TimePoint::duration>(options_.manual_info_interval);
  const std::string path =
      "/api/v1/namespaces/" + k8s::UrlEncode(options_.system_namespace) + "/configmaps/" + k8s::UrlEncode(name);
  Status st;
  std::string written_version;
  if (data.empty()) {
    // Nothing separated: the ConfigMap goes, as the reference's does.
    // Guarded: a version written since is looked at first.
    auto deleted = client_->Delete(path, json{{"preconditions", {{"resourceVersion", rv}}}});
    st = deleted.ok() || deleted.status().code() == StatusCode::kNotFound ? Status::Ok() : deleted.status();
  } else {
    auto put = PutOwnConfigMap(options_.system_namespace, name, data, {},
                               {{std::string(kManualInfoListedAnnotation), listed}}, rv);
    if (put.ok()) {
      written_version = *put;
    } else {
      st = put.status();
    }
  }
  if (!st.ok()) {
    if (manual_write_errors_ != nullptr) manual_write_errors_->Inc();
    Warn("write/manual-info", "mindcluster: cannot write " + where + ": " + st.message() + " (retrying)");
    *pending = true;
    return 0;
  }
  warned_.erase("write/manual-info");
  if (manual_writes_ != nullptr) manual_writes_->Inc();
  manual_written_ = std::move(listing);
  manual_own_ = written_version;
  if (!written_version.empty()) handle(written_version);
  return 1;
}

// ---- observability: statistic-fault-info, current-job-statistic, scheduling-exception-report ----

size_t MindClusterStack::WriteObservability(TimePoint now, bool* pending) {
  if (now < stats_next_) return 0;
  struct Want {
    std::string ns, name;
    std::map<std::string, std::string> data, labels;
  };
  std::vector<Want> wants;
  if (options_.statistics_cms) {
    std::map<std::string, std::vector<mc::PublicFaultStat>> faults;
    for (const auto& [node, ours] : ours_) {
      if (!ours.public_faults.empty()) faults[node] = ours.public_faults;
    }
    wants.push_back({options_.system_namespace,
                     std::string(mc::kStatisticFaultCmName),
                     mc::StatisticFaultCmData(faults),
                     {{std::string(mc::kStatisticFaultLabel), "true"}}});
    std::vector<mc::JobStat> jobs;
    v1::ListJobsRequest req;
    req.set_page_size(1000);
    for (;;) {
      auto page = env_.commands->ListJobs(req);
      if (!page.ok()) break;
      for (const v1::Job& j : page->jobs()) {
        mc::JobStat st;
        st.id = j.id();
        std::set<std::pair<std::string, uint32_t>> chips;
        for (const v1::RankPlacement& r : j.placement()) {
          if (r.has_device_id()) chips.emplace(r.node(), r.device_id());
        }
        st.card_num = static_cast<int64_t>(chips.size());
        st.first_run_ms = j.create_time().seconds() * 1000 + j.create_time().nanos() / 1'000'000;
        st.fault_times = static_cast<int64_t>(j.total_impacts());
        jobs.push_back(std::move(st));
      }
      if (page->next_page_token().empty() || jobs.size() >= mc::kMaxJobStatistics) break;
      req.set_page_token(page->next_page_token());
    }
    wants.push_back({options_.cluster_info_namespace,
                     std::string(mc::kJobStatisticCmName),
                     mc::JobStatisticCmData(std::move(jobs)),
                     {}});
  }
  if (options_.scheduling_exception_cm) {
    std::vector<mc::SchedulingException> exceptions;
    for (const v1::SchedulingFinding& f : env_.commands->SchedulingFindings()) {
      mc::SchedulingException e;
      e.key = f.pod() + "." + f.pod_namespace() + "/" + f.pod();
      e.job_name = f.pod();
      e.job_type = "Pod";
      e.name_space = f.pod_namespace();
      e.status = "PodGroupInqueue";
      e.reason = f.reason() == "taints" ? "NodePredicateFailed" : "NotEnoughResources";
      e.message = f.evidence();
      exceptions.push_back(std::move(e));
    }
    wants.push_back({options_.system_namespace,
                     std::string(mc::kSchedulingExceptionCmName),
                     mc::SchedulingExceptionCmData(exceptions),
                     {}});
  }
  size_t written = 0;
  for (const Want& w : wants) {
    const std::string key = w.ns + "/" + w.name;
    auto last = stats_written_.find(key);
    if (last != stats_written_.end() && last->second == w.data) continue;  // unchanged: no write
    if (!TakeToken(now)) {
      *pending = true;
      return written;  // the rest at the next pass
    }
    auto version = stats_versions_.find(key);
    auto put =
        PutOwnConfigMap(w.ns, w.name, w.data, w.labels, {}, version == stats_versions_.end() ? "" : version->second);
    if (!put.ok() && put.status().code() == StatusCode::kAlreadyExists) {
      // There already (written before a restart, or by the reference): its
      // version read, and written over at once.
      auto there = client_->Get("/api/v1/namespaces/" + k8s::UrlEncode(w.ns) + "/configmaps/" + k8s::UrlEncode(w.name));
      if (there.ok()) put = PutOwnConfigMap(w.ns, w.name, w.data, w.labels, {}, k8s::ResourceVersionOf(*there));
    }
    if (put.ok()) {
      stats_versions_[key] = *put;
      stats_written_[key] = w.data;
      warned_.erase("write/" + key);
      if (stats_writes_ != nullptr) stats_writes_->Inc();
      ++written;
      continue;
    }
    // Made or changed by someone else (the reference, an operator): its
    // version read again, written over at the next turn; gone: made again.
    const StatusCode code = put.status().code();
    if (code == StatusCode::kNotFound) {
      stats_versions_.erase(key);
    } else if (code == StatusCode::kAborted || code == StatusCode::kAlreadyExists) {
      auto now_cm =
          client_->Get("/api/v1/namespaces/" + k8s::UrlEncode(w.ns) + "/configmaps/" + k8s::UrlEncode(w.name));
      if (now_cm.ok()) stats_versions_[key] = k8s::ResourceVersionOf(*now_cm);
    }
    if (stats_write_errors_ != nullptr) stats_write_errors_->Inc();
    Warn("write/" + key, "mindcluster: cannot write " + key + ": " + put.status().message() + " (retrying)");
    *pending = true;
  }
  stats_next_ = now + std::chrono::duration_cast<TimePoint::duration>(options_.statistics_interval);
  return written;
}

StatusOr<std::string> MindClusterStack::PutOwnConfigMap(const std::string& ns, const std::string& name,
                                                        const std::map<std::string, std::string>& data,
                                                        const std::map<std::string, std::string>& labels,
                                                        const std::map<std::string, std::string>& annotations,
                                                        const std::string& resource_version) {
  const std::string collection = "/api/v1/namespaces/" + k8s::UrlEncode(ns) + "/configmaps";
  json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", name}, {"namespace", ns}}},
             {"data", json::object()}};
  for (const auto& [k, v] : data) cm["data"][k] = v;
  for (const auto& [k, v] : labels) cm["metadata"]["labels"][k] = v;
  for (const auto& [k, v] : annotations) cm["metadata"]["annotations"][k] = v;
  if (!resource_version.empty()) {
    // Guarded: a version written since we read it is looked at first (a
    // conflict; the informer brings it).
    cm["metadata"]["resourceVersion"] = resource_version;
    auto put = client_->Put(collection + "/" + k8s::UrlEncode(name), cm);
    if (!put.ok()) return put.status();
    return k8s::ResourceVersionOf(*put);
  }
  auto created = client_->Post(collection, cm);
  if (!created.ok()) return created.status();
  return k8s::ResourceVersionOf(*created);
}

}  // namespace clusterd
