// Accelerator backends: one interface over the sources of accelerator health that
// NodeD can read (the Ascend DCMI library, `npu-smi info` text, a simulator, none).
//
// A backend reports raw facts: which devices exist, and per device whether it is
// healthy, its raw health value and its active error codes. It does not decide fault
// levels: ClusterD's catalog maps codes to levels.
//
// Ownership and threads: NodeD owns one backend, created by MakeBackend. Init,
// Devices and Poll are called from one thread (the sampling loop); implementations
// are not required to be thread-safe for those three. SimBackend additionally allows
// Inject/NodeFaults from any thread (see sim_backend.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace clusterd::noded {

// One accelerator device (an Ascend "chip"; npu-smi's "NPU/Chip" row).
struct DeviceInfo {
  // Logic id where the source has one (DCMI's dcmi_get_device_logic_id, the
  // /dev/davinci<N> number), otherwise the index the backend documents.
  int32_t id = 0;
  std::string vendor;    // "huawei", "sim"
  std::string model;     // chip name, e.g. "910B3"
  std::string serial;    // empty when the source does not say
  std::string location;  // human hint: "card 3 chip 0", a PCI bus id, ...
  // Other names a device plugin gives this device in the kubelet's
  // pod-resources API besides its id (collectors/pod_devices.h): NVIDIA's
  // GPU UUID ("GPU-..."), its MIG devices' UUIDs ("MIG-...").
  std::vector<std::string> kubelet_ids;
};

// Raw health value of a device whose health could not be read (DCMI's own
// "does not exist" value).
inline constexpr uint32_t kHealthUnknown = 0xFFFFFFFFu;

// One device's state at one Poll.
struct DeviceStatus {
  int32_t id = 0;  // DeviceInfo::id
  // True only when the device was read completely (read_error empty) and its
  // health is 0 (OK). Active codes do not change it: it is the source's own verdict.
  bool healthy = false;
  // 0 = OK; for Ascend 1 = minor (Warning), 2 = major (Alarm), 3 = critical;
  // kHealthUnknown when it could not be read.
  uint32_t health_raw = kHealthUnknown;
  // Active fault codes, sorted, no duplicates. Ascend codes are 8 upper-case hex
  // digits ("80E01801"); npu-smi and sim may add named codes (see their headers).
  std::vector<std::string> error_codes;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  // Cumulative error counters the source keeps, by name; they only grow
  // (until the device or its driver is reset). nvml: "ecc_corrected" and
  // "ecc_uncorrected" (volatile ECC counts, since the driver loaded),
  // "xid_events" (Xid events this backend has seen); ascend: "ecc_single_bit"
  // and "ecc_double_bit" (the HBM's total ECC counts, dcmi_get_device_ecc_info).
  // Absent when the source does not say. The validation's built-in check
  // (noded/validator.h) fails when one grows within its window.
  std::map<std::string, uint64_t> error_counters;
  // Empty when the device was read completely. Otherwise which call failed and how
  // ("dcmi_get_device_health(card 1, chip 0) returned -8020"); health/codes may then
  // be incomplete. A device that cannot be read is not silently reported healthy.
  std::string read_error;
};

enum class InjectAction { kRaise, kClear };

// What a backend that can take faults by hand (the simulator) offers NodeD's
// `POST /v1/sim/faults`.
class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // Raises or clears `code` on `device` (nullopt: a node-level fault).
  virtual Status Inject(std::optional<uint32_t> device, std::string_view code, InjectAction action) = 0;
};

class AcceleratorBackend {
 public:
  virtual ~AcceleratorBackend() = default;

  // Loads and initialises the source. Must succeed before Devices/Poll; calling it
  // again after success is harmless. Never crashes on a missing library or tool:
  // the failure comes back as a Status naming what is missing.
  virtual Status Init() = 0;
  // Enumerates the devices now present (sorted by id).
  virtual StatusOr<std::vector<DeviceInfo>> Devices() = 0;
  // Reads the current state of every device (sorted by id). A failure of one device
  // shows in its DeviceStatus::read_error; the call itself fails only when nothing
  // could be read at all.
  virtual StatusOr<std::vector<DeviceStatus>> Poll() = 0;
  // The backend kind: "ascend", "npu-smi", "sim", "none".
  virtual std::string name() const = 0;

  // Node-level fault codes the source reports without a device, sorted. A
  // backend that reports them owns every node-level fault the rules engine
  // does not (NodeD clears those the backend no longer reports).
  virtual bool reports_node_faults() const { return false; }
  virtual std::vector<std::string> NodeFaults() const { return {}; }
  // Faults injected by hand, for backends that take them (the simulator);
  // null for real hardware. Owned by the backend.
  virtual FaultInjector* injector() { return nullptr; }
  // A kernel log line of the accelerator's driver (the kernel collector's
  // KERNEL_GPU_XID matches), for backends that fold them into their devices'
  // codes (nvml: "NVRM: Xid"). Called from the Poll thread.
  virtual void KernelLine(std::string_view /*message*/) {}
  // Versions the source reports for links of the software chain (docs/noded.md,
  // "The software chain"), as (link, version): nvml's driver and CUDA driver.
  // They fill links the file probes could not decide.
  virtual std::vector<std::pair<std::string, std::string>> ChainVersions() const { return {}; }
};

struct BackendOptions {
  std::string kind = "none";  // "ascend", "nvml", "npu-smi", "sim", "none"

  // ascend: libdcmi.so paths tried first, in order; then, when
  // dcmi_search_default_paths, kDefaultDcmiPaths.
  std::vector<std::string> dcmi_paths;
  bool dcmi_search_default_paths = true;

  // npu-smi: the command, split on whitespace and run without a shell (PATH is
  // searched for the program), and how long it may take before it is killed.
  std::string npu_smi_command = "npu-smi info";
  std::chrono::milliseconds npu_smi_timeout{10000};

  // sim: the number of simulated devices (0..kMaxSimDevices).
  int sim_devices = 8;

  // nvml: libnvidia-ml.so.1 paths tried before kDefaultNvmlPaths (when
  // nvml_search_default_paths), and the watchdog of its calls.
  std::vector<std::string> nvml_paths;
  bool nvml_search_default_paths = true;
  std::chrono::milliseconds nvml_call_timeout{10000};
  std::chrono::seconds nvml_xid_hold{600};
};

// Tried after BackendOptions::dcmi_paths: the two usual driver install locations,
// then the bare name (resolved by the dynamic loader: LD_LIBRARY_PATH, ld.so.cache).
inline constexpr const char* kDefaultDcmiPaths[] = {
    "/usr/local/Ascend/driver/lib64/driver/libdcmi.so",
    "/usr/local/Ascend/driver/lib64/libdcmi.so",
    "libdcmi.so",
};

inline constexpr int kMaxSimDevices = 1024;

// Creates the backend named by options.kind; does not call Init. InvalidArgument for
// an unknown kind or out-of-range option. For kind "sim" the result takes injected
// faults (injector()).
StatusOr<std::unique_ptr<AcceleratorBackend>> MakeBackend(const BackendOptions& options);

// 0x80E01801 -> "80E01801".
std::string FormatErrorCode(uint32_t code);

// No accelerator: no devices, Poll returns nothing.
class NoneBackend final : public AcceleratorBackend {
 public:
  Status Init() override { return Status::Ok(); }
  StatusOr<std::vector<DeviceInfo>> Devices() override { return std::vector<DeviceInfo>{}; }
  StatusOr<std::vector<DeviceStatus>> Poll() override { return std::vector<DeviceStatus>{}; }
  std::string name() const override { return "none"; }
};

}  // namespace clusterd::noded
