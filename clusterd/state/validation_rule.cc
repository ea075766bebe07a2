// ValidationRule (state/validation_rule.h): return to service, proven.
#include "clusterd/state/validation_rule.h"

#include <algorithm>
#include <cstdio>

#include <google/protobuf/util/time_util.h>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/schema.h"
#include "common/duration.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd {
namespace {

using google::protobuf::util::TimeUtil;

std::string ValidationKey(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%016llu", static_cast<unsigned long long>(seq));
  return std::string(ValidationRule::kKeyPrefix) + buf;
}

std::string ValidationIdOf(uint64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "val-%012llu", static_cast<unsigned long long>(seq));
  return buf;
}

// The sequence number of an id ("val-000000000042" -> 42); 0 when it is not one.
uint64_t ValidationSeqOf(const std::string& id) {
  if (id.size() != 16 || id.rfind("val-", 0) != 0) return 0;
  uint64_t seq = 0;
  for (size_t i = 4; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return 0;
    seq = seq * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  return seq;
}

std::string TargetText(const std::string& node, std::optional<uint32_t> device) {
  return device ? "node " + node + " device " + std::to_string(*device) : "node " + node;
}

// The tail of `text`, at most `max` bytes, cut at a UTF-8 character start.
std::string TailOf(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  size_t from = text.size() - max;
  while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
  return text.substr(from);
}

void IncIf(Counter* c) {
  if (c) c->Inc();
}

// The node of an operator's or the rule's target: InvalidArgument for a
// request that does not validate, NotFound for a node or device ClusterD
// does not know.
StatusOr<const NodeState*> FindTarget(const ClusterState& state, const std::string& node,
                                      std::optional<uint32_t> device, const std::string& actor,
                                      const std::string& reason) {
  CLUSTERD_RETURN_IF_ERROR(ValidateReleaseDevice(node, actor, reason));
  const NodeState* n = state.node_table().Find(node);
  if (!n) return NotFound("node " + node + " is not registered");
  if (device && !n->devices.count(*device)) {
    return NotFound("node " + node + " has no device " + std::to_string(*device));
  }
  return n;
}

v1::Validation NewRecord(uint64_t seq, const std::string& node, std::optional<uint32_t> device,
                         const std::string& trigger) {
  v1::Validation v;
  v.set_id(ValidationIdOf(seq));
  v.set_node(node);
  if (device) {
    v.add_device_ids(*device);
  } else {
    v.set_whole_node(true);
  }
  v.set_trigger(trigger);
  return v;
}

}  // namespace

Status ValidateValidationOptions(const ValidationOptions& o) {
  if (o.max_per_node < 1 || o.max_per_node > 64) return InvalidArgument("validation_max_per_node: 1 to 64");
  if (o.max_in_flight < 1 || o.max_in_flight > 100'000) {
    return InvalidArgument("validation_max_in_flight: 1 to 100000");
  }
  if (o.timeout < std::chrono::seconds(1)) return InvalidArgument("validation_timeout: at least 1s");
  if (o.stable_window >= o.timeout) return InvalidArgument("validation_stable_window: below validation_timeout");
  if (o.flap_limit < 1 || o.flap_limit > 50) return InvalidArgument("validation_flap_limit: 1 to 50");
  if (o.flap_window < std::chrono::hours(1) || o.flap_window > std::chrono::hours(720)) {
    return InvalidArgument("validation_flap_window: 1h to 720h");
  }
  if (o.retention < 1) return InvalidArgument("validation_retention_count: at least 1");
  return Status::Ok();
}

ValidationRule::Target ValidationRule::TargetOf(const v1::Validation& v) {
  Target t{v.node(), std::nullopt};
  if (!v.whole_node() && v.device_ids_size() > 0) t.device = v.device_ids(0);
  return t;
}

v1::Validation* ValidationRule::Find(const std::string& id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  auto rit = records_.find(it->second);
  return rit == records_.end() ? nullptr : &rit->second;
}

void ValidationRule::Loaded(ClusterState& state) {
  records_.clear();
  by_id_.clear();
  open_.clear();
  sent_session_.clear();
  candidates_.clear();
  triggered_.clear();
  running_ = 0;
  held_count_ = 0;
  next_seq_ = 1;
  const std::string prefix(kKeyPrefix);
  Status st = state.store().ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (!key.starts_with(prefix)) return;
    v1::Validation v;
    if (!v.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      GetLogger("state")->error("validation record {} does not parse; skipped", key);
      return;
    }
    const uint64_t seq = ValidationSeqOf(v.id());
    if (seq == 0) return;
    next_seq_ = std::max(next_seq_, seq + 1);
    by_id_[v.id()] = seq;
    if (v.state() == v1::VALIDATION_STATE_QUEUED || v.state() == v1::VALIDATION_STATE_RUNNING) {
      open_[TargetOf(v)] = seq;
      triggered_[v.id()] = FromTimestamp(v.create_time());
      if (v.state() == v1::VALIDATION_STATE_RUNNING) ++running_;
    }
    records_.emplace(seq, std::move(v));
  });
  if (!st.ok()) GetLogger("state")->error("validations not loaded: {}", st.ToString());
  // Targets held, and targets out that never had a validation (isolated
  // before validation was turned on): checked at the first run.
  for (const auto& [name, n] : state.node_table().all()) {
    const v1::Node& node = n.record.node();
    if (node.service_phase() == v1::SERVICE_PHASE_HELD) ++held_count_;
    if (node.isolated() && node.validation_id().empty()) candidates_.insert({name, std::nullopt});
    for (const auto& [id, d] : n.devices) {
      if (d.service_phase() == v1::SERVICE_PHASE_HELD) ++held_count_;
      if ((d.isolated() && !node.isolated()) && d.validation_id().empty()) candidates_.insert({name, id});
    }
  }
  if (!open_.empty()) GetLogger("state")->info("{} validations queued or in flight resume", open_.size());
  due_ = TimePoint::min();
  UpdateGauges();
}

void ValidationRule::FaultChanged(ClusterState& state, const v1::Fault& f, bool raised, bool new_occurrence) {
  if (!options_.enabled) return;
  Target t{f.node(), f.has_device_id() ? std::optional(f.device_id()) : std::nullopt};
  if (!raised) {
    // A device fault cleared on an isolated node: the node is the target.
    if (t.device) {
      const NodeState* n = state.node_table().Find(t.node);
      if (n && n->record.node().isolated()) t.device.reset();
    }
    candidates_.insert(t);
    due_ = TimePoint::min();
    return;
  }
  if (!new_occurrence || f.level() <= v1::FAULT_LEVEL_SUB_HEALTH) return;
  // Returned by a pass and faulting again within the flap window: a flap
  // (counted at the next run: no event here).
  const NodeState* n = state.node_table().Find(t.node);
  if (!n) return;
  const google::protobuf::Timestamp* returned = nullptr;
  if (t.device) {
    auto dit = n->devices.find(*t.device);
    if (dit != n->devices.end() && dit->second.has_returned_time()) returned = &dit->second.returned_time();
  } else if (n->record.node().has_returned_time()) {
    returned = &n->record.node().returned_time();
  }
  if (returned && state.Now() - FromTimestamp(*returned) < options_.flap_window) {
    refaulted_.insert(t);
    due_ = TimePoint::min();
  }
}

bool ValidationRule::StillFaulty(ClusterState& state, const Target& t) {
  const NodeState* n = state.node_table().Find(t.node);
  if (!n) return true;
  if (!t.device) return n->lost || n->record.node().worst_level() > v1::FAULT_LEVEL_SUB_HEALTH;
  auto dit = n->devices.find(*t.device);
  return dit == n->devices.end() || dit->second.worst_level() > v1::FAULT_LEVEL_SUB_HEALTH;
}

bool ValidationRule::IsOut(ClusterState& state, const Target& t) {
  const NodeState* n = state.node_table().Find(t.node);
  if (!n) return false;
  if (!t.device) return n->record.node().isolated() || n->record.node().cordoned();
  auto dit = n->devices.find(*t.device);
  return dit != n->devices.end() && (dit->second.isolated() || dit->second.separated());
}

bool ValidationRule::SetPhase(ClusterState& state, const Target& t, v1::ServicePhase phase,
                              const std::string& validation_id, const std::string& hold_reason) {
  v1::ServicePhase before = v1::SERVICE_PHASE_UNSPECIFIED;
  if (t.device) {
    v1::Device* d = state.MutableDevice(t.node, *t.device);
    if (!d) return false;
    before = d->service_phase();
    d->set_service_phase(phase);
    if (!validation_id.empty()) d->set_validation_id(validation_id);
    d->set_hold_reason(phase == v1::SERVICE_PHASE_HELD ? hold_reason : "");
    state.DeviceChanged(*d);
  } else {
    v1::Node* node = state.MutableNode(t.node);
    if (!node) return false;
    before = node->service_phase();
    node->set_service_phase(phase);
    if (!validation_id.empty()) node->set_validation_id(validation_id);
    node->set_hold_reason(phase == v1::SERVICE_PHASE_HELD ? hold_reason : "");
    state.NodeChanged(t.node);
  }
  if (before != v1::SERVICE_PHASE_HELD && phase == v1::SERVICE_PHASE_HELD) ++held_count_;
  if (before == v1::SERVICE_PHASE_HELD && phase != v1::SERVICE_PHASE_HELD && held_count_ > 0) --held_count_;
  return true;
}

void ValidationRule::Put(ClusterState& state, v1::Validation& v, Mutation* m, std::optional<v1::EventType> event) {
  if (event) v.set_revision(state.NextRevision());
  m->changes.Put(storage::Cf::kMeta, ValidationKey(ValidationSeqOf(v.id())), v);
  if (!event) return;
  v1::Event ev;
  ev.set_type(*event);
  ev.set_revision(v.revision());
  ev.set_node(v.node());
  if (!v.whole_node() && v.device_ids_size() == 1) ev.set_device_id(v.device_ids(0));
  ev.set_actor(v.actor());
  ev.set_reason(v.reason());
  ev.set_message("validation " + v.id() + " of " + TargetText(v.node(), TargetOf(v).device) + ": " +
                 v1::ValidationState_Name(v.state()) + (v.message().empty() ? "" : " (" + v.message() + ")"));
  *ev.mutable_validation() = v;
  state.Emit(m, std::move(ev));
}

void ValidationRule::EmitTargetUpdated(ClusterState& state, const Target& t, const std::string& actor,
                                       const std::string& reason, const std::string& message, Mutation* m) {
  const NodeState* n = state.node_table().Find(t.node);
  if (!n) return;
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_NODE_UPDATED);
  ev.set_revision(state.NextRevision());
  // The target's record carries its change's revision, so that whoever
  // follows the nodes by revision (StateView::NodesChangedAfter: Volcano's
  // cluster-info lists) sees its return or its hold.
  if (t.device) {
    if (v1::Device* d = state.MutableDevice(t.node, *t.device)) {
      d->set_revision(ev.revision());
      state.DeviceChanged(*d);
    }
  } else if (v1::Node* rec = state.MutableNode(t.node)) {
    rec->set_revision(ev.revision());
    state.NodeChanged(t.node);
  }
  ev.set_node(t.node);
  if (t.device) ev.set_device_id(*t.device);
  ev.set_actor(actor);
  ev.set_reason(reason);
  ev.set_message(message);
  *ev.mutable_node_info() = n->Describe();
  state.Emit(m, std::move(ev));
}

StatusOr<v1::Validation> ValidationRule::Start(ClusterState& state, const std::string& node,
                                               std::optional<uint32_t> device, const std::string& trigger,
                                               const std::string& actor, const std::string& reason, Mutation* m) {
  auto found = FindTarget(state, node, device, actor, reason);
  if (!found.ok()) return found.status();
  if (!options_.enabled) return FailedPrecondition("validation is off in this ClusterD (validation_enabled)");
  const NodeState* n = *found;
  const Target t{node, device};
  if (auto it = open_.find(t); it != open_.end()) return records_.at(it->second);
  const v1::ServicePhase phase = device ? n->devices.at(*device).service_phase() : n->record.node().service_phase();
  if (phase == v1::SERVICE_PHASE_HELD) {
    const std::string why = device ? n->devices.at(*device).hold_reason() : n->record.node().hold_reason();
    return FailedPrecondition(TargetText(node, device) + " is held (" + why +
                              "): an operator releases it with force (clusterctl uncordon/release --force)");
  }
  const uint64_t seq = next_seq_++;
  v1::Validation v = NewRecord(seq, node, device, trigger);
  v.set_state(v1::VALIDATION_STATE_QUEUED);
  v.set_actor(actor);
  v.set_reason(reason);
  *v.mutable_create_time() = ToTimestamp(state.Now());
  v.add_requested_checks("health-stable");
  if (options_.commands) v.add_requested_checks("commands");
  // VALIDATING is out of service: a target in service is isolated for it.
  if (!IsOut(state, t)) {
    CLUSTERD_RETURN_IF_ERROR(state.SetIsolated(node, device, "validating (" + v.id() + ")", m));
  }
  Put(state, v, m, v1::EVENT_TYPE_VALIDATION_STARTED);
  SetPhase(state, t, v1::SERVICE_PHASE_VALIDATING, v.id());
  by_id_[v.id()] = seq;
  open_[t] = seq;
  triggered_[v.id()] = state.Now();
  IncIf(metrics_.started);
  GetLogger("state")->info("{}: validation {} queued ({}, by {}: {})", TargetText(node, device), v.id(), trigger, actor,
                           reason);
  due_ = TimePoint::min();
  UpdateGauges();
  return records_.emplace(seq, std::move(v)).first->second;
}

bool ValidationRule::CountFlap(ClusterState& state, const Target& t, TimePoint now, const std::string& why,
                               Mutation* m) {
  google::protobuf::RepeatedPtrField<google::protobuf::Timestamp>* times = nullptr;
  if (t.device) {
    v1::Device* d = state.MutableDevice(t.node, *t.device);
    if (!d) return false;
    times = d->mutable_flap_times();
    d->clear_returned_time();
    state.DeviceChanged(*d);
  } else {
    v1::Node* node = state.MutableNode(t.node);
    if (!node) return false;
    times = node->mutable_flap_times();
    node->clear_returned_time();
    state.NodeChanged(t.node);
  }
  google::protobuf::RepeatedPtrField<google::protobuf::Timestamp> kept;
  for (const auto& ts : *times) {
    if (now - FromTimestamp(ts) < options_.flap_window) *kept.Add() = ts;
  }
  *kept.Add() = ToTimestamp(now);
  const size_t count = static_cast<size_t>(kept.size());
  times->Swap(&kept);
  IncIf(metrics_.flaps);
  if (count < options_.flap_limit) return false;
  const std::string reason = std::to_string(count) + " flaps within " + FormatDuration(options_.flap_window) +
                             " (validation_flap_limit " + std::to_string(options_.flap_limit) + "), the last: " + why;
  SetPhase(state, t, v1::SERVICE_PHASE_HELD, "", reason);
  if (!IsOut(state, t)) (void)state.SetIsolated(t.node, t.device, "held: " + reason, m);
  EmitTargetUpdated(state, t, "clusterd", reason, TargetText(t.node, t.device) + " held: " + reason, m);
  IncIf(metrics_.held);
  GetLogger("state")->warn("{} held: {}", TargetText(t.node, t.device), reason);
  return true;
}

void ValidationRule::ReturnToService(ClusterState& state, const v1::Validation& v, const std::string& actor,
                                     const std::string& reason, Mutation* m) {
  const Target t = TargetOf(v);
  const TimePoint now = state.Now();
  if (!t.device) {
    auto node = state.ApplyCordon(t.node, false, actor, reason, m);
    if (!node.ok()) GetLogger("state")->warn("node {}: not returned: {}", t.node, node.status().ToString());
    if (v1::Node* rec = state.MutableNode(t.node)) {
      *rec->mutable_returned_time() = ToTimestamp(now);
      state.NodeChanged(t.node);
    }
  } else {
    v1::Device* d = state.MutableDevice(t.node, *t.device);
    if (!d) return;
    *d->mutable_returned_time() = ToTimestamp(now);
    const bool was_isolated = d->isolated();
    const bool separated = d->separated();
    d->set_isolated(false);
    d->clear_isolation_reason();
    state.DeviceChanged(*d);
    if (was_isolated) {
      EmitTargetUpdated(state, t, actor, reason, "device " + std::to_string(*t.device) + " back in service", m);
    }
    if (separated) {
      auto released = ReleaseSeparatedDevice(state, t.node, *t.device, actor, reason, m);
      if (!released.ok()) {
        GetLogger("state")->warn("{}: separation not lifted: {}", TargetText(t.node, t.device),
                                 released.status().ToString());
      }
    }
  }
  SetPhase(state, t, v1::SERVICE_PHASE_UNSPECIFIED, "");
}

void ValidationRule::Finish(ClusterState& state, v1::Validation& v, v1::ValidationState outcome,
                            const std::string& message, TimePoint now, Mutation* m) {
  const Target t = TargetOf(v);
  const bool was_running = v.state() == v1::VALIDATION_STATE_RUNNING;
  v.set_state(outcome);
  v.set_message(message);
  *v.mutable_finish_time() = ToTimestamp(now);
  Put(state, v, m, v1::EVENT_TYPE_VALIDATION_FINISHED);
  if (was_running && running_ > 0) --running_;
  open_.erase(t);
  sent_session_.erase(v.id());
  const auto trig = triggered_.find(v.id());
  const TimePoint triggered = trig == triggered_.end() ? now : trig->second;
  if (trig != triggered_.end()) triggered_.erase(trig);
  GetLogger("state")->info("{}: validation {} {}: {}", TargetText(t.node, t.device), v.id(),
                           v1::ValidationState_Name(outcome), message);
  switch (outcome) {
    case v1::VALIDATION_STATE_PASSED:
      IncIf(metrics_.passed);
      ReturnToService(state, v, "clusterd", "validation " + v.id() + " passed", m);
      if (metrics_.return_seconds) {
        metrics_.return_seconds->Observe(std::chrono::duration<double>(now - triggered).count());
      }
      break;
    case v1::VALIDATION_STATE_FAILED:
      IncIf(metrics_.failed);
      // Out again (it never left), counted.
      if (!CountFlap(state, t, now, "validation " + v.id() + " failed: " + message, m)) {
        SetPhase(state, t, v1::SERVICE_PHASE_UNSPECIFIED, "");
      }
      break;
    default: break;
  }
  UpdateGauges();
}

v1::ValidationRequest ValidationRule::RequestOf(const v1::Validation& v) const {
  v1::ValidationRequest req;
  req.set_validation_id(v.id());
  req.set_node(v.node());
  *req.mutable_device_ids() = v.device_ids();
  req.set_whole_node(v.whole_node());
  *req.mutable_checks() = v.requested_checks();
  *req.mutable_stable_window() = TimeUtil::NanosecondsToDuration(options_.stable_window.count());
  *req.mutable_timeout() = TimeUtil::NanosecondsToDuration(options_.timeout.count());
  return req;
}

TimePoint ValidationRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  if (!options_.enabled && open_.empty()) return TimePoint::max();
  // Returns that faulted again: flaps.
  for (const Target& t : refaulted_) {
    if (state.node_table().Find(t.node)) CountFlap(state, t, now, "faulted again after returning to service", tick.m);
  }
  refaulted_.clear();
  // Faults cleared: targets out with nothing active any more are validated.
  for (const Target& t : candidates_) {
    if (!options_.enabled || open_.count(t)) continue;
    const NodeState* n = state.node_table().Find(t.node);
    if (!n || !IsOut(state, t) || StillFaulty(state, t)) continue;
    if (!t.device && !n->record.node().isolated()) continue;         // a maintenance cordon stays the operator's
    if (t.device && !n->devices.at(*t.device).isolated()) continue;  // separation: its release time decides
    const v1::ServicePhase phase =
        t.device ? n->devices.at(*t.device).service_phase() : n->record.node().service_phase();
    if (phase == v1::SERVICE_PHASE_HELD) continue;
    auto v = Start(state, t.node, t.device, "fault-cleared", "clusterd", "its faults cleared", tick.m);
    if (!v.ok()) GetLogger("state")->warn("{}: no validation: {}", TargetText(t.node, t.device), v.status().ToString());
  }
  candidates_.clear();
  // What fails a queued or running validation: a fault of the target, a
  // lost agent, the timeout.
  std::vector<std::pair<uint64_t, std::string>> failing;
  for (const auto& [t, seq] : open_) {
    const v1::Validation& v = records_.at(seq);
    const NodeState* n = state.node_table().Find(t.node);
    if (!n) {
      failing.emplace_back(seq, "the node is no longer registered");
    } else if (n->lost) {
      failing.emplace_back(seq, "the node's agent was lost (node grace passed)");
    } else if (StillFaulty(state, t)) {
      failing.emplace_back(seq, "a fault of the target is active during validation");
    } else if (v.state() == v1::VALIDATION_STATE_RUNNING && now >= FromTimestamp(v.deadline())) {
      failing.emplace_back(seq, "timed out: no result within " + FormatDuration(options_.timeout));
    }
  }
  for (const auto& [seq, why] : failing) Finish(state, records_.at(seq), v1::VALIDATION_STATE_FAILED, why, now, tick.m);
  // Queued ones start in order while there is room, per node and in all.
  std::map<std::string, uint32_t> per_node;
  std::vector<uint64_t> queued;
  for (const auto& [t, seq] : open_) {
    const v1::Validation& v = records_.at(seq);
    if (v.state() == v1::VALIDATION_STATE_RUNNING) {
      ++per_node[t.node];
    } else {
      queued.push_back(seq);
    }
  }
  std::sort(queued.begin(), queued.end());
  for (uint64_t seq : queued) {
    if (running_ >= options_.max_in_flight) break;
    v1::Validation& v = records_.at(seq);
    uint32_t& here = per_node[v.node()];
    if (here >= options_.max_per_node) continue;
    ++here;
    ++running_;
    v.set_state(v1::VALIDATION_STATE_RUNNING);
    *v.mutable_start_time() = ToTimestamp(now);
    *v.mutable_deadline() = ToTimestamp(now + options_.timeout);
    Put(state, v, tick.m, v1::EVENT_TYPE_VALIDATION_STARTED);
  }
  // Running ones go to their node's current agent session (again after a
  // reconnect or a restart: the same id).
  TimePoint next = TimePoint::max();
  for (const auto& [t, seq] : open_) {
    const v1::Validation& v = records_.at(seq);
    if (v.state() != v1::VALIDATION_STATE_RUNNING) continue;
    next = std::min(next, FromTimestamp(v.deadline()));
    const NodeState* n = state.node_table().Find(t.node);
    if (!n || !n->connected || outbox_ == nullptr) continue;
    uint64_t& sent = sent_session_[v.id()];
    if (sent == n->session) continue;
    sent = n->session;
    if (tick.after) {
      v1::ConnectResponse msg;
      *msg.mutable_validation() = RequestOf(v);
      tick.after->push_back([outbox = outbox_, node = t.node, session = n->session, msg = std::move(msg)] {
        outbox->Send(node, session, msg);
      });
    }
  }
  // Retention: the oldest finished records go.
  size_t finished = records_.size() - open_.size();
  for (auto it = records_.begin(); finished > options_.retention && it != records_.end();) {
    const auto s = it->second.state();
    if (s == v1::VALIDATION_STATE_QUEUED || s == v1::VALIDATION_STATE_RUNNING) {
      ++it;
      continue;
    }
    tick.m->changes.Delete(storage::Cf::kMeta, ValidationKey(it->first));
    by_id_.erase(it->second.id());
    it = records_.erase(it);
    --finished;
  }
  UpdateGauges();
  due_ = next;
  return next;
}

StatusOr<v1::Validation> ValidationRule::ApplyResult(ClusterState& state, const std::string& node,
                                                     const v1::ValidationResult& r, Mutation* m) {
  v1::Validation* v = Find(r.validation_id());
  if (!v) return NotFound("validation " + r.validation_id() + " does not exist");
  if (v->node() != node) {
    IncIf(metrics_.results_refused);
    GetLogger("state")->warn("node {} answered validation {} of node {}: refused", node, v->id(), v->node());
    return PermissionDenied("validation " + v->id() + " is node " + v->node() + "'s; node " + node +
                            " may answer only its own");
  }
  if (v->state() != v1::VALIDATION_STATE_RUNNING) return *v;  // answered again after a reconnect
  v->clear_checks();
  bool all_passed = r.checks_size() > 0;
  std::string first_failed;
  for (int i = 0; i < r.checks_size() && static_cast<size_t>(i) < kMaxChecks; ++i) {
    v1::ValidationCheckResult c = r.checks(i);
    c.set_name(c.name().substr(0, 128));
    c.set_message(c.message().substr(0, 1024));
    c.set_evidence(TailOf(c.evidence(), kMaxEvidenceBytes));
    if (!c.passed()) {
      all_passed = false;
      if (first_failed.empty()) first_failed = c.name() + (c.message().empty() ? "" : ": " + c.message());
    }
    *v->add_checks() = std::move(c);
  }
  const bool passed = r.passed() && all_passed;
  Finish(state, *v, passed ? v1::VALIDATION_STATE_PASSED : v1::VALIDATION_STATE_FAILED,
         passed ? "passed" : (first_failed.empty() ? "the agent reported a failure" : first_failed), state.Now(), m);
  return *v;
}

StatusOr<v1::Validation> ValidationRule::Skip(ClusterState& state, const std::string& node,
                                              std::optional<uint32_t> device, const std::string& actor,
                                              const std::string& reason, Mutation* m) {
  auto found = FindTarget(state, node, device, actor, reason);
  if (!found.ok()) return found.status();
  const Target t{node, device};
  const TimePoint now = state.Now();
  v1::Validation* v = nullptr;
  if (auto it = open_.find(t); it != open_.end()) {
    v = &records_.at(it->second);
  } else {
    const uint64_t seq = next_seq_++;
    v1::Validation fresh = NewRecord(seq, node, device, "operator");
    *fresh.mutable_create_time() = ToTimestamp(now);
    by_id_[fresh.id()] = seq;
    v = &records_.emplace(seq, std::move(fresh)).first->second;
  }
  v->set_actor(actor);
  v->set_reason(reason);
  Finish(state, *v, v1::VALIDATION_STATE_SKIPPED, "skipped by " + actor + ": " + reason, now, m);
  IncIf(metrics_.skipped);
  if (t.device) {
    if (v1::Device* d = state.MutableDevice(node, *device)) {
      d->clear_flap_times();
      state.DeviceChanged(*d);
    }
  } else if (v1::Node* rec = state.MutableNode(node)) {
    rec->clear_flap_times();
    state.NodeChanged(node);
  }
  ReturnToService(state, *v, actor, reason, m);
  if (t.device) {
    if (v1::Device* d = state.MutableDevice(node, *device)) d->set_validation_id(v->id());
  } else if (v1::Node* rec = state.MutableNode(node)) {
    rec->set_validation_id(v->id());
  }
  return *v;
}

Status ValidationRule::Hold(ClusterState& state, const std::string& node, std::optional<uint32_t> device,
                            const std::string& actor, const std::string& reason, Mutation* m) {
  auto found = FindTarget(state, node, device, actor, reason);
  if (!found.ok()) return found.status();
  const Target t{node, device};
  if (auto it = open_.find(t); it != open_.end()) {
    Finish(state, records_.at(it->second), v1::VALIDATION_STATE_CANCELLED, "held by " + actor, state.Now(), m);
  }
  const std::string why = "held by " + actor + ": " + reason;
  if (!IsOut(state, t)) CLUSTERD_RETURN_IF_ERROR(state.SetIsolated(node, device, why, m));
  SetPhase(state, t, v1::SERVICE_PHASE_HELD, "", why);
  EmitTargetUpdated(state, t, actor, reason, TargetText(node, device) + " " + why, m);
  UpdateGauges();
  return Status::Ok();
}

void ValidationRule::Forget(ClusterState& state, const std::string& node, std::optional<uint32_t> device,
                            const std::string& actor, Mutation* m) {
  std::vector<Target> targets{{node, device}};
  const NodeState* n = state.node_table().Find(node);
  if (!n) return;
  if (!device) {
    for (const auto& [id, d] : n->devices) targets.push_back({node, id});
  }
  for (const Target& t : targets) {
    if (auto it = open_.find(t); it != open_.end()) {
      Finish(state, records_.at(it->second), v1::VALIDATION_STATE_CANCELLED, "released with force by " + actor,
             state.Now(), m);
    }
    const v1::ServicePhase phase =
        t.device ? n->devices.at(*t.device).service_phase() : n->record.node().service_phase();
    if (phase != v1::SERVICE_PHASE_UNSPECIFIED) SetPhase(state, t, v1::SERVICE_PHASE_UNSPECIFIED, "");
  }
  UpdateGauges();
}

bool ValidationRule::SeparationReleaseAllowed(ClusterState& state, const std::string& node, uint32_t device,
                                              TimePoint now, Mutation* m) {
  if (!options_.enabled) return true;
  const Target t{node, device};
  if (open_.count(t)) return false;
  const NodeState* n = state.node_table().Find(node);
  if (!n) return false;
  auto dit = n->devices.find(device);
  if (dit == n->devices.end()) return false;
  const v1::Device& d = dit->second;
  if (d.service_phase() == v1::SERVICE_PHASE_HELD) return false;
  // After a failure, the next try waits a share of the flap window.
  if (!d.flap_times().empty() &&
      now - FromTimestamp(*d.flap_times().rbegin()) < options_.flap_window / options_.flap_limit) {
    return false;
  }
  auto v = Start(state, node, device, "separation-due", "clusterd", "fault-free for the separation's release time", m);
  if (!v.ok()) GetLogger("state")->warn("{}: no validation: {}", TargetText(node, device), v.status().ToString());
  return false;
}

StatusOr<v1::ListValidationsResponse> ValidationRule::List(const v1::ListValidationsRequest& req) const {
  if (!req.node().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  if (req.has_device_id() && req.node().empty()) return InvalidArgument("device_id: needs node");
  if (req.page_size() > 1000) return InvalidArgument("page_size: at most 1000");
  const size_t page = req.page_size() == 0 ? 100 : req.page_size();
  uint64_t from = UINT64_MAX;
  if (!req.page_token().empty()) {
    from = ValidationSeqOf(req.page_token());
    if (from == 0) return InvalidArgument("page_token: not a token of ListValidations");
  }
  constexpr size_t kBudget = 3 * 1024 * 1024 + 512 * 1024;
  v1::ListValidationsResponse out;
  size_t bytes = 0;
  for (auto it = from == UINT64_MAX ? records_.end() : records_.upper_bound(from); it != records_.begin();) {
    --it;
    const v1::Validation& v = it->second;
    if (!req.node().empty() && v.node() != req.node()) continue;
    if (req.has_device_id() &&
        std::find(v.device_ids().begin(), v.device_ids().end(), req.device_id()) == v.device_ids().end()) {
      continue;
    }
    const size_t size = v.ByteSizeLong() + 8;
    if (static_cast<size_t>(out.validations_size()) >= page || (bytes + size > kBudget && out.validations_size() > 0)) {
      out.set_next_page_token(v.id());
      break;
    }
    bytes += size;
    *out.add_validations() = v;
  }
  return out;
}

std::vector<v1::Validation> ValidationRule::History(const std::string& node, std::optional<uint32_t> device,
                                                    size_t limit) const {
  std::vector<v1::Validation> out;
  for (auto it = records_.rbegin(); it != records_.rend() && out.size() < limit; ++it) {
    const v1::Validation& v = it->second;
    if (v.node() != node) continue;
    const Target t = TargetOf(v);
    if (t.device != device) continue;
    out.push_back(v);
  }
  return out;
}

void ValidationRule::UpdateGauges() {
  if (metrics_.in_flight) metrics_.in_flight->Set(static_cast<double>(running_));
  if (metrics_.queued) metrics_.queued->Set(static_cast<double>(open_.size() - running_));
  if (metrics_.held_now) metrics_.held_now->Set(static_cast<double>(held_count_));
}

}  // namespace clusterd
