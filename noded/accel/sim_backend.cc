#include "noded/accel/sim_backend.h"

#include <algorithm>
#include <cstdio>

#include "common/validation.h"

namespace clusterd::noded {

SimBackend::SimBackend(int device_count)
    : device_codes_(static_cast<size_t>(std::clamp(device_count, 0, kMaxSimDevices))) {}

StatusOr<std::vector<DeviceInfo>> SimBackend::Devices() {
  std::vector<DeviceInfo> out;
  out.reserve(device_codes_.size());
  for (size_t i = 0; i < device_codes_.size(); ++i) {
    char serial[32];
    std::snprintf(serial, sizeof(serial), "SIM-%04zu", i);
    DeviceInfo d;
    d.id = static_cast<int32_t>(i);
    d.vendor = kVendor;
    d.model = kModel;
    d.serial = serial;
    d.location = "sim " + std::to_string(i);
    out.push_back(std::move(d));
  }
  return out;
}

StatusOr<std::vector<DeviceStatus>> SimBackend::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DeviceStatus> out;
  out.reserve(device_codes_.size());
  for (size_t i = 0; i < device_codes_.size(); ++i) {
    DeviceStatus s;
    s.id = static_cast<int32_t>(i);
    s.error_codes.assign(device_codes_[i].begin(), device_codes_[i].end());
    s.healthy = s.error_codes.empty();
    s.health_raw = s.healthy ? 0 : 1;
    s.temperature_c = 40.0;
    s.power_w = 90.0;
    out.push_back(std::move(s));
  }
  return out;
}

Status SimBackend::Inject(std::optional<uint32_t> device, std::string_view code, InjectAction action) {
  CLUSTERD_RETURN_IF_ERROR(ValidateCode("code", code));
  if (device && *device >= device_codes_.size()) {
    return InvalidArgument("device: " + std::to_string(*device) + " is out of range (this node has " +
                           std::to_string(device_codes_.size()) + " simulated devices)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string>& codes = device ? device_codes_[*device] : node_codes_;
  std::string key(code);
  if (action == InjectAction::kClear) {
    codes.erase(key);
    return Status::Ok();
  }
  if (codes.count(key) == 0 && codes.size() >= kMaxActiveCodes) {
    return ResourceExhausted("at most " + std::to_string(kMaxActiveCodes) + " codes may be active on " +
                             (device ? "device " + std::to_string(*device) : std::string("the node")));
  }
  codes.insert(std::move(key));
  return Status::Ok();
}

std::vector<std::string> SimBackend::NodeFaults() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {node_codes_.begin(), node_codes_.end()};
}

}  // namespace clusterd::noded
