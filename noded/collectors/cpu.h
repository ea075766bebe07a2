// CPU collector: utilisation from the delta of /proc/stat between two samples,
// load averages from /proc/loadavg, thermal throttle counters from
// /sys/devices/system/cpu/cpu*/thermal_throttle where the platform exposes them.
// Readings only; deciding what is a fault is the rules engine's job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

// Aggregate jiffies from the "cpu" line of /proc/stat.
struct CpuTimes {
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  uint64_t Total() const { return user + nice + system + idle + iowait + irq + softirq + steal; }
  uint64_t Idle() const { return idle + iowait; }
};

struct CpuThrottle {
  int cpu = 0;
  int package_id = 0;  // from topology/physical_package_id; the cpu number when absent
  std::optional<uint64_t> core_count;
  std::optional<uint64_t> package_count;
};

struct CpuReading {
  CpuTimes times;
  int cpus = 0;  // per-cpu lines in /proc/stat (online cpus)
  // Busy and iowait share of all cpus since the previous Collect(), in percent.
  // Absent on the first sample: a delta needs two.
  std::optional<double> utilisation_percent;
  std::optional<double> iowait_percent;
  std::optional<double> load1, load5, load15;  // absent when /proc/loadavg is unreadable
  std::vector<CpuThrottle> throttle;           // empty where sysfs has no thermal_throttle
  // Sum of core throttle counts plus one package count per package (every cpu of
  // a package reports the same package counter, so it is counted once).
  uint64_t throttle_events = 0;
};

// Not thread-safe: keeps the previous /proc/stat sample; use from one thread.
class CpuCollector {
 public:
  explicit CpuCollector(std::string root = "/");
  // Fails only when /proc/stat cannot be read or parsed; other files are optional.
  StatusOr<CpuReading> Collect();

 private:
  FsRoot fs_;
  std::optional<CpuTimes> previous_;
};

}  // namespace clusterd::noded
