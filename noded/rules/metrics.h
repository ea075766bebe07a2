// Turns collector readings into the flat samples the rules engine judges.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "noded/collectors/cpu.h"
#include "noded/collectors/disk.h"
#include "noded/collectors/kmsg.h"
#include "noded/collectors/memory.h"
#include "noded/collectors/network.h"
#include "noded/rules/rule.h"

namespace clusterd::noded {

struct Sample {
  std::string metric;   // a FindMetric() name
  std::string subject;  // mount point, interface, block device; "" for the node
  double value = 0;
  std::string detail;  // extra words for the fault message (e.g. the kernel log line)
};

// One round of sampling. `sources` lists the sources that were collected
// successfully: for those, a subject with no sample is gone (its faults clear); a
// source that failed this round leaves its faults as they were.
struct Snapshot {
  std::set<Source> sources;
  std::vector<Sample> samples;
};

void AddCpu(const CpuReading& r, Snapshot* s);
void AddMemory(const MemoryReading& r, Snapshot* s);
void AddDisk(const DiskReading& r, Snapshot* s);
void AddNetwork(const NetworkReading& r, Snapshot* s);
void AddKernel(const KernelReading& r, Snapshot* s);

}  // namespace clusterd::noded
