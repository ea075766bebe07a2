#include "noded/accel/nvml_backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "noded/accel/nvml_abi.h"

namespace clusterd::noded {

using NvmlClock = std::chrono::steady_clock;

// Runs one job at a time on its own thread; a job that does not finish in
// time keeps the thread, and every later Run fails at once until it does.
// The thread holds its state itself: a stuck job may outlive the worker, and
// the last owner of what a job captured may be the job (then the worker is
// destroyed on its own thread).
class NvmlWorker {
 public:
  NvmlWorker() : thread_([st = st_] { Loop(*st); }) {}
  ~NvmlWorker() {
    {
      std::lock_guard lock(st_->mu);
      st_->stop = true;
    }
    st_->cv.notify_all();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // it ends by itself after this job
      return;
    }
    std::unique_lock lock(st_->mu);
    // A job stuck in the library is left behind with its thread.
    const bool exited = st_->cv.wait_for(lock, std::chrono::seconds(2), [this] { return st_->exited; });
    lock.unlock();
    if (exited) {
      thread_.join();
    } else {
      thread_.detach();
    }
  }
  NvmlWorker(const NvmlWorker&) = delete;
  NvmlWorker& operator=(const NvmlWorker&) = delete;

  // True when `job` ran to its end within `timeout`.
  bool Run(std::function<void()> job, std::chrono::milliseconds timeout) {
    std::unique_lock lock(st_->mu);
    if (st_->running || st_->job || st_->stop) return false;  // the previous one is still stuck
    st_->job = std::move(job);
    const uint64_t mine = ++st_->submitted;
    st_->cv.notify_all();
    return st_->cv.wait_for(lock, timeout, [&] { return st_->finished >= mine; });
  }
  bool busy() const {
    std::lock_guard lock(st_->mu);
    return st_->running || static_cast<bool>(st_->job);
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> job;
    bool running = false, stop = false, exited = false;
    uint64_t submitted = 0, finished = 0;
  };

  static void Loop(State& s) {
    std::unique_lock lock(s.mu);
    while (true) {
      s.cv.wait(lock, [&] { return s.stop || s.job; });
      if (!s.job) break;
      std::function<void()> job;
      job.swap(s.job);
      s.running = true;
      lock.unlock();
      job();
      job = nullptr;  // its captures go without the lock held
      lock.lock();
      s.running = false;
      ++s.finished;
      s.cv.notify_all();
      if (s.stop) break;
    }
    s.exited = true;
    s.cv.notify_all();
  }

  std::shared_ptr<State> st_ = std::make_shared<State>();
  std::thread thread_;
};

struct NvmlBackend::Core {
  // Entry points (required unless marked).
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::SystemGetDriverVersionFn driver_version = nullptr;
  nvml::SystemGetCudaDriverVersionFn cuda_version = nullptr;  // optional
  nvml::DeviceGetCountFn count = nullptr;
  nvml::DeviceGetHandleByIndexFn handle = nullptr;
  nvml::DeviceGetStringFn uuid = nullptr, name = nullptr, serial = nullptr;
  nvml::DeviceGetPciInfoFn pci = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;                // optional
  nvml::DeviceGetPowerUsageFn power = nullptr;                       // optional
  nvml::DeviceGetTotalEccErrorsFn ecc = nullptr;                     // optional
  nvml::DeviceGetRetiredPagesPendingStatusFn retired = nullptr;      // optional
  nvml::DeviceGetRemappedRowsFn remapped = nullptr;                  // optional
  nvml::DeviceGetCurrentClocksThrottleReasonsFn throttle = nullptr;  // optional
  nvml::DeviceGetPcieReplayCounterFn replay = nullptr;               // optional
  nvml::DeviceGetNvLinkStateFn nvlink_state = nullptr;               // optional
  nvml::DeviceGetNvLinkErrorCounterFn nvlink_errors = nullptr;       // optional
  nvml::DeviceGetMigModeFn mig = nullptr;                            // optional
  nvml::DeviceGetMaxMigDeviceCountFn mig_count = nullptr;            // optional
  nvml::DeviceGetMigDeviceHandleByIndexFn mig_handle = nullptr;      // optional
  nvml::EventSetCreateFn event_create = nullptr;                     // optional, the four together
  nvml::DeviceRegisterEventsFn event_register = nullptr;
  nvml::EventSetWaitFn event_wait = nullptr;
  nvml::EventSetFreeFn event_free = nullptr;

  NvmlBackendOptions options;
  NvmlWorker worker;

  // Written by the worker thread while it runs a job; read by the Poll
  // thread only after Run returned true (the worker's mutex orders them).
  struct Gpu {
    DeviceInfo info;
    nvml::Device handle = nullptr;
    unsigned domain = 0, bus = 0, device = 0;
    bool have_replay = false;
    unsigned replay = 0;
    bool have_links = false;
    std::vector<unsigned> links_up;  // active at the first read
    unsigned long long link_errors = 0;
  };
  std::vector<Gpu> gpus;
  std::vector<nvml::Device> handles;  // the GPUs' handles by index, for the event thread (under mu)
  bool up = false;                    // nvmlInit succeeded and the GPUs were listed
  std::string driver, cuda;

  // Shared with the event thread and KernelLine: Xids per GPU index.
  mutable std::mutex mu;
  std::map<unsigned, std::map<unsigned, TimePoint>> xids;  // when each was last seen (XidNow)
  // Xid occurrences per GPU index since the backend started (NVML's events
  // and the kernel log's lines each count): DeviceStatus "xid_events".
  std::map<unsigned, uint64_t> xid_counts;
  std::map<std::tuple<unsigned, unsigned, unsigned>, unsigned> index_by_pci;
  std::string reason;  // why there are no GPUs
  bool unresponsive = false;
  bool stop_events = false;
  std::condition_variable events_cv;
  bool events_exited = true;
  nvml::EventSet event_set = nullptr;

  std::string Error(nvml::Return rc) const {
    const char* text = error_string ? error_string(rc) : nullptr;
    return std::to_string(rc) + (text ? std::string(" (") + text + ")" : "");
  }
  // The Xids' hold runs on options.clock (a test's FakeClock), else on the
  // monotonic clock.
  TimePoint XidNow() const {
    return options.clock != nullptr ? options.clock->Now() : MonotonicClock::Instance().Now();
  }
  // Under mu.
  void NoteXidLocked(unsigned index, unsigned xid) {
    xids[index][xid] = XidNow();
    ++xid_counts[index];
  }
  void EventLoop();
  Status List();
  DeviceStatus Read(Gpu& g);
};

namespace {

// A fixed-size buffer from the library: up to its NUL, printable ASCII only.
std::string NvmlText(const char* buf, size_t size) {
  std::string out;
  for (size_t i = 0; i < size && buf[i] != 0; ++i) {
    if (buf[i] >= ' ' && buf[i] <= '~') out.push_back(buf[i]);
  }
  return out;
}

std::string CudaText(int v) { return v <= 0 ? "" : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

std::vector<std::string> MakeNvmlPaths(const BackendOptions& options) {
  std::vector<std::string> paths = options.nvml_paths;
  if (options.nvml_search_default_paths) {
    for (const char* p : kDefaultNvmlPaths) paths.emplace_back(p);
  }
  return paths;
}

std::optional<KernelXid> ParseKernelXid(std::string_view m) {
  constexpr std::string_view kPrefix = "NVRM: Xid (PCI:";
  const size_t at = m.find(kPrefix);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = m.substr(at + kPrefix.size());
  const size_t close = rest.find("): ");
  if (close > 16) return std::nullopt;  // no "): " (npos), or an address too long
  // "0000:3b:00" (domain:bus:device); older drivers print "3b:00". A number
  // out of range or anything but hex digits is no Xid line (from_chars: no
  // overflow, unlike sscanf).
  std::vector<unsigned> parts;
  std::string_view address = rest.substr(0, close);
  bool whole = false;  // every field read
  while (!whole && parts.size() < 3) {
    const size_t colon = address.find(':');
    const std::string_view field = address.substr(0, colon);
    unsigned v = 0;
    auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), v, 16);
    if (field.empty() || ec != std::errc() || end != field.data() + field.size()) return std::nullopt;
    parts.push_back(v);
    whole = colon == std::string_view::npos;
    if (!whole) address.remove_prefix(colon + 1);
  }
  if (!whole || parts.size() < 2) return std::nullopt;
  const std::string_view number = rest.substr(close + 3);
  KernelXid x;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), x.xid, 10);
  if (ec != std::errc() || end == number.data()) return std::nullopt;
  if (parts.size() == 3) x.domain = parts[0];
  x.bus = parts[parts.size() - 2];
  x.device = parts.back();
  return x;
}

NvmlBackend::NvmlBackend(NvmlBackendOptions options) : options_(std::move(options)), core_(std::make_shared<Core>()) {
  core_->options = options_;
}

NvmlBackend::~NvmlBackend() {
  std::unique_lock lock(core_->mu);
  core_->stop_events = true;
  core_->events_cv.notify_all();
  // The event thread waits in the library for event_wait at a time.
  core_->events_cv.wait_for(lock, options_.event_wait + std::chrono::seconds(2), [&] { return core_->events_exited; });
}

Status NvmlBackend::Init() {
  next_retry_ = std::chrono::steady_clock::now() + options_.retry_interval;
  return Start();
}

// Loads the library and lists the GPUs; without a driver, remembers why.
Status NvmlBackend::Start() {
  Core& c = *core_;
  if (c.init == nullptr) {
    std::string tried;
    void* handle = nullptr;
    for (const std::string& path : options_.paths) {
      if (path.empty()) continue;
      dlerror();
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        GetLogger("accel")->info("nvml: loaded {}", path);
        break;
      }
      const char* err = dlerror();
      tried += (tried.empty() ? "" : "; ") + path + ": " + (err ? err : "unknown dlopen error");
    }
    if (handle == nullptr) {
      std::lock_guard lock(c.mu);
      c.reason = "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded (tried " + tried + ")";
      GetLogger("accel")->warn("nvml: {}", c.reason);
      return Status::Ok();
    }
    std::string missing;
    auto need = [&](auto& fn, const char* name, bool required = true) {
      void* p = dlsym(handle, name);
      if (p == nullptr && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    need(c.init, "nvmlInit_v2");
    need(c.shutdown, "nvmlShutdown");
    need(c.error_string, "nvmlErrorString");
    need(c.driver_version, "nvmlSystemGetDriverVersion");
    need(c.cuda_version, "nvmlSystemGetCudaDriverVersion_v2", false);
    need(c.count, "nvmlDeviceGetCount_v2");
    need(c.handle, "nvmlDeviceGetHandleByIndex_v2");
    need(c.uuid, "nvmlDeviceGetUUID");
    need(c.name, "nvmlDeviceGetName");
    need(c.serial, "nvmlDeviceGetSerial");
    need(c.pci, "nvmlDeviceGetPciInfo_v3");
    need(c.memory, "nvmlDeviceGetMemoryInfo");
    need(c.temperature, "nvmlDeviceGetTemperature", false);
    need(c.power, "nvmlDeviceGetPowerUsage", false);
    need(c.ecc, "nvmlDeviceGetTotalEccErrors", false);
    need(c.retired, "nvmlDeviceGetRetiredPagesPendingStatus", false);
    need(c.remapped, "nvmlDeviceGetRemappedRows", false);
    need(c.throttle, "nvmlDeviceGetCurrentClocksThrottleReasons", false);
    need(c.replay, "nvmlDeviceGetPcieReplayCounter", false);
    need(c.nvlink_state, "nvmlDeviceGetNvLinkState", false);
    need(c.nvlink_errors, "nvmlDeviceGetNvLinkErrorCounter", false);
    need(c.mig, "nvmlDeviceGetMigMode", false);
    need(c.mig_count, "nvmlDeviceGetMaxMigDeviceCount", false);
    need(c.mig_handle, "nvmlDeviceGetMigDeviceHandleByIndex", false);
    need(c.event_create, "nvmlEventSetCreate", false);
    need(c.event_register, "nvmlDeviceRegisterEvents", false);
    need(c.event_wait, "nvmlEventSetWait_v2", false);
    need(c.event_free, "nvmlEventSetFree", false);
    if (!missing.empty()) {
      c.init = nullptr;  // never dlclose'd: see AscendBackend::Unload
      return FailedPrecondition("libnvidia-ml.so.1 lacks required symbol(s): " + missing);
    }
  }
  if (c.up) return Status::Ok();
  // Initialise and list on the worker: a hung driver must not hang NodeD.
  auto result = std::make_shared<Status>(Status::Ok());
  std::shared_ptr<Core> core = core_;
  const bool done = c.worker.Run(
      [core, result] {
        if (nvml::Return rc = core->init(); rc != nvml::kSuccess) {
          *result = Unavailable("nvmlInit_v2 returned " + core->Error(rc));
          return;
        }
        *result = core->List();
      },
      options_.call_timeout);
  std::lock_guard lock(c.mu);
  if (!done) {
    c.unresponsive = true;
    c.reason = "NVML did not answer nvmlInit_v2 within " + std::to_string(options_.call_timeout.count()) + " ms";
    return Status::Ok();
  }
  c.unresponsive = false;
  if (!result->ok()) {
    c.reason = "no NVIDIA driver: " + result->message();
    GetLogger("accel")->warn("nvml: {}", c.reason);
    return Status::Ok();
  }
  c.reason.clear();
  c.up = true;
  c.index_by_pci.clear();
  c.handles.clear();
  for (const auto& g : c.gpus) c.handles.push_back(g.handle);
  for (size_t i = 0; i < c.gpus.size(); ++i) {
    c.index_by_pci[{c.gpus[i].domain, c.gpus[i].bus, c.gpus[i].device}] = static_cast<unsigned>(i);
  }
  GetLogger("accel")->info("nvml: driver {}, CUDA {}, {} GPU(s)", c.driver, c.cuda, c.gpus.size());
  if (c.event_set != nullptr && c.events_exited) {
    c.events_exited = false;
    std::thread([core] { core->EventLoop(); }).detach();
  }
  return Status::Ok();
}

// On the worker: the versions, every GPU's identity, the event set.
Status NvmlBackend::Core::List() {
  char buf[nvml::kSystemDriverVersionBufferSize] = {};
  if (driver_version(buf, sizeof(buf)) == nvml::kSuccess) driver = NvmlText(buf, sizeof(buf));
  int cuda_v = 0;
  if (cuda_version != nullptr && cuda_version(&cuda_v) == nvml::kSuccess) cuda = CudaText(cuda_v);
  unsigned n = 0;
  if (nvml::Return rc = count(&n); rc != nvml::kSuccess) {
    return Unavailable("nvmlDeviceGetCount_v2 returned " + Error(rc));
  }
  if (n > kMaxDevices) {
    return Internal("nvmlDeviceGetCount_v2 reported " + std::to_string(n) + " GPUs (at most " +
                    std::to_string(kMaxDevices) + ")");
  }
  std::vector<Gpu> listed;
  for (unsigned i = 0; i < n; ++i) {
    Gpu g;
    if (nvml::Return rc = handle(i, &g.handle); rc != nvml::kSuccess) {
      return Unavailable("nvmlDeviceGetHandleByIndex_v2(" + std::to_string(i) + ") returned " + Error(rc));
    }
    g.info.id = static_cast<int32_t>(i);
    g.info.vendor = "nvidia";
    char text[nvml::kDeviceNameBufferSize] = {};
    if (name(g.handle, text, sizeof(text)) == nvml::kSuccess) g.info.model = NvmlText(text, sizeof(text));
    char id[nvml::kDeviceUuidBufferSize] = {};
    std::string uuid_text;
    if (uuid(g.handle, id, sizeof(id)) == nvml::kSuccess) uuid_text = NvmlText(id, sizeof(id));
    // NVIDIA's device plugin names a GPU by its UUID in the kubelet's
    // pod-resources API (its default device id strategy).
    if (!uuid_text.empty()) g.info.kubelet_ids.push_back(uuid_text);
    char sn[nvml::kDeviceSerialBufferSize] = {};
    if (serial(g.handle, sn, sizeof(sn)) == nvml::kSuccess) g.info.serial = NvmlText(sn, sizeof(sn));
    nvml::PciInfo p{};
    std::string bus_id;
    if (pci(g.handle, &p) == nvml::kSuccess) {
      bus_id = NvmlText(p.bus_id, sizeof(p.bus_id));
      g.domain = p.domain;
      g.bus = p.bus;
      g.device = p.device;
    }
    nvml::Memory mem{};
    std::string memory_text;
    if (memory(g.handle, &mem) == nvml::kSuccess) memory_text = std::to_string(mem.total >> 20) + " MiB";
    unsigned mig_current = 0, mig_pending = 0;
    const bool mig_on = mig != nullptr && mig(g.handle, &mig_current, &mig_pending) == nvml::kSuccess && mig_current;
    // Its MIG devices' UUIDs: the ids NVIDIA's device plugin gives MIG slices.
    unsigned mig_max = 0;
    if (mig_on && mig_count != nullptr && mig_handle != nullptr && mig_count(g.handle, &mig_max) == nvml::kSuccess) {
      for (unsigned k = 0; k < std::min(mig_max, 64u); ++k) {
        nvml::Device m = nullptr;
        char mig_id[nvml::kDeviceUuidBufferSize] = {};
        if (mig_handle(g.handle, k, &m) == nvml::kSuccess && m != nullptr &&
            uuid(m, mig_id, sizeof(mig_id)) == nvml::kSuccess) {
          g.info.kubelet_ids.push_back(NvmlText(mig_id, sizeof(mig_id)));
        }
      }
    }
    g.info.location = "PCI " + bus_id + (uuid_text.empty() ? "" : ", " + uuid_text) +
                      (memory_text.empty() ? "" : ", " + memory_text) + (mig_on ? ", MIG on" : "");
    listed.push_back(std::move(g));
  }
  // Xid and double-bit ECC events, where the GPUs take them.
  if (event_create != nullptr && event_register != nullptr && event_wait != nullptr && event_free != nullptr &&
      event_set == nullptr && !listed.empty()) {
    nvml::EventSet set = nullptr;
    if (event_create(&set) == nvml::kSuccess && set != nullptr) {
      size_t registered = 0;
      for (const Gpu& g : listed) {
        const nvml::Return rc =
            event_register(g.handle, nvml::kEventTypeXidCriticalError | nvml::kEventTypeDoubleBitEccError, set);
        if (rc == nvml::kSuccess) {
          ++registered;
        } else {
          GetLogger("accel")->warn("nvml: GPU {}: no Xid events ({}): the kernel log's are still read", g.info.id,
                                   Error(rc));
        }
      }
      std::lock_guard lock(mu);
      event_set = set;
      if (registered == 0) GetLogger("accel")->warn("nvml: no GPU takes event registration");
    }
  }
  gpus = std::move(listed);
  return Status::Ok();
}

// The event thread: Xids as they come, a second at most per wait.
void NvmlBackend::Core::EventLoop() {
  while (true) {
    {
      std::lock_guard lock(mu);
      if (stop_events) break;
    }
    nvml::EventData data{};
    const nvml::Return rc = event_wait(event_set, &data, static_cast<unsigned>(options.event_wait.count()));
    if (rc == nvml::kSuccess) {
      if ((data.event_type & nvml::kEventTypeXidCriticalError) != 0 && data.event_data != 0 &&
          data.event_data < 1'000'000) {
        std::lock_guard lock(mu);
        for (size_t i = 0; i < handles.size(); ++i) {
          if (handles[i] == data.device) {
            NoteXidLocked(static_cast<unsigned>(i), static_cast<unsigned>(data.event_data));
          }
        }
      }
      continue;
    }
    if (rc == nvml::kErrorTimeout) continue;
    // Anything else (a lost GPU, an uninitialised library): wait a second
    // before trying again, and stop when asked.
    std::unique_lock lock(mu);
    if (events_cv.wait_for(lock, options.event_wait, [&] { return stop_events; })) break;
  }
  std::lock_guard lock(mu);
  events_exited = true;
  events_cv.notify_all();
}

StatusOr<std::vector<DeviceInfo>> NvmlBackend::Devices() {
  if (!core_->up) return std::vector<DeviceInfo>{};
  std::vector<DeviceInfo> out;
  for (const auto& g : core_->gpus) out.push_back(g.info);
  return out;
}

// On the worker: one GPU's state.
DeviceStatus NvmlBackend::Core::Read(Gpu& g) {
  DeviceStatus s;
  s.id = g.info.id;
  std::set<std::string> codes;
  // A lost GPU or one that needs a reset is what the GPU is, not a failed
  // read: its code, not a read_error (NodeD keeps a device's faults as they
  // were while it cannot be read, so the code would never be raised).
  auto failed = [&](const char* fn, nvml::Return rc) {
    if (rc == nvml::kSuccess || rc == nvml::kErrorNotSupported || rc == nvml::kErrorNoPermission) return false;
    if (rc == nvml::kErrorGpuIsLost) {
      codes.insert("GPU_LOST");
    } else if (rc == nvml::kErrorResetRequired) {
      codes.insert("GPU_RESET_REQUIRED");
    } else {
      s.read_error += (s.read_error.empty() ? "" : "; ") + std::string(fn) + " returned " + Error(rc);
    }
    return true;
  };
  if (temperature != nullptr) {
    unsigned temp = 0;
    const nvml::Return rc = temperature(g.handle, nvml::kTemperatureGpu, &temp);
    if (!failed("nvmlDeviceGetTemperature", rc) && rc == nvml::kSuccess) s.temperature_c = temp;
  }
  if (power != nullptr) {
    unsigned mw = 0;
    const nvml::Return rc = power(g.handle, &mw);
    if (!failed("nvmlDeviceGetPowerUsage", rc) && rc == nvml::kSuccess) s.power_w = mw / 1000.0;
  }
  if (ecc != nullptr) {
    unsigned long long volatile_dbe = 0, aggregate_dbe = 0, volatile_sbe = 0;
    nvml::Return rc = ecc(g.handle, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &volatile_dbe);
    if (!failed("nvmlDeviceGetTotalEccErrors", rc) && rc == nvml::kSuccess) {
      s.error_counters["ecc_uncorrected"] = volatile_dbe;
      if (volatile_dbe > 0) codes.insert("GPU_ECC_DBE_VOLATILE");
    }
    // Corrected errors raise no code; their growth is a validation's concern.
    rc = ecc(g.handle, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &volatile_sbe);
    if (!failed("nvmlDeviceGetTotalEccErrors", rc) && rc == nvml::kSuccess) {
      s.error_counters["ecc_corrected"] = volatile_sbe;
    }
    rc = ecc(g.handle, nvml::kMemoryErrorUncorrected, nvml::kAggregateEcc, &aggregate_dbe);
    if (!failed("nvmlDeviceGetTotalEccErrors", rc) && rc == nvml::kSuccess && options.ecc_aggregate_threshold > 0 &&
        aggregate_dbe >= options.ecc_aggregate_threshold) {
      codes.insert("GPU_ECC_DBE_AGGREGATE_HIGH");
    }
  }
  if (retired != nullptr) {
    int pending = 0;
    nvml::Return rc = retired(g.handle, &pending);
    if (!failed("nvmlDeviceGetRetiredPagesPendingStatus", rc) && rc == nvml::kSuccess && pending) {
      codes.insert("GPU_RETIRED_PAGES_PENDING");
    }
  }
  if (remapped != nullptr) {
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    nvml::Return rc = remapped(g.handle, &corr, &unc, &pending, &failure);
    if (!failed("nvmlDeviceGetRemappedRows", rc) && rc == nvml::kSuccess) {
      if (pending) codes.insert("GPU_ROW_REMAP_PENDING");
      if (failure) codes.insert("GPU_ROW_REMAP_FAILURE");
    }
  }
  if (throttle != nullptr) {
    unsigned long long reasons = 0;
    nvml::Return rc = throttle(g.handle, &reasons);
    if (!failed("nvmlDeviceGetCurrentClocksThrottleReasons", rc) && rc == nvml::kSuccess) {
      if (reasons & (nvml::kThrottleHwThermalSlowdown | nvml::kThrottleSwThermalSlowdown)) {
        codes.insert("GPU_THERMAL_SLOWDOWN");
      }
      if (reasons & nvml::kThrottleHwPowerBrakeSlowdown) codes.insert("GPU_POWER_BRAKE_SLOWDOWN");
      if ((reasons & nvml::kThrottleHwSlowdown) &&
          !(reasons & (nvml::kThrottleHwThermalSlowdown | nvml::kThrottleHwPowerBrakeSlowdown))) {
        codes.insert("GPU_HW_SLOWDOWN");
      }
    }
  }
  if (replay != nullptr) {
    unsigned count = 0;
    nvml::Return rc = replay(g.handle, &count);
    if (!failed("nvmlDeviceGetPcieReplayCounter", rc) && rc == nvml::kSuccess) {
      if (g.have_replay && options.pcie_replay_threshold > 0 && count >= g.replay &&
          count - g.replay >= options.pcie_replay_threshold) {
        codes.insert("GPU_PCIE_REPLAY_HIGH");
      }
      g.have_replay = true;
      g.replay = count;
    }
  }
  if (nvlink_state != nullptr) {
    std::vector<unsigned> up;
    unsigned long long errors = 0;
    bool supported = false;
    for (unsigned link = 0; link < nvml::kNvLinkMaxLinks; ++link) {
      int active = 0;
      const nvml::Return rc = nvlink_state(g.handle, link, &active);
      if (rc != nvml::kSuccess) continue;  // links a GPU lacks answer NOT_SUPPORTED or INVALID_ARGUMENT
      supported = true;
      if (active) up.push_back(link);
      if (nvlink_errors != nullptr) {
        for (int counter : {nvml::kNvLinkErrorDlReplay, nvml::kNvLinkErrorDlRecovery, nvml::kNvLinkErrorDlCrcFlit}) {
          unsigned long long v = 0;
          if (nvlink_errors(g.handle, link, counter, &v) == nvml::kSuccess) errors += v;
        }
      }
    }
    if (supported) {
      if (!g.have_links) {
        g.links_up = up;  // the links that should stay up
      } else {
        for (unsigned link : g.links_up) {
          if (!std::binary_search(up.begin(), up.end(), link)) codes.insert("GPU_NVLINK_DOWN");
        }
        if (options.nvlink_error_threshold > 0 && errors >= g.link_errors &&
            errors - g.link_errors >= options.nvlink_error_threshold) {
          codes.insert("GPU_NVLINK_ERRORS");
        }
      }
      g.have_links = true;
      g.link_errors = errors;
    }
  }
  {
    std::lock_guard lock(mu);
    auto it = xids.find(static_cast<unsigned>(g.info.id));
    if (it != xids.end()) {
      const TimePoint now = XidNow();
      std::erase_if(it->second, [&](const auto& x) { return now - x.second >= options.xid_hold; });
      for (const auto& [xid, when] : it->second) codes.insert("XID_" + std::to_string(xid));
    }
    auto count = xid_counts.find(static_cast<unsigned>(g.info.id));
    s.error_counters["xid_events"] = count == xid_counts.end() ? 0 : count->second;
  }
  s.error_codes.assign(codes.begin(), codes.end());
  s.health_raw = !s.read_error.empty() && codes.empty() ? kHealthUnknown : codes.empty() ? 0 : 2;
  s.healthy = s.read_error.empty() && codes.empty();
  return s;
}

StatusOr<std::vector<DeviceStatus>> NvmlBackend::Poll() {
  Core& c = *core_;
  if (!c.up) {
    // Without a driver (or before it answered): try again now and then.
    if (!c.worker.busy() && NvmlClock::now() >= next_retry_) {
      next_retry_ = NvmlClock::now() + options_.retry_interval;
      CLUSTERD_RETURN_IF_ERROR(Start());
    }
    if (!c.up) return std::vector<DeviceStatus>{};
  }
  auto result = std::make_shared<std::vector<DeviceStatus>>();
  std::shared_ptr<Core> core = core_;
  const bool done = c.worker.Run(
      [core, result] {
        for (auto& g : core->gpus) result->push_back(core->Read(g));
      },
      options_.call_timeout);
  {
    std::lock_guard lock(c.mu);
    if (done != !c.unresponsive) {
      if (done) {
        GetLogger("accel")->info("nvml: answering again");
      } else {
        GetLogger("accel")->error("nvml: a call did not return within {} ms: GPUs unreadable until it does",
                                  options_.call_timeout.count());
      }
    }
    c.unresponsive = !done;
  }
  if (done) return std::move(*result);
  std::vector<DeviceStatus> out;
  for (const auto& g : c.gpus) {
    DeviceStatus s;
    s.id = g.info.id;
    s.read_error = "NVML did not answer within " + std::to_string(options_.call_timeout.count()) + " ms";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<std::string> NvmlBackend::NodeFaults() const {
  std::lock_guard lock(core_->mu);
  std::vector<std::string> out;
  if (!core_->reason.empty() && !core_->unresponsive) out.push_back("NVML_DRIVER_NOT_LOADED");
  if (core_->unresponsive) out.push_back("NVML_UNRESPONSIVE");
  return out;
}

void NvmlBackend::KernelLine(std::string_view message) {
  auto x = ParseKernelXid(message);
  if (!x || x->xid == 0 || x->xid >= 1'000'000) return;
  std::lock_guard lock(core_->mu);
  auto it = core_->index_by_pci.find({x->domain, x->bus, x->device});
  if (it == core_->index_by_pci.end()) return;  // not one of ours, or NVML not up
  core_->NoteXidLocked(it->second, x->xid);
}

std::vector<std::pair<std::string, std::string>> NvmlBackend::ChainVersions() const {
  std::vector<std::pair<std::string, std::string>> out;
  if (!core_->up) return out;
  if (!core_->driver.empty()) out.emplace_back("driver", core_->driver);
  if (!core_->cuda.empty()) out.emplace_back("cuda", core_->cuda);
  return out;
}

std::string NvmlBackend::driver_version() const { return core_->up ? core_->driver : ""; }
std::string NvmlBackend::cuda_version() const { return core_->up ? core_->cuda : ""; }
std::string NvmlBackend::unavailable_reason() const {
  std::lock_guard lock(core_->mu);
  return core_->reason;
}

}  // namespace clusterd::noded
