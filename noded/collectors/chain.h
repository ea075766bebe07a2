// The accelerator software chain of a node (docs/noded.md, "The software
// chain"): what makes a chip usable by a pod, link by link, read from files
// only: the driver (installed, its version, loaded: its device files), the
// firmware package's version, the chips the driver exposes against those expected, the CANN toolkits
// installed on the host, the container runtime (Ascend Docker Runtime
// configured for containerd or Docker), the device plugin registered with the
// kubelet, and the kernel. A link that cannot be decided from what is
// readable (a path not mounted into NodeD's container, an unreadable or
// oversized file) is UNKNOWN, never guessed: only BROKEN links raise faults.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "noded/collectors/fs_root.h"

namespace clusterd::noded {

struct ChainOptions {
  std::string root = "/";
  // Where the Ascend software is installed (driver/, ascend-toolkit/, cann*/).
  std::string ascend_path = "/usr/local/Ascend";
  std::string dev_path = "/dev";
  // containerd's configuration files and drop-in directories (RKE2's first),
  // and Docker's daemon.json: the runtime is configured for Ascend when one
  // of them names the Ascend Docker Runtime.
  std::vector<std::string> runtime_files = {"/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
                                            "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.tmpl",
                                            "/var/lib/rancher/k3s/agent/etc/containerd/config.toml",
                                            "/etc/containerd/config.toml", "/etc/docker/daemon.json"};
  std::vector<std::string> runtime_dirs = {"/var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d",
                                           "/var/lib/rancher/rke2/agent/etc/containerd/config.toml.d",
                                           "/etc/containerd/conf.d", "/etc/containerd/config.d"};
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  // Chips the node should have; 0: unknown (the accelerator backend's count
  // is used when it has one).
  uint32_t expected_chips = 0;
  // A configuration file larger than this is not read (UNKNOWN).
  size_t max_file_bytes = 1 << 20;
};

enum class LinkState { kUnknown, kOk, kBroken };

struct ChainLink {
  std::string name;  // driver, firmware, device_files, chips, cann, runtime, device_plugin, kernel
  LinkState state = LinkState::kUnknown;
  std::string version;   // driver, firmware, cann (comma-separated), kernel
  std::string evidence;  // what was read, one line
  // The node fault a BROKEN link raises ("" for none: cann, kernel).
  // (firmware never raises one: the driver/firmware pair is judged by
  // ClusterD, CHAIN_FIRMWARE_MISMATCH).
  std::string code;
};

struct ChainReading {
  std::vector<ChainLink> links;  // in the order above, always all eight
  const ChainLink* Find(const std::string& name) const;
};

// Node fault codes of the chain (NodeD's own catalog, docs/faults.md).
inline constexpr char kChainDriverMissing[] = "NODE_CHAIN_DRIVER_NOT_INSTALLED";
inline constexpr char kChainDriverNotLoaded[] = "NODE_CHAIN_DRIVER_NOT_LOADED";
inline constexpr char kChainChipsMissing[] = "NODE_CHAIN_CHIPS_MISSING";
inline constexpr char kChainRuntimeNotConfigured[] = "NODE_CHAIN_RUNTIME_NOT_CONFIGURED";
inline constexpr char kChainDevicePluginNotRegistered[] = "NODE_CHAIN_DEVICE_PLUGIN_NOT_REGISTERED";

// Stateless; safe to call from any one thread at a time.
class ChainCollector {
 public:
  explicit ChainCollector(ChainOptions options);
  // `backend_chips`: the chips the accelerator backend sees (0: none known;
  // the option, when set, wins). `ascend_node`: the backend is Ascend's (DCMI
  // or npu-smi), so a missing driver is a fault; otherwise the node counts
  // as an Ascend node only once its driver is seen installed.
  ChainReading Collect(uint32_t backend_chips, bool ascend_node) const;

 private:
  ChainLink Driver(bool ascend_node) const;
  ChainLink Firmware() const;
  ChainLink DeviceFiles(bool ascend, uint32_t* chips) const;
  ChainLink Chips(const ChainLink& device_files, uint32_t chips, uint32_t expected) const;
  ChainLink Cann() const;
  ChainLink Runtime(bool ascend) const;
  ChainLink DevicePlugin(bool ascend) const;
  ChainLink Kernel() const;
  // The file's bytes; NotFound, or ResourceExhausted past max_file_bytes.
  StatusOr<std::string> ReadSmall(const std::string& abs) const;

  ChainOptions options_;
  FsRoot fs_;
};

const char* LinkStateName(LinkState s);

}  // namespace clusterd::noded
