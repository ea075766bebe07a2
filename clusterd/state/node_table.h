// Nodes, their devices and their agents' liveness: the node aggregate. It
// owns the records and writes them to the change set (once per commit,
// however often they changed: Flush). Health is derived from faults by
// ClusterState, which sets it here.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "clusterd/state/journal.h"
#include "clusterd/storage/store.h"
#include "clusterd/storage/v1/storage.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "common/status.h"

namespace clusterd {

// One node as the state holds it.
struct NodeState {
  // A time written without the exclusive lock (heartbeats under the shared
  // lock), copyable so that NodeState stays a value.
  struct AtomicTime {
    std::atomic<int64_t> ns{0};
    AtomicTime() = default;
    AtomicTime(const AtomicTime& o) : ns(o.ns.load()) {}
    AtomicTime& operator=(const AtomicTime& o) {
      ns = o.ns.load();
      return *this;
    }
  };
  storage::v1::NodeRecord record;
  std::map<uint32_t, v1::Device> devices;
  TimePoint last_seen;       // last message applied by the writer
  mutable AtomicTime heard;  // last heartbeat taken by TryHeartbeat
  TimePoint LastSeen() const {
    return std::max(last_seen, TimePoint(TimePoint::duration(heard.ns.load(std::memory_order_relaxed))));
  }
  bool connected = false;
  bool lost = false;  // HEARTBEAT_LOST active
  uint64_t session = 0;
  uint64_t hello_epoch = 0;  // the epoch the current session said hello with
  v1::MetricSnapshot metrics;

  const std::string& name() const { return record.node().name(); }
  // The node as answered: the record plus liveness.
  v1::Node Describe() const;
};

class NodeTable {
 public:
  using Map = std::map<std::string, NodeState>;
  // How many agent epochs per node keep their applied sequence.
  static constexpr size_t kEpochsKept = 8;

  explicit NodeTable(Journal* journal) : journal_(journal) {}

  // Reads every node and device record; nodes start disconnected, seen now.
  Status Load(const storage::Store& store, TimePoint now);

  const NodeState* Find(const std::string& name) const;
  NodeState* Find(const std::string& name);
  // The node, created empty if new (second: created).
  std::pair<NodeState*, bool> FindOrAdd(const std::string& name);
  // The node of an agent session: FailedPrecondition when the node never
  // said hello or a newer stream replaced this one.
  StatusOr<NodeState*> OfSession(const std::string& name, uint64_t session);
  const Map& all() const { return nodes_; }
  Map& all() { return nodes_; }
  size_t size() const { return nodes_.size(); }

  // The node's or device's record goes into the next Flush.
  void Changed(const NodeState& n) { dirty_nodes_.insert(n.name()); }
  void Changed(const v1::Device& d) { dirty_devices_.emplace(d.node(), d.id()); }
  // Writes every record changed since the last flush into m.
  void Flush(Mutation* m);

  // An agent connected or disconnected (the summary counts connections).
  void ConnectionChanged() { ++connections_changed_; }
  uint64_t connections_changed() const { return connections_changed_; }
  // Counts the changes of the nodes' labels (a node created, a hello with
  // other labels): what the fault domains are derived from (state/domains.h).
  void LabelsChanged() { ++labels_generation_; }
  uint64_t labels_generation() const { return labels_generation_; }

  // With the lock held shared: a heartbeat of the node's current session on
  // a node that is not lost refreshes its last-seen time. False otherwise.
  bool TryHeartbeat(const std::string& name, uint64_t session, TimePoint now) const;

  // The applied sequence of `epoch` in the node's record (0 when new). Keeps
  // the kEpochsKept most recent epochs, never evicting `epoch` or the current
  // session's hello epoch.
  static uint64_t& TrackEpoch(NodeState& n, uint64_t epoch);

  // Marks a node (device absent) or a device isolated, with a NODE_UPDATED
  // event; idempotent. ClearIsolation ends both (no event of its own).
  Status SetIsolated(const std::string& node, std::optional<uint32_t> device, const std::string& reason, Mutation* m);
  void ClearIsolation(NodeState& n);
  // Cordons or uncordons (uncordon also ends isolation), with its event.
  // Unchanged: no event. Returns the node as answered.
  v1::Node SetCordon(NodeState& n, bool cordon, const std::string& actor, const std::string& reason, Mutation* m);

  std::set<std::string> Cordoned() const;
  std::set<std::string> Isolated() const;
  // Node names by the value of a label (the first node wins a duplicate).
  std::map<std::string, std::string> ByLabel(const std::string& label) const;

  StatusOr<v1::ListNodesResponse> List(const v1::ListNodesRequest& req) const;

 private:
  Journal* journal_;
  Map nodes_;
  std::set<std::string> dirty_nodes_;
  std::set<std::pair<std::string, uint32_t>> dirty_devices_;
  uint64_t connections_changed_ = 0;
  uint64_t labels_generation_ = 0;
};

}  // namespace clusterd
