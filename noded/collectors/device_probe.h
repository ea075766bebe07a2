// The pingmesh's device plane on the NodeD side (docs/pingmesh.md, "The
// device plane"): the NPUs' own network ports probe the peers' ports with the
// accelerator network's tool, as MindCluster's NodeD does on Ascend:
//
//   hccn_tool -i <device> -ping -g address <peer port's IPv4> pkt <attempts>
//
// which prints a line per reply and a summary, for example
//
//   device 0 PING 29.1.110.2
//   recv seq=0,time=0.079000ms
//   recv seq=1,time=0.052000ms
//   2 packets transmitted, 2 received, 0.00% packet loss
//
// The ports come from /etc/hccn.conf (`address_<device>=<ipv4>` lines, the
// file hccn_tool itself writes; other keys are ignored).
//
// Stateless; ProbeDevices runs the tool without a shell, each run killed
// after its timeout and its output capped.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace clusterd::noded {

inline constexpr size_t kMaxDevicePorts = 64;            // ports per node
inline constexpr size_t kMaxHccnConfBytes = 64 << 10;    // /etc/hccn.conf read at most
inline constexpr size_t kMaxPingOutputBytes = 64 << 10;  // one tool run's output kept at most
inline constexpr uint32_t kMaxDeviceProbesPerRound = 1024;
inline constexpr uint32_t kDeviceProbeParallel = 16;  // tool runs at once

struct DevicePort {
  uint32_t device_id = 0;
  std::string address;  // an IPv4 literal
  bool operator==(const DevicePort&) const = default;
};

// The ports of the text of an hccn.conf, sorted by device id: every
// `address_<id>=<ipv4>` line (blank lines and `#` comments skipped, other
// keys ignored). InvalidArgument (with the line number) for an address line
// whose id is not a number 0..65535 or whose value is no IPv4 literal, an id
// given twice, more than kMaxDevicePorts ports, or more than
// kMaxHccnConfBytes of text.
StatusOr<std::vector<DevicePort>> ParseHccnConf(std::string_view text);
// The file at `path` parsed; NotFound when it does not exist.
StatusOr<std::vector<DevicePort>> ReadHccnConf(const std::string& path);

struct DevicePing {
  uint32_t sent = 0;
  uint32_t received = 0;
  // Over the reply lines' times (zero when none).
  std::chrono::microseconds rtt_max{0};
  std::chrono::microseconds rtt_sum{0};
  uint32_t rtt_count = 0;
};

// The output of one `hccn_tool -ping`: the summary line ("<n> packets
// transmitted, <m> received, ...") gives sent and received; the reply lines
// ("recv seq=<k>,time=<t>ms") the round trips. InvalidArgument when there is
// no summary line, a number does not parse, or more received than sent.
StatusOr<DevicePing> ParseHccnPing(std::string_view text);

struct DeviceProbeTarget {
  std::string node;             // the peer
  uint32_t device_id = 0;       // this node's device that probes
  uint32_t peer_device_id = 0;  // the peer's port
  std::string address;          // the peer port's IPv4 literal
};

struct DeviceProbeOutcome {
  DeviceProbeTarget target;
  bool ran = false;  // false: the tool failed to run or its output did not parse
  std::string error;
  uint32_t sent = 0;
  uint32_t lost = 0;
  std::chrono::microseconds rtt_max{0};
  std::chrono::microseconds rtt_sum{0};  // over sent - lost replies
};

struct DeviceProbeOptions {
  std::string tool;                         // the tool's path
  uint32_t packets = 3;                     // pkt <n>, 1..10
  std::chrono::milliseconds timeout{5000};  // per run; killed after
};

// The tool at `path` exists and is executable by this process.
bool DeviceToolUsable(const std::string& path);

// Runs the tool once per target, at most kDeviceProbeParallel at once, and
// returns one outcome per target in the targets' order. A run that times out
// lost every packet; one that exits without a parsable summary did not run
// (ran false, error says why). At most kMaxDeviceProbesPerRound targets (the
// rest are not run).
std::vector<DeviceProbeOutcome> ProbeDevices(const std::vector<DeviceProbeTarget>& targets,
                                             const DeviceProbeOptions& options);

}  // namespace clusterd::noded
