// The subset of Huawei's libdcmi.so C ABI that the ascend backend uses (see
// shared/data/dcmi-abi.md). Only types and function-pointer typedefs: the library
// is loaded with dlopen at run time, never linked. The test fake includes this
// header too, so both sides agree on the struct layout.
#pragma once

namespace clusterd::noded::dcmi {

inline constexpr int kMaxChipNameLen = 32;

// Layout must match the driver's `struct dcmi_chip_info` exactly.
struct ChipInfo {
  unsigned char chip_type[kMaxChipNameLen];
  unsigned char chip_name[kMaxChipNameLen];  // e.g. "910B3", NUL-padded
  unsigned char chip_ver[kMaxChipNameLen];
  unsigned int aicore_cnt;
};

// Every function returns 0 on success.
using InitFn = int (*)();
using GetCardListFn = int (*)(int* card_num, int* card_list, int list_len);
using GetDeviceNumInCardFn = int (*)(int card_id, int* device_num);
using GetDeviceLogicIdFn = int (*)(int* device_logic_id, int card_id, int device_id);
using GetDeviceChipInfoFn = int (*)(int card_id, int device_id, ChipInfo* chip_info);
using GetDeviceHealthFn = int (*)(int card_id, int device_id, unsigned int* health);
using GetDeviceErrorCodeV2Fn = int (*)(int card_id, int device_id, int* error_count, unsigned int* error_code_list,
                                       unsigned int list_len);
using GetDeviceTemperatureFn = int (*)(int card_id, int device_id, int* temperature);
using GetDevicePowerInfoFn = int (*)(int card_id, int device_id, int* power);  // 0.1 W units

// `enum dcmi_device_type`'s HBM value (DDR 0, SRAM 1, HBM 2, NPU 3).
inline constexpr int kDeviceTypeHbm = 2;

// Layout must match the driver's `struct dcmi_ecc_info` exactly.
struct EccInfo {
  int enable_flag;
  unsigned int single_bit_error_cnt;
  unsigned int double_bit_error_cnt;
  unsigned int total_single_bit_error_cnt;
  unsigned int total_double_bit_error_cnt;
  unsigned int single_bit_isolated_pages_cnt;
  unsigned int double_bit_isolated_pages_cnt;
  unsigned int single_bit_next_isolated_pages_cnt;
  unsigned int double_bit_next_isolated_pages_cnt;
};
// input_type is an `enum dcmi_device_type` (an int in the C ABI).
using GetDeviceEccInfoFn = int (*)(int card_id, int device_id, int input_type, EccInfo* ecc_info);

}  // namespace clusterd::noded::dcmi
