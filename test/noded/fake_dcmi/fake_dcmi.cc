// A fake libdcmi.so for the ascend backend tests. It exports the DCMI C symbols the
// backend resolves (noded/accel/dcmi_abi.h) over scripted state, plus fake_dcmi_*
// functions that a test resolves with dlsym on the same handle to script it.
//
// Variants (compile definitions), each built as its own libdcmi.so:
//   FAKE_DCMI_OLD_CARD_LIST  exports dcmi_get_card_num_list instead of dcmi_get_card_list
//   FAKE_DCMI_NO_ERRORCODE   lacks dcmi_get_device_errorcode_v2 (a required symbol)
//
// State: `cards` cards with ids first_card_id, first_card_id+1, ..., each with
// `chips` chips; the chip (card index c, chip k) has logic id c*chips+k. Scripting
// addresses chips by logic id. Every DCMI call but dcmi_init returns -8005 until
// dcmi_init has been called since the last reset, as the real library refuses calls
// before initialisation. Thread-safe (one mutex).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "noded/accel/dcmi_abi.h"

namespace {

using clusterd::noded::dcmi::ChipInfo;

constexpr int kNotInitialised = -8005;
constexpr int kInvalidDevice = -8001;

struct Chip {
  unsigned health = 0;
  std::set<unsigned> codes;
  int temperature = 40;
  int power_decawatts = 900;  // 0.1 W units, as DCMI reports
  std::string name = "910B3";
  // The HBM's total ECC counts (dcmi_get_device_ecc_info), ECC enabled.
  unsigned ecc_single_bit = 0;
  unsigned ecc_double_bit = 0;
};

struct State {
  int cards = 0;
  int chips = 0;
  int first_card_id = 0;
  std::vector<Chip> chip;  // by logic id
  bool initialised = false;
  // function -> (logic id or -1 for every chip) -> return code
  std::map<std::string, std::map<int, int>> fail;
  std::map<std::string, int> calls;
};

std::mutex mu;
State state;

// Card index for a card id, or -1.
int CardIndex(int card_id) {
  int idx = card_id - state.first_card_id;
  return idx >= 0 && idx < state.cards ? idx : -1;
}

// Logic id for (card id, chip), or -1.
int Logic(int card_id, int chip) {
  int idx = CardIndex(card_id);
  if (idx < 0 || chip < 0 || chip >= state.chips) return -1;
  return idx * state.chips + chip;
}

// Counts the call; returns the scripted failure for it (0 when none).
int Enter(const char* fn, int logic = -1) {
  state.calls[fn]++;
  auto it = state.fail.find(fn);
  if (it != state.fail.end()) {
    if (auto f = it->second.find(logic); logic >= 0 && f != it->second.end()) return f->second;
    if (auto all = it->second.find(-1); all != it->second.end()) return all->second;
  }
  if (std::strcmp(fn, "dcmi_init") != 0 && !state.initialised) return kNotInitialised;
  return 0;
}

int CardList(const char* fn, int* card_num, int* card_list, int list_len) {
  std::lock_guard<std::mutex> lock(mu);
  if (int rc = Enter(fn); rc != 0) return rc;
  *card_num = state.cards;
  for (int i = 0; i < std::min(state.cards, list_len); ++i) card_list[i] = state.first_card_id + i;
  return 0;
}

}  // namespace

extern "C" {

// ---- DCMI ABI ----

int dcmi_init(void) {
  std::lock_guard<std::mutex> lock(mu);
  if (int rc = Enter("dcmi_init"); rc != 0) return rc;
  state.initialised = true;
  return 0;
}

#ifdef FAKE_DCMI_OLD_CARD_LIST
int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len) {
  return CardList("dcmi_get_card_num_list", card_num, card_list, list_len);
}
#else
int dcmi_get_card_list(int* card_num, int* card_list, int list_len) {
  return CardList("dcmi_get_card_list", card_num, card_list, list_len);
}
#endif

int dcmi_get_device_num_in_card(int card_id, int* device_num) {
  std::lock_guard<std::mutex> lock(mu);
  if (int rc = Enter("dcmi_get_device_num_in_card"); rc != 0) return rc;
  if (CardIndex(card_id) < 0) return kInvalidDevice;
  *device_num = state.chips;
  return 0;
}

int dcmi_get_device_logic_id(int* device_logic_id, int card_id, int device_id) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_logic_id", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  *device_logic_id = logic;
  return 0;
}

int dcmi_get_device_chip_info(int card_id, int device_id, ChipInfo* chip_info) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_chip_info", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  std::memset(chip_info, 0, sizeof(*chip_info));
  std::memcpy(chip_info->chip_type, "Ascend", 6);
  const std::string& name = state.chip[logic].name;
  // Deliberately not NUL-terminated when the name fills the field.
  std::memcpy(chip_info->chip_name, name.data(), std::min<size_t>(name.size(), sizeof(chip_info->chip_name)));
  std::memcpy(chip_info->chip_ver, "V1", 2);
  chip_info->aicore_cnt = 20;
  return 0;
}

int dcmi_get_device_health(int card_id, int device_id, unsigned int* health) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_health", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  *health = state.chip[logic].health;
  return 0;
}

#ifndef FAKE_DCMI_NO_ERRORCODE
int dcmi_get_device_errorcode_v2(int card_id, int device_id, int* error_count, unsigned int* error_code_list,
                                 unsigned int list_len) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_errorcode_v2", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  unsigned n = 0;
  for (unsigned code : state.chip[logic].codes) {
    if (n >= list_len) break;
    error_code_list[n++] = code;
  }
  *error_count = static_cast<int>(n);
  return 0;
}
#endif

int dcmi_get_device_temperature(int card_id, int device_id, int* temperature) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_temperature", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  *temperature = state.chip[logic].temperature;
  return 0;
}

int dcmi_get_device_power_info(int card_id, int device_id, int* power) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_power_info", logic); rc != 0) return rc;
  if (logic < 0) return kInvalidDevice;
  *power = state.chip[logic].power_decawatts;
  return 0;
}

int dcmi_get_device_ecc_info(int card_id, int device_id, int input_type, clusterd::noded::dcmi::EccInfo* ecc_info) {
  std::lock_guard<std::mutex> lock(mu);
  int logic = Logic(card_id, device_id);
  if (int rc = Enter("dcmi_get_device_ecc_info", logic); rc != 0) return rc;
  if (logic < 0 || input_type != clusterd::noded::dcmi::kDeviceTypeHbm) return kInvalidDevice;
  std::memset(ecc_info, 0, sizeof(*ecc_info));
  ecc_info->enable_flag = 1;
  ecc_info->single_bit_error_cnt = state.chip[logic].ecc_single_bit;
  ecc_info->double_bit_error_cnt = state.chip[logic].ecc_double_bit;
  ecc_info->total_single_bit_error_cnt = state.chip[logic].ecc_single_bit;
  ecc_info->total_double_bit_error_cnt = state.chip[logic].ecc_double_bit;
  return 0;
}

// ---- scripting ----

// Forgets everything (failures, codes, call counts, initialisation) and sets up
// `cards` x `chips`.
void fake_dcmi_reset(int cards, int chips, int first_card_id) {
  std::lock_guard<std::mutex> lock(mu);
  state = State{};
  state.cards = cards;
  state.chips = chips;
  state.first_card_id = first_card_id;
  state.chip.assign(static_cast<size_t>(std::max(0, cards * chips)), Chip{});
  for (size_t i = 0; i < state.chip.size(); ++i) state.chip[i].temperature = 40 + static_cast<int>(i);
}

// 0 on success, -1 for an unknown logic id.
int fake_dcmi_set_health(int logic, unsigned health) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].health = health;
  return 0;
}

int fake_dcmi_raise(int logic, unsigned code) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].codes.insert(code);
  return 0;
}

int fake_dcmi_clear(int logic, unsigned code) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].codes.erase(code);
  return 0;
}

int fake_dcmi_set_sensors(int logic, int temperature, int power_decawatts) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].temperature = temperature;
  state.chip[logic].power_decawatts = power_decawatts;
  return 0;
}

int fake_dcmi_set_ecc(int logic, unsigned single_bit, unsigned double_bit) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].ecc_single_bit = single_bit;
  state.chip[logic].ecc_double_bit = double_bit;
  return 0;
}

int fake_dcmi_set_chip_name(int logic, const char* name) {
  std::lock_guard<std::mutex> lock(mu);
  if (logic < 0 || static_cast<size_t>(logic) >= state.chip.size()) return -1;
  state.chip[logic].name = name;
  return 0;
}

// Makes `function` return `rc` for chip `logic` (-1: for every call); rc 0 removes
// the failure.
void fake_dcmi_fail(const char* function, int logic, int rc) {
  std::lock_guard<std::mutex> lock(mu);
  if (rc == 0) {
    state.fail[function].erase(logic);
  } else {
    state.fail[function][logic] = rc;
  }
}

int fake_dcmi_calls(const char* function) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = state.calls.find(function);
  return it == state.calls.end() ? 0 : it->second;
}

}  // extern "C"
