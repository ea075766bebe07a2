// A fake libnvidia-ml.so.1 for the nvml backend tests. It exports the NVML C
// symbols the backend resolves (noded/accel/nvml_abi.h) over scripted state, plus
// fake_nvml_* functions that a test resolves with dlsym on the same handle to
// script it.
//
// Variants (compile definitions), each built as its own libnvidia-ml.so.1:
//   FAKE_NVML_NO_REMAP  lacks nvmlDeviceGetRemappedRows (an optional symbol)
//   FAKE_NVML_NO_INIT   lacks nvmlInit_v2 (a required symbol)
//
// State: no GPUs until fake_nvml_reset(n); then n identical H100s, device i
// with UUID GPU-00000000-0000-0000-0000-0000000000<ii>, PCI bus 0x18 + i, all
// healthy. Every NVML call but nvmlInit_v2 and nvmlErrorString returns
// NVML_ERROR_UNINITIALIZED until nvmlInit_v2 has succeeded since the last reset
// or nvmlShutdown. MIG: fake_nvml_set's "mig_current" 1 turns MIG mode on and
// "mig_devices" N (at most 7) makes that many MIG devices, UUID
// MIG-00000000-0000-0000-0000-0000000000<ii><k>. A call is counted, then blocks while it is hung
// (fake_nvml_hang), then returns its scripted failure (fake_nvml_fail), then
// checks initialisation and its arguments. Device handles encode the device's
// index and stop being valid when fake_nvml_set_devices drops their GPU.
//
// Events: one queue for the library; nvmlEventSetWait_v2 takes the oldest queued
// event whose GPU was registered in that set for that event type, and leaves the
// others queued. A wait also returns when its set is freed
// (NVML_ERROR_INVALID_ARGUMENT), on nvmlShutdown (NVML_ERROR_UNINITIALIZED) and
// on fake_nvml_reset (NVML_ERROR_UNKNOWN).
//
// Process mode, for end-to-end tests of a real NodeD (the test cannot dlsym
// into another process): FAKE_NVML_DEVICES=N starts with N GPUs, and
// FAKE_NVML_CONTROL=FILE is read for new lines at every call, each
// "set DEV FIELD VALUE" (as fake_nvml_set), "xid DEV N" (an Xid event) or
// "fail FUNCTION DEV RC" (as fake_nvml_fail; RC 0 removes it);
// a malformed line is reported on stderr and skipped.
//
// Thread-safe (one mutex, one condition variable); blocked calls hold neither.
// The state is a leaked heap object: the library is never unloaded and calls may
// still be blocked when the test process exits.
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "noded/accel/nvml_abi.h"

namespace nvml = clusterd::noded::nvml;

namespace {

using nvml::Return;
using Lock = std::unique_lock<std::mutex>;

constexpr std::uintptr_t kDeviceHandleBase = 0x1000;
constexpr std::uintptr_t kEventSetHandleBase = 0x5e70000;
// A MIG device's handle: base + GPU index x kMaxMig + its index on the GPU.
constexpr std::uintptr_t kMigHandleBase = 0x3160000;
constexpr unsigned kMaxMig = 7;
constexpr int kNoDevice = -2;            // Enter: a call that takes no device
constexpr unsigned kNvLinkCounters = 5;  // NVML_NVLINK_ERROR_COUNT (DL_ECC_DATA is 4)
constexpr unsigned long long kGiB = 1ULL << 30;

// The exported NVML functions (whether this variant exports them or not): the
// names fake_nvml_fail, fake_nvml_hang and fake_nvml_calls accept.
struct Function {
  std::string_view name;
  bool has_device;  // takes a device handle (or index)
};
constexpr Function kFunctions[] = {
    {"nvmlInit_v2", false},
    {"nvmlShutdown", false},
    {"nvmlErrorString", false},
    {"nvmlSystemGetDriverVersion", false},
    {"nvmlSystemGetCudaDriverVersion_v2", false},
    {"nvmlDeviceGetCount_v2", false},
    {"nvmlDeviceGetHandleByIndex_v2", true},
    {"nvmlDeviceGetUUID", true},
    {"nvmlDeviceGetName", true},
    {"nvmlDeviceGetSerial", true},
    {"nvmlDeviceGetPciInfo_v3", true},
    {"nvmlDeviceGetMemoryInfo", true},
    {"nvmlDeviceGetTemperature", true},
    {"nvmlDeviceGetPowerUsage", true},
    {"nvmlDeviceGetTotalEccErrors", true},
    {"nvmlDeviceGetRetiredPagesPendingStatus", true},
    {"nvmlDeviceGetRemappedRows", true},
    {"nvmlDeviceGetCurrentClocksThrottleReasons", true},
    {"nvmlDeviceGetPcieReplayCounter", true},
    {"nvmlDeviceGetNvLinkState", true},
    {"nvmlDeviceGetNvLinkErrorCounter", true},
    {"nvmlDeviceGetMigMode", true},
    {"nvmlDeviceGetMaxMigDeviceCount", true},
    {"nvmlDeviceGetMigDeviceHandleByIndex", true},
    {"nvmlEventSetCreate", false},
    {"nvmlDeviceRegisterEvents", true},
    {"nvmlEventSetWait_v2", false},
    {"nvmlEventSetFree", false},
};

struct Gpu {
  unsigned temperature = 40;
  unsigned power_mw = 120000;
  unsigned long long ecc[2][2] = {};  // [memory error type][ecc counter type]
  int retired_pending = nvml::kFeatureDisabled;
  unsigned remap_pending = 0;
  unsigned remap_failure = 0;
  unsigned remap_corr_rows = 0;
  unsigned remap_unc_rows = 0;
  unsigned long long throttle = 0;
  unsigned pcie_replay = 0;
  unsigned mig_current = 0;
  unsigned mig_pending = 0;
  unsigned mig_devices = 0;  // MIG devices made (shown while mig_current is 1), at most kMaxMig
  std::array<bool, nvml::kNvLinkMaxLinks> link_active;
  std::array<std::array<unsigned long long, kNvLinkCounters>, nvml::kNvLinkMaxLinks> link_errors = {};

  Gpu() { link_active.fill(true); }
};

struct Event {
  int device = 0;
  unsigned long long type = 0;
  unsigned long long data = 0;
};

struct Hang {
  bool on = false;
  unsigned long long releases = 0;  // fake_nvml_hang(f, 0) calls: wakes the calls blocked before
};

// Everything fake_nvml_reset forgets.
struct Data {
  unsigned devices = 0;  // what nvmlDeviceGetCount_v2 reports
  std::vector<Gpu> gpu;  // at least `devices`
  bool initialised = false;
  std::map<std::string, std::map<int, Return>, std::less<>> fail;  // function -> device (-1: all) -> rc
  std::map<std::string, Hang, std::less<>> hang;
  std::map<std::string, int, std::less<>> calls;
  std::deque<Event> events;
  std::map<std::uintptr_t, std::map<int, unsigned long long>> sets;  // set -> device -> registered types
  std::uintptr_t next_set = kEventSetHandleBase;
};

struct State {
  std::mutex mu;
  std::condition_variable cv;
  unsigned long long generation = 0;  // bumped by fake_nvml_reset
  Data d;
};

bool Apply(Gpu& g, std::string_view field, long long value);

State* MakeState() {
  auto* s = new State;
  if (const char* n = std::getenv("FAKE_NVML_DEVICES"); n != nullptr) {
    const long devices = std::strtol(n, nullptr, 10);
    if (devices > 0 && devices <= 64) {
      s->d.devices = static_cast<unsigned>(devices);
      s->d.gpu.assign(s->d.devices, Gpu{});
    }
  }
  return s;
}

State& S() {
  static State* s = MakeState();  // leaked on purpose (see the file comment)
  return *s;
}

// Process mode: the control file's lines not applied yet (under the lock).
void ApplyControl(State& s) {
  static const char* path = std::getenv("FAKE_NVML_CONTROL");
  static long offset = 0;
  static std::string partial;
  if (path == nullptr) return;
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return;
  if (std::fseek(f, offset, SEEK_SET) == 0) {
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
      partial.append(buf, n);
      offset += static_cast<long>(n);
    }
  }
  std::fclose(f);
  size_t nl = 0;
  while ((nl = partial.find('\n')) != std::string::npos) {
    const std::string line = partial.substr(0, nl);
    partial.erase(0, nl + 1);
    char verb[16] = {}, field[64] = {};
    int device = 0;
    long long value = 0;
    bool ok = false;
    if (std::sscanf(line.c_str(), "set %d %63s %lld", &device, field, &value) == 3) {
      Gpu scratch;
      ok = Apply(scratch, field, value) && device >= -1 && device < static_cast<int>(s.d.gpu.size());
      if (ok) {
        for (size_t i = 0; i < s.d.gpu.size(); ++i) {
          if (device == -1 || static_cast<int>(i) == device) Apply(s.d.gpu[i], field, value);
        }
      }
    } else if (std::sscanf(line.c_str(), "fail %63s %d %lld", field, &device, &value) == 3) {
      // field holds the function's name here.
      ok = value >= 0 && std::any_of(std::begin(kFunctions), std::end(kFunctions),
                                     [&](const Function& f) { return f.name == field; });
      if (ok && value == 0) {
        if (auto it = s.d.fail.find(std::string_view(field)); it != s.d.fail.end()) it->second.erase(device);
      } else if (ok) {
        s.d.fail[field][device] = static_cast<Return>(value);
      }
    } else if (std::sscanf(line.c_str(), "%15s %d %lld", verb, &device, &value) == 3 &&
               std::string_view(verb) == "xid") {
      ok = device >= 0 && device < static_cast<int>(s.d.gpu.size()) && value > 0;
      if (ok) {
        s.d.events.push_back(Event{device, nvml::kEventTypeXidCriticalError, static_cast<unsigned long long>(value)});
        s.cv.notify_all();
      }
    }
    if (!ok) std::fprintf(stderr, "fake_nvml: control line skipped: %s\n", line.c_str());
  }
}

// The function named `fn`; an unknown name aborts (a test bug).
const Function& Find(const char* fn) {
  if (fn != nullptr) {
    for (const Function& f : kFunctions) {
      if (f.name == fn) return f;
    }
  }
  std::fprintf(stderr, "fake_nvml: unknown function '%s'\n", fn == nullptr ? "(null)" : fn);
  std::abort();
}

// Runs an NVML call's body; no exception leaves the library.
template <class F>
Return Guarded(F&& body) {
  try {
    return body();
  } catch (...) {
    return nvml::kErrorUnknown;
  }
}

// The index of a valid device handle, or -1.
int DeviceIndex(nvml::Device device) {
  auto v = reinterpret_cast<std::uintptr_t>(device);
  if (v < kDeviceHandleBase || v - kDeviceHandleBase >= S().d.devices) return -1;
  return static_cast<int>(v - kDeviceHandleBase);
}

nvml::Device DeviceHandle(int index) {
  return reinterpret_cast<nvml::Device>(kDeviceHandleBase + static_cast<std::uintptr_t>(index));
}

// Counts the call, blocks while `fn` is hung, then returns its scripted failure
// for `device` (an index, -1 for an invalid handle, kNoDevice for a call without
// a device), NVML_ERROR_UNINITIALIZED before nvmlInit_v2, or success.
Return Enter(Lock& lock, std::string_view fn, int device) {
  State& s = S();
  ApplyControl(s);
  s.d.calls[std::string(fn)]++;
  if (auto h = s.d.hang.find(fn); h != s.d.hang.end() && h->second.on) {
    const unsigned long long generation = s.generation;
    const unsigned long long releases = h->second.releases;
    s.cv.wait(lock, [&] {
      if (s.generation != generation) return true;
      auto it = s.d.hang.find(fn);
      return it == s.d.hang.end() || it->second.releases != releases;
    });
    if (s.generation != generation) return nvml::kErrorUnknown;
  }
  if (auto f = s.d.fail.find(fn); f != s.d.fail.end() && !f->second.empty()) {
    const auto& by_device = f->second;  // a function without a device has its failure under -1
    if (auto one = by_device.find(device); device >= 0 && one != by_device.end()) return one->second;
    if (auto all = by_device.find(-1); all != by_device.end()) return all->second;
  }
  if (fn != "nvmlInit_v2" && !s.d.initialised) return nvml::kErrorUninitialized;
  return nvml::kSuccess;
}

// Enter for a call on `device`; on success *index is its index. An unknown
// handle is NVML_ERROR_INVALID_ARGUMENT (checked again after a hang: the GPU
// may have gone meanwhile).
Return EnterDevice(Lock& lock, std::string_view fn, nvml::Device device, int* index) {
  if (Return rc = Enter(lock, fn, DeviceIndex(device)); rc != nvml::kSuccess) return rc;
  *index = DeviceIndex(device);
  return *index < 0 ? nvml::kErrorInvalidArgument : nvml::kSuccess;
}

Return CopyString(const std::string& value, char* buf, unsigned length) {
  if (buf == nullptr) return nvml::kErrorInvalidArgument;
  if (value.size() + 1 > length) return nvml::kErrorInsufficientSize;
  std::memcpy(buf, value.c_str(), value.size() + 1);
  return nvml::kSuccess;
}

// Two decimal digits of a device index ("03").
std::string TwoDigits(int index) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%02d", index);
  return buf;
}

// Applies fake_nvml_set's field to one GPU; false for an unknown field or link.
bool Apply(Gpu& g, std::string_view field, long long value) {
  const auto u = static_cast<unsigned>(value);
  const auto ull = static_cast<unsigned long long>(value);
  if (field == "temperature") {
    g.temperature = u;
  } else if (field == "power_mw") {
    g.power_mw = u;
  } else if (field == "ecc_volatile_corrected") {
    g.ecc[nvml::kMemoryErrorCorrected][nvml::kVolatileEcc] = ull;
  } else if (field == "ecc_volatile_uncorrected") {
    g.ecc[nvml::kMemoryErrorUncorrected][nvml::kVolatileEcc] = ull;
  } else if (field == "ecc_aggregate_corrected") {
    g.ecc[nvml::kMemoryErrorCorrected][nvml::kAggregateEcc] = ull;
  } else if (field == "ecc_aggregate_uncorrected") {
    g.ecc[nvml::kMemoryErrorUncorrected][nvml::kAggregateEcc] = ull;
  } else if (field == "retired_pending") {
    g.retired_pending = value != 0 ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
  } else if (field == "remap_pending") {
    g.remap_pending = u;
  } else if (field == "remap_failure") {
    g.remap_failure = u;
  } else if (field == "remap_corr_rows") {
    g.remap_corr_rows = u;
  } else if (field == "remap_unc_rows") {
    g.remap_unc_rows = u;
  } else if (field == "throttle") {
    g.throttle = ull;
  } else if (field == "pcie_replay") {
    g.pcie_replay = u;
  } else if (field == "mig_current") {
    g.mig_current = u;
  } else if (field == "mig_pending") {
    g.mig_pending = u;
  } else if (field == "mig_devices") {
    if (u > kMaxMig) return false;
    g.mig_devices = u;
  } else if (field == "nvlink_down" || field == "nvlink_up") {
    if (value < 0 || value >= static_cast<long long>(nvml::kNvLinkMaxLinks)) return false;
    g.link_active[static_cast<size_t>(value)] = field == "nvlink_up";
  } else if (field == "nvlink_crc" || field == "nvlink_replay" || field == "nvlink_recovery") {
    const int counter = field == "nvlink_crc"      ? nvml::kNvLinkErrorDlCrcFlit
                        : field == "nvlink_replay" ? nvml::kNvLinkErrorDlReplay
                                                   : nvml::kNvLinkErrorDlRecovery;
    for (auto& link : g.link_errors) link[static_cast<size_t>(counter)] += ull;
  } else {
    return false;
  }
  return true;
}

// The oldest queued event that `set` registered for, taken off the queue.
bool TakeEvent(const std::map<int, unsigned long long>& registered, nvml::EventData* data) {
  Data& d = S().d;
  for (auto it = d.events.begin(); it != d.events.end(); ++it) {
    if (it->device < 0 || static_cast<unsigned>(it->device) >= d.devices) continue;
    auto r = registered.find(it->device);
    if (r == registered.end() || (r->second & it->type) == 0) continue;
    data->device = DeviceHandle(it->device);
    data->event_type = it->type;
    data->event_data = it->data;
    data->gpu_instance_id = 0xFFFFFFFFu;  // not attributable to a MIG instance
    data->compute_instance_id = 0xFFFFFFFFu;
    d.events.erase(it);
    return true;
  }
  return false;
}

}  // namespace

extern "C" {

// ---- NVML ABI ----

#ifndef FAKE_NVML_NO_INIT
Return nvmlInit_v2() {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlInit_v2", kNoDevice); rc != nvml::kSuccess) return rc;
    S().d.initialised = true;
    return nvml::kSuccess;
  });
}
#endif

Return nvmlShutdown() {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlShutdown", kNoDevice); rc != nvml::kSuccess) return rc;
    S().d.initialised = false;
    S().cv.notify_all();  // event waits return NVML_ERROR_UNINITIALIZED
    return nvml::kSuccess;
  });
}

const char* nvmlErrorString(Return result) {
  try {
    Lock lock(S().mu);
    Enter(lock, "nvmlErrorString", kNoDevice);  // counted and hangable; its failure is meaningless
  } catch (...) {
  }
  switch (result) {
    case nvml::kSuccess: return "Success";
    case nvml::kErrorUninitialized: return "Uninitialized";
    case nvml::kErrorInvalidArgument: return "Invalid Argument";
    case nvml::kErrorNotSupported: return "Not Supported";
    case nvml::kErrorNoPermission: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case nvml::kErrorNotFound: return "Not Found";
    case nvml::kErrorInsufficientSize: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case nvml::kErrorDriverNotLoaded: return "Driver Not Loaded";
    case nvml::kErrorTimeout: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case nvml::kErrorGpuIsLost: return "GPU is lost";
    case nvml::kErrorResetRequired: return "Reset Required";
    case 17: return "The operating system has blocked the request";
    case nvml::kErrorLibRmVersionMismatch: return "RM has detected an NVML/RM version mismatch";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    default: return "Unknown Error";  // NVML_ERROR_UNKNOWN (999) and the codes not listed
  }
}

Return nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlSystemGetDriverVersion", kNoDevice); rc != nvml::kSuccess) return rc;
    return CopyString("550.54.15", version, length);
  });
}

Return nvmlSystemGetCudaDriverVersion_v2(int* cuda_driver_version) {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlSystemGetCudaDriverVersion_v2", kNoDevice); rc != nvml::kSuccess) return rc;
    if (cuda_driver_version == nullptr) return nvml::kErrorInvalidArgument;
    *cuda_driver_version = 12040;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetCount_v2(unsigned int* count) {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlDeviceGetCount_v2", kNoDevice); rc != nvml::kSuccess) return rc;
    if (count == nullptr) return nvml::kErrorInvalidArgument;
    *count = S().d.devices;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvml::Device* device) {
  return Guarded([&] {
    Lock lock(S().mu);
    const int dev = index < S().d.devices ? static_cast<int>(index) : -1;
    if (Return rc = Enter(lock, "nvmlDeviceGetHandleByIndex_v2", dev); rc != nvml::kSuccess) return rc;
    if (device == nullptr || index >= S().d.devices) return nvml::kErrorInvalidArgument;
    *device = DeviceHandle(static_cast<int>(index));
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetUUID(nvml::Device device, char* uuid, unsigned int length) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    const auto v = reinterpret_cast<std::uintptr_t>(device);
    if (v >= kMigHandleBase && v < kMigHandleBase + kMaxMig * S().d.devices) {
      // A MIG device: MIG-...<gpu><k>.
      const auto gpu = static_cast<int>((v - kMigHandleBase) / kMaxMig);
      if (Return rc = Enter(lock, "nvmlDeviceGetUUID", gpu); rc != nvml::kSuccess) return rc;
      return CopyString(
          "MIG-00000000-0000-0000-0000-0000000000" + TwoDigits(gpu) + std::to_string((v - kMigHandleBase) % kMaxMig),
          uuid, length);
    }
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetUUID", device, &i); rc != nvml::kSuccess) return rc;
    return CopyString("GPU-00000000-0000-0000-0000-0000000000" + TwoDigits(i), uuid, length);
  });
}

Return nvmlDeviceGetName(nvml::Device device, char* name, unsigned int length) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetName", device, &i); rc != nvml::kSuccess) return rc;
    return CopyString("NVIDIA H100 80GB HBM3", name, length);
  });
}

Return nvmlDeviceGetSerial(nvml::Device device, char* serial, unsigned int length) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetSerial", device, &i); rc != nvml::kSuccess) return rc;
    return CopyString("165432100000" + TwoDigits(i), serial, length);
  });
}

Return nvmlDeviceGetPciInfo_v3(nvml::Device device, nvml::PciInfo* pci) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetPciInfo_v3", device, &i); rc != nvml::kSuccess) return rc;
    if (pci == nullptr) return nvml::kErrorInvalidArgument;
    std::memset(pci, 0, sizeof(*pci));
    const int bus = 0x18 + i;
    std::snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "0000:%02X:00.0", bus);
    std::snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:%02X:00.0", bus);
    pci->domain = 0;
    pci->bus = static_cast<unsigned>(bus);
    pci->device = 0;
    pci->pci_device_id = 0x233010DE;  // H100 SXM5 80GB (device 0x2330, vendor 0x10DE)
    pci->pci_sub_system_id = 0x16C110DE;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetMemoryInfo(nvml::Device device, nvml::Memory* memory) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetMemoryInfo", device, &i); rc != nvml::kSuccess) return rc;
    if (memory == nullptr) return nvml::kErrorInvalidArgument;
    memory->total = 80 * kGiB;
    memory->used = 1 * kGiB;
    memory->free = memory->total - memory->used;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetTemperature(nvml::Device device, int sensor, unsigned int* temp) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetTemperature", device, &i); rc != nvml::kSuccess) return rc;
    if (sensor != nvml::kTemperatureGpu || temp == nullptr) return nvml::kErrorInvalidArgument;
    *temp = S().d.gpu[static_cast<size_t>(i)].temperature;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetPowerUsage(nvml::Device device, unsigned int* milliwatts) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetPowerUsage", device, &i); rc != nvml::kSuccess) return rc;
    if (milliwatts == nullptr) return nvml::kErrorInvalidArgument;
    *milliwatts = S().d.gpu[static_cast<size_t>(i)].power_mw;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetTotalEccErrors(nvml::Device device, int error_type, int counter_type, unsigned long long* count) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetTotalEccErrors", device, &i); rc != nvml::kSuccess) return rc;
    if (error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1 || count == nullptr) {
      return nvml::kErrorInvalidArgument;
    }
    *count = S().d.gpu[static_cast<size_t>(i)].ecc[error_type][counter_type];
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetRetiredPagesPendingStatus(nvml::Device device, int* is_pending) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetRetiredPagesPendingStatus", device, &i); rc != nvml::kSuccess) {
      return rc;
    }
    if (is_pending == nullptr) return nvml::kErrorInvalidArgument;
    *is_pending = S().d.gpu[static_cast<size_t>(i)].retired_pending;
    return nvml::kSuccess;
  });
}

#ifndef FAKE_NVML_NO_REMAP
Return nvmlDeviceGetRemappedRows(nvml::Device device, unsigned int* corr_rows, unsigned int* unc_rows,
                                 unsigned int* is_pending, unsigned int* failure_occurred) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetRemappedRows", device, &i); rc != nvml::kSuccess) return rc;
    if (corr_rows == nullptr || unc_rows == nullptr || is_pending == nullptr || failure_occurred == nullptr) {
      return nvml::kErrorInvalidArgument;
    }
    const Gpu& g = S().d.gpu[static_cast<size_t>(i)];
    *corr_rows = g.remap_corr_rows;
    *unc_rows = g.remap_unc_rows;
    *is_pending = g.remap_pending;
    *failure_occurred = g.remap_failure;
    return nvml::kSuccess;
  });
}
#endif

Return nvmlDeviceGetCurrentClocksThrottleReasons(nvml::Device device, unsigned long long* reasons) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetCurrentClocksThrottleReasons", device, &i); rc != nvml::kSuccess) {
      return rc;
    }
    if (reasons == nullptr) return nvml::kErrorInvalidArgument;
    *reasons = S().d.gpu[static_cast<size_t>(i)].throttle;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetPcieReplayCounter(nvml::Device device, unsigned int* value) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetPcieReplayCounter", device, &i); rc != nvml::kSuccess) return rc;
    if (value == nullptr) return nvml::kErrorInvalidArgument;
    *value = S().d.gpu[static_cast<size_t>(i)].pcie_replay;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetNvLinkState(nvml::Device device, unsigned int link, int* is_active) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetNvLinkState", device, &i); rc != nvml::kSuccess) return rc;
    if (link >= nvml::kNvLinkMaxLinks || is_active == nullptr) return nvml::kErrorInvalidArgument;
    *is_active = S().d.gpu[static_cast<size_t>(i)].link_active[link] ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetNvLinkErrorCounter(nvml::Device device, unsigned int link, int counter, unsigned long long* value) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetNvLinkErrorCounter", device, &i); rc != nvml::kSuccess) {
      return rc;
    }
    if (link >= nvml::kNvLinkMaxLinks || counter < 0 || counter >= static_cast<int>(kNvLinkCounters) ||
        value == nullptr) {
      return nvml::kErrorInvalidArgument;
    }
    // Only the scripted counters (replay, recovery, CRC flit) ever move; the others read 0.
    *value = S().d.gpu[static_cast<size_t>(i)].link_errors[link][static_cast<size_t>(counter)];
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetMigMode(nvml::Device device, unsigned int* current_mode, unsigned int* pending_mode) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetMigMode", device, &i); rc != nvml::kSuccess) return rc;
    if (current_mode == nullptr || pending_mode == nullptr) return nvml::kErrorInvalidArgument;
    *current_mode = S().d.gpu[static_cast<size_t>(i)].mig_current;
    *pending_mode = S().d.gpu[static_cast<size_t>(i)].mig_pending;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetMaxMigDeviceCount(nvml::Device device, unsigned int* count) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetMaxMigDeviceCount", device, &i); rc != nvml::kSuccess) return rc;
    if (count == nullptr) return nvml::kErrorInvalidArgument;
    *count = S().d.gpu[static_cast<size_t>(i)].mig_current ? kMaxMig : 0;
    return nvml::kSuccess;
  });
}

Return nvmlDeviceGetMigDeviceHandleByIndex(nvml::Device device, unsigned int index, nvml::Device* mig_device) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceGetMigDeviceHandleByIndex", device, &i); rc != nvml::kSuccess) {
      return rc;
    }
    const Gpu& g = S().d.gpu[static_cast<size_t>(i)];
    if (mig_device == nullptr || index >= kMaxMig) return nvml::kErrorInvalidArgument;
    if (!g.mig_current || index >= g.mig_devices) return nvml::kErrorNotFound;
    *mig_device = reinterpret_cast<nvml::Device>(kMigHandleBase + static_cast<std::uintptr_t>(i) * kMaxMig + index);
    return nvml::kSuccess;
  });
}

Return nvmlEventSetCreate(nvml::EventSet* set) {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlEventSetCreate", kNoDevice); rc != nvml::kSuccess) return rc;
    if (set == nullptr) return nvml::kErrorInvalidArgument;
    const std::uintptr_t id = S().d.next_set++;
    S().d.sets[id];
    *set = reinterpret_cast<nvml::EventSet>(id);
    return nvml::kSuccess;
  });
}

Return nvmlDeviceRegisterEvents(nvml::Device device, unsigned long long event_types, nvml::EventSet set) {
  return Guarded([&] {
    Lock lock(S().mu);
    int i = -1;
    if (Return rc = EnterDevice(lock, "nvmlDeviceRegisterEvents", device, &i); rc != nvml::kSuccess) return rc;
    auto it = S().d.sets.find(reinterpret_cast<std::uintptr_t>(set));
    if (it == S().d.sets.end()) return nvml::kErrorInvalidArgument;
    it->second[i] |= event_types;
    S().cv.notify_all();  // queued events may match now
    return nvml::kSuccess;
  });
}

Return nvmlEventSetWait_v2(nvml::EventSet set, nvml::EventData* data, unsigned int timeout_ms) {
  return Guarded([&] {
    State& s = S();
    Lock lock(s.mu);
    if (Return rc = Enter(lock, "nvmlEventSetWait_v2", kNoDevice); rc != nvml::kSuccess) return rc;
    const auto id = reinterpret_cast<std::uintptr_t>(set);
    if (data == nullptr || s.d.sets.find(id) == s.d.sets.end()) return nvml::kErrorInvalidArgument;
    const unsigned long long generation = s.generation;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (s.generation != generation) return nvml::kErrorUnknown;
      if (!s.d.initialised) return nvml::kErrorUninitialized;
      auto it = s.d.sets.find(id);
      if (it == s.d.sets.end()) return nvml::kErrorInvalidArgument;  // freed meanwhile
      if (TakeEvent(it->second, data)) return nvml::kSuccess;
      if (std::chrono::steady_clock::now() >= deadline) return nvml::kErrorTimeout;
      s.cv.wait_until(lock, deadline);
    }
  });
}

Return nvmlEventSetFree(nvml::EventSet set) {
  return Guarded([&] {
    Lock lock(S().mu);
    if (Return rc = Enter(lock, "nvmlEventSetFree", kNoDevice); rc != nvml::kSuccess) return rc;
    if (S().d.sets.erase(reinterpret_cast<std::uintptr_t>(set)) == 0) return nvml::kErrorInvalidArgument;
    S().cv.notify_all();  // waits on the set return NVML_ERROR_INVALID_ARGUMENT
    return nvml::kSuccess;
  });
}

// ---- scripting ----

// Forgets everything (initialisation, failures, hangs, call counts, events, event
// sets) and sets up `devices` healthy GPUs. Calls blocked in the library return
// NVML_ERROR_UNKNOWN.
void fake_nvml_reset(unsigned devices) {
  State& s = S();
  Lock lock(s.mu);
  s.d = Data{};
  s.d.devices = devices;
  s.d.gpu.assign(devices, Gpu{});
  s.generation++;
  s.cv.notify_all();
}

// Sets `field` of GPU `device` (-1: every GPU); Apply lists the fields. An unknown
// field, link or device aborts (a test bug).
void fake_nvml_set(int device, const char* field, long long value) {
  State& s = S();
  Lock lock(s.mu);
  Gpu scratch;
  if (field == nullptr || !Apply(scratch, field, value)) {
    std::fprintf(stderr, "fake_nvml_set: unknown field '%s' or value %lld\n", field == nullptr ? "(null)" : field,
                 value);
    std::abort();
  }
  if (device == -1) {
    for (Gpu& g : s.d.gpu) Apply(g, field, value);
  } else if (device >= 0 && static_cast<size_t>(device) < s.d.gpu.size()) {
    Apply(s.d.gpu[static_cast<size_t>(device)], field, value);
  } else {
    std::fprintf(stderr, "fake_nvml_set: no device %d\n", device);
    std::abort();
  }
}

// Makes `function` return `rc` for GPU `device` (-1: every GPU; ignored by the
// functions without a device); rc 0 removes the failure.
void fake_nvml_fail(const char* function, int device, int rc) {
  if (!Find(function).has_device) device = -1;
  State& s = S();
  Lock lock(s.mu);
  if (rc == 0) {
    auto it = s.d.fail.find(function);
    if (it == s.d.fail.end()) return;
    it->second.erase(device);
    if (it->second.empty()) s.d.fail.erase(it);
  } else {
    s.d.fail[function][device] = rc;
  }
}

// hang != 0: calls to `function` block until fake_nvml_hang(function, 0), which
// releases them to proceed normally (or fake_nvml_reset: NVML_ERROR_UNKNOWN).
void fake_nvml_hang(const char* function, int hang) {
  Find(function);
  State& s = S();
  Lock lock(s.mu);
  Hang& h = s.d.hang[function];
  h.on = hang != 0;
  if (!h.on) {
    h.releases++;
    s.cv.notify_all();
  }
}

// Queues an event for GPU `device` (an index below the count fake_nvml_reset set
// up, or abort).
void fake_nvml_push_event(int device, unsigned long long event_type, unsigned long long event_data) {
  State& s = S();
  Lock lock(s.mu);
  if (device < 0 || static_cast<size_t>(device) >= s.d.gpu.size()) {
    std::fprintf(stderr, "fake_nvml_push_event: no device %d\n", device);
    std::abort();
  }
  s.d.events.push_back(Event{device, event_type, event_data});
  s.cv.notify_all();
}

// How many times `function` was entered since the last reset.
int fake_nvml_calls(const char* function) {
  Find(function);
  State& s = S();
  Lock lock(s.mu);
  auto it = s.d.calls.find(function);
  return it == s.d.calls.end() ? 0 : it->second;
}

// Changes the count nvmlDeviceGetCount_v2 reports; handles at or beyond it become
// invalid. Growing past the reset's count adds healthy GPUs; a GPU that comes back
// keeps its scripted state.
void fake_nvml_set_devices(unsigned devices) {
  State& s = S();
  Lock lock(s.mu);
  s.d.devices = devices;
  if (s.d.gpu.size() < devices) s.d.gpu.resize(devices);
  s.cv.notify_all();
}

}  // extern "C"

// The exported functions have exactly the ABI's types.
#ifndef FAKE_NVML_NO_INIT
static_assert(std::is_same_v<decltype(&nvmlInit_v2), nvml::InitFn>);
#endif
static_assert(std::is_same_v<decltype(&nvmlShutdown), nvml::ShutdownFn>);
static_assert(std::is_same_v<decltype(&nvmlErrorString), nvml::ErrorStringFn>);
static_assert(std::is_same_v<decltype(&nvmlSystemGetDriverVersion), nvml::SystemGetDriverVersionFn>);
static_assert(std::is_same_v<decltype(&nvmlSystemGetCudaDriverVersion_v2), nvml::SystemGetCudaDriverVersionFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCount_v2), nvml::DeviceGetCountFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetHandleByIndex_v2), nvml::DeviceGetHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetUUID), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetName), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetSerial), nvml::DeviceGetStringFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPciInfo_v3), nvml::DeviceGetPciInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMemoryInfo), nvml::DeviceGetMemoryInfoFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTemperature), nvml::DeviceGetTemperatureFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPowerUsage), nvml::DeviceGetPowerUsageFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetTotalEccErrors), nvml::DeviceGetTotalEccErrorsFn>);
static_assert(
    std::is_same_v<decltype(&nvmlDeviceGetRetiredPagesPendingStatus), nvml::DeviceGetRetiredPagesPendingStatusFn>);
#ifndef FAKE_NVML_NO_REMAP
static_assert(std::is_same_v<decltype(&nvmlDeviceGetRemappedRows), nvml::DeviceGetRemappedRowsFn>);
#endif
static_assert(std::is_same_v<decltype(&nvmlDeviceGetCurrentClocksThrottleReasons),
                             nvml::DeviceGetCurrentClocksThrottleReasonsFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetPcieReplayCounter), nvml::DeviceGetPcieReplayCounterFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetNvLinkState), nvml::DeviceGetNvLinkStateFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetNvLinkErrorCounter), nvml::DeviceGetNvLinkErrorCounterFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigMode), nvml::DeviceGetMigModeFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMaxMigDeviceCount), nvml::DeviceGetMaxMigDeviceCountFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceGetMigDeviceHandleByIndex), nvml::DeviceGetMigDeviceHandleByIndexFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetCreate), nvml::EventSetCreateFn>);
static_assert(std::is_same_v<decltype(&nvmlDeviceRegisterEvents), nvml::DeviceRegisterEventsFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetWait_v2), nvml::EventSetWaitFn>);
static_assert(std::is_same_v<decltype(&nvmlEventSetFree), nvml::EventSetFreeFn>);
