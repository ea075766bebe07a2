// The validation's built-in check (noded/validator.h) over a real backend's
// readings: each sample polls the backend, as NodeD's agent does, and hands
// its readings to AddReadings. The backend tests use it to check that what
// their fake library reports during a validation's window fails it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include <google/protobuf/util/time_util.h>

#include "noded/accel/backend.h"
#include "noded/validator.h"

namespace clusterd::noded::testing {

// A window the scripted change comes well within (a sample a millisecond):
// a check that misses the change passes at its end, and the test fails.
inline constexpr std::chrono::milliseconds kUntilItFails{30'000};

// Runs "health-stable" of `devices` over `window`, sampled every millisecond;
// `before_sample(n)` runs before the n-th sample (from 1) to script the fake.
inline v1::ValidationResult ValidateOverBackend(AcceleratorBackend& backend, const std::vector<uint32_t>& devices,
                                                std::chrono::milliseconds window,
                                                const std::function<void(int)>& before_sample) {
  int samples = 0;
  auto probe = [&](const std::vector<uint32_t>& which, bool) {
    if (before_sample) before_sample(++samples);
    std::map<int32_t, DeviceStatus> readings;
    ValidationSample sample;
    auto polled = backend.Poll();
    if (!polled.ok()) {
      sample.problems.push_back(polled.status().ToString());
      return sample;
    }
    for (DeviceStatus& s : *polled) readings[s.id] = std::move(s);
    AddReadings(
        which,
        [&](int32_t id) -> std::optional<DeviceStatus> {
          auto it = readings.find(id);
          return it == readings.end() ? std::nullopt : std::optional<DeviceStatus>(it->second);
        },
        &sample);
    return sample;
  };
  ValidatorOptions options;
  options.sample = std::chrono::milliseconds(1);
  options.max_running = 1;
  Validator v(options, probe, nullptr, nullptr, nullptr);
  v1::ValidationRequest req;
  req.set_validation_id("val-backend");
  for (uint32_t d : devices) req.add_device_ids(d);
  req.add_checks("health-stable");
  *req.mutable_stable_window() = google::protobuf::util::TimeUtil::MillisecondsToDuration(window.count());
  return v.Run(req);
}

}  // namespace clusterd::noded::testing
