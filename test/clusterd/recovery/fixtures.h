// Builders shared by the recovery tests. Time is fixed: kT0 is "now" unless a
// test says otherwise, and faults are raised a minute earlier (past any
// hold-down) unless given a first_seen.
#pragma once

#include <string>

#include "clusterd/recovery/decide.h"

namespace clusterd::recovery::testing {

using namespace std::chrono_literals;

inline const TimePoint kT0 = TimePoint(std::chrono::seconds(1'700'000'000));

inline std::string NodeName(int i) {
  std::string n = std::to_string(i);
  return "worker" + (n.size() < 2 ? "0" + n : n);
}

// `nodes` nodes worker01.., 8 devices each, rank = (node-1)*8 + device.
inline Job MakeJob(JobKind kind = JobKind::kTraining, int nodes = 2, int devices = 8) {
  Job job;
  job.id = "job-1";
  job.kind = kind;
  for (int n = 1; n <= nodes; ++n) {
    for (int d = 0; d < devices; ++d) {
      job.placement[(n - 1) * devices + d] = RankPlacement{NodeName(n), static_cast<uint32_t>(d)};
    }
  }
  job.Index();
  return job;
}

inline FaultView DeviceFault(const std::string& node, uint32_t device, FaultLevel level,
                             const std::string& code = "80E01801", TimePoint first_seen = kT0 - 1min,
                             v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
  FaultView f;
  f.node = node;
  f.device = device;
  f.code = code;
  f.level = level;
  f.source = source;
  f.first_seen = first_seen;
  f.id = node + "/" + std::to_string(device) + "/" + std::to_string(static_cast<int>(source)) + "/" + code;
  return f;
}

inline FaultView NodeFault(const std::string& node, FaultLevel level, const std::string& code = "HEARTBEAT_LOST",
                           TimePoint first_seen = kT0 - 1min, v1::FaultSource source = v1::FAULT_SOURCE_HEARTBEAT) {
  FaultView f;
  f.node = node;
  f.code = code;
  f.level = level;
  f.source = source;
  f.first_seen = first_seen;
  f.id = node + "/-/" + std::to_string(static_cast<int>(source)) + "/" + code;
  return f;
}

inline ClusterView Cluster(int total_nodes = 100) {
  ClusterView c;
  c.total_nodes = total_nodes;
  return c;
}

inline std::set<Strategy> Allowed(std::initializer_list<Strategy> s) { return std::set<Strategy>(s); }

inline std::set<Strategy> FromMask(unsigned mask) {
  std::set<Strategy> out;
  for (int i = 0; i < 5; ++i) {
    if (mask & (1u << i)) out.insert(static_cast<Strategy>(i));
  }
  return out;
}

}  // namespace clusterd::recovery::testing
