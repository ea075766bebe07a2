// The Ascend backend: reads chip health and active error codes from the driver's
// libdcmi.so, loaded with dlopen at run time so that NodeD builds and runs on
// machines without the driver.
//
// Loading: the paths in AscendBackendOptions::paths are tried in order with
// dlopen(RTLD_NOW | RTLD_LOCAL); the first that loads is used. Required symbols:
// dcmi_init, dcmi_get_card_list (older drivers: dcmi_get_card_num_list, same
// signature), dcmi_get_device_num_in_card, dcmi_get_device_logic_id,
// dcmi_get_device_chip_info, dcmi_get_device_health, dcmi_get_device_errorcode_v2.
// Optional: dcmi_get_device_temperature, dcmi_get_device_power_info,
// dcmi_get_device_ecc_info (the HBM's total ECC counts, as the error counters
// ecc_single_bit and ecc_double_bit); their fields stay empty when absent or
// failing. The library is never unloaded (dlclose), see
// Unload in the .cc.
//
// Device ids are DCMI logic ids (the N of /dev/davinciN). Error codes are printed
// as 8 upper-case hex digits. Power is reported by DCMI in 0.1 W and converted to W.
// A non-zero health without error codes is reported as is (healthy=false, raw
// value); no code is invented.
//
// Threads: not thread-safe; one thread calls Init/Devices/Poll (backend.h).
#pragma once

#include <string>
#include <vector>

#include "noded/accel/backend.h"
#include "noded/accel/dcmi_abi.h"

namespace clusterd::noded {

struct AscendBackendOptions {
  std::vector<std::string> paths;  // tried in order; see MakeAscendPaths
};

// BackendOptions::dcmi_paths, then kDefaultDcmiPaths when enabled.
std::vector<std::string> MakeAscendPaths(const BackendOptions& options);

class AscendBackend final : public AcceleratorBackend {
 public:
  // Length of the error code list passed to dcmi_get_device_errorcode_v2.
  static constexpr unsigned kErrorCodeListLen = 128;
  // Upper bounds on what the driver may claim, so a bad value cannot make us
  // allocate or loop without limit.
  static constexpr int kMaxCards = 64;
  static constexpr int kMaxChipsPerCard = 16;

  explicit AscendBackend(AscendBackendOptions options);
  ~AscendBackend() override;
  AscendBackend(const AscendBackend&) = delete;
  AscendBackend& operator=(const AscendBackend&) = delete;

  // Loads the library (Unavailable if no path loads, listing each path and
  // dlerror), resolves symbols (FailedPrecondition naming a missing one), calls
  // dcmi_init and enumerates the chips (Unavailable naming the function and its
  // return code on a non-zero return).
  Status Init() override;
  // Re-enumerates cards and chips; the result also becomes the set Poll reads.
  StatusOr<std::vector<DeviceInfo>> Devices() override;
  StatusOr<std::vector<DeviceStatus>> Poll() override;
  std::string name() const override { return "ascend"; }

  // The path that was loaded (empty before a successful Init).
  const std::string& loaded_path() const { return loaded_path_; }
  // Which card-list symbol was resolved: "dcmi_get_card_list" or
  // "dcmi_get_card_num_list".
  const std::string& card_list_symbol() const { return card_list_symbol_; }

 private:
  struct Chip {
    int card_id = 0;
    int chip = 0;  // the device_id argument of the dcmi calls (index within the card)
    int32_t logic_id = 0;
    std::string model;
  };

  Status Load();
  Status Resolve();
  StatusOr<std::vector<Chip>> Enumerate();
  DeviceStatus ReadChip(const Chip& chip);
  void Unload();

  AscendBackendOptions options_;
  void* handle_ = nullptr;
  bool initialised_ = false;
  std::string loaded_path_;
  std::string card_list_symbol_;
  std::vector<Chip> chips_;

  dcmi::InitFn init_ = nullptr;
  dcmi::GetCardListFn get_card_list_ = nullptr;
  dcmi::GetDeviceNumInCardFn get_device_num_in_card_ = nullptr;
  dcmi::GetDeviceLogicIdFn get_device_logic_id_ = nullptr;
  dcmi::GetDeviceChipInfoFn get_device_chip_info_ = nullptr;
  dcmi::GetDeviceHealthFn get_device_health_ = nullptr;
  dcmi::GetDeviceErrorCodeV2Fn get_device_errorcode_v2_ = nullptr;
  dcmi::GetDeviceTemperatureFn get_device_temperature_ = nullptr;
  dcmi::GetDevicePowerInfoFn get_device_power_info_ = nullptr;
  dcmi::GetDeviceEccInfoFn get_device_ecc_info_ = nullptr;
};

}  // namespace clusterd::noded
