// The fix, in one line, for each broken link of the accelerator software
// chain (docs/noded.md, "The software chain") and for its version drift:
// what clusterctl doctor and the status page print next to the evidence.
#pragma once

#include <string_view>

namespace clusterd {

inline std::string_view ChainFix(std::string_view code) {
  if (code == "NODE_CHAIN_DRIVER_NOT_INSTALLED") {
    return "install the Ascend driver and firmware on the host (or point NodeD's --ascend-path at it)";
  }
  if (code == "NODE_CHAIN_DRIVER_NOT_LOADED") {
    return "load the driver: check dmesg for the davinci modules, reinstall the driver or reboot the node";
  }
  if (code == "NODE_CHAIN_CHIPS_MISSING") {
    return "a chip is gone from the driver's view: npu-smi info on the node, then reseat, reset or replace it";
  }
  if (code == "NODE_CHAIN_RUNTIME_NOT_CONFIGURED") {
    return "install the Ascend Docker Runtime and add it to containerd's (or Docker's) configuration, then restart "
           "the runtime";
  }
  if (code == "NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED") {
    return "start the Ascend device plugin on the node (its DaemonSet's node selector, its logs) so that the kubelet "
           "offers NPUs";
  }
  if (code == "NODE_ALLOCATABLE_MISMATCH") {
    return "the kubelet offers fewer NPUs than the node has: check the device plugin's pod and logs on the node, and "
           "its view of the chips' health";
  }
  if (code == "CHAIN_VERSION_DRIFT") {
    return "upgrade or roll back the node to its pool's version, or label it into the pool it belongs to";
  }
  return {};
}

}  // namespace clusterd
