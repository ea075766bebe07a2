// ClusterState: recovery records, job state and isolation as the Coordinator
// changes them, and the recovery queries. See cluster_state.h for the thread
// contract; docs/recovery.md for the model.
#include <algorithm>
#include <tuple>

#include "clusterd/cluster_state.h"
#include "clusterd/response_limits.h"
#include "clusterd/storage/key_codec.h"
#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd {

using storage::Cf;

namespace {

// n of "<job>.<n>", 0 if the id does not end that way.
uint64_t RecoverySeqOf(const std::string& id) {
  const size_t dot = id.rfind('.');
  if (dot == std::string::npos || dot + 1 >= id.size()) return 0;
  uint64_t n = 0;
  for (size_t i = dot + 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  return n;
}

}  // namespace

void ClusterState::LoadRecovery(v1::Recovery r) {
  uint64_t& seq = recovery_seq_[r.job_id()];
  seq = std::max(seq, RecoverySeqOf(r.id()));
  recoveries_by_job_[r.job_id()].insert(r.id());
  std::string id = r.id();
  recoveries_[std::move(id)] = std::move(r);
}

std::vector<const v1::Recovery*> ClusterState::RecoveriesOfJob(const std::string& job_id) const {
  std::vector<const v1::Recovery*> out;
  auto it = recoveries_by_job_.find(job_id);
  if (it == recoveries_by_job_.end()) return out;
  for (const auto& id : it->second) out.push_back(&recoveries_.at(id));
  std::sort(out.begin(), out.end(),
            [](const v1::Recovery* a, const v1::Recovery* b) { return a->create_revision() < b->create_revision(); });
  return out;
}

size_t ClusterState::ApplyRecoveryRetention(const RecoveryRetention& retention, TimePoint now, Mutation* m) {
  struct Candidate {
    TimePoint ended;
    std::string id;
  };
  std::vector<Candidate> candidates;
  for (const auto& [job_id, ids] : recoveries_by_job_) {
    const v1::Recovery* newest = nullptr;
    if (jobs_.count(job_id)) {
      for (const auto& id : ids) {
        const v1::Recovery& r = recoveries_.at(id);
        if (!newest || r.create_revision() > newest->create_revision()) newest = &r;
      }
    }
    for (const auto& id : ids) {
      const v1::Recovery& r = recoveries_.at(id);
      const auto s = r.state();
      if (&r == newest || s == v1::RECOVERY_STATE_WAITING || s == v1::RECOVERY_STATE_RUNNING ||
          s == v1::RECOVERY_STATE_UNSPECIFIED) {
        continue;
      }
      const TimePoint created = FromTimestamp(r.create_time());
      const TimePoint ended = FromTimestamp(r.has_end_time() ? r.end_time() : r.update_time());
      if (now - created <= retention.protect || now - ended <= retention.protect) continue;
      candidates.push_back({ended, id});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return std::tie(a.ended, a.id) < std::tie(b.ended, b.id); });
  const size_t excess = recoveries_.size() > retention.max_count ? recoveries_.size() - retention.max_count : 0;
  size_t removed = 0;
  for (const Candidate& c : candidates) {
    if (removed >= excess && now - c.ended <= retention.max_age) break;  // oldest first: the rest stay too
    auto it = recoveries_.find(c.id);
    m->changes.Delete(Cf::kRecoveries, storage::RecoveryKey(c.id));
    auto by_job = recoveries_by_job_.find(it->second.job_id());
    by_job->second.erase(c.id);
    // recovery_seq_ keeps the job's counter, so an id is never given twice
    // while this process runs; after a restart it is rebuilt from what is
    // stored, which always includes the newest recovery of a job that exists.
    if (by_job->second.empty()) recoveries_by_job_.erase(by_job);
    recoveries_.erase(it);
    ++removed;
  }
  return removed;
}

std::string ClusterState::NextRecoveryId(const std::string& job_id) {
  return job_id + "." + std::to_string(++recovery_seq_[job_id]);
}

const v1::Recovery& ClusterState::PutRecovery(v1::Recovery r, v1::EventType type, Mutation* m) {
  v1::Event ev;
  ev.set_type(type);
  ev.set_revision(NextRevision(m));
  r.set_revision(ev.revision());
  if (r.create_revision() == 0) r.set_create_revision(ev.revision());
  *r.mutable_update_time() = ToTimestamp(clock_->Now());
  if (!r.has_create_time()) *r.mutable_create_time() = r.update_time();
  ev.add_job_ids(r.job_id());
  *ev.mutable_recovery() = r;
  m->changes.Put(Cf::kRecoveries, storage::RecoveryKey(r.id()), r);
  Emit(m, std::move(ev));
  recoveries_by_job_[r.job_id()].insert(r.id());
  std::string id = r.id();
  auto& slot = recoveries_[id];
  slot = std::move(r);
  return slot;
}

Status ClusterState::SetJobState(const std::string& id, v1::JobState state, const std::string& reason, Mutation* m) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  v1::Job& job = it->second;
  if (job.state() == state) return Status::Ok();
  job.set_state(state);
  *job.mutable_update_time() = ToTimestamp(clock_->Now());
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_UPDATED);
  ev.set_revision(NextRevision(m));
  job.set_revision(ev.revision());
  ev.add_job_ids(id);
  ev.set_actor("clusterd");
  ev.set_reason(reason);
  *ev.mutable_job() = job;
  m->changes.Put(Cf::kJobs, storage::JobKey(id), job);
  Emit(m, std::move(ev));
  return Status::Ok();
}

Status ClusterState::SetIsolated(const std::string& node, std::optional<uint32_t> device, const std::string& reason,
                                 Mutation* m) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("node " + node + " is not registered");
  NodeState& n = it->second;
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_NODE_UPDATED);
  ev.set_node(node);
  ev.set_actor("clusterd");
  ev.set_reason(reason);
  if (device) {
    auto dit = n.devices.find(*device);
    if (dit == n.devices.end()) {
      // A device the agent never reported: record it so the isolation shows.
      v1::Device d;
      d.set_node(node);
      d.set_id(*device);
      d.set_health(v1::HEALTH_HEALTHY);
      dit = n.devices.emplace(*device, std::move(d)).first;
    }
    v1::Device& d = dit->second;
    if (d.isolated()) return Status::Ok();
    d.set_isolated(true);
    d.set_isolation_reason(reason);
    ev.set_revision(NextRevision(m));
    d.set_revision(ev.revision());
    ev.set_device_id(*device);
    ev.set_message("device " + std::to_string(*device) + " isolated");
    PutDevice(d, m);
  } else {
    v1::Node* rec = n.record.mutable_node();
    if (rec->isolated()) return Status::Ok();
    rec->set_isolated(true);
    rec->set_isolation_reason(reason);
    ev.set_revision(NextRevision(m));
    rec->set_revision(ev.revision());
    ev.set_message("node isolated");
    PutNode(n, m);
  }
  *ev.mutable_node_info() = n.record.node();
  Emit(m, std::move(ev));
  return Status::Ok();
}

void ClusterState::ClearIsolation(NodeState& n, Mutation* m) {
  n.record.mutable_node()->set_isolated(false);
  n.record.mutable_node()->clear_isolation_reason();
  for (auto& [id, d] : n.devices) {
    if (!d.isolated()) continue;
    d.set_isolated(false);
    d.clear_isolation_reason();
    PutDevice(d, m);
  }
}

std::vector<const v1::Fault*> ClusterState::FaultsOnJobNodes(const v1::Job& job) const {
  std::set<std::string> nodes;
  for (const auto& p : job.placement()) nodes.insert(p.node());
  std::vector<const v1::Fault*> out;
  for (const auto& node : nodes) {
    for (const auto& [key, f] : FaultsOfNode(node)) out.push_back(&f);
  }
  return out;
}

const v1::Fault* ClusterState::FindFault(const std::string& fault_id) const {
  for (const auto& [key, f] : FaultsOfNode(fault_id.substr(0, fault_id.find('/')))) {
    if (f.id() == fault_id) return &f;
  }
  return nullptr;
}

std::set<std::string> ClusterState::CordonedNodes() const {
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_) {
    if (n.record.node().cordoned()) out.insert(name);
  }
  return out;
}

std::set<std::string> ClusterState::IsolatedNodes() const {
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_) {
    if (n.record.node().isolated()) out.insert(name);
  }
  return out;
}

// ---------------------------------------------------------------- queries ---

StatusOr<v1::ListRecoveriesResponse> ClusterState::ListRecoveries(const v1::ListRecoveriesRequest& req) const {
  if (req.page_size() < 0) return InvalidArgument("page_size: must not be negative");
  const int32_t page_size = req.page_size() == 0 ? 100 : std::min(req.page_size(), 1000);
  // Newest first: the token is the create_revision of the last one returned.
  uint64_t below = UINT64_MAX;
  if (!req.page_token().empty()) {
    auto decoded = storage::HexDecode(req.page_token());
    auto rev = decoded ? storage::DecodeU64(*decoded) : std::nullopt;
    if (!rev) return InvalidArgument("page_token: not a token this server issued");
    below = *rev;
  }
  if (!req.job().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job", req.job()));
  if (!v1::RecoveryState_IsValid(req.state())) return InvalidArgument("state: unknown value");
  std::vector<const v1::Recovery*> match;
  for (const auto& [id, r] : recoveries_) {
    if (!req.job().empty() && r.job_id() != req.job()) continue;
    if (req.state() != v1::RECOVERY_STATE_UNSPECIFIED && r.state() != req.state()) continue;
    match.push_back(&r);
  }
  std::sort(match.begin(), match.end(),
            [](const v1::Recovery* a, const v1::Recovery* b) { return a->create_revision() > b->create_revision(); });
  v1::ListRecoveriesResponse out;
  out.set_total_size(static_cast<int32_t>(match.size()));
  PageBudget budget(page_size);  // by count and by bytes (response_limits.h)
  for (const v1::Recovery* r : match) {
    if (r->create_revision() >= below) continue;
    if (!budget.Take(r->ByteSizeLong())) {
      std::string token;
      storage::AppendU64(&token, out.recoveries(out.recoveries_size() - 1).create_revision());
      out.set_next_page_token(storage::HexEncode(token));
      break;
    }
    *out.add_recoveries() = *r;
  }
  return out;
}

StatusOr<v1::Recovery> ClusterState::GetRecovery(const std::string& id) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("id", id, 512));
  if (id.empty()) return InvalidArgument("id: required");
  auto it = recoveries_.find(id);
  if (it == recoveries_.end()) return NotFound("recovery " + id + " does not exist");
  return it->second;
}

}  // namespace clusterd
