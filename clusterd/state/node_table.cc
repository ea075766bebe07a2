#include "clusterd/state/node_table.h"

#include <algorithm>

#include "clusterd/state/response_limits.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/time_proto.h"

namespace clusterd {

using storage::Cf;

v1::Node NodeState::Describe() const {
  v1::Node node = record.node();
  *node.mutable_last_heartbeat_time() = ToTimestamp(LastSeen());
  node.set_connected(connected);
  return node;
}

Status NodeTable::Load(const storage::Store& store, TimePoint now) {
  Status parse_error;
  auto fail = [&](const std::string& what, std::string_view key) {
    if (parse_error.ok()) parse_error = DataLoss(what + " record " + storage::HexEncode(key) + " does not parse");
  };
  CLUSTERD_RETURN_IF_ERROR(store.ForEach(Cf::kNodes, [&](std::string_view key, std::string_view value) {
    NodeState n;
    if (!n.record.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("node", key);
    n.last_seen = now;
    nodes_.emplace(std::string(key), std::move(n));
  }));
  CLUSTERD_RETURN_IF_ERROR(store.ForEach(Cf::kDevices, [&](std::string_view key, std::string_view value) {
    v1::Device d;
    if (!d.ParseFromArray(value.data(), static_cast<int>(value.size()))) return fail("device", key);
    auto it = nodes_.find(d.node());
    if (it != nodes_.end()) it->second.devices[d.id()] = std::move(d);
  }));
  return parse_error;
}

const NodeState* NodeTable::Find(const std::string& name) const {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

NodeState* NodeTable::Find(const std::string& name) {
  auto it = nodes_.find(name);
  return it == nodes_.end() ? nullptr : &it->second;
}

std::pair<NodeState*, bool> NodeTable::FindOrAdd(const std::string& name) {
  auto [it, created] = nodes_.try_emplace(name);
  return {&it->second, created};
}

StatusOr<NodeState*> NodeTable::OfSession(const std::string& name, uint64_t session) {
  NodeState* n = Find(name);
  if (!n) return FailedPrecondition("node " + name + " has not said hello");
  if (n->session != session) return FailedPrecondition("a newer stream for node " + name + " replaced this one");
  return n;
}

void NodeTable::Flush(Mutation* m) {
  for (const auto& name : dirty_nodes_) {
    if (const NodeState* n = Find(name)) m->changes.Put(Cf::kNodes, storage::NodeKey(name), n->record);
  }
  dirty_nodes_.clear();
  for (const auto& [name, id] : dirty_devices_) {
    const NodeState* n = Find(name);
    if (!n) continue;
    auto dit = n->devices.find(id);
    if (dit != n->devices.end()) m->changes.Put(Cf::kDevices, storage::DeviceKey(name, id), dit->second);
  }
  dirty_devices_.clear();
}

bool NodeTable::TryHeartbeat(const std::string& name, uint64_t session, TimePoint now) const {
  const NodeState* n = Find(name);
  if (!n || n->session != session || n->lost) return false;
  n->heard.ns.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  return true;
}

uint64_t& NodeTable::TrackEpoch(NodeState& n, uint64_t epoch) {
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

Status NodeTable::SetIsolated(const std::string& node, std::optional<uint32_t> device, const std::string& reason,
                              Mutation* m) {
  NodeState* n = Find(node);
  if (!n) return NotFound("node " + node + " is not registered");
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_NODE_UPDATED);
  ev.set_node(node);
  ev.set_actor("clusterd");
  ev.set_reason(reason);
  if (device) {
    auto dit = n->devices.find(*device);
    if (dit == n->devices.end()) {
      // A device the agent never reported: record it so the isolation shows.
      v1::Device d;
      d.set_node(node);
      d.set_id(*device);
      d.set_health(v1::HEALTH_HEALTHY);
      dit = n->devices.emplace(*device, std::move(d)).first;
    }
    v1::Device& d = dit->second;
    if (d.isolated()) return Status::Ok();
    d.set_isolated(true);
    d.set_isolation_reason(reason);
    ev.set_revision(journal_->Next());
    d.set_revision(ev.revision());
    ev.set_device_id(*device);
    ev.set_message("device " + std::to_string(*device) + " isolated");
    Changed(d);
  } else {
    v1::Node* rec = n->record.mutable_node();
    if (rec->isolated()) return Status::Ok();
    rec->set_isolated(true);
    rec->set_isolation_reason(reason);
    ev.set_revision(journal_->Next());
    rec->set_revision(ev.revision());
    ev.set_message("node isolated");
    Changed(*n);
  }
  *ev.mutable_node_info() = n->record.node();
  journal_->Emit(m, std::move(ev));
  return Status::Ok();
}

void NodeTable::ClearIsolation(NodeState& n) {
  n.record.mutable_node()->set_isolated(false);
  n.record.mutable_node()->clear_isolation_reason();
  for (auto& [id, d] : n.devices) {
    if (!d.isolated()) continue;
    d.set_isolated(false);
    d.clear_isolation_reason();
    Changed(d);
  }
}

v1::Node NodeTable::SetCordon(NodeState& n, bool cordon, const std::string& actor, const std::string& reason,
                              Mutation* m) {
  v1::Node* node = n.record.mutable_node();
  bool isolated = node->isolated();
  for (const auto& [id, d] : n.devices) isolated = isolated || d.isolated();
  if (node->cordoned() != cordon || (!cordon && isolated)) {
    node->set_cordoned(cordon);
    node->set_cordon_reason(cordon ? reason : "");
    *node->mutable_cordon_changed_time() = ToTimestamp(journal_->Now());
    // Uncordon returns the node to service: isolation by a recovery ends too.
    if (!cordon) ClearIsolation(n);
    v1::Event ev;
    ev.set_type(cordon ? v1::EVENT_TYPE_NODE_CORDONED : v1::EVENT_TYPE_NODE_UNCORDONED);
    ev.set_node(n.name());
    ev.set_actor(actor);
    ev.set_reason(reason);
    ev.set_revision(journal_->Next());
    node->set_revision(ev.revision());
    *ev.mutable_node_info() = *node;
    journal_->Emit(m, std::move(ev));
    Changed(n);
  }
  v1::Node out = *node;
  out.set_connected(n.connected);
  return out;
}

std::set<std::string> NodeTable::Cordoned() const {
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_) {
    if (n.record.node().cordoned()) out.insert(name);
  }
  return out;
}

std::set<std::string> NodeTable::Isolated() const {
  std::set<std::string> out;
  for (const auto& [name, n] : nodes_) {
    if (n.record.node().isolated()) out.insert(name);
  }
  return out;
}

std::map<std::string, std::string> NodeTable::ByLabel(const std::string& label) const {
  std::map<std::string, std::string> out;
  for (const auto& [name, n] : nodes_) {
    auto it = n.record.node().labels().find(label);
    if (it != n.record.node().labels().end()) out.emplace(it->second, name);
  }
  return out;
}

StatusOr<v1::ListNodesResponse> NodeTable::List(const v1::ListNodesRequest& req) const {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  if (!v1::Health_IsValid(req.health())) return InvalidArgument("health: unknown value");
  auto selector = ParseLabelSelector(req.label_selector());
  if (!selector.ok()) return selector.status();
  auto matches = [&](const NodeState& n) {
    const v1::Node& node = n.record.node();
    if (req.health() != v1::HEALTH_UNSPECIFIED && node.health() != req.health()) return false;
    return selector->Matches(node.labels());
  };
  v1::ListNodesResponse out;
  PageBudget budget(page->size);
  if (req.health() == v1::HEALTH_UNSPECIFIED && req.label_selector().empty()) {
    // Every node matches: the total is the table's size and the page starts
    // at its token, so a page costs its own nodes, not the whole table (at
    // 100,000 nodes a walk of every page was quadratic).
    auto it = page->start.empty() ? nodes_.begin() : nodes_.upper_bound(page->start);
    for (; it != nodes_.end(); ++it) {
      v1::Node node = it->second.Describe();
      if (!budget.Take(node.ByteSizeLong())) {
        out.set_next_page_token(storage::HexEncode(out.nodes(out.nodes_size() - 1).name()));
        break;
      }
      *out.add_nodes() = std::move(node);
    }
    out.set_total_size(static_cast<int32_t>(nodes_.size()));
    return out;
  }
  int32_t total = 0;
  for (const auto& [name, n] : nodes_) {
    if (!matches(n)) continue;
    ++total;
    if (!page->start.empty() && name <= page->start) continue;
    if (!budget.closed()) {
      v1::Node node = n.Describe();
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

}  // namespace clusterd
