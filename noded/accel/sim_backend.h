// The simulated backend: N devices for demos and tests, with faults injected by
// hand (NodeD's `POST /v1/sim/faults` in sim mode).
//
// Devices: ids 0..N-1, vendor "sim", model "SIM-910B", serial "SIM-0000"...,
// always healthy unless a code is active. A device with an active code reports
// healthy=false and health_raw 1; temperature 40 C and power 90 W are fixed.
//
// Node-level faults (injected without a device) are not part of any device's
// status: NodeD reads them with NodeFaults() and reports them without a device.
//
// Threads: every method is thread-safe (one mutex), so the HTTP handler may
// Inject while the sampling loop Polls.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "noded/accel/backend.h"

namespace clusterd::noded {

class SimBackend final : public AcceleratorBackend, public FaultInjector {
 public:
  static constexpr const char* kModel = "SIM-910B";
  static constexpr const char* kVendor = "sim";
  // Bound on active codes per device and on node-level codes, so that injection
  // through the HTTP port cannot grow memory without limit.
  static constexpr size_t kMaxActiveCodes = 256;

  // device_count must be in 0..kMaxSimDevices (MakeBackend checks it).
  explicit SimBackend(int device_count = 8);

  Status Init() override { return Status::Ok(); }
  StatusOr<std::vector<DeviceInfo>> Devices() override;
  StatusOr<std::vector<DeviceStatus>> Poll() override;
  std::string name() const override { return "sim"; }

  // Raises or clears `code` on `device` (nullopt: a node-level fault).
  // InvalidArgument for a device out of range or a malformed code (1-64
  // characters of [A-Za-z0-9_.-]); ResourceExhausted when raising would exceed
  // kMaxActiveCodes. Raising an active code or clearing an inactive one is a no-op.
  Status Inject(std::optional<uint32_t> device, std::string_view code, InjectAction action) override;
  FaultInjector* injector() override { return this; }

  // Active node-level codes, sorted.
  bool reports_node_faults() const override { return true; }
  std::vector<std::string> NodeFaults() const override;

  int device_count() const { return static_cast<int>(device_codes_.size()); }

 private:
  mutable std::mutex mu_;
  std::vector<std::set<std::string>> device_codes_;  // size fixed at construction
  std::set<std::string> node_codes_;
};

}  // namespace clusterd::noded
