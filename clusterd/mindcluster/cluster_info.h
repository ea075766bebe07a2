// What Volcano's Ascend plugin reads from ClusterD: the ConfigMaps
// mindx-dl/cluster-info-device-<i> (label mx-consumer-volcano=true, one data
// key equal to the ConfigMap's name), whose value maps
// "mindx-dl-deviceinfo-<node>" to the node's chip lists (docs/mindcluster.md,
// "What Volcano reads"). Pure: the entries (the device plugin's view with
// ClusterD's own knowledge merged in) and the ConfigMaps they are cut into;
// the Kubernetes room writes what the publisher plans.
//
// Where it does better than the reference ClusterD: an entry's UpdateTime
// grows whenever its lists change, for every cause (Volcano ignores an
// update whose UpdateTime did not grow); a node keeps its ConfigMap unless
// that one would pass the size limit; a ConfigMap that gains a node is
// written before the one that loses it, so Volcano never misses the node;
// ConfigMaps no longer needed are deleted, not left with stale content.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "clusterd/mindcluster/device_info.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kClusterInfoNamespace = "mindx-dl";
inline constexpr std::string_view kClusterInfoDevicePrefix = "cluster-info-device-";
inline constexpr std::string_view kVolcanoLabel = "mx-consumer-volcano";
// The reference's limit on one ConfigMap's value (the API's is 1 MiB).
inline constexpr size_t kMaxClusterInfoBytes = 800 * 1024;
// ClusterD's default (mindcluster_cluster_info_chunk_bytes): a fault rewrites
// the ConfigMap holding its node, and a quarter of the size reaches Volcano
// in about half the time (docs/performance.md, scenario 13).
inline constexpr size_t kDefaultClusterInfoChunkBytes = 200 * 1024;

// ClusterD's own knowledge of one chip, from its other sources (NodeD,
// external reporters, public faults) and from recovery.
struct ChipState {
  v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;  // worst active fault
  std::vector<std::string> codes;                      // their codes
  bool public_fault = false;                           // one of them is a public fault
  bool isolated = false;                               // a recovery isolated the chip
  bool separated = false;                              // the separation policy separated it
  bool in_use = false;                                 // a pod holds it (the pre-separate rule)
};

// ClusterD's own knowledge of one node.
struct NodeState {
  // Without a device-plugin view: the type and chips from NodeD's inventory.
  std::string device_type;
  std::vector<uint32_t> chips;
  std::map<uint32_t, ChipState> chip_state;
  bool isolated = false;  // a recovery isolated the node, or an operator cordoned it
};

// The entry Volcano reads for a node: the plugin's view (nullptr: none, the
// node is built from `ours`) with ClusterD's knowledge merged in:
//  - a chip at RESTART_REQUEST or above, or isolated, or separated, or on
//    an isolated node, leaves the available list and is listed -Unhealthy;
//  - a PRE_SEPARATE chip leaves the available list and is listed -Unhealthy
//    only while no pod uses it (MindCluster's pre-separate rule);
//  - each such chip gets a -Fault entry (fault_type PublicFault or
//    CardUnhealthy, its codes, its level's MindCluster name; SeparateNPU for
//    an isolated chip, ManuallySeparateNPU for a separated one, as
//    MindCluster's manual separation), merged with the plugin's entry of the
//    same kind;
//  - NOT_HANDLE and SUB_HEALTH chips stay available.
// Lists are sorted by chip number, -Fault entries by chip and kind.
// UpdateTime is the plugin's (the publisher makes it grow).
NodeDeviceInfo MergeForVolcano(const NodeDeviceInfo* plugin, const NodeState& ours);

// The entry's Go-JSON in a cluster-info-device value, without the key:
// {"DeviceList":{...},"UpdateTime":N,"CmName":"mindx-dl-deviceinfo-<node>",
//  "SuperPodID":N,"RackID":N,"ServerIndex":N}.
std::string ClusterInfoEntryJson(const std::string& node, const NodeDeviceInfo& entry);

// The cluster-info ConfigMaps Volcano reads as a map cut into chunks
// (cluster-info-device-<i>, cluster-info-switch-<i>): which node is in which,
// each entry's last content and UpdateTime, and what must be written. Traits
// say what an entry is:
//   using Entry = ...;  // with int64_t update_time and operator==
//   static constexpr std::string_view kConfigMapPrefix, kKeyPrefix;
//   static std::string Json(const std::string& node, const Entry& e);
//   static bool Urgent(const Entry& before, const Entry& after);  // written first
//   static StatusOr<Entry> Parse(const nlohmann::json& e);  // Adopt: one entry
template <typename Traits>
class ChunkedPublisher {
 public:
  using Entry = typename Traits::Entry;
  explicit ChunkedPublisher(size_t max_bytes = kMaxClusterInfoBytes);

  // Takes over a ConfigMap found at start (its name and its value), so that
  // nodes keep their ConfigMap and UpdateTimes keep growing after a restart.
  // InvalidArgument for a name or value that is not one of ours; nothing is
  // taken then.
  Status Adopt(const std::string& name, std::string_view value);

  // The node's entry; its UpdateTime becomes the largest of the entry's, the
  // last one written plus one when the content changed (else the last one),
  // and now_s. An entry larger than the limit on its own is refused.
  Status Set(const std::string& node, Entry entry, int64_t now_s);
  // A node whose lists last changed at least this long ago is quiet: its
  // urgent change is written before those of nodes that change all the time
  // (a flapping device plugin rewrites its ConfigMap every second), so a
  // fault elsewhere does not queue behind them.
  static constexpr int64_t kQuietSeconds = 10;

  // Every entry's UpdateTime becomes now_s (at least one more than it was)
  // and every ConfigMap is to be written: the periodic rewrite that keeps
  // Volcano's cache fresh (it rebuilds its informer when an entry's
  // UpdateTime has not grown for a minute).
  void Refresh(int64_t now_s);
  // After the last Adopt: ConfigMaps over this publisher's limit (written
  // with a larger one, or by the reference) hand nodes to others until they
  // fit; those that gain them are written first.
  void Fit();
  // The node has nothing to publish any more (never for a fault: Volcano
  // keeps a missing node's last lists).
  void Remove(const std::string& node);

  struct Write {
    std::string name;           // <prefix><i>
    std::string value;          // the value of its one data key (= name)
    bool refresh_only = false;  // nothing changed but UpdateTime (Refresh)
    bool urgent = false;        // it gains a node, or a chip left an available list
  };
  struct Plan {
    // In this order: gaining ConfigMaps; urgent ones, a quiet node's first;
    // changed ones; refreshed ones. Within each, the longest waiting first.
    // Last, a ConfigMap that lost its last node: its value "" (see blank_).
    std::vector<Write> writes;
    bool more = false;  // writes left out at max_writes
    bool empty() const { return writes.empty(); }
  };
  // What changed since the last Written(); every ConfigMap with `all`. At
  // most `max_writes` writes, the first in the order above: the others stay
  // to be written, and their values (up to 800 KiB each) are not built.
  Plan Pending(bool all = false, size_t max_writes = SIZE_MAX) const;
  // The plan's writes are done.
  void Written(const Plan& plan);

  // Inspection (tests, metrics).
  std::optional<size_t> ChunkOf(const std::string& node) const;
  std::vector<std::string> Nodes() const;
  std::optional<int64_t> UpdateTimeOf(const std::string& node) const;
  size_t chunks() const { return chunks_.size(); }
  size_t node_count() const { return nodes_.size(); }

 private:
  struct Node {
    Entry entry;
    std::string json;  // Traits::Json
    size_t chunk = 0;
    int64_t changed_s = 0;  // when its content last changed (Set's now_s)
  };
  struct Chunk {
    std::set<std::string> nodes;
    size_t bytes = 2;  // "{}"
    bool dirty = false;
    bool gained = false;        // a node moved in since the last write
    bool refresh_only = false;  // dirty only for a refresh: written last
    bool urgent = false;        // Traits::Urgent: written before other changes
    bool quiet_urgent = false;  // ... of a quiet node: before other urgent ones
    uint64_t dirty_seq = 0;     // when it became dirty: the longest waiting first
    uint64_t quiet_seq = 0;     // when a quiet node's urgent change came
  };
  static size_t EntryBytes(const std::string& node, const std::string& json);
  size_t Place(const std::string& node, size_t bytes, std::optional<size_t> prefer);
  void Leave(const std::string& node, const Node& n);
  void Touch(Chunk& c);
  void Fit(const std::vector<std::string>& candidates);
  std::string ValueOf(const Chunk& c) const;
  static std::string NameOf(size_t index);

  const size_t max_bytes_;
  std::map<std::string, Node> nodes_;
  std::map<size_t, Chunk> chunks_;
  // A ConfigMap that loses its last node is never deleted: Volcano's Ascend
  // plugin, on a Delete event, drops from its cache every node the deleted
  // object's last version lists (ascend-for-volcano common/k8s/cmmgr.go,
  // dealClusterDeviceInfo), and those nodes' lists would freeze until their
  // new ConfigMap is written again. It is rewritten with "" (which Volcano
  // reads as no nodes), as the reference does, and kept for reuse.
  std::set<size_t> to_blank_;  // lost their last node: "" to be written
  std::set<size_t> blank_;     // "" written (or adopted so)
  uint64_t dirty_seq_ = 0;
};

// cluster-info-device-<i>: "mindx-dl-deviceinfo-<node>" -> the node's chip
// lists; urgent when a chip leaves the available list.
struct DeviceEntryTraits {
  using Entry = NodeDeviceInfo;
  static constexpr std::string_view kConfigMapPrefix = kClusterInfoDevicePrefix;
  static constexpr std::string_view kKeyPrefix = "mindx-dl-deviceinfo-";
  static std::string Json(const std::string& node, const Entry& e) { return ClusterInfoEntryJson(node, e); }
  static bool Urgent(const Entry& before, const Entry& after);
  static StatusOr<Entry> Parse(const nlohmann::json& e);
};
using ClusterInfoPublisher = ChunkedPublisher<DeviceEntryTraits>;

// cluster-info-switch-<i> (A3): "mindx-dl-switchinfo-<node>" -> the switch
// faults the device plugin reports for the node (its SwitchInfoCfg):
// {"FaultCode":[...],"FaultLevel":...,"UpdateTime":N,"NodeStatus":...,
//  "FaultTimeAndLevelMap":{...},"CmName":"mindx-dl-switchinfo-<node>"}.
inline constexpr std::string_view kClusterInfoSwitchPrefix = "cluster-info-switch-";
struct SwitchEntry {
  std::vector<std::string> fault_codes;  // FaultCode: each the JSON of one switch fault, as the plugin wrote it
  std::string fault_level;               // FaultLevel
  std::string node_status;               // NodeStatus
  std::string levels_json = "{}";        // FaultTimeAndLevelMap: a JSON object
  int64_t update_time = 0;               // seconds
  bool operator==(const SwitchEntry&) const = default;
};
std::string ClusterInfoSwitchEntryJson(const std::string& node, const SwitchEntry& e);
// Urgent when the node's status or faults change (Volcano takes an UnHealthy
// switch's node out).
struct SwitchEntryTraits {
  using Entry = SwitchEntry;
  static constexpr std::string_view kConfigMapPrefix = kClusterInfoSwitchPrefix;
  static constexpr std::string_view kKeyPrefix = "mindx-dl-switchinfo-";
  static std::string Json(const std::string& node, const Entry& e) { return ClusterInfoSwitchEntryJson(node, e); }
  static bool Urgent(const Entry& before, const Entry& after) {
    return before.node_status != after.node_status || before.fault_codes != after.fault_codes;
  }
  static StatusOr<Entry> Parse(const nlohmann::json& e);
};
using SwitchInfoPublisher = ChunkedPublisher<SwitchEntryTraits>;

extern template class ChunkedPublisher<DeviceEntryTraits>;
extern template class ChunkedPublisher<SwitchEntryTraits>;

}  // namespace clusterd::mindcluster
