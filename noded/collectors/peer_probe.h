// The pingmesh's probe on the NodeD side (docs/pingmesh.md): TCP connects to
// the peers ClusterD planned for this round, on the peers' NodeD probe port.
// A connect that completes is a reply; one refused, reset or not done within
// the timeout is lost. One attempt opens one socket per target at once and
// waits on all of them together, so a round of N peers costs about one
// timeout at worst, not N.
//
// Addresses are IP literals (IPv4 or IPv6), never names: the probe path does
// no DNS lookup. Stateless; safe to call from any one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace clusterd::noded {

struct ProbeTarget {
  std::string node;     // the peer's node name, as planned
  std::string address;  // an IPv4 or IPv6 literal
  uint16_t port = 0;
};

struct ProbeOutcome {
  std::string node;
  uint32_t sent = 0;
  uint32_t lost = 0;
  // Over the replies (zero when none came back).
  std::chrono::microseconds rtt_min{0};
  std::chrono::microseconds rtt_max{0};
  std::chrono::microseconds rtt_sum{0};
};

struct PeerProbeOptions {
  uint32_t attempts = 3;                    // 1..10
  std::chrono::milliseconds timeout{1000};  // per attempt, 10 ms..10 s
};

inline constexpr size_t kMaxProbeTargets = 256;

// Checks the options and the targets (at most kMaxProbeTargets, literal
// addresses, a port, a node name): INVALID_ARGUMENT names the first offence.
Status ValidateProbe(const std::vector<ProbeTarget>& targets, const PeerProbeOptions& options);

// One outcome per target, in the targets' order. The input must pass
// ValidateProbe. A socket that cannot be opened at all (out of descriptors)
// counts as lost for that target.
std::vector<ProbeOutcome> ProbePeers(const std::vector<ProbeTarget>& targets, const PeerProbeOptions& options);

}  // namespace clusterd::noded
