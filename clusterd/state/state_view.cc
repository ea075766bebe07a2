#include "clusterd/state/state_view.h"

#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <optional>

#include "clusterd/state/placement_index.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/metrics.h"
#include "common/validation.h"

namespace clusterd {

namespace {

bool HasPrefix(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

}  // namespace

v1::GetSummaryResponse StateView::GetSummary() const {
  // Every change a summary counts bumps the revision or the connection
  // counter, so an unchanged key means an unchanged answer (a summary walks
  // every node, device and fault: milliseconds at 10,000 nodes).
  const SummaryKey key{journal_.revision(), journal_.durable(), journal_.compacted(), nodes_.connections_changed()};
  // The scheduling diagnosis is not state (the writer replaces it): added to
  // the cached counts each time.
  auto with_findings = [this](v1::GetSummaryResponse out) {
    for (const auto& f : scheduling_findings_) *out.add_scheduling_findings() = f;
    return out;
  };
  {
    std::lock_guard lock(summary_mu_);
    if (summary_key_ == key) return with_findings(summary_cache_);
  }
  v1::GetSummaryResponse out;
  auto count = [](v1::HealthCounts* c, v1::Health h) {
    c->set_total(c->total() + 1);
    switch (h) {
      case v1::HEALTH_HEALTHY: c->set_healthy(c->healthy() + 1); break;
      case v1::HEALTH_SUB_HEALTHY: c->set_sub_healthy(c->sub_healthy() + 1); break;
      case v1::HEALTH_UNHEALTHY: c->set_unhealthy(c->unhealthy() + 1); break;
      default: c->set_unknown(c->unknown() + 1); break;
    }
  };
  uint32_t connected = 0;
  for (const auto& [name, n] : nodes_.all()) {
    count(out.mutable_nodes(), n.record.node().health());
    for (const auto& [id, d] : n.devices) count(out.mutable_devices(), d.health());
    connected += n.connected ? 1 : 0;
  }
  uint32_t active = 0;
  for (const auto& [key, f] : faults_.all()) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    ++active;
    (*out.mutable_active_faults_by_level())[v1::FaultLevel_Name(f.level())]++;
  }
  out.set_active_faults(active);
  out.set_revision(journal_.durable());
  out.set_compacted_revision(journal_.compacted());
  out.set_connected_agents(connected);
  std::lock_guard lock(summary_mu_);
  summary_key_ = key;
  summary_cache_ = out;
  return with_findings(std::move(out));
}

StatusOr<v1::GetNodeResponse> StateView::GetNode(const v1::GetNodeRequest& req) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("name", req.name()));
  const NodeState* n = nodes_.Find(req.name());
  if (!n) return NotFound("node " + req.name() + " is not registered");
  v1::GetNodeResponse out;
  *out.mutable_node() = n->Describe();
  // The recoveries its faults caused within the window (all of them, not
  // only those since its last cordon change).
  auto caused = RecoveriesByNode(clock_->Now(), recoveries_caused_window_, nullptr);
  if (auto it = caused.find(req.name()); it != caused.end()) {
    const auto& times = it->second.times;
    out.mutable_node()->set_recoveries_caused(static_cast<uint32_t>(times.size()));
    if (times.size() >= 2) {
      const auto mean = (times.back() - times.front()) / static_cast<int64_t>(times.size() - 1);
      *out.mutable_node()->mutable_mean_time_between_recoveries() =
          google::protobuf::util::TimeUtil::NanosecondsToDuration(
              std::chrono::duration_cast<std::chrono::nanoseconds>(mean).count());
    }
  }
  for (const auto& [id, d] : n->devices) *out.add_devices() = d;
  *out.mutable_metrics() = n->metrics;
  // The faults fill what the node, its devices and metrics leave of the
  // answer's budget (ListFaults pages through the rest).
  const size_t used = out.ByteSizeLong();
  PageBudget budget(1000, used < kAnswerBytes ? kAnswerBytes - used : 0);
  std::string last_key;
  for (const auto& [key, f] : faults_.OfNode(req.name())) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    if (budget.Take(f.ByteSizeLong() + 8)) {
      *out.add_active_faults() = f;
      last_key = key;
      continue;
    }
    out.set_active_faults_truncated(true);
    if (!last_key.empty()) out.set_next_faults_page_token(storage::HexEncode(last_key));
    if (limits_.node_faults_truncated) limits_.node_faults_truncated->Inc();
    break;
  }
  return out;
}

bool StateView::DescribeNode(const std::string& name, v1::Node* node, std::vector<v1::Device>* devices) const {
  const NodeState* n = nodes_.Find(name);
  if (!n) return false;
  *node = n->Describe();
  devices->clear();
  devices->reserve(n->devices.size());
  for (const auto& [id, d] : n->devices) devices->push_back(d);
  return true;
}

StatusOr<v1::ListFaultsResponse> StateView::ListFaults(const v1::ListFaultsRequest& req) const {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  if (!req.node().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  if (req.has_device_id() && req.node().empty()) return InvalidArgument("device_id: requires node");
  if (!v1::FaultLevel_IsValid(req.min_level())) return InvalidArgument("min_level: unknown value");
  const v1::Job* job = nullptr;
  if (!req.job().empty()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job", req.job()));
    job = jobs_.Find(req.job());
    if (!job) return NotFound("job " + req.job() + " does not exist");
  }
  const std::string prefix = req.node().empty() ? std::string() : storage::NodePrefix(req.node());
  // Indexed once: a job of R ranks costs O(log R) per fault, not O(R).
  const std::optional<PlacementIndex> placement = job ? std::optional<PlacementIndex>(*job) : std::nullopt;
  auto matches = [&](const v1::Fault& f) {
    if (placement) {
      const auto* ranks = placement->RanksHit(f);
      if (!ranks || ranks->empty()) return false;
    }
    if (req.has_device_id() && (!f.has_device_id() || f.device_id() != req.device_id())) return false;
    if (f.level() < req.min_level()) return false;
    if (req.active_only() && f.state() != v1::FAULT_STATE_ACTIVE) return false;
    return f.revision() > req.since_revision();
  };
  v1::ListFaultsResponse out;
  int32_t total = 0;
  std::string last_key;
  PageBudget budget(page->size);
  const auto& all = faults_.all();
  for (auto it = all.lower_bound(prefix); it != all.end() && HasPrefix(it->first, prefix); ++it) {
    if (!matches(it->second)) continue;
    ++total;
    if (!page->start.empty() && it->first <= page->start) continue;
    if (budget.Take(it->second.ByteSizeLong())) {
      *out.add_faults() = it->second;
      last_key = it->first;
    } else if (out.next_page_token().empty()) {
      out.set_next_page_token(storage::HexEncode(last_key));
    }
  }
  out.set_total_size(total);
  return out;
}

v1::Job StateView::WithImpacts(const v1::Job& job) const {
  // Bounded by construction: the placement is indexed once, each fault
  // record on the job's nodes costs a lookup, and at most max_job_impacts
  // impacts (kImpactBytes in all, kMaxImpactRanks ranks each) are listed; the
  // rest are only counted.
  v1::Job out = job;
  const PlacementIndex index(job);
  uint32_t total = 0;
  size_t bytes = 0;
  bool truncated = false;
  for (const auto& node : index.Nodes()) {
    for (const auto& [key, f] : faults_.OfNode(node)) {
      if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
      const std::vector<uint32_t>* ranks = index.RanksHit(f);
      if (!ranks || ranks->empty()) continue;
      ++total;
      if (truncated) continue;
      v1::FaultImpact impact;
      impact.set_fault_id(f.id());
      impact.set_level(f.level());
      impact.set_node(f.node());
      if (f.has_device_id()) impact.set_device_id(f.device_id());
      impact.set_code(f.code());
      impact.set_total_ranks(static_cast<uint32_t>(ranks->size()));
      const size_t listed = std::min(ranks->size(), kMaxImpactRanks);
      impact.mutable_ranks()->Reserve(static_cast<int>(listed));
      for (size_t i = 0; i < listed; ++i) impact.add_ranks((*ranks)[i]);
      const size_t size = impact.ByteSizeLong() + 8;  // + field tag and length
      if (static_cast<uint32_t>(out.impacts_size()) >= limits_.max_job_impacts || bytes + size > kImpactBytes) {
        truncated = true;
        continue;
      }
      bytes += size;
      *out.add_impacts() = std::move(impact);
    }
  }
  out.set_total_impacts(total);
  out.set_impacts_truncated(truncated);
  if (truncated && limits_.job_impacts_truncated) limits_.job_impacts_truncated->Inc();
  return out;
}

StatusOr<v1::Job> StateView::GetJob(const std::string& id) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("id", id));
  const v1::Job* job = jobs_.Find(id);
  if (!job) return NotFound("job " + id + " does not exist");
  return WithImpacts(*job);
}

StatusOr<v1::ListJobsResponse> StateView::ListJobs(const v1::ListJobsRequest& req) const {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  if (!v1::JobState_IsValid(req.state())) return InvalidArgument("state: unknown value");
  if (!v1::JobKind_IsValid(req.kind())) return InvalidArgument("kind: unknown value");
  v1::ListJobsResponse out;
  int32_t total = 0;
  PageBudget budget(page->size);
  for (const auto& [id, job] : jobs_.all()) {
    if (req.state() != v1::JOB_STATE_UNSPECIFIED && job.state() != req.state()) continue;
    if (req.kind() != v1::JOB_KIND_UNSPECIFIED && job.kind() != req.kind()) continue;
    ++total;
    if (!page->start.empty() && id <= page->start) continue;
    if (!budget.closed()) {
      v1::Job item = WithImpacts(job);
      if (budget.Take(item.ByteSizeLong())) {
        *out.add_jobs() = std::move(item);
        continue;
      }
    }
    if (out.next_page_token().empty()) out.set_next_page_token(storage::HexEncode(out.jobs(out.jobs_size() - 1).id()));
  }
  out.set_total_size(total);
  return out;
}

std::set<std::string> StateView::NodesChangedAfter(uint64_t revision) const {
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_.all()) {
    bool changed = revision == 0 || n.record.node().revision() > revision;
    for (auto it = n.devices.begin(); !changed && it != n.devices.end(); ++it)
      changed = it->second.revision() > revision;
    if (changed) out.insert(name);
  }
  for (const auto& [key, f] : faults_.all()) {
    if (f.revision() > revision && nodes_.Find(f.node()) != nullptr) out.insert(f.node());
  }
  for (const auto& [node, changed] : jobs_.placement_changed()) {
    if (changed > revision && nodes_.Find(node) != nullptr) out.insert(node);
  }
  return out;
}

void StateView::AppendFaultsOnNode(const std::string& node, std::vector<const v1::Fault*>* out) const {
  for (const auto& [key, f] : faults_.OfNode(node)) out->push_back(&f);
}

}  // namespace clusterd
