// Network collector: per interface under /sys/class/net (except "lo"): operstate,
// carrier, carrier_changes and the error/drop counters in statistics/.
//
// By default only physical interfaces (those with a "device" link in sysfs) are
// reported: veth, bridge and tunnel interfaces come and go with pods and their link
// state says nothing about the node. Name them in `include` to watch them anyway
// (a bond, say).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

struct InterfaceReading {
  std::string name;
  std::string operstate;  // "up", "down", "lowerlayerdown", "unknown", ...
  bool admin_up = false;  // IFF_UP in "flags": an interface the operator took down is not a fault
  bool physical = false;
  std::optional<bool> carrier;  // unreadable while the interface is administratively down
  std::optional<uint64_t> carrier_changes;
  std::optional<uint64_t> rx_errors, tx_errors, rx_dropped, tx_dropped;

  // Administratively up, but no carrier or the kernel says the link is down.
  bool LinkDown() const;
};

struct NetworkReading {
  std::vector<InterfaceReading> interfaces;  // sorted by name
};

struct NetworkCollectorOptions {
  std::string root = "/";
  bool include_virtual = false;
  std::vector<std::string> include;  // always reported, physical or not
  std::vector<std::string> ignore;   // never reported
};

// Stateless; safe to call from any one thread at a time.
class NetworkCollector {
 public:
  explicit NetworkCollector(NetworkCollectorOptions options = {});
  // Never fails: a missing /sys/class/net gives an empty reading.
  StatusOr<NetworkReading> Collect() const;

 private:
  NetworkCollectorOptions options_;
  FsRoot fs_;
};

}  // namespace clusterd::noded
