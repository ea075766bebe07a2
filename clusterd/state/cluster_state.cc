#include "clusterd/state/cluster_state.h"

#include <algorithm>
#include <map>

#include <google/protobuf/util/message_differencer.h>

#include "clusterd/state/chain_drift.h"
#include "common/chain_doctor.h"
#include "clusterd/storage/key_codec.h"
#include "common/levels.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_proto.h"

namespace clusterd {

using google::protobuf::util::MessageDifferencer;
using storage::Cf;

namespace {

constexpr char kHeartbeatLost[] = "HEARTBEAT_LOST";

std::optional<uint32_t> DeviceOf(const v1::Fault& f) {
  return f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt;
}

std::string ReportKey(const std::string& node, const v1::FaultReport& r) {
  return storage::FaultKey(node, r.has_device_id() ? std::optional<uint32_t>(r.device_id()) : std::nullopt, r.source(),
                           storage::AgentDiscriminator(r.code(), r.subject()));
}

std::string HeartbeatKey(const std::string& node) {
  return storage::FaultKey(node, std::nullopt, v1::FAULT_SOURCE_HEARTBEAT, kHeartbeatLost);
}

}  // namespace

ClusterState::ClusterState(storage::Store* store, const Catalog* catalog, const Clock* clock)
    : StateView(clock), store_(store), catalog_(catalog) {}

Status ClusterState::Load() {
  CLUSTERD_RETURN_IF_ERROR(Load(store_->revision_at_open(), store_->compacted_at_open()));
  GetLogger("state")->info("loaded {} nodes, {} fault records at revision {}", nodes_.size(), faults_.size(),
                           journal_.revision());
  return Status::Ok();
}

Status ClusterState::Load(uint64_t revision, uint64_t compacted) {
  std::unique_lock lock(mu_);
  journal_.Load(revision, compacted);
  CLUSTERD_RETURN_IF_ERROR(nodes_.Load(*store_, clock_->Now()));
  CLUSTERD_RETURN_IF_ERROR(faults_.Load(*store_));
  for (const auto& [key, f] : faults_.all()) {
    if (f.source() != v1::FAULT_SOURCE_HEARTBEAT || f.state() != v1::FAULT_STATE_ACTIVE) continue;
    if (NodeState* n = nodes_.Find(f.node())) n->lost = true;
  }
  CLUSTERD_RETURN_IF_ERROR(jobs_.Load(*store_));
  CLUSTERD_RETURN_IF_ERROR(recoveries_.Load(*store_));
  // What the attached rules keep in the records (the separation policy's
  // counts).
  for (WriterRule* rule : attached_) rule->Loaded(*this);
  Status parse_error;
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (key != storage::kMetaAdminState) return;
    if (!admin_.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      parse_error = DataLoss("admin state record " + storage::HexEncode(key) + " does not parse");
    }
  }));
  return parse_error;
}

// ----------------------------------------------------- faults and health ---

v1::Fault ClusterState::FaultFromReport(const std::string& node, const v1::FaultReport& r) const {
  v1::Fault f;
  f.set_node(node);
  if (r.has_device_id()) f.set_device_id(r.device_id());
  f.set_source(r.source());
  f.set_code(r.code());
  f.set_subject(r.subject());
  f.set_level(catalog_->Resolve(r.code(), r.level()));
  f.set_message(r.message());
  return f;
}

void ClusterState::EmitFault(const v1::Fault& f, v1::EventType type, const std::string& actor, Mutation* m) {
  v1::Event ev;
  ev.set_revision(f.revision());
  ev.set_type(type);
  ev.set_actor(actor);
  ev.set_node(f.node());
  if (f.has_device_id()) ev.set_device_id(f.device_id());
  *ev.mutable_fault() = f;
  for (auto& id : jobs_.HitBy(f)) ev.add_job_ids(std::move(id));
  journal_.Emit(m, std::move(ev));
}

const v1::Fault& ClusterState::Raise(NodeState& n, const std::string& key, const v1::Fault& proposed, Mutation* m) {
  const FaultTable::Raised raised = faults_.Raise(key, proposed, m);
  const v1::Fault& f = *raised.fault;
  if (!raised.changed) return f;
  EmitFault(f, raised.was_active ? v1::EVENT_TYPE_FAULT_UPDATED : v1::EVENT_TYPE_FAULT_RAISED, "", m);
  if (f.source() == v1::FAULT_SOURCE_HEARTBEAT) n.lost = true;
  RecomputeHealth(n, DeviceOf(f), m);
  for (WriterRule* rule : attached_) rule->FaultChanged(*this, f, true, !raised.was_active);
  return f;
}

bool ClusterState::Clear(NodeState& n, const std::string& key, const std::string& reason, Mutation* m,
                         const std::string& actor) {
  const v1::Fault* f = faults_.Clear(key, reason, m);
  if (!f) return false;
  EmitFault(*f, v1::EVENT_TYPE_FAULT_CLEARED, actor, m);
  if (f->source() == v1::FAULT_SOURCE_HEARTBEAT) n.lost = false;
  RecomputeHealth(n, DeviceOf(*f), m);
  for (WriterRule* rule : attached_) rule->FaultChanged(*this, *f, false, false);
  return true;
}

bool ClusterState::ClearFault(const std::string& key, const std::string& reason, Mutation* m) {
  const v1::Fault* f = faults_.Find(key);
  if (!f) return false;
  NodeState* n = nodes_.Find(f->node());
  if (!n) {
    faults_.SetAutoClear(key, std::nullopt, m);  // no node to clear it on (nodes are never removed)
    return false;
  }
  return Clear(*n, key, reason, m);  // ends its auto-clear
}

v1::Device* ClusterState::MutableDevice(const std::string& node, uint32_t device) {
  NodeState* n = nodes_.Find(node);
  if (!n) return nullptr;
  auto [dit, created] = n->devices.try_emplace(device);
  v1::Device& d = dit->second;
  if (created) {
    d.set_node(n->name());
    d.set_id(device);
    d.set_health(v1::HEALTH_HEALTHY);
    nodes_.Changed(d);
  }
  return &d;
}

Status ClusterState::ChainAllowsRelease(const std::string& node, bool automatic) const {
  if (release_chain_check_ == ReleaseChainCheck::kNever) return Status::Ok();
  if (!automatic && release_chain_check_ != ReleaseChainCheck::kAlways) return Status::Ok();
  const NodeState* n = nodes_.Find(node);
  if (n == nullptr) return Status::Ok();  // the caller's own NotFound
  std::vector<const v1::Fault*> faults;
  AppendFaultsOnNode(node, &faults);
  std::erase_if(faults, [](const v1::Fault* f) { return f->state() != v1::FAULT_STATE_ACTIVE; });
  const std::vector<ChainFinding> blockers = ChainReleaseBlockers(n->record.node(), faults);
  if (blockers.empty()) return Status::Ok();
  return FailedPrecondition("node " + node +
                            "'s accelerator software chain is not healthy: " + ChainBlockersText(blockers) +
                            (automatic ? "" : " (release_chain_check is always; force to return it anyway)"));
}

void ClusterState::RecomputeHealth(NodeState& n, std::optional<uint32_t> device, Mutation* m) {
  const std::string& name = n.name();
  const FaultTable::NodeTally tally = faults_.Active(name, device);
  if (device) {
    auto [dit, created] = n.devices.try_emplace(*device);
    v1::Device& d = dit->second;
    if (created) {
      // A fault on a device the inventory did not list: keep it visible.
      d.set_node(name);
      d.set_id(*device);
      d.set_health(v1::HEALTH_HEALTHY);
    }
    const v1::Health before = d.health();
    const v1::Health after = HealthForLevel(tally.device.worst);
    d.set_worst_level(tally.device.worst);
    d.set_active_faults(tally.device.active);
    d.set_health(after);
    if (before != after) {
      v1::Event ev;
      ev.set_type(v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED);
      ev.set_node(name);
      ev.set_device_id(*device);
      ev.set_health(after);
      ev.set_previous_health(before);
      ev.set_revision(journal_.Next());
      d.set_revision(ev.revision());
      journal_.Emit(m, std::move(ev));
    }
    nodes_.Changed(d);
  }
  v1::Node* node = n.record.mutable_node();
  const v1::Health before = node->health();
  const v1::Health after = n.lost ? v1::HEALTH_UNKNOWN : HealthForLevel(tally.node.worst);
  node->set_worst_level(tally.node.worst);
  node->set_active_faults(tally.node.active);
  node->set_health(after);
  if (before != after) {
    v1::Event ev;
    ev.set_type(v1::EVENT_TYPE_NODE_HEALTH_CHANGED);
    ev.set_node(name);
    ev.set_health(after);
    ev.set_previous_health(before);
    ev.set_revision(journal_.Next());
    node->set_revision(ev.revision());
    journal_.Emit(m, std::move(ev));
  }
  nodes_.Changed(n);
}

Status ClusterState::CheckFaultRoom(const std::string& node, const std::string& key, bool external) const {
  if (faults_.IsActive(key)) return Status::Ok();  // a refresh or an update: no new active fault
  // As costly as the health recomputation every raise does anyway.
  if (faults_.ActiveFrom(node, external) < limits_.max_faults_per_node) return Status::Ok();
  const std::string limit = std::to_string(limits_.max_faults_per_node);
  if (external) {
    if (limits_.faults_refused_external) limits_.faults_refused_external->Inc();
    return ResourceExhausted("node " + node + " already has " + limit +
                             " active externally reported faults (max_faults_per_node): clear some before "
                             "reporting new ones");
  }
  if (limits_.faults_refused_agent) limits_.faults_refused_agent->Inc();
  return ResourceExhausted("node " + node + " already has " + limit +
                           " active faults raised by its agent (max_faults_per_node): this raise is refused and "
                           "stays in the agent's outbox, which sends it again after reconnecting");
}

// ---------------------------------------------------------------- agents ---

StatusOr<v1::Welcome> ClusterState::ApplyHello(const v1::Hello& hello, uint64_t session, Mutation* m) {
  auto valid = Validate(hello);
  if (!valid.ok()) return valid.status();
  return ApplyHello(*valid, session, m);
}

StatusOr<v1::Welcome> ClusterState::ApplyHello(const Validated<v1::Hello>& valid, uint64_t session, Mutation* m) {
  const v1::Hello& hello = *valid;
  const std::string& name = hello.node_name();
  auto [found, created] = nodes_.FindOrAdd(name);
  NodeState& n = *found;
  v1::Node* node = n.record.mutable_node();

  // Identity and inventory.
  v1::Node updated = *node;
  updated.set_name(name);
  updated.set_boot_id(hello.boot_id());
  updated.set_agent_version(hello.agent_version());
  *updated.mutable_labels() = hello.labels();
  *updated.mutable_inventory() = hello.inventory();
  updated.clear_registered_by();  // an agent's node from now on
  if (created) {
    *updated.mutable_registered_time() = ToTimestamp(clock_->Now());
    updated.set_health(v1::HEALTH_HEALTHY);
  }
  const auto same_labels = [&] {
    if (updated.labels_size() != node->labels_size()) return false;
    for (const auto& [k, v] : updated.labels()) {
      auto it = node->labels().find(k);
      if (it == node->labels().end() || it->second != v) return false;
    }
    return true;
  };
  if (created || !same_labels()) nodes_.LabelsChanged();  // the fault domains come from the labels
  // A chain that changed (or a new node) may change its pool's drift.
  if (created || !MessageDifferencer::Equals(updated.inventory(), node->inventory())) {
    ++chain_generation_;
  }
  UpdateNodeRecord(n, updated, created, "", m);
  SetDevices(n, hello.inventory());

  n.session = session;
  n.connected = true;
  nodes_.ConnectionChanged();
  n.last_seen = clock_->Now();

  // Reconcile agent-sourced faults with the agent's view.
  std::map<std::string, const v1::FaultReport*> wanted;
  for (const auto& r : hello.active_faults()) {
    wanted[ReportKey(name, r)] = &r;
  }
  std::vector<std::string> stale;
  for (const auto& [key, f] : faults_.OfNode(name)) {
    if (f.state() == v1::FAULT_STATE_ACTIVE && f.source() != v1::FAULT_SOURCE_HEARTBEAT &&
        f.source() != v1::FAULT_SOURCE_EXTERNAL && !wanted.count(key)) {
      stale.push_back(key);
    }
  }
  for (const auto& key : stale) Clear(n, key, "not active on the agent at reconnect", m);
  for (const auto& [key, report] : wanted) Raise(n, key, FaultFromReport(name, *report), m);
  if (n.lost) Clear(n, HeartbeatKey(name), "agent reconnected", m);

  // Applied sequences belong to one agent incarnation. A new one (a new or
  // wiped state dir: its epochs start again) has applied nothing yet.
  storage::v1::NodeRecord& record = n.record;
  uint64_t max_epoch = 0;
  for (const auto& [epoch, seq] : record.applied_seq()) max_epoch = std::max(max_epoch, epoch);
  const bool new_incarnation = !hello.instance_id().empty() && !record.agent_instance().empty()
                                   ? hello.instance_id() != record.agent_instance()
                                   : hello.epoch() < max_epoch;
  bool record_changed = record.agent_instance() != hello.instance_id();
  if (new_incarnation) {
    GetLogger("state")->info(
        "node {}: new agent incarnation (instance '{}' -> '{}', epoch {} after {}); "
        "its transition ids start over",
        name, record.agent_instance(), hello.instance_id(), hello.epoch(), max_epoch);
    record.clear_applied_seq();
    record_changed = true;
  }
  record.set_agent_instance(hello.instance_id());
  n.hello_epoch = hello.epoch();
  record_changed |= !record.applied_seq().contains(hello.epoch());
  const uint64_t applied = NodeTable::TrackEpoch(n, hello.epoch());
  if (record_changed) nodes_.Changed(n);
  v1::Welcome welcome;
  welcome.set_revision(journal_.revision());
  welcome.set_applied_seq(applied);
  return welcome;
}

StatusOr<v1::Node> ClusterState::ApplyRegisterNode(const std::string& name, const v1::Inventory& inventory,
                                                   const std::string& source, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateRegisterNode(name, inventory, source));
  auto [found, created] = nodes_.FindOrAdd(name);
  NodeState& n = *found;
  v1::Node* node = n.record.mutable_node();
  if (!created && node->registered_by().empty()) return n.Describe();  // an agent's node
  v1::Node updated = *node;
  updated.set_name(name);
  updated.set_registered_by(source);
  *updated.mutable_inventory()->mutable_devices() = inventory.devices();
  if (created) {
    *updated.mutable_registered_time() = ToTimestamp(clock_->Now());
    updated.set_health(v1::HEALTH_HEALTHY);
    n.last_seen = clock_->Now();
  }
  UpdateNodeRecord(n, updated, created, source, m);
  SetDevices(n, inventory);
  return n.Describe();
}

void ClusterState::UpdateNodeRecord(NodeState& n, const v1::Node& updated, bool created, const std::string& actor,
                                    Mutation* m) {
  v1::Node* node = n.record.mutable_node();
  if (!created && MessageDifferencer::Equals(updated, *node)) return;
  *node = updated;
  v1::Event ev;
  ev.set_type(created ? v1::EVENT_TYPE_NODE_REGISTERED : v1::EVENT_TYPE_NODE_UPDATED);
  ev.set_node(node->name());
  ev.set_actor(actor);
  ev.set_revision(journal_.Next());
  node->set_revision(ev.revision());
  *ev.mutable_node_info() = *node;
  journal_.Emit(m, std::move(ev));
  nodes_.Changed(n);
}

void ClusterState::SetDevices(NodeState& n, const v1::Inventory& inventory) {
  for (const auto& info : inventory.devices()) {
    v1::Device& d = n.devices[info.id()];
    const v1::Device before = d;
    d.set_node(n.name());
    d.set_id(info.id());
    d.set_vendor(info.vendor());
    d.set_model(info.model());
    d.set_serial(info.serial());
    if (d.health() == v1::HEALTH_UNSPECIFIED) d.set_health(v1::HEALTH_HEALTHY);
    if (!MessageDifferencer::Equals(before, d)) {
      d.set_revision(journal_.revision());
      nodes_.Changed(d);
    }
  }
}

Status ClusterState::ApplyHeartbeat(const std::string& node, uint64_t session, Mutation* m) {
  auto n = nodes_.OfSession(node, session);
  if (!n.ok()) return n.status();
  (*n)->last_seen = clock_->Now();
  if ((*n)->lost) Clear(**n, HeartbeatKey(node), "heartbeat resumed", m);
  return Status::Ok();
}

Status ClusterState::ApplyChainUpdate(const std::string& node, uint64_t session, const v1::ChainUpdate& update,
                                      Mutation* m) {
  auto valid = Validate(update);
  if (!valid.ok()) return valid.status();
  return ApplyChainUpdate(node, session, *valid, m);
}

Status ClusterState::ApplyChainUpdate(const std::string& node, uint64_t session,
                                      const Validated<v1::ChainUpdate>& update, Mutation* m) {
  bool changed = false;
  Status st = ReplaceInventory(
      node, session, [&](v1::Inventory* inv) { *inv->mutable_chain() = update->links(); }, m, &changed);
  if (changed) ++chain_generation_;
  return st;
}

Status ClusterState::ReplaceInventory(const std::string& node, uint64_t session,
                                      const std::function<void(v1::Inventory*)>& set, Mutation* m, bool* changed) {
  auto n = nodes_.OfSession(node, session);
  if (!n.ok()) return n.status();
  NodeState& ns = **n;
  ns.last_seen = clock_->Now();
  v1::Node updated = ns.record.node();
  set(updated.mutable_inventory());
  if (MessageDifferencer::Equals(updated.inventory(), ns.record.node().inventory())) return Status::Ok();
  *changed = true;
  UpdateNodeRecord(ns, updated, /*created=*/false, "", m);
  return Status::Ok();
}

Status ClusterState::ApplyPodDevices(const std::string& node, uint64_t session, const v1::PodDevicesUpdate& update,
                                     Mutation* m) {
  auto valid = Validate(update);
  if (!valid.ok()) return valid.status();
  return ApplyPodDevices(node, session, *valid, m);
}

Status ClusterState::ApplyPodDevices(const std::string& node, uint64_t session,
                                     const Validated<v1::PodDevicesUpdate>& update, Mutation* m) {
  bool changed = false;
  return ReplaceInventory(
      node, session, [&](v1::Inventory* inv) { *inv->mutable_pod_devices() = update->pods(); }, m, &changed);
}

Status ClusterState::ApplyMetrics(const std::string& node, uint64_t session, const v1::MetricSnapshot& snapshot) {
  auto valid = Validate(snapshot);
  if (!valid.ok()) return valid.status();
  return ApplyMetrics(node, session, *valid);
}

Status ClusterState::ApplyMetrics(const std::string& node, uint64_t session,
                                  const Validated<v1::MetricSnapshot>& snapshot) {
  auto n = nodes_.OfSession(node, session);
  if (!n.ok()) return n.status();
  (*n)->metrics = *snapshot;
  (*n)->last_seen = clock_->Now();
  return Status::Ok();
}

StatusOr<TransitionResult> ClusterState::ApplyTransition(const std::string& node, uint64_t session,
                                                         const v1::FaultTransition& t, Mutation* m) {
  auto valid = Validate(t);
  if (!valid.ok()) return valid.status();
  return ApplyTransition(node, session, *valid, m);
}

StatusOr<TransitionResult> ClusterState::ApplyTransition(const std::string& node, uint64_t session,
                                                         const Validated<v1::FaultTransition>& valid, Mutation* m) {
  const v1::FaultTransition& t = *valid;
  auto found = nodes_.OfSession(node, session);
  if (!found.ok()) return found.status();
  NodeState& n = **found;
  n.last_seen = clock_->Now();
  if (t.id().epoch() > n.hello_epoch) {
    return InvalidArgument("transition.id.epoch: " + std::to_string(t.id().epoch()) +
                           " is newer than the hello's epoch " + std::to_string(n.hello_epoch));
  }
  const auto& applied = n.record.applied_seq();
  if (!applied.contains(t.id().epoch()) && applied.size() >= kEpochsKept) {
    // An epoch older than every epoch kept was applied long ago (the agent
    // has restarted kEpochsKept times since); a newer one is new.
    uint64_t oldest = UINT64_MAX;
    for (const auto& [epoch, seq] : applied) oldest = std::min(oldest, epoch);
    if (t.id().epoch() < oldest) return TransitionResult{true};
  }
  uint64_t& applied_seq = NodeTable::TrackEpoch(n, t.id().epoch());
  if (t.id().seq() <= applied_seq) return TransitionResult{true};
  const std::string key = ReportKey(node, t.fault());
  // Refused before it counts as applied: the agent keeps it and resends it.
  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    CLUSTERD_RETURN_IF_ERROR(CheckFaultRoom(node, key, /*external=*/false));
  }
  applied_seq = t.id().seq();

  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    Raise(n, key, FaultFromReport(node, t.fault()), m);
  } else {
    Clear(n, key, "cleared by agent", m);
  }
  if (n.lost) Clear(n, HeartbeatKey(node), "heartbeat resumed", m);
  nodes_.Changed(n);  // the applied sequence, in the same commit as the change
  return TransitionResult{false};
}

void ClusterState::ApplyDisconnect(const std::string& node, uint64_t session) {
  NodeState* n = nodes_.Find(node);
  if (n && n->session == session) {
    n->connected = false;
    nodes_.ConnectionChanged();
  }
}

TimePoint ClusterState::CheckLiveness(std::chrono::nanoseconds grace, Mutation* m, bool hold_unattached) {
  const TimePoint now = clock_->Now();
  TimePoint next = TimePoint::max();
  for (auto& [name, n] : nodes_.all()) {
    if (n.lost || !n.record.node().registered_by().empty()) continue;  // no agent expected there
    if (hold_unattached && n.session == 0) continue;                   // still to reattach
    const TimePoint seen = n.LastSeen();
    if (now - seen <= grace) {
      next = std::min(next, seen + grace);
      continue;
    }
    v1::Fault f;
    f.set_node(name);
    f.set_source(v1::FAULT_SOURCE_HEARTBEAT);
    f.set_code(kHeartbeatLost);
    f.set_level(catalog_->Resolve(kHeartbeatLost, v1::FAULT_LEVEL_SEPARATE));
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - seen).count();
    f.set_message("no message from the agent for " + std::to_string(silent) + " ms");
    GetLogger("liveness")->warn("node {} lost: {}", name, f.message());
    Raise(n, HeartbeatKey(name), f, m);
  }
  return next;
}

size_t ClusterState::AwaitingReattach() const {
  size_t awaiting = 0;
  for (const auto& [name, n] : nodes_.all()) {
    if (!n.lost && n.session == 0 && n.record.node().registered_by().empty()) ++awaiting;
  }
  return awaiting;
}

void ClusterState::RestartGrace(TimePoint now) {
  for (auto& [name, n] : nodes_.all()) {
    if (!n.lost) n.last_seen = std::max(n.last_seen, now);
  }
}

// ------------------------------------------------------ external reports ---

StatusOr<v1::ReportResponse> ClusterState::ApplyReport(const v1::ReportRequest& req, Mutation* m) {
  auto valid = Validate(req);
  if (!valid.ok()) return valid.status();
  return ApplyReport(*valid, m);
}

void ClusterState::SetReportedLevel(const std::string& code, v1::FaultLevel reported, bool reporter_decides,
                                    v1::Fault* proposed) const {
  const Catalog::Resolution level = catalog_->ResolveFor(code, reported, reporter_decides);
  proposed->set_level(level.level);
  if (reported != v1::FAULT_LEVEL_UNSPECIFIED && level.catalog != v1::FAULT_LEVEL_UNSPECIFIED &&
      reported != level.catalog) {
    // Both had a say and differ: the fault shows both, and which won.
    proposed->set_reported_level(reported);
    proposed->set_catalog_level(level.catalog);
    proposed->set_level_source(std::string(level.source));
  }
}

StatusOr<v1::ReportResponse> ClusterState::ApplyReport(const Validated<v1::ReportRequest>& valid, Mutation* m) {
  const v1::ReportRequest& req = *valid;
  NodeState* n = nodes_.Find(req.node());
  if (!n) return NotFound("node " + req.node() + " is not registered");
  std::optional<uint32_t> device = req.has_device_id() ? std::optional<uint32_t>(req.device_id()) : std::nullopt;
  const std::string key =
      storage::FaultKey(req.node(), device, v1::FAULT_SOURCE_EXTERNAL, req.reporter() + "/" + req.id());
  v1::ReportResponse resp;
  const uint64_t before = journal_.revision();
  if (req.action() == v1::TRANSITION_ACTION_RAISE) {
    v1::Fault proposed;
    proposed.set_node(req.node());
    if (device) proposed.set_device_id(*device);
    proposed.set_source(v1::FAULT_SOURCE_EXTERNAL);
    proposed.set_code(req.code());
    SetReportedLevel(req.code(), req.level(), ReporterDecidesLevel(req.reporter()), &proposed);
    proposed.set_message(req.message());
    proposed.set_reporter(req.reporter());
    proposed.set_external_id(req.id());
    const v1::Fault* existing = faults_.Find(key);
    if (existing && existing->code() != req.code()) {
      return InvalidArgument("code: fault " + req.reporter() + "/" + req.id() + " was reported with code " +
                             existing->code());
    }
    CLUSTERD_RETURN_IF_ERROR(CheckFaultRoom(req.node(), key, /*external=*/true));
    *resp.mutable_fault() = Raise(*n, key, proposed, m);
  } else {
    Clear(*n, key, "cleared by " + req.reporter(), m);
    if (const v1::Fault* f = faults_.Find(key)) *resp.mutable_fault() = *f;
  }
  resp.set_unchanged(journal_.revision() == before);
  resp.set_revision(journal_.revision());
  return resp;
}

// ----------------------------------------------------------------- admin ---

StatusOr<v1::Node> ClusterState::ApplyCordon(const std::string& node, bool cordon, const std::string& actor,
                                             const std::string& reason, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateCordon(node, cordon, actor, reason));
  NodeState* n = nodes_.Find(node);
  if (!n) return NotFound("node " + node + " is not registered");
  return nodes_.SetCordon(*n, cordon, actor, reason, m);
}

StatusOr<v1::Fault> ClusterState::ApplyClearFault(const std::string& fault_id, const std::string& actor,
                                                  const std::string& reason, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateClearFault(fault_id, actor, reason));
  const std::string node = fault_id.substr(0, fault_id.find('/'));
  NodeState* n = nodes_.Find(node);
  if (!n) return NotFound("node " + node + " is not registered");
  for (const auto& [key, f] : faults_.OfNode(node)) {
    if (f.id() != fault_id) continue;
    if (f.state() != v1::FAULT_STATE_ACTIVE) return FailedPrecondition("fault " + fault_id + " is not active");
    const std::string found = key;  // Clear changes the record; the loop ends here
    Clear(*n, found, "cleared by " + actor + ": " + reason, m, actor);
    return *faults_.Find(found);
  }
  return NotFound("fault " + fault_id + " does not exist");
}

StatusOr<v1::AdminState> ClusterState::ApplySetRecoveryMode(const v1::SetRecoveryModeRequest& req, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateSetRecoveryMode(req));
  v1::AdminState next = admin_;
  if (req.has_recovery_paused()) next.set_recovery_paused(req.recovery_paused());
  if (req.has_dry_run()) next.set_dry_run(req.dry_run());
  if (next.recovery_paused() == admin_.recovery_paused() && next.dry_run() == admin_.dry_run()) return admin_;
  next.set_actor(req.actor());
  next.set_reason(req.reason());
  *next.mutable_update_time() = ToTimestamp(clock_->Now());
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_RECOVERY_MODE_CHANGED);
  ev.set_actor(req.actor());
  ev.set_reason(req.reason());
  ev.set_message(std::string("recovery_paused=") + (next.recovery_paused() ? "true" : "false") +
                 " dry_run=" + (next.dry_run() ? "true" : "false"));
  ev.set_revision(journal_.Next());
  next.set_revision(ev.revision());
  m->changes.Put(Cf::kMeta, std::string(storage::kMetaAdminState), next);
  journal_.Emit(m, std::move(ev));
  admin_ = std::move(next);
  return admin_;
}

// ------------------------------------------------------ jobs, recoveries ---

StatusOr<v1::Job> ClusterState::ApplyCreateJob(const v1::Job& job, Mutation* m, const std::string& source) {
  auto stored = jobs_.Create(job, source, m);
  if (!stored.ok()) return stored.status();
  ++chain_generation_;  // its nodes' versions are compared
  return WithImpacts(*stored);
}

StatusOr<v1::Job> ClusterState::ApplyUpdateJob(const v1::Job& job, Mutation* m, const std::string& source) {
  auto stored = jobs_.Update(job, source, m);
  if (!stored.ok()) return stored.status();
  ++chain_generation_;
  return WithImpacts(*stored);
}

StatusOr<uint64_t> ClusterState::ApplyDeleteJob(const std::string& id, Mutation* m, const std::string& source) {
  ++chain_generation_;
  return jobs_.Delete(id, source, m);
}

size_t ClusterState::ApplyRecoveryRetention(const RecoveryRetention& retention, TimePoint now, Mutation* m) {
  return recoveries_.ApplyRetention(
      retention, now, [this](const std::string& job) { return jobs_.Find(job) != nullptr; }, m);
}

}  // namespace clusterd
