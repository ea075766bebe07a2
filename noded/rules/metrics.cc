#include "noded/rules/metrics.h"

namespace clusterd::noded {
namespace {

void Add(Snapshot* s, const char* metric, std::string subject, double value, std::string detail = {}) {
  s->samples.push_back({metric, std::move(subject), value, std::move(detail)});
}

template <typename T>
double D(T v) {
  return static_cast<double>(v);
}

}  // namespace

void AddCpu(const CpuReading& r, Snapshot* s) {
  s->sources.insert(Source::kCpu);
  if (r.utilisation_percent) Add(s, "cpu.utilisation_percent", "", *r.utilisation_percent);
  if (r.iowait_percent) Add(s, "cpu.iowait_percent", "", *r.iowait_percent);
  if (r.load1) Add(s, "cpu.load1", "", *r.load1);
  if (r.load5) Add(s, "cpu.load5", "", *r.load5);
  if (r.load15) Add(s, "cpu.load15", "", *r.load15);
  if (r.load1 && r.cpus > 0) Add(s, "cpu.load1_per_cpu", "", *r.load1 / r.cpus);
  if (!r.throttle.empty()) Add(s, "cpu.throttle_events", "", D(r.throttle_events));
}

void AddMemory(const MemoryReading& r, Snapshot* s) {
  s->sources.insert(Source::kMemory);
  Add(s, "memory.available_percent", "", r.available_percent);
  Add(s, "memory.hardware_corrupted_kib", "", D(r.hardware_corrupted_kib));
  if (r.pressure_some) Add(s, "memory.pressure_some_avg10", "", r.pressure_some->avg10);
  if (r.pressure_full) Add(s, "memory.pressure_full_avg10", "", r.pressure_full->avg10);
  if (!r.edac.empty()) {
    Add(s, "memory.ecc_corrected", "", D(r.ecc_corrected));
    Add(s, "memory.ecc_uncorrected", "", D(r.ecc_uncorrected));
  }
}

void AddDisk(const DiskReading& r, Snapshot* s) {
  s->sources.insert(Source::kDisk);
  for (const auto& m : r.mounts) {
    std::string detail = m.device + " (" + m.fs_type + ")";
    Add(s, "disk.readonly", m.mount_point, m.unexpected_read_only ? 1 : 0, detail);
    if (m.used_percent) Add(s, "disk.used_percent", m.mount_point, *m.used_percent, detail);
    if (m.inodes_used_percent) {
      Add(s, "disk.inodes_used_percent", m.mount_point, *m.inodes_used_percent, detail);
    }
  }
  for (const auto& d : r.devices) Add(s, "disk.io_errors", d.name, D(d.io_errors));
}

void AddNetwork(const NetworkReading& r, Snapshot* s) {
  s->sources.insert(Source::kNetwork);
  for (const auto& i : r.interfaces) {
    std::string detail = "operstate " + i.operstate;
    if (i.carrier) detail += *i.carrier ? ", carrier up" : ", no carrier";
    Add(s, "network.link_down", i.name, i.LinkDown() ? 1 : 0, detail);
    if (i.carrier_changes) Add(s, "network.carrier_changes", i.name, D(*i.carrier_changes));
    if (i.rx_errors || i.tx_errors) {
      Add(s, "network.errors", i.name, D(i.rx_errors.value_or(0) + i.tx_errors.value_or(0)));
    }
    if (i.rx_dropped || i.tx_dropped) {
      Add(s, "network.drops", i.name, D(i.rx_dropped.value_or(0) + i.tx_dropped.value_or(0)));
    }
  }
}

void AddKernel(const KernelReading& r, Snapshot* s) {
  s->sources.insert(Source::kKernel);
  for (const auto& [code, count] : r.counts) {
    auto last = r.last_message.find(code);
    s->samples.push_back(
        {"kernel." + code, "", D(count), last == r.last_message.end() ? std::string() : "last: " + last->second});
  }
}

}  // namespace clusterd::noded
