// The NVIDIA backend: GPU identity and health from the driver's NVML library
// (libnvidia-ml.so.1), loaded with dlopen at run time so that NodeD builds and
// runs where there is no NVIDIA driver (docs/noded.md, "NVIDIA GPUs").
//
// Loading: NvmlBackendOptions::paths are tried in order. No library, or a
// driver NVML cannot reach (NVML_ERROR_DRIVER_NOT_LOADED, a library/kernel
// module mismatch), is not an error: the backend has no GPUs and reports the
// node fault NVML_DRIVER_NOT_LOADED, and tries again every `retry_interval`.
// A library without a required entry point is (FailedPrecondition, naming it).
//
// What a Poll reads per GPU, as error codes of ClusterD's catalog
// (clusterd/state/catalog/nvidia-gpu-codes.json): XID_<n> (an Xid event,
// from NVML's event set or the kernel log's "NVRM: Xid" lines, the two
// merged; active for `xid_hold` after its last occurrence), GPU_LOST,
// GPU_RESET_REQUIRED, GPU_ECC_DBE_VOLATILE, GPU_ECC_DBE_AGGREGATE_HIGH,
// GPU_RETIRED_PAGES_PENDING, GPU_ROW_REMAP_PENDING, GPU_ROW_REMAP_FAILURE,
// GPU_THERMAL_SLOWDOWN, GPU_POWER_BRAKE_SLOWDOWN, GPU_HW_SLOWDOWN,
// GPU_PCIE_REPLAY_HIGH, GPU_NVLINK_DOWN, GPU_NVLINK_ERRORS; and the
// counters (DeviceStatus::error_counters) ecc_corrected, ecc_uncorrected
// (volatile) and xid_events. A query the GPU does not support is skipped;
// any other failure is the GPU's read_error.
//
// Watchdog: every NVML call of Init, Devices and Poll runs on one worker
// thread; a call that has not returned after `call_timeout` leaves the GPUs
// unreadable (read_error) and raises the node fault NVML_UNRESPONSIVE, and
// no further call is made until the stuck one returns. Xid events are waited
// for on a thread of their own.
//
// Threads: Init/Devices/Poll from one thread (backend.h); KernelLine from the
// same thread; the worker and event threads are internal.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "noded/accel/backend.h"

namespace clusterd::noded {

inline constexpr const char* kDefaultNvmlPaths[] = {
    "libnvidia-ml.so.1",
    // The GPU operator's driver container installs under /run/nvidia/driver.
    "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    "/usr/lib64/libnvidia-ml.so.1",
    "/usr/lib/aarch64-linux-gnu/libnvidia-ml.so.1",
};

struct NvmlBackendOptions {
  std::vector<std::string> paths;  // tried in order
  std::chrono::milliseconds call_timeout{10000};
  std::chrono::milliseconds retry_interval{60000};  // loading again without a driver
  std::chrono::seconds xid_hold{600};
  // What the Xids' hold is measured on; nullptr: the monotonic clock. A
  // test's FakeClock steps the hold instead of waiting it out. Must outlive
  // the backend.
  const Clock* clock = nullptr;
  // One wait of the event thread in nvmlEventSetWait_v2 (also how long the
  // backend's destruction may wait for it).
  std::chrono::milliseconds event_wait{1000};
  // GPU_ECC_DBE_AGGREGATE_HIGH at this many uncorrected errors over the GPU's
  // life (0: never).
  unsigned long long ecc_aggregate_threshold = 10;
  // GPU_PCIE_REPLAY_HIGH / GPU_NVLINK_ERRORS when the counters grew by this
  // much since the previous poll (0: never).
  unsigned long long pcie_replay_threshold = 100;
  unsigned long long nvlink_error_threshold = 100;
};

// BackendOptions::nvml_paths, then kDefaultNvmlPaths.
std::vector<std::string> MakeNvmlPaths(const BackendOptions& options);

class NvmlBackend final : public AcceleratorBackend {
 public:
  // Upper bound on the GPUs NVML may claim.
  static constexpr unsigned kMaxDevices = 64;

  explicit NvmlBackend(NvmlBackendOptions options);
  ~NvmlBackend() override;
  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  Status Init() override;
  StatusOr<std::vector<DeviceInfo>> Devices() override;
  StatusOr<std::vector<DeviceStatus>> Poll() override;
  std::string name() const override { return "nvml"; }
  bool reports_node_faults() const override { return true; }
  std::vector<std::string> NodeFaults() const override;
  void KernelLine(std::string_view message) override;
  // ("driver", "550.54.15"), ("cuda", "12.4") once NVML answered.
  std::vector<std::pair<std::string, std::string>> ChainVersions() const override;

  // The driver and CUDA driver versions NVML reported ("" before).
  std::string driver_version() const;
  std::string cuda_version() const;
  // Why there are no GPUs ("" when NVML is up).
  std::string unavailable_reason() const;

  struct Core;

 private:
  Status Start();

  NvmlBackendOptions options_;
  std::shared_ptr<Core> core_;
  std::chrono::steady_clock::time_point next_retry_;
};

// "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
// -> {domain 0, bus 0x3b, device 0, xid 79}; nullopt for other lines.
struct KernelXid {
  unsigned domain = 0, bus = 0, device = 0;
  unsigned xid = 0;
};
std::optional<KernelXid> ParseKernelXid(std::string_view message);

}  // namespace clusterd::noded
