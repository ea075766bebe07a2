#include "noded/collectors/network.h"

#include <algorithm>

namespace clusterd::noded {

bool InterfaceReading::LinkDown() const {
  if (!admin_up) return false;
  if (carrier && !*carrier) return true;
  return operstate == "down" || operstate == "lowerlayerdown";
}

NetworkCollector::NetworkCollector(NetworkCollectorOptions options)
    : options_(std::move(options)), fs_(options_.root) {}

StatusOr<NetworkReading> NetworkCollector::Collect() const {
  auto contains = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  NetworkReading r;
  for (const auto& name : fs_.List("/sys/class/net")) {
    if (name == "lo" || contains(options_.ignore, name)) continue;
    const std::string dir = "/sys/class/net/" + name;
    InterfaceReading i;
    i.name = name;
    i.physical = fs_.Exists(dir + "/device");
    if (!i.physical && !options_.include_virtual && !contains(options_.include, name)) continue;
    i.operstate = fs_.ReadLine(dir + "/operstate").value_or("unknown");
    i.admin_up = (fs_.ReadUint(dir + "/flags").value_or(0) & 0x1) != 0;  // IFF_UP
    if (auto c = fs_.ReadUint(dir + "/carrier")) i.carrier = *c != 0;
    i.carrier_changes = fs_.ReadUint(dir + "/carrier_changes");
    i.rx_errors = fs_.ReadUint(dir + "/statistics/rx_errors");
    i.tx_errors = fs_.ReadUint(dir + "/statistics/tx_errors");
    i.rx_dropped = fs_.ReadUint(dir + "/statistics/rx_dropped");
    i.tx_dropped = fs_.ReadUint(dir + "/statistics/tx_dropped");
    r.interfaces.push_back(std::move(i));
  }
  return r;
}

}  // namespace clusterd::noded
