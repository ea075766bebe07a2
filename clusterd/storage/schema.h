// The whole on-disk schema of ClusterD's RocksDB store, in one place.
// docs/storage.md explains it; the values below reach disk and never change.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace clusterd::storage {

// Column families. The numeric values are pinned: they index handle arrays
// and appear in docs; the names are what RocksDB stores.
enum class Cf : uint8_t {
  kDefault = 0,     // unused, RocksDB requires it
  kMeta = 1,        // revision, compacted revision, schema version
  kNodes = 2,       // node name -> storage.v1.NodeRecord
  kDevices = 3,     // node \0 device-id(u32 BE) -> v1.Device
  kFaults = 4,      // fault key (key_codec.h) -> v1.Fault
  kEvents = 5,      // revision (u64 BE) -> v1.Event
  kJobs = 6,        // job id -> v1.Job (as stored, without impacts)
  kRecoveries = 7,  // recovery id -> v1.Recovery
};
inline constexpr size_t kCfCount = 8;

inline constexpr std::array<std::string_view, kCfCount> kCfNames = {"default", "meta",   "nodes", "devices",
                                                                    "faults",  "events", "jobs",  "recoveries"};

// Keys in the meta column family. Values are u64 big-endian.
inline constexpr std::string_view kMetaRevision = "revision";
inline constexpr std::string_view kMetaCompactedRevision = "compacted_revision";
inline constexpr std::string_view kMetaSchemaVersion = "schema_version";
// Value: v1.AdminState (recovery paused, dry-run).
inline constexpr std::string_view kMetaAdminState = "admin_state";
// Prefix of the keys "mindcluster/datatrace/<namespace>/<name>"; value:
// clusterd.storage.v1.DataTraceRecord (a job's MindCluster profiling switch,
// docs/mindcluster.md). Not cluster state: no revision, no event.
inline constexpr std::string_view kMetaDataTracePrefix = "mindcluster/datatrace/";
// Prefix of the keys "mindcluster/om/<job id>"; value:
// clusterd.storage.v1.OmJobRecord (a job's MindCluster NIC switch and stress
// test, in flight and finished, docs/mindcluster.md). Not cluster state: no
// revision, no event.
inline constexpr std::string_view kMetaOmPrefix = "mindcluster/om/";
// Prefix of the keys "incidents/<incident id>"; value: clusterd.v1.Incident
// (an incident of a fault domain, docs/domains.md). Cluster state: each
// change has its revision and an INCIDENT_* event; the closed incidents
// beyond the newest 1000 are deleted.
inline constexpr std::string_view kMetaIncidentPrefix = "incidents/";
// Prefix of the keys "evidence/<incident id>/<node>"; value:
// clusterd.v1.EvidenceBundle (a member node's diagnostic bundle of an
// incident, docs/domains.md). Not cluster state: no revision, no event;
// deleted by age (evidence_max_age) and by total size
// (evidence_max_total_bytes, the oldest first).
inline constexpr std::string_view kMetaEvidencePrefix = "evidence/";

inline constexpr uint64_t kSchemaVersion = 1;

}  // namespace clusterd::storage
