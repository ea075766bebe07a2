#include "noded/accel/ascend_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>
#include <utility>

#include "common/logging.h"

namespace clusterd::noded {
namespace {

std::string CallFailed(const char* fn, int rc) { return std::string(fn) + " returned " + std::to_string(rc); }

std::string CallFailed(const char* fn, int card, int chip, int rc) {
  return std::string(fn) + "(card " + std::to_string(card) + ", chip " + std::to_string(chip) + ") returned " +
         std::to_string(rc);
}

// chip_name is NUL-padded but not guaranteed NUL-terminated; keep printable ASCII.
std::string ChipName(const dcmi::ChipInfo& info) {
  const auto* p = info.chip_name;
  size_t n = 0;
  while (n < sizeof(info.chip_name) && p[n] != 0) ++n;
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] > ' ' && p[i] <= '~') out.push_back(static_cast<char>(p[i]));
  }
  return out;
}

}  // namespace

std::vector<std::string> MakeAscendPaths(const BackendOptions& options) {
  std::vector<std::string> paths = options.dcmi_paths;
  if (options.dcmi_search_default_paths) {
    for (const char* p : kDefaultDcmiPaths) paths.emplace_back(p);
  }
  return paths;
}

AscendBackend::AscendBackend(AscendBackendOptions options) : options_(std::move(options)) {}

AscendBackend::~AscendBackend() { Unload(); }

// The handle is dropped but the library is never dlclose'd: vendor libraries may
// start threads or register exit handlers that make unloading unsafe, and NodeD
// loads it once per process anyway (dlopen of the same path reuses it).
void AscendBackend::Unload() {
  handle_ = nullptr;
  initialised_ = false;
  loaded_path_.clear();
}

Status AscendBackend::Load() {
  if (options_.paths.empty()) return Unavailable("libdcmi.so: no path to try");
  std::string tried;
  for (const std::string& path : options_.paths) {
    if (path.empty()) continue;
    dlerror();
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h != nullptr) {
      handle_ = h;
      loaded_path_ = path;
      return Status::Ok();
    }
    const char* err = dlerror();
    if (!tried.empty()) tried += "; ";
    tried += path + ": " + (err != nullptr ? err : "unknown dlopen error");
  }
  return Unavailable("libdcmi.so could not be loaded (tried " + tried + ")");
}

Status AscendBackend::Resolve() {
  auto sym = [this](const char* name) { return dlsym(handle_, name); };
  std::string missing;
  auto need = [&](auto& fn, const char* name) {
    void* p = sym(name);
    if (p == nullptr) {
      if (!missing.empty()) missing += ", ";
      missing += name;
    }
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  need(init_, "dcmi_init");
  if (void* p = sym("dcmi_get_card_list"); p != nullptr) {
    get_card_list_ = reinterpret_cast<dcmi::GetCardListFn>(p);
    card_list_symbol_ = "dcmi_get_card_list";
  } else if (void* q = sym("dcmi_get_card_num_list"); q != nullptr) {
    get_card_list_ = reinterpret_cast<dcmi::GetCardListFn>(q);
    card_list_symbol_ = "dcmi_get_card_num_list";
  } else {
    missing += missing.empty() ? "" : ", ";
    missing += "dcmi_get_card_list (or dcmi_get_card_num_list)";
  }
  need(get_device_num_in_card_, "dcmi_get_device_num_in_card");
  need(get_device_logic_id_, "dcmi_get_device_logic_id");
  need(get_device_chip_info_, "dcmi_get_device_chip_info");
  need(get_device_health_, "dcmi_get_device_health");
  need(get_device_errorcode_v2_, "dcmi_get_device_errorcode_v2");
  if (!missing.empty()) {
    return FailedPrecondition(loaded_path_ + " lacks required symbol(s): " + missing);
  }
  get_device_temperature_ = reinterpret_cast<dcmi::GetDeviceTemperatureFn>(sym("dcmi_get_device_temperature"));
  get_device_power_info_ = reinterpret_cast<dcmi::GetDevicePowerInfoFn>(sym("dcmi_get_device_power_info"));
  get_device_ecc_info_ = reinterpret_cast<dcmi::GetDeviceEccInfoFn>(sym("dcmi_get_device_ecc_info"));
  auto log = GetLogger("accel");
  if (get_device_temperature_ == nullptr) log->warn("{} has no dcmi_get_device_temperature", loaded_path_);
  if (get_device_power_info_ == nullptr) log->warn("{} has no dcmi_get_device_power_info", loaded_path_);
  return Status::Ok();
}

Status AscendBackend::Init() {
  if (initialised_) return Status::Ok();
  if (handle_ == nullptr) {
    CLUSTERD_RETURN_IF_ERROR(Load());
    Status st = Resolve();
    if (!st.ok()) {
      Unload();
      return st;
    }
  }
  // The library stays loaded if dcmi_init fails, so a later Init retries the call
  // (the driver may still be starting) without reloading.
  if (int rc = init_(); rc != 0) return Unavailable(CallFailed("dcmi_init", rc));
  auto chips = Enumerate();
  if (!chips.ok()) return chips.status();
  chips_ = std::move(*chips);
  initialised_ = true;
  GetLogger("accel")->info("ascend: loaded {} ({}), {} chip(s)", loaded_path_, card_list_symbol_, chips_.size());
  return Status::Ok();
}

StatusOr<std::vector<AscendBackend::Chip>> AscendBackend::Enumerate() {
  int card_num = 0;
  int card_list[kMaxCards] = {};
  if (int rc = get_card_list_(&card_num, card_list, kMaxCards); rc != 0) {
    return Unavailable(CallFailed(card_list_symbol_.c_str(), rc));
  }
  if (card_num < 0 || card_num > kMaxCards) {
    return Internal(card_list_symbol_ + " reported " + std::to_string(card_num) + " cards (at most " +
                    std::to_string(kMaxCards) + " are supported)");
  }
  std::vector<Chip> chips;
  std::set<int32_t> seen;
  for (int i = 0; i < card_num; ++i) {
    const int card = card_list[i];
    int device_num = 0;
    if (int rc = get_device_num_in_card_(card, &device_num); rc != 0) {
      return Unavailable(CallFailed("dcmi_get_device_num_in_card", card, 0, rc));
    }
    if (device_num < 0 || device_num > kMaxChipsPerCard) {
      return Internal("dcmi_get_device_num_in_card(card " + std::to_string(card) + ") reported " +
                      std::to_string(device_num) + " chips");
    }
    for (int chip = 0; chip < device_num; ++chip) {
      Chip c{card, chip, 0, ""};
      int logic = -1;
      if (int rc = get_device_logic_id_(&logic, card, chip); rc != 0) {
        return Unavailable(CallFailed("dcmi_get_device_logic_id", card, chip, rc));
      }
      if (logic < 0 || !seen.insert(logic).second) {
        return Internal("dcmi_get_device_logic_id(card " + std::to_string(card) + ", chip " + std::to_string(chip) +
                        ") gave invalid or duplicate logic id " + std::to_string(logic));
      }
      c.logic_id = logic;
      dcmi::ChipInfo info{};
      if (int rc = get_device_chip_info_(card, chip, &info); rc == 0) {
        c.model = ChipName(info);
      } else {
        // The model is descriptive only: keep the chip, say why the name is missing.
        GetLogger("accel")->warn("{}", CallFailed("dcmi_get_device_chip_info", card, chip, rc));
      }
      chips.push_back(std::move(c));
    }
  }
  std::sort(chips.begin(), chips.end(), [](const Chip& a, const Chip& b) { return a.logic_id < b.logic_id; });
  return chips;
}

StatusOr<std::vector<DeviceInfo>> AscendBackend::Devices() {
  if (!initialised_) return FailedPrecondition("ascend backend: Init has not succeeded");
  auto chips = Enumerate();
  if (!chips.ok()) return chips.status();
  chips_ = std::move(*chips);
  std::vector<DeviceInfo> out;
  out.reserve(chips_.size());
  for (const Chip& c : chips_) {
    DeviceInfo d;
    d.id = c.logic_id;
    d.vendor = "huawei";
    d.model = c.model;
    d.location = "card " + std::to_string(c.card_id) + " chip " + std::to_string(c.chip);
    out.push_back(std::move(d));
  }
  return out;
}

DeviceStatus AscendBackend::ReadChip(const Chip& c) {
  DeviceStatus s;
  s.id = c.logic_id;
  auto add_error = [&s](const std::string& e) {
    if (!s.read_error.empty()) s.read_error += "; ";
    s.read_error += e;
  };

  unsigned int health = kHealthUnknown;
  if (int rc = get_device_health_(c.card_id, c.chip, &health); rc != 0) {
    add_error(CallFailed("dcmi_get_device_health", c.card_id, c.chip, rc));
    health = kHealthUnknown;
  }
  s.health_raw = health;

  int count = 0;
  unsigned int codes[kErrorCodeListLen] = {};
  if (int rc = get_device_errorcode_v2_(c.card_id, c.chip, &count, codes, kErrorCodeListLen); rc != 0) {
    add_error(CallFailed("dcmi_get_device_errorcode_v2", c.card_id, c.chip, rc));
  } else {
    const int n = std::clamp(count, 0, static_cast<int>(kErrorCodeListLen));
    std::set<std::string> unique;
    for (int i = 0; i < n; ++i) {
      if (codes[i] != 0) unique.insert(FormatErrorCode(codes[i]));
    }
    s.error_codes.assign(unique.begin(), unique.end());
  }
  s.healthy = s.read_error.empty() && health == 0;

  if (get_device_temperature_ != nullptr) {
    int t = 0;
    if (get_device_temperature_(c.card_id, c.chip, &t) == 0) s.temperature_c = t;
  }
  if (get_device_power_info_ != nullptr) {
    int p = 0;
    if (get_device_power_info_(c.card_id, c.chip, &p) == 0) s.power_w = p / 10.0;
  }
  if (get_device_ecc_info_ != nullptr) {
    // A chip without HBM ECC (or a driver that refuses the query) has no counters.
    dcmi::EccInfo ecc{};
    if (get_device_ecc_info_(c.card_id, c.chip, dcmi::kDeviceTypeHbm, &ecc) == 0 && ecc.enable_flag != 0) {
      s.error_counters["ecc_single_bit"] = ecc.total_single_bit_error_cnt;
      s.error_counters["ecc_double_bit"] = ecc.total_double_bit_error_cnt;
    }
  }
  return s;
}

StatusOr<std::vector<DeviceStatus>> AscendBackend::Poll() {
  if (!initialised_) return FailedPrecondition("ascend backend: Init has not succeeded");
  std::vector<DeviceStatus> out;
  out.reserve(chips_.size());
  size_t failed = 0;
  for (const Chip& c : chips_) {
    out.push_back(ReadChip(c));
    if (!out.back().read_error.empty()) ++failed;
  }
  if (!out.empty() && failed == out.size()) {
    return Unavailable("ascend: no chip could be read: " + out.front().read_error);
  }
  return out;
}

}  // namespace clusterd::noded
