// Memory collector: /proc/meminfo, pressure stall information from
// /proc/pressure/memory where the kernel has PSI, and EDAC corrected /
// uncorrected ECC counts from /sys/devices/system/edac/mc/mc*.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

// One line of /proc/pressure/memory ("some" or "full").
struct Pressure {
  double avg10 = 0, avg60 = 0, avg300 = 0;
  uint64_t total_us = 0;
};

struct EdacController {
  std::string name;  // "mc0"
  uint64_t ce_count = 0;
  uint64_t ue_count = 0;
};

struct MemoryReading {
  std::map<std::string, uint64_t> meminfo_kib;  // every /proc/meminfo field, in KiB
  uint64_t total_kib = 0;
  // MemAvailable; on kernels without it, MemFree + Buffers + Cached.
  uint64_t available_kib = 0;
  double available_percent = 0;           // available / total * 100
  uint64_t hardware_corrupted_kib = 0;    // memory the kernel poisoned after errors
  std::optional<Pressure> pressure_some;  // absent without PSI
  std::optional<Pressure> pressure_full;
  std::vector<EdacController> edac;  // empty without EDAC
  uint64_t ecc_corrected = 0;        // sums over controllers
  uint64_t ecc_uncorrected = 0;
};

// Stateless; safe to call from any one thread at a time.
class MemoryCollector {
 public:
  explicit MemoryCollector(std::string root = "/");
  // Fails only when /proc/meminfo is unreadable or has no MemTotal.
  StatusOr<MemoryReading> Collect() const;

 private:
  FsRoot fs_;
};

}  // namespace clusterd::noded
