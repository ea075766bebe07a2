#include "clusterd/state/evidence.h"

#include <algorithm>
#include <vector>

#include "clusterd/state/agent_outbox.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/incidents.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/schema.h"
#include "common/duration.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_proto.h"

namespace clusterd {

namespace {

std::string EvidenceStoreKey(const std::string& incident, const std::string& node) {
  return std::string(storage::kMetaEvidencePrefix) + incident + "/" + node;
}

void Bump(Counter* c) {
  if (c != nullptr) c->Inc();
}

}  // namespace

Status ValidateEvidenceOptions(const EvidenceOptions& o) {
  constexpr uint64_t kMaxBundle = uint64_t{3} << 20;
  if (o.max_bundle_bytes < 1024 || o.max_bundle_bytes > kMaxBundle) {
    return InvalidArgument("evidence_max_bundle_bytes: 1 KiB to 3 MiB (an answer holding one stays under 4 MiB), not " +
                           std::to_string(o.max_bundle_bytes));
  }
  if (o.max_total_bytes < o.max_bundle_bytes) {
    return InvalidArgument("evidence_max_total_bytes: at least evidence_max_bundle_bytes (" +
                           std::to_string(o.max_bundle_bytes) + "), not " + std::to_string(o.max_total_bytes));
  }
  if (o.max_in_flight == 0) return InvalidArgument("evidence_max_in_flight: at least 1");
  if (o.timeout <= std::chrono::nanoseconds::zero()) return InvalidArgument("evidence_timeout: must be positive");
  if (o.max_age <= std::chrono::nanoseconds::zero()) return InvalidArgument("evidence_max_age: must be positive");
  return Status::Ok();
}

EvidenceRule::Entry* EvidenceRule::Find(const std::string& incident, const std::string& node) {
  auto it = entries_.find(incident);
  if (it == entries_.end()) return nullptr;
  auto e = it->second.find(node);
  return e == it->second.end() ? nullptr : &e->second;
}

void EvidenceRule::UpdateGauges() {
  if (metrics_.bytes) metrics_.bytes->Set(static_cast<double>(total_bytes_));
  if (metrics_.bundles) metrics_.bundles->Set(static_cast<double>(stored_order_.size()));
  if (metrics_.in_flight) metrics_.in_flight->Set(static_cast<double>(in_flight_));
  if (metrics_.queued) metrics_.queued->Set(static_cast<double>(queued_));
}

void EvidenceRule::Loaded(ClusterState& state) {
  entries_.clear();
  entry_count_ = 0;
  scanned_.clear();
  queue_.clear();
  queued_ = in_flight_ = 0;
  deadlines_.clear();
  stored_order_.clear();
  total_bytes_ = 0;
  const std::string prefix(storage::kMetaEvidencePrefix);
  (void)state.store().ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (key.substr(0, prefix.size()) != prefix) return;
    v1::EvidenceBundle b;
    if (!b.ParseFromArray(value.data(), static_cast<int>(value.size())) || b.incident_id().empty() ||
        b.node().empty()) {
      GetLogger("state")->error("evidence record {} does not parse: skipped", storage::HexEncode(key));
      return;
    }
    Entry& e = entries_[b.incident_id()][b.node()];
    ++entry_count_;
    e.member.set_node(b.node());
    e.member.set_state(v1::EVIDENCE_STATE_STORED);
    e.member.set_size_bytes(b.size_bytes());
    e.stored_at = FromTimestamp(b.store_time());
    total_bytes_ += b.size_bytes();
    stored_order_.insert({e.stored_at, {b.incident_id(), b.node()}});
    e.bundle = std::move(b);
  });
  UpdateGauges();
}

void EvidenceRule::AgentUp(const std::string& node, uint64_t session, bool collects) {
  if (!options_.enabled) return;
  if (collects) {
    agents_[node] = session;
    non_collecting_.erase(node);
  } else {
    non_collecting_[node] = session;
    agents_.erase(node);
  }
  dispatch_ = true;
}

void EvidenceRule::Fail(Entry& e, const std::string& detail) {
  if (e.member.state() == v1::EVIDENCE_STATE_ASKED && in_flight_ > 0) --in_flight_;
  if (e.member.state() == v1::EVIDENCE_STATE_QUEUED && queued_ > 0) --queued_;
  e.member.set_state(v1::EVIDENCE_STATE_FAILED);
  e.member.set_detail(detail);
  Bump(metrics_.failed);
  dispatch_ = true;  // a slot is free
}

// Members of open incidents not asked yet, in the order they were hit.
void EvidenceRule::Scan(ClusterState& state, TimePoint now) {
  const IncidentRule* incidents = state.Attached<IncidentRule>();
  if (incidents == nullptr) return;
  for (const auto& [domain, id] : incidents->open_by_domain()) {
    const v1::Incident* inc = incidents->Find(id);
    if (inc == nullptr) continue;
    uint64_t& seen = scanned_[id];
    if (seen == inc->revision() && inc->revision() != 0) continue;
    seen = inc->revision();
    auto& members = entries_[id];
    for (const v1::IncidentMember& m : inc->members()) {
      if (members.count(m.node()) != 0) continue;
      if (entry_count_ >= kMaxEntries) {
        Bump(metrics_.dropped);
        continue;
      }
      Entry& e = members[m.node()];
      ++entry_count_;
      e.member.set_node(m.node());
      e.member.set_state(v1::EVIDENCE_STATE_QUEUED);
      e.since = FromTimestamp(m.time()) - options_.log_before;
      e.queued_at = now;
      queue_.emplace_back(id, m.node());
      ++queued_;
      dispatch_ = true;
    }
  }
}

void EvidenceRule::Dispatch(ClusterState& state, const WriterTick& tick) {
  if (!dispatch_) return;
  dispatch_ = false;
  const TimePoint now = tick.now;
  for (auto it = queue_.begin(); it != queue_.end();) {
    Entry* e = Find(it->first, it->second);
    if (e == nullptr || e->member.state() != v1::EVIDENCE_STATE_QUEUED) {
      it = queue_.erase(it);
      continue;
    }
    const std::string& node = it->second;
    if (auto nc = non_collecting_.find(node); nc != non_collecting_.end()) {
      Fail(*e, "the node's agent collects no evidence (evidence off there, or an older NodeD)");
      it = queue_.erase(it);
      continue;
    }
    const NodeState* n = state.node_table().Find(node);
    auto agent = agents_.find(node);
    if (n == nullptr || !n->connected || agent == agents_.end() || agent->second != n->session || outbox_ == nullptr) {
      // Its agent is not there (yet): it waits at most evidence_timeout.
      if (now - e->queued_at >= options_.timeout) {
        Fail(*e,
             "the node's agent was not connected within evidence_timeout (" + FormatDuration(options_.timeout) + ")");
        it = queue_.erase(it);
      } else {
        ++it;
      }
      continue;
    }
    if (in_flight_ >= options_.max_in_flight) {
      ++it;
      continue;
    }
    --queued_;
    ++in_flight_;
    e->member.set_state(v1::EVIDENCE_STATE_ASKED);
    *e->member.mutable_asked_time() = ToTimestamp(now);
    e->deadline = now + options_.timeout;
    e->sent_session = n->session;
    deadlines_.insert({e->deadline, *it});
    Bump(metrics_.asked);
    if (tick.after != nullptr) {
      v1::ConnectResponse msg;
      v1::EvidenceRequest* req = msg.mutable_evidence_request();
      req->set_incident_id(it->first);
      req->set_node(node);
      *req->mutable_since() = ToTimestamp(e->since);
      req->set_max_bytes(options_.max_bundle_bytes);
      tick.after->push_back(
          [outbox = outbox_, node, session = n->session, msg = std::move(msg)] { outbox->Send(node, session, msg); });
    }
    it = queue_.erase(it);
  }
  // A member still waiting for its agent is looked at again when its
  // queue time runs out (the timer below) or an agent says hello.
}

void EvidenceRule::Expire(const Key& key, v1::EvidenceState why, Mutation* m) {
  Entry* e = Find(key.first, key.second);
  if (e == nullptr || !e->bundle) return;
  stored_order_.erase({e->stored_at, key});
  total_bytes_ -= std::min<uint64_t>(total_bytes_, e->member.size_bytes());
  e->bundle.reset();
  e->member.set_state(why);
  e->member.set_detail(why == v1::EVIDENCE_STATE_EXPIRED ? "deleted: older than evidence_max_age" : "");
  m->changes.Delete(storage::Cf::kMeta, EvidenceStoreKey(key.first, key.second));
}

void EvidenceRule::DropIncident(const std::string& incident, Mutation* m) {
  auto it = entries_.find(incident);
  if (it == entries_.end()) return;
  for (auto& [node, e] : it->second) {
    if (e.bundle) {
      stored_order_.erase({e.stored_at, {incident, node}});
      total_bytes_ -= std::min<uint64_t>(total_bytes_, e.member.size_bytes());
      m->changes.Delete(storage::Cf::kMeta, EvidenceStoreKey(incident, node));
    }
    if (e.member.state() == v1::EVIDENCE_STATE_ASKED && in_flight_ > 0) --in_flight_;
    if (e.member.state() == v1::EVIDENCE_STATE_QUEUED && queued_ > 0) --queued_;
    deadlines_.erase({e.deadline, {incident, node}});
    --entry_count_;
  }
  entries_.erase(it);
  scanned_.erase(incident);
}

TimePoint EvidenceRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  if (options_.enabled) Scan(state, now);
  // Asked members past their deadline.
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    const Key key = deadlines_.begin()->second;
    deadlines_.erase(deadlines_.begin());
    Entry* e = Find(key.first, key.second);
    if (e != nullptr && e->member.state() == v1::EVIDENCE_STATE_ASKED) {
      Fail(*e, "no bundle within evidence_timeout (" + FormatDuration(options_.timeout) + ")");
    }
  }
  // A member waiting for its agent may have run out of time.
  if (queued_ > 0 && now >= next_housekeeping_) dispatch_ = true;
  Dispatch(state, tick);
  // Bundles by age.
  while (!stored_order_.empty() && now - stored_order_.begin()->first >= options_.max_age) {
    const Key key = stored_order_.begin()->second;
    Expire(key, v1::EVIDENCE_STATE_EXPIRED, tick.m);
    Bump(metrics_.expired_age);
  }
  // The total cap (lowered by a restart with a smaller one): the oldest go.
  while (total_bytes_ > options_.max_total_bytes && !stored_order_.empty()) {
    const Key oldest = stored_order_.begin()->second;
    Expire(oldest, v1::EVIDENCE_STATE_EXPIRED, tick.m);
    if (Entry* old = Find(oldest.first, oldest.second)) {
      old->member.set_detail("deleted: evidence_max_total_bytes reached (the oldest go first)");
    }
    Bump(metrics_.expired_size);
  }
  // Housekeeping: the evidence of incidents the incident rule no longer
  // keeps goes with them, and scans of closed incidents are forgotten.
  if (now >= next_housekeeping_) {
    next_housekeeping_ = now + std::chrono::seconds(10);
    const IncidentRule* incidents = state.Attached<IncidentRule>();
    std::vector<std::string> gone;
    for (const auto& [id, members] : entries_) {
      if (incidents == nullptr || incidents->Find(id) == nullptr) gone.push_back(id);
    }
    for (const std::string& id : gone) DropIncident(id, tick.m);
    for (auto it = scanned_.begin(); it != scanned_.end();) {
      const v1::Incident* inc = incidents == nullptr ? nullptr : incidents->Find(it->first);
      it = inc == nullptr || inc->state() != v1::INCIDENT_STATE_OPEN ? scanned_.erase(it) : std::next(it);
    }
  }
  UpdateGauges();
  TimePoint next = TimePoint::max();
  if (!deadlines_.empty()) next = std::min(next, deadlines_.begin()->first);
  if (!stored_order_.empty()) next = std::min(next, stored_order_.begin()->first + options_.max_age);
  if (queued_ > 0 || !entries_.empty()) next = std::min(next, next_housekeeping_);
  return next;
}

Status EvidenceRule::ApplyBundle(ClusterState& state, const std::string& node, v1::EvidenceBundle bundle, Mutation* m) {
  (void)state;
  Entry* e = Find(bundle.incident_id(), node);
  if (e == nullptr) {
    Bump(metrics_.refused);
    return PermissionDenied("node " + node + " was not asked for evidence of incident \"" +
                            bundle.incident_id().substr(0, 64) + "\"");
  }
  if (!bundle.node().empty() && bundle.node() != node) {
    Bump(metrics_.refused);
    return PermissionDenied("node " + node + " may send its own evidence only, not node \"" +
                            bundle.node().substr(0, 64) + "\"'s");
  }
  const v1::EvidenceState st = e->member.state();
  if (st != v1::EVIDENCE_STATE_ASKED && st != v1::EVIDENCE_STATE_FAILED) {
    Bump(metrics_.refused);
    return FailedPrecondition("evidence of node " + node + " for incident " + bundle.incident_id() + " is " +
                              v1::EvidenceState_Name(st) + ": not asked for now");
  }
  if (bundle.sections_size() > kMaxSections) {
    Bump(metrics_.refused);
    return InvalidArgument("evidence.sections: at most " + std::to_string(kMaxSections));
  }
  for (const v1::EvidenceSection& s : bundle.sections()) {
    if (s.name().empty() || s.name().size() > kMaxSectionName) {
      Bump(metrics_.refused);
      return InvalidArgument("evidence.sections.name: 1 to " + std::to_string(kMaxSectionName) + " characters");
    }
  }
  bundle.set_node(node);
  bundle.clear_store_time();
  bundle.clear_size_bytes();
  const uint64_t size = bundle.ByteSizeLong();
  if (size > options_.max_bundle_bytes) {
    Bump(metrics_.refused);
    const std::string why = "bundle of " + std::to_string(size) + " bytes over evidence_max_bundle_bytes (" +
                            std::to_string(options_.max_bundle_bytes) + ")";
    if (st == v1::EVIDENCE_STATE_ASKED) {
      deadlines_.erase({e->deadline, {bundle.incident_id(), node}});
      Fail(*e, why);
    }
    return ResourceExhausted(why);
  }
  const TimePoint now = state.Now();
  *bundle.mutable_store_time() = ToTimestamp(now);
  bundle.set_size_bytes(size);
  m->changes.Put(storage::Cf::kMeta, EvidenceStoreKey(bundle.incident_id(), node), bundle);
  if (st == v1::EVIDENCE_STATE_ASKED) {
    deadlines_.erase({e->deadline, {bundle.incident_id(), node}});
    if (in_flight_ > 0) --in_flight_;
    dispatch_ = true;
  }
  const Key key{bundle.incident_id(), node};
  e->member.set_state(v1::EVIDENCE_STATE_STORED);
  e->member.set_detail("");
  e->member.set_size_bytes(size);
  e->stored_at = now;
  e->bundle = std::move(bundle);
  stored_order_.insert({now, key});
  total_bytes_ += size;
  Bump(metrics_.stored);
  // The total cap: the oldest bundles go (never the one just stored: it is
  // at most max_bundle_bytes <= max_total_bytes).
  while (total_bytes_ > options_.max_total_bytes && stored_order_.size() > 1) {
    const Key oldest = stored_order_.begin()->second;
    Entry* old = Find(oldest.first, oldest.second);
    Expire(oldest, v1::EVIDENCE_STATE_EXPIRED, m);
    if (old != nullptr) old->member.set_detail("deleted: evidence_max_total_bytes reached (the oldest go first)");
    Bump(metrics_.expired_size);
  }
  UpdateGauges();
  GetLogger("state")->info("evidence of node {} for incident {} stored: {} bytes", node, key.first, size);
  return Status::Ok();
}

StatusOr<v1::GetIncidentEvidenceResponse> EvidenceRule::Get(const IncidentRule* incidents,
                                                            const v1::GetIncidentEvidenceRequest& req) const {
  if (req.id().empty()) return InvalidArgument("id: required");
  auto it = entries_.find(req.id());
  if (it == entries_.end()) {
    if (incidents == nullptr || incidents->Find(req.id()) == nullptr) {
      return NotFound("incident " + req.id() + " not found");
    }
    return v1::GetIncidentEvidenceResponse{};
  }
  v1::GetIncidentEvidenceResponse resp;
  for (const auto& [node, e] : it->second) *resp.add_members() = e.member;
  if (!req.node().empty()) {
    auto e = it->second.find(req.node());
    if (e == it->second.end()) {
      return NotFound("node " + req.node() + " is not a member of incident " + req.id() + " asked for evidence");
    }
    if (e->second.bundle) *resp.mutable_bundle() = *e->second.bundle;
    return resp;
  }
  // One stored bundle per page: the first member at or after the token.
  auto e = it->second.lower_bound(req.page_token());
  while (e != it->second.end() && !e->second.bundle) ++e;
  if (e == it->second.end()) return resp;
  *resp.mutable_bundle() = *e->second.bundle;
  for (++e; e != it->second.end(); ++e) {
    if (e->second.bundle) {
      resp.set_next_page_token(e->first);
      break;
    }
  }
  return resp;
}

}  // namespace clusterd
