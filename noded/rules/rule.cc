#include "noded/rules/rule.h"

#include <array>

namespace clusterd::noded {
namespace {

constexpr std::array<const char*, 8> kLevelNames = {"NOT_HANDLE",      "SUB_HEALTH",       "PRE_SEPARATE",
                                                    "RESTART_REQUEST", "RESTART_BUSINESS", "FREE_RESTART_NPU",
                                                    "RESTART_NPU",     "SEPARATE"};

struct StaticMetric {
  const char* name;
  Source source;
  MetricKind kind;
  const char* subject;
};

constexpr StaticMetric kMetrics[] = {
    {"cpu.utilisation_percent", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.iowait_percent", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.load1", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.load5", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.load15", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.load1_per_cpu", Source::kCpu, MetricKind::kGauge, "node"},
    {"cpu.throttle_events", Source::kCpu, MetricKind::kCounter, "node"},
    {"memory.available_percent", Source::kMemory, MetricKind::kGauge, "node"},
    {"memory.hardware_corrupted_kib", Source::kMemory, MetricKind::kGauge, "node"},
    {"memory.pressure_some_avg10", Source::kMemory, MetricKind::kGauge, "node"},
    {"memory.pressure_full_avg10", Source::kMemory, MetricKind::kGauge, "node"},
    {"memory.ecc_corrected", Source::kMemory, MetricKind::kCounter, "node"},
    {"memory.ecc_uncorrected", Source::kMemory, MetricKind::kCounter, "node"},
    {"disk.used_percent", Source::kDisk, MetricKind::kGauge, "mount point"},
    {"disk.inodes_used_percent", Source::kDisk, MetricKind::kGauge, "mount point"},
    {"disk.readonly", Source::kDisk, MetricKind::kGauge, "mount point"},
    {"disk.io_errors", Source::kDisk, MetricKind::kCounter, "block device"},
    {"network.link_down", Source::kNetwork, MetricKind::kGauge, "interface"},
    {"network.carrier_changes", Source::kNetwork, MetricKind::kCounter, "interface"},
    {"network.errors", Source::kNetwork, MetricKind::kCounter, "interface"},
    {"network.drops", Source::kNetwork, MetricKind::kCounter, "interface"},
};

bool IsCodeChar(char c) { return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

}  // namespace

const char* LevelName(Level level) { return kLevelNames[static_cast<size_t>(level)]; }

std::optional<Level> ParseLevel(std::string_view name) {
  for (size_t i = 0; i < kLevelNames.size(); ++i) {
    if (name == kLevelNames[i]) return static_cast<Level>(i);
  }
  return std::nullopt;
}

const char* SourceName(Source source) {
  switch (source) {
    case Source::kCpu: return "cpu";
    case Source::kMemory: return "memory";
    case Source::kDisk: return "disk";
    case Source::kNetwork: return "network";
    case Source::kKernel: return "kernel";
  }
  return "unknown";
}

const char* OpName(Op op) { return op == Op::kAbove ? "above" : "below"; }

const char* ActionName(Transition::Action action) { return action == Transition::Action::kRaise ? "raise" : "clear"; }

std::optional<MetricInfo> FindMetric(std::string_view name) {
  for (const auto& m : kMetrics) {
    if (name == m.name) return MetricInfo{m.name, m.source, m.kind, m.subject};
  }
  constexpr std::string_view kKernel = "kernel.";
  if (name.starts_with(kKernel) && name.size() > kKernel.size()) {
    for (char c : name.substr(kKernel.size())) {
      if (!IsCodeChar(c)) return std::nullopt;
    }
    return MetricInfo{std::string(name), Source::kKernel, MetricKind::kCounter, "node"};
  }
  return std::nullopt;
}

}  // namespace clusterd::noded
