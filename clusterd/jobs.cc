// ClusterState: jobs and fault impact. See cluster_state.h for the thread
// contract; docs/recovery.md for the model.
#include <algorithm>
#include <set>

#include "clusterd/cluster_state.h"
#include "clusterd/placement_index.h"
#include "clusterd/recovery/types.h"
#include "clusterd/response_limits.h"
#include "clusterd/storage/key_codec.h"
#include "common/metrics.h"
#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd {

using storage::Cf;

namespace {

Status ValidateStrategy(const std::string& at, int s) {
  if (!v1::RecoveryStrategy_IsValid(s) || s == v1::RECOVERY_STRATEGY_UNSPECIFIED) {
    return InvalidArgument(at + ": unknown recovery strategy " + std::to_string(s));
  }
  return Status::Ok();
}

Status ValidatePolicy(const v1::RecoveryPolicy& p) {
  for (int s : p.allowed_strategies()) CLUSTERD_RETURN_IF_ERROR(ValidateStrategy("policy.allowed_strategies", s));
  for (const auto& t : p.step_timeouts()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateStrategy("policy.step_timeouts.strategy", t.strategy()));
    if (t.timeout().seconds() < 0 || t.timeout().nanos() < 0 ||
        (t.timeout().seconds() == 0 && t.timeout().nanos() == 0)) {
      return InvalidArgument("policy.step_timeouts.timeout: must be positive");
    }
  }
  for (const auto& w : p.silences()) {
    std::string code = w.code();
    if (!code.empty() && code.back() == '*') code.pop_back();
    CLUSTERD_RETURN_IF_ERROR(ValidateCode("policy.silences.code", code));
  }
  if (p.hold_down().seconds() < 0 || p.hold_down().nanos() < 0) {
    return InvalidArgument("policy.hold_down: must not be negative");
  }
  return Status::Ok();
}

}  // namespace

Status ValidateJob(const v1::Job& job, size_t max_ranks) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job.id", job.id()));
  if (job.kind() != v1::JOB_KIND_TRAINING && job.kind() != v1::JOB_KIND_INFERENCE) {
    return InvalidArgument("job.kind: must be JOB_KIND_TRAINING or JOB_KIND_INFERENCE");
  }
  if (!v1::JobState_IsValid(job.state())) return InvalidArgument("job.state: unknown value");
  if (job.placement_size() == 0) return InvalidArgument("job.placement: at least one rank");
  if (static_cast<size_t>(job.placement_size()) > max_ranks) {
    return InvalidArgument("job.placement: " + std::to_string(job.placement_size()) + " ranks, more than the " +
                           std::to_string(max_ranks) + " a job may have (max_job_ranks)");
  }
  std::set<uint32_t> ranks;
  for (const auto& p : job.placement()) {
    const std::string at = "job.placement[rank " + std::to_string(p.rank()) + "]";
    if (!ranks.insert(p.rank()).second) return InvalidArgument(at + ": duplicate rank");
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(at + ".node", p.node()));
    if (p.has_device_id() && p.device_id() > 65535) return InvalidArgument(at + ".device_id: above 65535");
  }
  if (job.labels_size() > static_cast<int>(kMaxLabels)) return InvalidArgument("job.labels: more than 64 labels");
  for (const auto& [k, v] : job.labels()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("job.labels key", k));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("job.labels[" + k + "]", v, true));
  }
  CLUSTERD_RETURN_IF_ERROR(ValidatePolicy(job.policy()));
  // Checked last (it walks the whole message): a job travels whole in every
  // answer and Watch event, which must fit a client's 4 MiB.
  if (const size_t bytes = job.ByteSizeLong(); bytes > kMaxJobBytes) {
    return InvalidArgument("job: " + std::to_string(bytes) + " bytes, more than the " + std::to_string(kMaxJobBytes) +
                           " a job record may take (placement, policy and labels together)");
  }
  return Status::Ok();
}

std::vector<uint32_t> RanksHit(const v1::Job& job, const v1::Fault& fault) {
  std::vector<uint32_t> out;
  for (const auto& p : job.placement()) {
    if (p.node() != fault.node()) continue;
    if (recovery::FaultHitsRank(fault.has_device_id() ? std::optional<uint32_t>(fault.device_id()) : std::nullopt,
                                p.has_device_id() ? std::optional<uint32_t>(p.device_id()) : std::nullopt)) {
      out.push_back(p.rank());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ClusterState::IndexJob(const v1::Job& job, bool add) {
  for (const auto& p : job.placement()) {
    if (add) {
      jobs_by_node_[p.node()].insert(job.id());
    } else if (auto it = jobs_by_node_.find(p.node()); it != jobs_by_node_.end()) {
      it->second.erase(job.id());
      if (it->second.empty()) jobs_by_node_.erase(it);
    }
  }
}

std::vector<std::string> ClusterState::JobsHitBy(const v1::Fault& f) const {
  std::vector<std::string> out;
  auto it = jobs_by_node_.find(f.node());
  if (it == jobs_by_node_.end()) return out;
  for (const auto& id : it->second) {
    if (!RanksHit(jobs_.at(id), f).empty()) out.push_back(id);
  }
  return out;
}

v1::Job ClusterState::WithImpacts(const v1::Job& job) const {
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
    for (const auto& [key, f] : FaultsOfNode(node)) {
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

namespace {

std::string SourceOf(const v1::Job& job) { return job.source().empty() ? ClusterState::kApiSource : job.source(); }

Status CheckSource(const v1::Job& stored, const std::string& source, const char* verb) {
  if (SourceOf(stored) == source) return Status::Ok();
  return FailedPrecondition("job " + stored.id() + " was registered by " + SourceOf(stored) + "; " + source +
                            " may not " + verb + " it");
}

}  // namespace

StatusOr<v1::Job> ClusterState::ApplyCreateJob(const v1::Job& requested, Mutation* m, const std::string& source) {
  v1::Job job = requested;
  job.clear_impacts();
  job.set_source(source);
  if (job.state() == v1::JOB_STATE_UNSPECIFIED) job.set_state(v1::JOB_STATE_RUNNING);
  if (Status st = ValidateJob(job, limits_.max_job_ranks); !st.ok()) {
    if (limits_.jobs_refused) limits_.jobs_refused->Inc();
    return st;
  }
  if (jobs_.count(job.id())) return Status(StatusCode::kAlreadyExists, "job " + job.id() + " already exists");
  const auto now = ToTimestamp(clock_->Now());
  *job.mutable_create_time() = now;
  *job.mutable_update_time() = now;
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_CREATED);
  ev.set_revision(NextRevision(m));
  job.set_revision(ev.revision());
  ev.add_job_ids(job.id());
  *ev.mutable_job() = job;
  m->changes.Put(Cf::kJobs, storage::JobKey(job.id()), job);
  Emit(m, std::move(ev));
  jobs_[job.id()] = job;
  IndexJob(job, true);
  return WithImpacts(job);
}

StatusOr<v1::Job> ClusterState::ApplyUpdateJob(const v1::Job& requested, Mutation* m, const std::string& source) {
  auto it = jobs_.find(requested.id());
  if (it == jobs_.end()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job.id", requested.id()));
    return NotFound("job " + requested.id() + " does not exist");
  }
  CLUSTERD_RETURN_IF_ERROR(CheckSource(it->second, source, "change"));
  v1::Job job = requested;
  job.clear_impacts();
  job.set_source(it->second.source());
  if (job.kind() == v1::JOB_KIND_UNSPECIFIED) job.set_kind(it->second.kind());
  if (job.kind() != it->second.kind()) return InvalidArgument("job.kind: cannot change");
  if (job.state() == v1::JOB_STATE_UNSPECIFIED) job.set_state(it->second.state());
  if (Status st = ValidateJob(job, limits_.max_job_ranks); !st.ok()) {
    if (limits_.jobs_refused) limits_.jobs_refused->Inc();
    return st;
  }
  *job.mutable_create_time() = it->second.create_time();
  *job.mutable_update_time() = ToTimestamp(clock_->Now());
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_UPDATED);
  ev.set_revision(NextRevision(m));
  job.set_revision(ev.revision());
  ev.add_job_ids(job.id());
  *ev.mutable_job() = job;
  m->changes.Put(Cf::kJobs, storage::JobKey(job.id()), job);
  Emit(m, std::move(ev));
  IndexJob(it->second, false);
  it->second = job;
  IndexJob(job, true);
  return WithImpacts(job);
}

StatusOr<uint64_t> ClusterState::ApplyDeleteJob(const std::string& id, Mutation* m, const std::string& source) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("id", id));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  // The API may remove any job (an operator cleaning up after an
  // integration); an integration only its own.
  if (source != kApiSource) CLUSTERD_RETURN_IF_ERROR(CheckSource(it->second, source, "delete"));
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_DELETED);
  ev.set_revision(NextRevision(m));
  ev.add_job_ids(id);
  *ev.mutable_job() = it->second;
  m->changes.Delete(Cf::kJobs, storage::JobKey(id));
  const uint64_t rev = ev.revision();
  Emit(m, std::move(ev));
  IndexJob(it->second, false);
  jobs_.erase(it);
  return rev;
}

StatusOr<v1::Job> ClusterState::GetJob(const std::string& id) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("id", id));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  return WithImpacts(it->second);
}

StatusOr<v1::ListJobsResponse> ClusterState::ListJobs(const v1::ListJobsRequest& req) const {
  if (req.page_size() < 0) return InvalidArgument("page_size: must not be negative");
  const int32_t page_size = req.page_size() == 0 ? 100 : std::min(req.page_size(), 1000);
  std::string start;
  if (!req.page_token().empty()) {
    auto decoded = storage::HexDecode(req.page_token());
    if (!decoded || decoded->empty()) return InvalidArgument("page_token: not a token this server issued");
    start = *decoded;
  }
  if (!v1::JobState_IsValid(req.state())) return InvalidArgument("state: unknown value");
  if (!v1::JobKind_IsValid(req.kind())) return InvalidArgument("kind: unknown value");
  v1::ListJobsResponse out;
  int32_t total = 0;
  PageBudget budget(page_size);
  for (const auto& [id, job] : jobs_) {
    if (req.state() != v1::JOB_STATE_UNSPECIFIED && job.state() != req.state()) continue;
    if (req.kind() != v1::JOB_KIND_UNSPECIFIED && job.kind() != req.kind()) continue;
    ++total;
    if (!start.empty() && id <= start) continue;
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

}  // namespace clusterd
