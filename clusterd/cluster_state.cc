#include "clusterd/cluster_state.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/util/time_util.h>

#include "clusterd/placement_index.h"
#include "clusterd/response_limits.h"
#include "clusterd/storage/key_codec.h"
#include "common/levels.h"
#include "common/metrics.h"
#include "common/time_proto.h"
#include "common/logging.h"
#include "common/validation.h"

namespace clusterd {

using google::protobuf::util::MessageDifferencer;
using storage::Cf;

namespace {

constexpr uint32_t kMaxDeviceId = 65535;
constexpr size_t kMaxDevices = 1024;
constexpr size_t kMaxDisks = 256;
constexpr size_t kMaxActiveFaults = 4096;
constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;
constexpr char kHeartbeatLost[] = "HEARTBEAT_LOST";

std::optional<uint32_t> DeviceOf(const v1::Fault& f) {
  return f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt;
}

bool HasPrefix(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string ReportKey(const std::string& node, const v1::FaultReport& r) {
  return storage::FaultKey(node, r.has_device_id() ? std::optional<uint32_t>(r.device_id()) : std::nullopt, r.source(),
                           storage::AgentDiscriminator(r.code(), r.subject()));
}

Status ValidateFaultReport(const std::string& at, const v1::FaultReport& r) {
  if (r.has_device_id() && r.device_id() > kMaxDeviceId) return InvalidArgument(at + ".device_id: above 65535");
  switch (r.source()) {
    case v1::FAULT_SOURCE_UNSPECIFIED: return InvalidArgument(at + ".source: must be set");
    case v1::FAULT_SOURCE_HEARTBEAT:
    case v1::FAULT_SOURCE_EXTERNAL:
      return InvalidArgument(at + ".source: " + v1::FaultSource_Name(r.source()) + " is reserved to ClusterD");
    default:
      if (!v1::FaultSource_IsValid(r.source())) return InvalidArgument(at + ".source: unknown value");
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateCode(at + ".code", r.code()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".subject", r.subject(), 1024));
  if (!v1::FaultLevel_IsValid(r.level())) return InvalidArgument(at + ".level: unknown value");
  return ValidateText(at + ".message", r.message());
}

Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) return InvalidArgument("hello.labels: more than 64 labels");
  for (const auto& [k, v] : labels) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.labels key", k));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.labels[" + k + "]", v, /*allow_empty=*/true));
  }
  return Status::Ok();
}

Status ValidatePaging(int32_t page_size, const std::string& token, int32_t* size, std::string* start_key) {
  if (page_size < 0) return InvalidArgument("page_size: must not be negative");
  *size = page_size == 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  if (!token.empty()) {
    auto decoded = storage::HexDecode(token);
    if (!decoded || decoded->empty()) return InvalidArgument("page_token: not a token this server issued");
    *start_key = *decoded;
  }
  return Status::Ok();
}

// One term of a label selector: key=value, key==value or key!=value (the
// equality-based subset of Kubernetes label selectors). A node without the
// key matches key!=value.
struct SelectorTerm {
  std::string key;
  std::string value;
  bool equal = true;
  bool Matches(const google::protobuf::Map<std::string, std::string>& labels) const {
    auto it = labels.find(key);
    const bool has = it != labels.end() && it->second == value;
    return has == equal;
  }
};

StatusOr<std::vector<SelectorTerm>> ParseSelector(const std::string& selector) {
  std::vector<SelectorTerm> out;
  if (selector.size() > 4096) return InvalidArgument("label_selector: longer than 4096 bytes");
  size_t pos = 0;
  while (pos < selector.size()) {
    size_t comma = selector.find(',', pos);
    if (comma == std::string::npos) comma = selector.size();
    const std::string term = selector.substr(pos, comma - pos);
    SelectorTerm t;
    size_t op = term.find_first_of("!=");
    size_t value_at = std::string::npos;
    if (op != std::string::npos && term.compare(op, 2, "!=") == 0) {
      t.equal = false;
      value_at = op + 2;
    } else if (op != std::string::npos && term[op] == '=') {
      value_at = op + (term.compare(op, 2, "==") == 0 ? 2 : 1);
    }
    if (value_at == std::string::npos || op == 0) {
      return InvalidArgument("label_selector: \"" + term + "\" is not key=value, key==value or key!=value");
    }
    t.key = term.substr(0, op);
    t.value = term.substr(value_at);
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("label_selector key", t.key));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("label_selector value of " + t.key, t.value, /*allow_empty=*/true));
    out.push_back(std::move(t));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

Status ValidateHello(const v1::Hello& hello) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("hello.node_name", hello.node_name()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.boot_id", hello.boot_id(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.agent_version", hello.agent_version(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLabels(hello.labels()));
  if (hello.epoch() == 0) return InvalidArgument("hello.epoch: must be positive");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.instance_id", hello.instance_id(), /*allow_empty=*/true));
  if (hello.instance_id().size() > 64) return InvalidArgument("hello.instance_id: longer than 64 characters");
  const auto& inv = hello.inventory();
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.cpu_model", inv.cpu_model(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.kernel_version", inv.kernel_version(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.os_image", inv.os_image(), 256));
  if (inv.devices_size() > static_cast<int>(kMaxDevices))
    return InvalidArgument("hello.inventory.devices: more than 1024");
  if (inv.disks_size() > static_cast<int>(kMaxDisks)) return InvalidArgument("hello.inventory.disks: more than 256");
  std::set<uint32_t> ids;
  for (const auto& d : inv.devices()) {
    const std::string at = "hello.inventory.devices[" + std::to_string(d.id()) + "]";
    if (d.id() > kMaxDeviceId) return InvalidArgument(at + ".id: above 65535");
    if (!ids.insert(d.id()).second) return InvalidArgument(at + ".id: duplicate device id");
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".vendor", d.vendor(), 256));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".model", d.model(), 256));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".serial", d.serial(), 256));
  }
  for (const auto& d : inv.disks()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.mount_point", d.mount_point(), 1024));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.device", d.device(), 1024));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.fs_type", d.fs_type(), 64));
  }
  if (hello.active_faults_size() > static_cast<int>(kMaxActiveFaults)) {
    return InvalidArgument("hello.active_faults: more than 4096");
  }
  for (int i = 0; i < hello.active_faults_size(); ++i) {
    CLUSTERD_RETURN_IF_ERROR(
        ValidateFaultReport("hello.active_faults[" + std::to_string(i) + "]", hello.active_faults(i)));
  }
  return Status::Ok();
}

Status ValidateTransition(const v1::FaultTransition& t) {
  if (t.id().epoch() == 0 || t.id().seq() == 0) return InvalidArgument("transition.id: epoch and seq must be positive");
  if (t.action() != v1::TRANSITION_ACTION_RAISE && t.action() != v1::TRANSITION_ACTION_CLEAR) {
    return InvalidArgument("transition.action: must be RAISE or CLEAR");
  }
  return ValidateFaultReport("transition.fault", t.fault());
}

Status ValidateReport(const v1::ReportRequest& req) {
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("reporter", req.reporter()));
  if (req.reporter().find('/') != std::string::npos) return InvalidArgument("reporter: must not contain '/'");
  // MindCluster public faults are stored as "pubfault/<resource>"; the bare
  // name would let a reporter reach their keys.
  if (req.reporter() == "pubfault")
    return InvalidArgument("reporter: \"pubfault\" is reserved for MindCluster public faults");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("id", req.id()));
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  if (req.has_device_id() && req.device_id() > kMaxDeviceId) return InvalidArgument("device_id: above 65535");
  CLUSTERD_RETURN_IF_ERROR(ValidateCode("code", req.code()));
  if (!v1::FaultLevel_IsValid(req.level())) return InvalidArgument("level: unknown value");
  if (req.action() != v1::TRANSITION_ACTION_RAISE && req.action() != v1::TRANSITION_ACTION_CLEAR) {
    return InvalidArgument("action: must be TRANSITION_ACTION_RAISE or TRANSITION_ACTION_CLEAR");
  }
  return ValidateText("message", req.message());
}

ClusterState::ClusterState(storage::Store* store, const Catalog* catalog, const Clock* clock)
    : store_(store), catalog_(catalog), clock_(clock) {}

Status ClusterState::Load() {
  std::unique_lock lock(mu_);
  revision_ = store_->revision_at_open();
  compacted_ = store_->compacted_at_open();
  durable_revision_ = revision_;
  const TimePoint now = clock_->Now();
  Status parse_error;
  auto fail = [&](const std::string& what, std::string_view key) {
    if (parse_error.ok()) parse_error = DataLoss(what + " record " + storage::HexEncode(key) + " does not parse");
  };
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kNodes, [&](std::string_view key, std::string_view value) {
    NodeState n;
    if (!n.record.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("node", key);
    n.last_seen = now;
    nodes_.emplace(std::string(key), std::move(n));
  }));
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kDevices, [&](std::string_view key, std::string_view value) {
    v1::Device d;
    if (!d.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("device", key);
    auto it = nodes_.find(d.node());
    if (it != nodes_.end()) it->second.devices[d.id()] = std::move(d);
  }));
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kFaults, [&](std::string_view key, std::string_view value) {
    v1::Fault f;
    if (!f.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("fault", key);
    if (f.source() == v1::FAULT_SOURCE_HEARTBEAT && f.state() == v1::FAULT_STATE_ACTIVE) {
      auto it = nodes_.find(f.node());
      if (it != nodes_.end()) it->second.lost = true;
    }
    if (f.state() == v1::FAULT_STATE_ACTIVE) {
      CountPubFault(f, +1);
      if (f.has_auto_clear_time()) auto_clears_.emplace(FromTimestamp(f.auto_clear_time()), std::string(key));
    }
    faults_.emplace(std::string(key), std::move(f));
  }));
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kJobs, [&](std::string_view key, std::string_view value) {
    v1::Job job;
    if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("job", key);
    IndexJob(job, true);
    jobs_.emplace(std::string(key), std::move(job));
  }));
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kRecoveries, [&](std::string_view key, std::string_view value) {
    v1::Recovery r;
    if (!r.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("recovery", key);
    LoadRecovery(std::move(r));
  }));
  CLUSTERD_RETURN_IF_ERROR(store_->ForEach(Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (key != storage::kMetaAdminState) return;
    if (!admin_.ParseFromArray(value.data(), static_cast<int>(value.size()))) fail("admin state", key);
  }));
  CLUSTERD_RETURN_IF_ERROR(parse_error);
  GetLogger("state")->info("loaded {} nodes, {} fault records at revision {}", nodes_.size(), faults_.size(),
                           revision_);
  return Status::Ok();
}

// ---------------------------------------------------------------- writes ---

uint64_t ClusterState::NextRevision(Mutation*) {
  revision_dirty_ = true;  // written once per commit, by FlushDirty
  return ++revision_;
}

void ClusterState::FlushDirty(Mutation* m) {
  if (revision_dirty_) {
    storage::PutRevision(&m->changes, revision_);
    revision_dirty_ = false;
  }
  for (const auto& name : dirty_nodes_) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) continue;
    m->changes.Put(Cf::kNodes, storage::NodeKey(name), it->second.record);
  }
  dirty_nodes_.clear();
  for (const auto& [name, id] : dirty_devices_) {
    auto it = nodes_.find(name);
    if (it == nodes_.end()) continue;
    auto dit = it->second.devices.find(id);
    if (dit == it->second.devices.end()) continue;
    m->changes.Put(Cf::kDevices, storage::DeviceKey(name, id), dit->second);
  }
  dirty_devices_.clear();
}

void ClusterState::Emit(Mutation* m, v1::Event event) {
  if (event.revision() == 0) event.set_revision(NextRevision(m));
  *event.mutable_time() = ToTimestamp(clock_->Now());
  m->changes.Put(Cf::kEvents, storage::EventKey(event.revision()), event);
  m->events.push_back(std::move(event));
}

void ClusterState::PutNode(NodeState& n, Mutation*) { dirty_nodes_.insert(n.record.node().name()); }

void ClusterState::PutDevice(const v1::Device& d, Mutation*) { dirty_devices_.emplace(d.node(), d.id()); }

void ClusterState::PutFault(const std::string& key, const v1::Fault& f, Mutation* m) {
  m->changes.Put(Cf::kFaults, key, f);
}

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

const v1::Fault& ClusterState::Raise(NodeState& n, const std::string& key, const v1::Fault& proposed, Mutation* m) {
  const auto now = ToTimestamp(clock_->Now());
  auto [it, inserted] = faults_.try_emplace(key, proposed);
  v1::Fault& f = it->second;
  const bool was_active = !inserted && f.state() == v1::FAULT_STATE_ACTIVE;
  if (was_active) {
    *f.mutable_last_seen() = now;
    if (f.level() == proposed.level() && f.message() == proposed.message()) return f;  // a refresh, not a change
    f.set_level(proposed.level());
    f.set_message(proposed.message());
  } else {
    if (inserted) {
      *f.mutable_first_seen() = now;
      f.set_id(storage::FaultIdOf(f));
    }
    f.set_level(proposed.level());
    f.set_message(proposed.message());
    f.set_state(v1::FAULT_STATE_ACTIVE);
    CountPubFault(f, +1);
    f.set_count(f.count() + 1);
    *f.mutable_last_seen() = now;
    *f.mutable_activated_time() = now;
    f.clear_cleared_time();
    f.clear_clear_reason();
  }
  const uint64_t rev = NextRevision(m);
  f.set_revision(rev);
  if (inserted) f.set_create_revision(rev);
  PutFault(key, f, m);
  v1::Event ev;
  ev.set_revision(rev);
  ev.set_type(was_active ? v1::EVENT_TYPE_FAULT_UPDATED : v1::EVENT_TYPE_FAULT_RAISED);
  ev.set_node(f.node());
  if (f.has_device_id()) ev.set_device_id(f.device_id());
  *ev.mutable_fault() = f;
  for (auto& id : JobsHitBy(f)) ev.add_job_ids(std::move(id));
  Emit(m, std::move(ev));
  if (f.source() == v1::FAULT_SOURCE_HEARTBEAT) n.lost = true;
  RecomputeHealth(n, DeviceOf(f), m);
  return f;
}

bool ClusterState::Clear(NodeState& n, const std::string& key, const std::string& reason, Mutation* m,
                         const std::string& actor) {
  auto it = faults_.find(key);
  if (it == faults_.end() || it->second.state() != v1::FAULT_STATE_ACTIVE) return false;
  v1::Fault& f = it->second;
  f.set_state(v1::FAULT_STATE_CLEARED);
  CountPubFault(f, -1);
  if (f.has_auto_clear_time()) {
    auto_clears_.erase({FromTimestamp(f.auto_clear_time()), key});
    f.clear_auto_clear_time();
  }
  *f.mutable_cleared_time() = ToTimestamp(clock_->Now());
  f.set_clear_reason(reason);
  const uint64_t rev = NextRevision(m);
  f.set_revision(rev);
  PutFault(key, f, m);
  v1::Event ev;
  ev.set_revision(rev);
  ev.set_type(v1::EVENT_TYPE_FAULT_CLEARED);
  ev.set_actor(actor);
  ev.set_node(f.node());
  if (f.has_device_id()) ev.set_device_id(f.device_id());
  *ev.mutable_fault() = f;
  for (auto& id : JobsHitBy(f)) ev.add_job_ids(std::move(id));
  Emit(m, std::move(ev));
  if (f.source() == v1::FAULT_SOURCE_HEARTBEAT) n.lost = false;
  RecomputeHealth(n, DeviceOf(f), m);
  return true;
}

void ClusterState::RecomputeHealth(NodeState& n, std::optional<uint32_t> device, Mutation* m) {
  const std::string& name = n.record.node().name();
  v1::FaultLevel node_worst = v1::FAULT_LEVEL_UNSPECIFIED, dev_worst = v1::FAULT_LEVEL_UNSPECIFIED;
  uint32_t node_active = 0, dev_active = 0;
  for (const auto& [key, f] : FaultsOfNode(name)) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    ++node_active;
    node_worst = std::max(node_worst, f.level());
    if (device && f.has_device_id() && f.device_id() == *device) {
      ++dev_active;
      dev_worst = std::max(dev_worst, f.level());
    }
  }
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
    const v1::Health after = HealthForLevel(dev_worst);
    d.set_worst_level(dev_worst);
    d.set_active_faults(dev_active);
    d.set_health(after);
    if (before != after) {
      v1::Event ev;
      ev.set_type(v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED);
      ev.set_node(name);
      ev.set_device_id(*device);
      ev.set_health(after);
      ev.set_previous_health(before);
      ev.set_revision(NextRevision(m));
      d.set_revision(ev.revision());
      Emit(m, std::move(ev));
    }
    PutDevice(d, m);
  }
  v1::Node* node = n.record.mutable_node();
  const v1::Health before = node->health();
  const v1::Health after = n.lost ? v1::HEALTH_UNKNOWN : HealthForLevel(node_worst);
  node->set_worst_level(node_worst);
  node->set_active_faults(node_active);
  node->set_health(after);
  if (before != after) {
    v1::Event ev;
    ev.set_type(v1::EVENT_TYPE_NODE_HEALTH_CHANGED);
    ev.set_node(name);
    ev.set_health(after);
    ev.set_previous_health(before);
    ev.set_revision(NextRevision(m));
    node->set_revision(ev.revision());
    Emit(m, std::move(ev));
  }
  PutNode(n, m);
}

uint64_t& ClusterState::TrackEpoch(NodeState& n, uint64_t epoch) {
  auto* applied = n.record.mutable_applied_seq();
  applied->insert({epoch, 0});
  while (applied->size() > kEpochsKept) {
    // Evict the oldest epoch, but never the one asked for nor the one the
    // node's current session said hello with (its transitions are new).
    uint64_t oldest = UINT64_MAX;
    for (const auto& [e, seq] : *applied) {
      if (e != epoch && e != n.hello_epoch) oldest = std::min(oldest, e);
    }
    applied->erase(oldest);
  }
  return (*applied)[epoch];
}

StatusOr<v1::Welcome> ClusterState::ApplyHello(const v1::Hello& hello, uint64_t session, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateHello(hello));
  const std::string& name = hello.node_name();
  auto [it, created] = nodes_.try_emplace(name);
  NodeState& n = it->second;
  v1::Node* node = n.record.mutable_node();

  // Identity and inventory.
  v1::Node updated = *node;
  updated.set_name(name);
  updated.set_boot_id(hello.boot_id());
  updated.set_agent_version(hello.agent_version());
  *updated.mutable_labels() = hello.labels();
  *updated.mutable_inventory() = hello.inventory();
  if (created) {
    *updated.mutable_registered_time() = ToTimestamp(clock_->Now());
    updated.set_health(v1::HEALTH_HEALTHY);
  }
  if (created || !MessageDifferencer::Equals(updated, *node)) {
    *node = updated;
    v1::Event ev;
    ev.set_type(created ? v1::EVENT_TYPE_NODE_REGISTERED : v1::EVENT_TYPE_NODE_UPDATED);
    ev.set_node(name);
    ev.set_revision(NextRevision(m));
    node->set_revision(ev.revision());
    *ev.mutable_node_info() = *node;
    Emit(m, std::move(ev));
    PutNode(n, m);
  }
  for (const auto& info : hello.inventory().devices()) {
    v1::Device& d = n.devices[info.id()];
    v1::Device before = d;
    d.set_node(name);
    d.set_id(info.id());
    d.set_vendor(info.vendor());
    d.set_model(info.model());
    d.set_serial(info.serial());
    if (d.health() == v1::HEALTH_UNSPECIFIED) d.set_health(v1::HEALTH_HEALTHY);
    if (!MessageDifferencer::Equals(before, d)) {
      d.set_revision(revision_);
      PutDevice(d, m);
    }
  }

  n.session = session;
  n.connected = true;
  ++connections_changed_;
  n.last_seen = clock_->Now();

  // Reconcile agent-sourced faults with the agent's view.
  std::map<std::string, const v1::FaultReport*> wanted;
  for (const auto& r : hello.active_faults()) {
    wanted[ReportKey(name, r)] = &r;
  }
  std::vector<std::string> stale;
  for (const auto& [key, f] : FaultsOfNode(name)) {
    if (f.state() == v1::FAULT_STATE_ACTIVE && f.source() != v1::FAULT_SOURCE_HEARTBEAT &&
        f.source() != v1::FAULT_SOURCE_EXTERNAL && !wanted.count(key)) {
      stale.push_back(key);
    }
  }
  for (const auto& key : stale) Clear(n, key, "not active on the agent at reconnect", m);
  for (const auto& [key, report] : wanted) Raise(n, key, FaultFromReport(name, *report), m);
  if (n.lost)
    Clear(n, storage::FaultKey(name, std::nullopt, v1::FAULT_SOURCE_HEARTBEAT, kHeartbeatLost), "agent reconnected", m);

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
  const uint64_t applied = TrackEpoch(n, hello.epoch());
  if (record_changed) PutNode(n, m);
  v1::Welcome welcome;
  welcome.set_revision(revision_);
  welcome.set_applied_seq(applied);
  return welcome;
}

StatusOr<ClusterState::NodeState*> ClusterState::SessionNode(const std::string& node, uint64_t session) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return FailedPrecondition("node " + node + " has not said hello");
  if (it->second.session != session) {
    return FailedPrecondition("a newer stream for node " + node + " replaced this one");
  }
  return &it->second;
}

Status ClusterState::CheckFaultRoom(const std::string& node, const std::string& key, bool external) const {
  if (auto it = faults_.find(key); it != faults_.end() && it->second.state() == v1::FAULT_STATE_ACTIVE) {
    return Status::Ok();  // a refresh or an update: no new active fault
  }
  // As costly as the health recomputation every raise does anyway.
  uint32_t active = 0;
  for (const auto& [k, f] : FaultsOfNode(node)) {
    if (f.state() != v1::FAULT_STATE_ACTIVE || f.source() == v1::FAULT_SOURCE_HEARTBEAT) continue;
    if ((f.source() == v1::FAULT_SOURCE_EXTERNAL) == external) ++active;
  }
  if (active < limits_.max_faults_per_node) return Status::Ok();
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

bool ClusterState::TryHeartbeat(const std::string& node, uint64_t session) const {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.session != session || it->second.lost) return false;
  it->second.heard.ns.store(clock_->Now().time_since_epoch().count(), std::memory_order_relaxed);
  return true;
}

Status ClusterState::ApplyHeartbeat(const std::string& node, uint64_t session, Mutation* m) {
  auto n = SessionNode(node, session);
  if (!n.ok()) return n.status();
  (*n)->last_seen = clock_->Now();
  if ((*n)->lost) {
    Clear(**n, storage::FaultKey(node, std::nullopt, v1::FAULT_SOURCE_HEARTBEAT, kHeartbeatLost), "heartbeat resumed",
          m);
  }
  return Status::Ok();
}

Status ValidateMetrics(const v1::MetricSnapshot& snapshot) {
  if (snapshot.gauges_size() > 512) return InvalidArgument("metrics.gauges: more than 512");
  for (const auto& [name, value] : snapshot.gauges()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("metrics.gauges key", name));
    if (!std::isfinite(value)) return InvalidArgument("metrics.gauges[" + name + "]: not a finite number");
  }
  return Status::Ok();
}

Status ClusterState::ApplyMetrics(const std::string& node, uint64_t session, const v1::MetricSnapshot& snapshot) {
  CLUSTERD_RETURN_IF_ERROR(ValidateMetrics(snapshot));
  auto n = SessionNode(node, session);
  if (!n.ok()) return n.status();
  (*n)->metrics = snapshot;
  (*n)->last_seen = clock_->Now();
  return Status::Ok();
}

StatusOr<TransitionResult> ClusterState::ApplyTransition(const std::string& node, uint64_t session,
                                                         const v1::FaultTransition& t, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateTransition(t));
  auto found = SessionNode(node, session);
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
  uint64_t& applied_seq = TrackEpoch(n, t.id().epoch());
  if (t.id().seq() <= applied_seq) return TransitionResult{true};
  // Refused before it counts as applied: the agent keeps it and resends it.
  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    CLUSTERD_RETURN_IF_ERROR(CheckFaultRoom(node, ReportKey(node, t.fault()), /*external=*/false));
  }
  applied_seq = t.id().seq();

  const auto& r = t.fault();
  const std::string key = ReportKey(node, r);
  if (t.action() == v1::TRANSITION_ACTION_RAISE) {
    Raise(n, key, FaultFromReport(node, r), m);
  } else {
    Clear(n, key, "cleared by agent", m);
  }
  if (n.lost) {
    Clear(n, storage::FaultKey(node, std::nullopt, v1::FAULT_SOURCE_HEARTBEAT, kHeartbeatLost), "heartbeat resumed", m);
  }
  PutNode(n, m);  // the applied sequence, in the same commit as the change
  return TransitionResult{false};
}

void ClusterState::ApplyDisconnect(const std::string& node, uint64_t session) {
  auto it = nodes_.find(node);
  if (it != nodes_.end() && it->second.session == session) {
    it->second.connected = false;
    ++connections_changed_;
  }
}

StatusOr<v1::ReportResponse> ClusterState::ApplyReport(const v1::ReportRequest& req, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateReport(req));
  auto nit = nodes_.find(req.node());
  if (nit == nodes_.end()) return NotFound("node " + req.node() + " is not registered");
  NodeState& n = nit->second;
  std::optional<uint32_t> device = req.has_device_id() ? std::optional<uint32_t>(req.device_id()) : std::nullopt;
  const std::string key =
      storage::FaultKey(req.node(), device, v1::FAULT_SOURCE_EXTERNAL, req.reporter() + "/" + req.id());
  v1::ReportResponse resp;
  const uint64_t before = revision_;
  if (req.action() == v1::TRANSITION_ACTION_RAISE) {
    v1::Fault proposed;
    proposed.set_node(req.node());
    if (device) proposed.set_device_id(*device);
    proposed.set_source(v1::FAULT_SOURCE_EXTERNAL);
    proposed.set_code(req.code());
    proposed.set_level(catalog_->Resolve(req.code(), req.level()));
    proposed.set_message(req.message());
    proposed.set_reporter(req.reporter());
    proposed.set_external_id(req.id());
    auto existing = faults_.find(key);
    if (existing != faults_.end() && existing->second.code() != req.code()) {
      return InvalidArgument("code: fault " + req.reporter() + "/" + req.id() + " was reported with code " +
                             existing->second.code());
    }
    CLUSTERD_RETURN_IF_ERROR(CheckFaultRoom(req.node(), key, /*external=*/true));
    *resp.mutable_fault() = Raise(n, key, proposed, m);
  } else {
    Clear(n, key, "cleared by " + req.reporter(), m);
    auto it = faults_.find(key);
    if (it != faults_.end()) *resp.mutable_fault() = it->second;
  }
  resp.set_unchanged(revision_ == before);
  resp.set_revision(revision_);
  return resp;
}

StatusOr<v1::Node> ClusterState::ApplyCordon(const std::string& node, bool cordon, const std::string& actor,
                                             const std::string& reason, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", node));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", actor));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", reason, 1024));
  if (cordon && reason.empty()) return InvalidArgument("reason: say why the node is cordoned");
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return NotFound("node " + node + " is not registered");
  v1::Node* n = it->second.record.mutable_node();
  bool isolated = n->isolated();
  for (const auto& [id, d] : it->second.devices) isolated = isolated || d.isolated();
  if (n->cordoned() != cordon || (!cordon && isolated)) {
    n->set_cordoned(cordon);
    n->set_cordon_reason(cordon ? reason : "");
    // Uncordon returns the node to service: isolation by a recovery ends too.
    if (!cordon) ClearIsolation(it->second, m);
    v1::Event ev;
    ev.set_type(cordon ? v1::EVENT_TYPE_NODE_CORDONED : v1::EVENT_TYPE_NODE_UNCORDONED);
    ev.set_node(node);
    ev.set_actor(actor);
    ev.set_reason(reason);
    ev.set_revision(NextRevision(m));
    n->set_revision(ev.revision());
    *ev.mutable_node_info() = *n;
    Emit(m, std::move(ev));
    PutNode(it->second, m);
  }
  v1::Node out = *n;
  out.set_connected(it->second.connected);
  return out;
}

StatusOr<v1::Fault> ClusterState::ApplyClearFault(const std::string& fault_id, const std::string& actor,
                                                  const std::string& reason, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("fault_id", fault_id, 2048));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", actor));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", reason, 1024));
  if (reason.empty()) return InvalidArgument("reason: say why the fault is cleared by hand");
  const std::string node = fault_id.substr(0, fault_id.find('/'));
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("fault_id (node part)", node));
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return NotFound("node " + node + " is not registered");
  for (const auto& [key, f] : FaultsOfNode(node)) {
    if (f.id() != fault_id) continue;
    if (f.state() != v1::FAULT_STATE_ACTIVE) return FailedPrecondition("fault " + fault_id + " is not active");
    const std::string found = key;  // Clear changes the record; the loop ends here
    Clear(nit->second, found, "cleared by " + actor + ": " + reason, m, actor);
    return faults_.at(found);
  }
  return NotFound("fault " + fault_id + " does not exist");
}

StatusOr<v1::AdminState> ClusterState::ApplySetRecoveryMode(const v1::SetRecoveryModeRequest& req, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", req.actor()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", req.reason(), 1024));
  if (!req.has_recovery_paused() && !req.has_dry_run()) {
    return InvalidArgument("set recovery_paused and/or dry_run");
  }
  // Stopping automation needs a reason, like cordoning a node or clearing a
  // fault by hand; turning it back on may go without one.
  if (req.reason().empty() && (req.recovery_paused() || req.dry_run())) {
    return InvalidArgument("reason: say why recovery is paused or put in dry-run");
  }
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
  ev.set_revision(NextRevision(m));
  next.set_revision(ev.revision());
  m->changes.Put(Cf::kMeta, std::string(storage::kMetaAdminState), next);
  Emit(m, std::move(ev));
  admin_ = std::move(next);
  return admin_;
}

TimePoint ClusterState::CheckLiveness(std::chrono::nanoseconds grace, Mutation* m) {
  const TimePoint now = clock_->Now();
  TimePoint next = TimePoint::max();
  for (auto& [name, n] : nodes_) {
    if (n.lost) continue;
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
    Raise(n, storage::FaultKey(name, std::nullopt, v1::FAULT_SOURCE_HEARTBEAT, kHeartbeatLost), f, m);
  }
  return next;
}

void ClusterState::ApplyCompaction(uint64_t to, Mutation* m) {
  const uint64_t from = compacted_.load();
  if (to <= from) return;
  storage::AddCompaction(&m->changes, from, to);
  compacted_ = to;
}

// --------------------------------------------------------------- queries ---

v1::GetSummaryResponse ClusterState::GetSummary() const {
  // Every change a summary counts bumps the revision or the connection
  // counter, so an unchanged key means an unchanged answer (a summary walks
  // every node, device and fault: milliseconds at 10,000 nodes).
  const SummaryKey key{revision_, durable_revision_.load(), compacted_.load(), connections_changed_};
  {
    std::lock_guard lock(summary_mu_);
    if (summary_key_ == key) return summary_cache_;
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
  for (const auto& [name, n] : nodes_) {
    count(out.mutable_nodes(), n.record.node().health());
    for (const auto& [id, d] : n.devices) count(out.mutable_devices(), d.health());
    connected += n.connected ? 1 : 0;
  }
  uint32_t active = 0;
  for (const auto& [key, f] : faults_) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    ++active;
    (*out.mutable_active_faults_by_level())[v1::FaultLevel_Name(f.level())]++;
  }
  out.set_active_faults(active);
  out.set_revision(durable_revision_.load());
  out.set_compacted_revision(compacted_.load());
  out.set_connected_agents(connected);
  std::lock_guard lock(summary_mu_);
  summary_key_ = key;
  summary_cache_ = out;
  return out;
}

StatusOr<v1::ListNodesResponse> ClusterState::ListNodes(const v1::ListNodesRequest& req) const {
  int32_t page_size = 0;
  std::string start;
  CLUSTERD_RETURN_IF_ERROR(ValidatePaging(req.page_size(), req.page_token(), &page_size, &start));
  if (!v1::Health_IsValid(req.health())) return InvalidArgument("health: unknown value");
  auto selector = ParseSelector(req.label_selector());
  if (!selector.ok()) return selector.status();
  auto matches = [&](const NodeState& n) {
    const v1::Node& node = n.record.node();
    if (req.health() != v1::HEALTH_UNSPECIFIED && node.health() != req.health()) return false;
    for (const auto& term : *selector) {
      if (!term.Matches(node.labels())) return false;
    }
    return true;
  };
  v1::ListNodesResponse out;
  int32_t total = 0;
  PageBudget budget(page_size);
  for (const auto& [name, n] : nodes_) {
    if (!matches(n)) continue;
    ++total;
    if (!start.empty() && name <= start) continue;
    if (!budget.closed()) {
      v1::Node node = n.record.node();
      *node.mutable_last_heartbeat_time() = ToTimestamp(n.LastSeen());
      node.set_connected(n.connected);
      if (budget.Take(node.ByteSizeLong())) {
        *out.add_nodes() = std::move(node);
        continue;
      }
    }
    if (out.next_page_token().empty()) {
      out.set_next_page_token(storage::HexEncode(out.nodes(out.nodes_size() - 1).name()));
    }
  }
  out.set_total_size(total);
  return out;
}

StatusOr<v1::GetNodeResponse> ClusterState::GetNode(const v1::GetNodeRequest& req) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("name", req.name()));
  auto it = nodes_.find(req.name());
  if (it == nodes_.end()) return NotFound("node " + req.name() + " is not registered");
  const NodeState& n = it->second;
  v1::GetNodeResponse out;
  *out.mutable_node() = n.record.node();
  *out.mutable_node()->mutable_last_heartbeat_time() = ToTimestamp(n.LastSeen());
  out.mutable_node()->set_connected(n.connected);
  for (const auto& [id, d] : n.devices) *out.add_devices() = d;
  *out.mutable_metrics() = n.metrics;
  // The faults fill what the node, its devices and metrics leave of the
  // answer's budget (ListFaults pages through the rest).
  const size_t used = out.ByteSizeLong();
  PageBudget budget(kMaxPageSize, used < kAnswerBytes ? kAnswerBytes - used : 0);
  std::string last_key;
  for (const auto& [key, f] : FaultsOfNode(req.name())) {
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

StatusOr<v1::ListFaultsResponse> ClusterState::ListFaults(const v1::ListFaultsRequest& req) const {
  int32_t page_size = 0;
  std::string start;
  CLUSTERD_RETURN_IF_ERROR(ValidatePaging(req.page_size(), req.page_token(), &page_size, &start));
  if (!req.node().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  if (req.has_device_id() && req.node().empty()) return InvalidArgument("device_id: requires node");
  if (!v1::FaultLevel_IsValid(req.min_level())) return InvalidArgument("min_level: unknown value");
  const v1::Job* job = nullptr;
  if (!req.job().empty()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job", req.job()));
    auto jit = jobs_.find(req.job());
    if (jit == jobs_.end()) return NotFound("job " + req.job() + " does not exist");
    job = &jit->second;
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
  PageBudget budget(page_size);
  for (auto it = faults_.lower_bound(prefix); it != faults_.end() && HasPrefix(it->first, prefix); ++it) {
    if (!matches(it->second)) continue;
    ++total;
    if (!start.empty() && it->first <= start) continue;
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

}  // namespace clusterd
