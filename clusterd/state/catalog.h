// Fault code -> level. The default catalog is compiled in from the public
// Ascend mapping (clusterd/state/catalog/ascend-fault-codes.json) and NVIDIA's
// Xid and NVML codes (nvidia-gpu-codes.json); an override file
// in the same format replaces or adds entries. Immutable after construction,
// so safe to read from any thread.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

class Catalog {
 public:
  // The built-in catalog plus the product's own named codes (HEARTBEAT_LOST).
  static Catalog Default(v1::FaultLevel default_level = v1::FAULT_LEVEL_SUB_HEALTH);

  // Merges a catalog JSON document ({"codes": [{"code", "level"}],
  // optional "default_level", optional "firmware_driver_pairs": [{"driver",
  // "firmware": [versions]}]}) over this one. A pair entry replaces the
  // driver's list; an empty list takes the driver out of the table. On error
  // nothing changes and the Status names the offending entry.
  Status MergeJson(std::string_view json_text, std::string_view origin);
  Status MergeFile(const std::string& path);

  // Catalog level if the code is known; else the reported level if the
  // reporter gave one; else the default level. Codes compare case-insensitively.
  v1::FaultLevel Resolve(std::string_view code, v1::FaultLevel reported) const;
  // The same for a reporter whose levels are its own (`reporter_decides`:
  // MindCluster's device plugin decides each fault's level from its own,
  // operator-customised fault tables and escalations): its level wins over
  // the built-in catalog's, but not over a code the operator's catalog file
  // names. `source` says which gave `level`: "reporter", "catalog",
  // "catalog override" or "default"; `catalog` is the catalog's level for
  // the code (UNSPECIFIED when it knows none).
  struct Resolution {
    v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
    v1::FaultLevel catalog = v1::FAULT_LEVEL_UNSPECIFIED;
    std::string_view source;
  };
  Resolution ResolveFor(std::string_view code, v1::FaultLevel reported, bool reporter_decides) const;
  bool Contains(std::string_view code) const;
  // Whether the code's level comes from a catalog merged over the built-in
  // one (the operator's file), not from the built-in catalog.
  bool Overridden(std::string_view code) const;

  // The firmware versions known to suit a driver version (compared without
  // case), or nullptr when the table does not know the driver: then no pair
  // is judged. The built-in table is empty (docs/faults.md).
  const std::vector<std::string>* FirmwareFor(std::string_view driver) const;
  size_t firmware_pairs() const { return firmware_.size(); }

  v1::FaultLevel default_level() const { return default_level_; }
  void set_default_level(v1::FaultLevel level) { default_level_ = level; }
  size_t size() const { return levels_.size(); }

 private:
  std::unordered_map<std::string, v1::FaultLevel> levels_;
  std::unordered_set<std::string> overridden_;  // upper-case codes merged over the built-in catalog
  std::unordered_map<std::string, std::vector<std::string>> firmware_;  // upper-case driver -> firmware
  v1::FaultLevel default_level_ = v1::FAULT_LEVEL_SUB_HEALTH;
};

}  // namespace clusterd
