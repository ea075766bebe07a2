#include "noded/collectors/cpu.h"

#include <algorithm>
#include <map>

namespace clusterd::noded {
namespace {

std::optional<CpuTimes> ParseCpuLine(std::string_view line) {
  auto f = SplitWhitespace(line);
  if (f.size() < 5 || f[0] != "cpu") return std::nullopt;
  CpuTimes t;
  uint64_t* order[] = {&t.user, &t.nice, &t.system, &t.idle, &t.iowait, &t.irq, &t.softirq, &t.steal};
  // Old kernels print fewer columns; missing ones stay zero.
  for (size_t i = 1; i < f.size() && i <= 8; ++i) {
    auto v = ParseUint(f[i]);
    if (!v) return std::nullopt;
    *order[i - 1] = *v;
  }
  return t;
}

}  // namespace

CpuCollector::CpuCollector(std::string root) : fs_(std::move(root)) {}

StatusOr<CpuReading> CpuCollector::Collect() {
  auto stat = fs_.Read("/proc/stat");
  if (!stat.ok()) return stat.status();

  CpuReading r;
  bool have_total = false;
  std::string_view rest = *stat;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.starts_with("cpu ")) {
      auto t = ParseCpuLine(line);
      if (!t) return DataLoss(fs_.Path("/proc/stat") + ": malformed cpu line");
      r.times = *t;
      have_total = true;
    } else if (line.starts_with("cpu")) {
      ++r.cpus;
    }
  }
  if (!have_total) return DataLoss(fs_.Path("/proc/stat") + ": no aggregate cpu line");

  if (previous_) {
    uint64_t total = r.times.Total() - std::min(r.times.Total(), previous_->Total());
    // Counters only grow; a smaller value means a hot-unplugged cpu, so skip the delta.
    if (total > 0 && r.times.Total() >= previous_->Total() && r.times.Idle() >= previous_->Idle() &&
        r.times.iowait >= previous_->iowait) {
      uint64_t idle = r.times.Idle() - previous_->Idle();
      uint64_t busy = total > idle ? total - idle : 0;
      r.utilisation_percent = 100.0 * static_cast<double>(busy) / static_cast<double>(total);
      r.iowait_percent = 100.0 * static_cast<double>(r.times.iowait - previous_->iowait) / static_cast<double>(total);
    }
  }
  previous_ = r.times;

  if (auto load = fs_.ReadLine("/proc/loadavg")) {
    auto f = SplitWhitespace(*load);
    if (f.size() >= 3) {
      r.load1 = ParseDouble(f[0]);
      r.load5 = ParseDouble(f[1]);
      r.load15 = ParseDouble(f[2]);
    }
  }

  std::map<int, uint64_t> package_max;
  for (const auto& name : fs_.List("/sys/devices/system/cpu")) {
    if (name.size() < 4 || !name.starts_with("cpu")) continue;
    auto num = ParseUint(std::string_view(name).substr(3));
    if (!num) continue;  // cpufreq, cpuidle ...
    const std::string dir = "/sys/devices/system/cpu/" + name;
    CpuThrottle t;
    t.cpu = static_cast<int>(*num);
    t.core_count = fs_.ReadUint(dir + "/thermal_throttle/core_throttle_count");
    t.package_count = fs_.ReadUint(dir + "/thermal_throttle/package_throttle_count");
    if (!t.core_count && !t.package_count) continue;
    auto pkg = fs_.ReadUint(dir + "/topology/physical_package_id");
    t.package_id = pkg ? static_cast<int>(*pkg) : t.cpu;
    if (t.core_count) r.throttle_events += *t.core_count;
    if (t.package_count) {
      uint64_t& m = package_max[t.package_id];
      m = std::max(m, *t.package_count);
    }
    r.throttle.push_back(t);
  }
  for (const auto& [pkg, count] : package_max) r.throttle_events += count;
  return r;
}

}  // namespace clusterd::noded
