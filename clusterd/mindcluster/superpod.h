// MindCluster's SuperPoD membership ConfigMaps (docs/mindcluster.md, "SuperPoD
// ConfigMaps for MindCluster NodeD's pingmesh"): cluster-system/super-pod-<id>,
// label app=pingmesh, data key superPodDevice, which MindCluster's NodeD reads
// to learn the peers its pingmesh probes (every chip of every node of its
// SuperPoD, by super device id).
//
// In: the annotations the Ascend device plugin puts on each Node of an A3
// SuperPoD: superPodID ("7"), serverIndex ("3"), serverType ("A3") and
// baseDeviceInfos (JSON: "Ascend910-<phy id>" -> {"IP", "SuperDeviceID"}).
// Out: per SuperPoD the Go-JSON of the reference's api.SuperPodDevice,
// {"Version":"A3","SuperPodID":"7","NodeDeviceMap":{"<node>":{"NodeName":
// "<node>","ServerID":"3","DeviceMap":{"<phy id>":"<super device id>"}}}},
// byte for byte what the reference's ClusterD writes (Go sorts map keys), so
// that a restart that finds its own ConfigMaps rewrites none of them.
//
// Pure: no Kubernetes client, no clock. Not thread-safe; one owner.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace clusterd::mindcluster {

inline constexpr std::string_view kSuperPodCmPrefix = "super-pod-";
inline constexpr std::string_view kSuperPodDeviceKey = "superPodDevice";
inline constexpr std::string_view kPingMeshLabelKey = "app";
inline constexpr std::string_view kPingMeshLabelValue = "pingmesh";
// The device plugin's Node annotations.
inline constexpr std::string_view kSuperPodIdAnnotation = "superPodID";
inline constexpr std::string_view kServerIndexAnnotation = "serverIndex";
inline constexpr std::string_view kServerTypeAnnotation = "serverType";
inline constexpr std::string_view kBaseDeviceInfosAnnotation = "baseDeviceInfos";
// The only server type served: A3 (the device plugin writes "npu" for A5,
// whose rack-level ConfigMap shape is not served).
inline constexpr std::string_view kSuperPodServerTypeA3 = "A3";

// The reference's bounds: chips per node (node_storage.go's
// maxNodeDeviceNum), nodes per SuperPoD and SuperPoDs (superpod_storage.go).
inline constexpr size_t kMaxSuperPodNodeDevices = 128;
inline constexpr size_t kMaxSuperPodNodes = 256;
inline constexpr size_t kMaxSuperPods = 1024;
// A SuperPoD id is a natural number that NodeD's own (an int) can equal.
inline constexpr uint64_t kMaxSuperPodId = 2'147'483'647;
// baseDeviceInfos longer than this is not parsed (128 chips take ~8 KiB).
inline constexpr size_t kMaxBaseDeviceInfosBytes = 64 * 1024;
inline constexpr size_t kMaxServerIndexBytes = 64;

// Why a node that names a SuperPoD is left out of it.
enum class SuperPodSkip : uint8_t {
  kSuperPodId,   // superPodID is not a natural number (canonical decimal)
  kServerType,   // serverType is not A3
  kDevices,      // baseDeviceInfos missing, malformed, empty or over 128 chips
  kServerIndex,  // serverIndex over 64 bytes or not printable
  kFull,         // its SuperPoD already has 256 nodes, or 1024 SuperPoDs are kept
};
inline constexpr size_t kSuperPodSkipReasons = 5;
// "super_pod_id", "server_type", "devices", "server_index", "full": the
// metric label.
std::string_view SuperPodSkipName(SuperPodSkip reason);

// One node's part of its SuperPoD's ConfigMap.
struct SuperPodMember {
  uint64_t super_pod = 0;
  std::string server_id;                 // the serverIndex annotation, trimmed ("" when absent)
  std::map<uint32_t, uint32_t> devices;  // physical chip id -> super device id
  bool operator==(const SuperPodMember&) const = default;
};

// What a Node's annotations say: not a member (no superPodID annotation:
// a node outside any SuperPoD, nothing to count), a member, or skipped with
// a reason and a message naming what is wrong.
struct SuperPodVerdict {
  std::optional<SuperPodMember> member;
  std::optional<SuperPodSkip> skip;
  std::string why;
  bool operator==(const SuperPodVerdict&) const = default;
};
// `annotations`: the Node's metadata.annotations (any JSON; not an object
// means none). Checked as the reference checks them (trimmed values; a
// SuperPoD id that is a natural number; serverType A3; 1 to 128 chips named
// "Ascend910-<n>", each with an unsigned 32-bit SuperDeviceID) and stricter
// where the reference would publish what NodeD cannot use: a non-canonical
// number ("007", "+7"), a chip without SuperDeviceID or with a null entry.
SuperPodVerdict SuperPodMemberOf(const nlohmann::json& annotations);

// The SuperPoDs' members, node by node, and the value of each ConfigMap.
class SuperPodIndex {
 public:
  // The node's verdict now (a node deleted: nullopt). The SuperPoDs whose
  // content may have changed (the one it left, the one it joined) are added
  // to `changed`; nothing is added when the verdict is the same as before.
  void Set(const std::string& node, std::optional<SuperPodVerdict> verdict, std::set<uint64_t>* changed);

  // The ConfigMap's value of SuperPoD `id`: nullopt when no node of it is
  // listed (the ConfigMap goes). Its first kMaxSuperPodNodes members by name;
  // a SuperPoD past the first kMaxSuperPods ids has none listed.
  std::optional<std::string> Value(uint64_t id) const;
  // The SuperPoDs with at least one member listed.
  std::set<uint64_t> SuperPods() const;

  // Nodes listed in some ConfigMap, and nodes skipped, by reason (those
  // past the bounds count as kFull).
  size_t listed() const;
  std::array<size_t, kSuperPodSkipReasons> skipped() const;

 private:
  // Members of SuperPoD id within the bounds.
  bool Kept(uint64_t id) const;

  std::map<std::string, SuperPodVerdict> nodes_;
  std::map<uint64_t, std::set<std::string>> members_;   // SuperPoD -> its nodes, sorted
  std::array<size_t, kSuperPodSkipReasons> skipped_{};  // by verdict, not counting kFull
};

// "super-pod-<id>", and back (nullopt for any other name, or one that is
// not canonical: "super-pod-07").
std::string SuperPodCmName(uint64_t id);
std::optional<uint64_t> SuperPodIdOfCmName(std::string_view name);

}  // namespace clusterd::mindcluster
