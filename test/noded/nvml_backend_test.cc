// The nvml backend against fake libnvidia-ml.so.1 libraries built by the tests
// (test/noded/fake_nvml): the real dlopen/dlsym path, scripted GPUs, Xid
// events, error codes on every entry point, a hanging call.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "noded/accel/backend.h"
#include "noded/accel/nvml_backend.h"
#include "noded/collectors/kmsg.h"
#include "backend_validation.h"
#include "test/support/wait.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using clusterd::testing::WaitFor;

// The fake's scripting functions, on the handle the backend gets too (one
// shared object per path). Never dlclose'd: a backend's threads may still be
// on their way out of it.
class FakeNvml {
 public:
  explicit FakeNvml(const char* path) : lib_(path, /*close_at_end=*/false) {
    if (!lib_.loaded()) return;
    reset_ = lib_.Sym<decltype(reset_)>("fake_nvml_reset");
    set_ = lib_.Sym<decltype(set_)>("fake_nvml_set");
    fail_ = lib_.Sym<decltype(fail_)>("fake_nvml_fail");
    hang_ = lib_.Sym<decltype(hang_)>("fake_nvml_hang");
    push_ = lib_.Sym<decltype(push_)>("fake_nvml_push_event");
    calls_ = lib_.Sym<decltype(calls_)>("fake_nvml_calls");
  }
  bool loaded() const { return lib_.loaded() && calls_ != nullptr; }
  void Reset(unsigned gpus) { reset_(gpus); }
  void Set(int gpu, const char* field, long long value) { set_(gpu, field, value); }
  void Fail(const char* fn, int rc, int gpu = -1) { fail_(fn, gpu, rc); }
  void Hang(const char* fn, bool hang) { hang_(fn, hang ? 1 : 0); }
  void Xid(int gpu, unsigned long long xid) { push_(gpu, 0x8, xid); }
  int Calls(const char* fn) { return calls_(fn); }

 private:
  testing::FakeLibrary lib_;
  void (*reset_)(unsigned) = nullptr;
  void (*set_)(int, const char*, long long) = nullptr;
  void (*fail_)(const char*, int, int) = nullptr;
  void (*hang_)(const char*, int) = nullptr;
  void (*push_)(int, unsigned long long, unsigned long long) = nullptr;
  int (*calls_)(const char*) = nullptr;
};

NvmlBackendOptions Options(const char* path) {
  NvmlBackendOptions o;
  o.paths = {"/nonexistent/libnvidia-ml.so.1", path};
  o.call_timeout = std::chrono::milliseconds(300);
  o.retry_interval = std::chrono::milliseconds(0);
  o.event_wait = std::chrono::milliseconds(50);
  return o;
}

// The codes of GPU `id` in one Poll.
std::vector<std::string> CodesOf(NvmlBackend& b, int id) {
  auto statuses = b.Poll();
  EXPECT_TRUE(statuses.ok()) << statuses.status().ToString();
  if (!statuses.ok()) return {};
  for (const auto& s : *statuses) {
    if (s.id == id) return s.error_codes;
  }
  ADD_FAILURE() << "no GPU " << id;
  return {};
}

bool Has(const std::vector<std::string>& codes, const std::string& code) {
  return std::find(codes.begin(), codes.end(), code) != codes.end();
}

class NvmlBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.loaded());
    fake_.Reset(4);
  }
  void TearDown() override { fake_.Reset(0); }
  FakeNvml fake_{FAKE_NVML_PATH};
};

TEST(NvmlBackendLoad, NoDriverMeansNoGpusAndANodeFaultNotAnError) {
  NvmlBackendOptions o;
  o.paths = {"/nonexistent/libnvidia-ml.so.1"};
  NvmlBackend b(o);
  ASSERT_TRUE(b.Init().ok());
  EXPECT_TRUE(b.Devices()->empty());
  EXPECT_TRUE(b.Poll()->empty());
  EXPECT_EQ(b.NodeFaults(), std::vector<std::string>{"NVML_DRIVER_NOT_LOADED"});
  EXPECT_NE(b.unavailable_reason().find("no NVIDIA driver"), std::string::npos) << b.unavailable_reason();
  EXPECT_TRUE(b.ChainVersions().empty());
}

TEST(NvmlBackendLoad, ALibraryWithoutARequiredEntryPointIsRefused) {
  NvmlBackend b(Options(FAKE_NVML_NO_INIT_PATH));
  Status st = b.Init();
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("nvmlInit_v2"), std::string::npos) << st.message();
}

TEST(NvmlBackendLoad, MakeBackendNamesNvml) {
  BackendOptions o;
  o.kind = "nvml";
  o.nvml_paths = {"/nonexistent/libnvidia-ml.so.1"};
  o.nvml_search_default_paths = false;
  auto b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name(), "nvml");
  o.nvml_call_timeout = std::chrono::milliseconds(0);
  EXPECT_FALSE(MakeBackend(o).ok());
  o.kind = "cuda";
  EXPECT_NE(MakeBackend(o).status().message().find("nvml"), std::string::npos);
}

TEST_F(NvmlBackendTest, IdentityVersionsAndAHealthyPoll) {
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  EXPECT_TRUE(b.NodeFaults().empty());
  auto devices = b.Devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  const DeviceInfo& d = (*devices)[3];
  EXPECT_EQ(d.id, 3);
  EXPECT_EQ(d.vendor, "nvidia");
  EXPECT_EQ(d.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(d.serial, "16543210000003");
  EXPECT_NE(d.location.find("PCI 00000000:1B:00.0"), std::string::npos) << d.location;
  EXPECT_NE(d.location.find("GPU-00000000-0000-0000-0000-000000000003"), std::string::npos) << d.location;
  EXPECT_NE(d.location.find("81920 MiB"), std::string::npos) << d.location;
  EXPECT_EQ(b.ChainVersions(),
            (std::vector<std::pair<std::string, std::string>>{{"driver", "550.54.15"}, {"cuda", "12.4"}}));
  auto statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 4u);
  for (const auto& s : *statuses) {
    EXPECT_TRUE(s.healthy) << s.id << ": " << s.read_error;
    EXPECT_TRUE(s.error_codes.empty());
    EXPECT_EQ(s.health_raw, 0u);
    EXPECT_EQ(s.temperature_c, 40.0);
    EXPECT_EQ(s.power_w, 120.0);
  }
}

// The names NVIDIA's device plugin gives the kubelet for each GPU: its UUID,
// and in MIG mode its MIG devices' UUIDs (those made only).
TEST_F(NvmlBackendTest, KubeletIdsAreTheGpuUuidAndItsMigDevicesUuids) {
  fake_.Set(1, "mig_current", 1);
  fake_.Set(1, "mig_devices", 2);
  fake_.Set(2, "mig_devices", 3);  // MIG mode off: none shown
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  auto devices = b.Devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 4u);
  EXPECT_EQ((*devices)[0].kubelet_ids, std::vector<std::string>{"GPU-00000000-0000-0000-0000-000000000000"});
  EXPECT_EQ((*devices)[1].kubelet_ids, (std::vector<std::string>{"GPU-00000000-0000-0000-0000-000000000001",
                                                                 "MIG-00000000-0000-0000-0000-0000000000010",
                                                                 "MIG-00000000-0000-0000-0000-0000000000011"}));
  EXPECT_EQ((*devices)[2].kubelet_ids.size(), 1u);
  EXPECT_NE((*devices)[1].location.find("MIG on"), std::string::npos);
}

// Each condition on its own GPU, raised while it lasts and gone after.
TEST_F(NvmlBackendTest, HealthConditionsBecomeCodesOnTheirGpu) {
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  ASSERT_TRUE(b.Poll().ok());  // the baselines: PCIe replays, NVLinks up, their errors
  fake_.Set(0, "ecc_volatile_uncorrected", 1);
  fake_.Set(1, "retired_pending", 1);
  fake_.Set(2, "remap_pending", 1);
  fake_.Set(2, "remap_failure", 1);
  fake_.Set(3, "throttle", 0x40 | 0x80);  // HW thermal, power brake
  EXPECT_EQ(CodesOf(b, 0), std::vector<std::string>{"GPU_ECC_DBE_VOLATILE"});
  EXPECT_EQ(CodesOf(b, 1), std::vector<std::string>{"GPU_RETIRED_PAGES_PENDING"});
  EXPECT_EQ(CodesOf(b, 2), (std::vector<std::string>{"GPU_ROW_REMAP_FAILURE", "GPU_ROW_REMAP_PENDING"}));
  EXPECT_EQ(CodesOf(b, 3), (std::vector<std::string>{"GPU_POWER_BRAKE_SLOWDOWN", "GPU_THERMAL_SLOWDOWN"}));
  fake_.Set(-1, "ecc_volatile_uncorrected", 0);
  fake_.Set(-1, "retired_pending", 0);
  fake_.Set(-1, "remap_pending", 0);
  fake_.Set(-1, "remap_failure", 0);
  fake_.Set(-1, "throttle", 0x8);  // HW slowdown alone
  EXPECT_EQ(CodesOf(b, 0), std::vector<std::string>{"GPU_HW_SLOWDOWN"});
  fake_.Set(-1, "throttle", 0);
  EXPECT_TRUE(CodesOf(b, 2).empty());
  // Lifetime uncorrected errors at the threshold (10).
  fake_.Set(1, "ecc_aggregate_uncorrected", 9);
  EXPECT_TRUE(CodesOf(b, 1).empty());
  fake_.Set(1, "ecc_aggregate_uncorrected", 10);
  EXPECT_EQ(CodesOf(b, 1), std::vector<std::string>{"GPU_ECC_DBE_AGGREGATE_HIGH"});
  fake_.Set(1, "ecc_aggregate_uncorrected", 0);
  // Counters judged by their growth between two polls.
  fake_.Set(2, "pcie_replay", 150);
  EXPECT_EQ(CodesOf(b, 2), std::vector<std::string>{"GPU_PCIE_REPLAY_HIGH"});
  EXPECT_TRUE(CodesOf(b, 2).empty()) << "no growth since";
  fake_.Set(3, "nvlink_crc", 10);  // 18 links x 10
  EXPECT_EQ(CodesOf(b, 3), std::vector<std::string>{"GPU_NVLINK_ERRORS"});
  EXPECT_TRUE(CodesOf(b, 3).empty());
  fake_.Set(0, "nvlink_down", 5);
  EXPECT_EQ(CodesOf(b, 0), std::vector<std::string>{"GPU_NVLINK_DOWN"});
  fake_.Set(0, "nvlink_up", 5);
  EXPECT_TRUE(CodesOf(b, 0).empty());
}

// Xids from NVML's events and from the kernel log are one code per GPU;
// each stays for the hold after its last occurrence.
TEST_F(NvmlBackendTest, XidEventsAndKernelLinesAreOneCodeHeldForAWhile) {
  NvmlBackendOptions o = Options(FAKE_NVML_PATH);
  o.xid_hold = std::chrono::seconds(1);
  FakeClock clock;  // the hold is stepped, not waited out
  o.clock = &clock;
  NvmlBackend b(o);
  ASSERT_TRUE(b.Init().ok());
  fake_.Xid(3, 79);
  ASSERT_TRUE(WaitFor([&] { return Has(CodesOf(b, 3), "XID_79"); }));
  EXPECT_TRUE(CodesOf(b, 2).empty());
  // The same Xid in the kernel log (GPU 3 is on bus 0x1b): still one code.
  b.KernelLine("NVRM: Xid (PCI:0000:1b:00): 79, pid=1234, name=python, GPU has fallen off the bus.");
  EXPECT_EQ(CodesOf(b, 3), std::vector<std::string>{"XID_79"});
  // Another GPU's Xid from the kernel log only; a GPU that is not ours; junk.
  b.KernelLine("NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error");
  b.KernelLine("NVRM: Xid (PCI:0000:99:00): 13, Graphics Exception");
  b.KernelLine("NVRM: Xid (PCI:zz): 13");
  EXPECT_EQ(CodesOf(b, 0), std::vector<std::string>{"XID_48"});
  // Still there just before the hold has passed since the last one; gone
  // once it has.
  clock.Advance(std::chrono::milliseconds(999));
  EXPECT_EQ(CodesOf(b, 0), std::vector<std::string>{"XID_48"});
  EXPECT_EQ(CodesOf(b, 3), std::vector<std::string>{"XID_79"});
  clock.Advance(std::chrono::milliseconds(1));
  EXPECT_TRUE(CodesOf(b, 0).empty());
  EXPECT_TRUE(CodesOf(b, 3).empty());
}

TEST(NvmlKernelXid, ParsesBothBusFormsAndNothingElse) {
  auto x = ParseKernelXid("[ 1234.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.");
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->domain, 0u);
  EXPECT_EQ(x->bus, 0x3bu);
  EXPECT_EQ(x->device, 0u);
  EXPECT_EQ(x->xid, 79u);
  x = ParseKernelXid("NVRM: Xid (PCI:3b:00): 31, pid=77, Ch 00000010, intr 10000000");
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->bus, 0x3bu);
  EXPECT_EQ(x->xid, 31u);
  EXPECT_FALSE(ParseKernelXid("NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:0000:3b:00): , pid=1").has_value());
  // Hostile lines: numbers out of range, too many fields, not hex, huge.
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:ffffffffffffff:3b:00): 79").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:0000:3b:00): 99999999999999999999").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:1:2:3:4): 79").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:zz:00): 79").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:): 79").has_value());
  EXPECT_FALSE(ParseKernelXid("NVRM: Xid (PCI:" + std::string(100000, '0') + "): 79").has_value());
  // The kernel collector's default patterns pick the line out for the backend.
  auto matcher = KmsgMatcher::Create(DefaultKernelPatterns());
  ASSERT_TRUE(matcher.ok());
  const std::string* code = matcher->Match("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.");
  ASSERT_NE(code, nullptr);
  EXPECT_EQ(*code, kKernelGpuXidCode);
}

// A failing call is the GPU's read_error (never silently healthy); a lost GPU
// or one needing a reset is a code (not a read error); an unsupported query
// is skipped.
TEST_F(NvmlBackendTest, ErrorCodesOnEveryEntryPoint) {
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  fake_.Fail("nvmlDeviceGetTotalEccErrors", 15, 1);  // GPU is lost
  fake_.Fail("nvmlDeviceGetRemappedRows", 16, 2);    // reset required
  fake_.Fail("nvmlDeviceGetPcieReplayCounter", 3);   // not supported
  auto statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  // A lost GPU is its code, not an unreadable GPU: NodeD raises what a
  // complete reading says.
  EXPECT_EQ((*statuses)[1].error_codes, std::vector<std::string>{"GPU_LOST"});
  EXPECT_TRUE((*statuses)[1].read_error.empty()) << (*statuses)[1].read_error;
  EXPECT_FALSE((*statuses)[1].healthy);
  EXPECT_EQ((*statuses)[2].error_codes, std::vector<std::string>{"GPU_RESET_REQUIRED"});
  EXPECT_TRUE((*statuses)[0].healthy) << (*statuses)[0].read_error;
  // Every per-GPU entry point failing: unreadable, unknown health, no crash.
  fake_.Fail("nvmlDeviceGetTotalEccErrors", 0, 1);
  fake_.Fail("nvmlDeviceGetRemappedRows", 0, 2);
  for (const char* fn : {"nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEccErrors",
                         "nvmlDeviceGetRetiredPagesPendingStatus", "nvmlDeviceGetRemappedRows",
                         "nvmlDeviceGetCurrentClocksThrottleReasons", "nvmlDeviceGetPcieReplayCounter",
                         "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNvLinkErrorCounter"}) {
    fake_.Fail(fn, 999);
  }
  statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  for (const auto& s : *statuses) {
    EXPECT_FALSE(s.healthy);
    EXPECT_FALSE(s.read_error.empty());
    EXPECT_EQ(s.health_raw, kHealthUnknown);
  }
  // Init's own failures: no GPU list is no GPUs, reported, retried.
  NvmlBackend late(Options(FAKE_NVML_PATH));
  fake_.Fail("nvmlDeviceGetCount_v2", 999);
  ASSERT_TRUE(late.Init().ok());
  EXPECT_EQ(late.NodeFaults(), std::vector<std::string>{"NVML_DRIVER_NOT_LOADED"});
  fake_.Fail("nvmlDeviceGetCount_v2", 0);
  ASSERT_TRUE(late.Poll().ok());
  EXPECT_TRUE(late.NodeFaults().empty());
  EXPECT_EQ(late.Devices()->size(), 4u);
}

// The driver not loaded (a library without its kernel module): no GPUs and
// the node fault, until a later poll finds it loaded.
TEST_F(NvmlBackendTest, DriverNotLoadedIsRetried) {
  fake_.Fail("nvmlInit_v2", 9);
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  EXPECT_EQ(b.NodeFaults(), std::vector<std::string>{"NVML_DRIVER_NOT_LOADED"});
  EXPECT_NE(b.unavailable_reason().find("nvmlInit_v2 returned 9"), std::string::npos) << b.unavailable_reason();
  EXPECT_TRUE(b.Poll()->empty());
  fake_.Fail("nvmlInit_v2", 0);
  auto statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  EXPECT_EQ(statuses->size(), 4u);
  EXPECT_TRUE(b.NodeFaults().empty());
}

// A hung NVML call: the poll returns after call_timeout with every GPU
// unreadable and NVML_UNRESPONSIVE; no further call is made while it hangs;
// once it returns, the GPUs read again and the fault clears.
TEST_F(NvmlBackendTest, AHungCallIsCutOffByTheWatchdog) {
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  fake_.Hang("nvmlDeviceGetTemperature", true);
  auto statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 4u);
  for (const auto& s : *statuses) {
    EXPECT_FALSE(s.healthy);
    EXPECT_NE(s.read_error.find("NVML did not answer"), std::string::npos) << s.read_error;
  }
  EXPECT_EQ(b.NodeFaults(), std::vector<std::string>{"NVML_UNRESPONSIVE"});
  const int temperature_calls = fake_.Calls("nvmlDeviceGetTemperature");
  const int ecc_calls = fake_.Calls("nvmlDeviceGetTotalEccErrors");
  statuses = b.Poll();  // at once: the worker is still stuck
  ASSERT_TRUE(statuses.ok());
  EXPECT_FALSE((*statuses)[0].healthy);
  EXPECT_EQ(fake_.Calls("nvmlDeviceGetTemperature"), temperature_calls);
  EXPECT_EQ(fake_.Calls("nvmlDeviceGetTotalEccErrors"), ecc_calls);
  fake_.Hang("nvmlDeviceGetTemperature", false);
  ASSERT_TRUE(WaitFor([&] {
    auto s = b.Poll();
    return s.ok() && !s->empty() && (*s)[0].healthy && b.NodeFaults().empty();
  }));
}

TEST_F(NvmlBackendTest, AnOptionalEntryPointMissingIsSkipped) {
  FakeNvml no_remap(FAKE_NVML_NO_REMAP_PATH);
  ASSERT_TRUE(no_remap.loaded());
  no_remap.Reset(2);
  no_remap.Set(0, "remap_pending", 1);
  NvmlBackend b(Options(FAKE_NVML_NO_REMAP_PATH));
  ASSERT_TRUE(b.Init().ok());
  auto statuses = b.Poll();
  ASSERT_TRUE(statuses.ok());
  ASSERT_EQ(statuses->size(), 2u);
  EXPECT_TRUE((*statuses)[0].healthy) << (*statuses)[0].read_error;
  no_remap.Reset(0);
}

// The validation's built-in check reads the backend: over its window, a GPU
// whose corrected or uncorrected ECC count grows, or that takes an Xid,
// fails it (the counter or the code named as its evidence); counts that hold
// still pass it, and are kept as its evidence.
TEST_F(NvmlBackendTest, AValidationFailsOnEccGrowthOrAnXidWithinItsWindow) {
  NvmlBackend b(Options(FAKE_NVML_PATH));
  ASSERT_TRUE(b.Init().ok());
  fake_.Set(1, "ecc_volatile_corrected", 7);  // before the window: the baseline, not a failure
  v1::ValidationResult r = testing::ValidateOverBackend(b, {1, 2}, std::chrono::milliseconds(30), nullptr);
  ASSERT_EQ(r.checks_size(), 1);
  EXPECT_TRUE(r.passed()) << r.checks(0).message();
  EXPECT_NE(r.checks(0).evidence().find("device 1 ecc_corrected 7"), std::string::npos) << r.checks(0).evidence();
  EXPECT_NE(r.checks(0).evidence().find("device 2 xid_events 0"), std::string::npos) << r.checks(0).evidence();

  // Corrected errors raise no code: only the count says it.
  r = testing::ValidateOverBackend(b, {1, 2}, testing::kUntilItFails, [&](int n) {
    if (n == 3) fake_.Set(1, "ecc_volatile_corrected", 9);
  });
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("device 1 ecc_corrected rose from 7 to 9"), std::string::npos)
      << r.checks(0).message();

  // An Xid, from NVML's events: counted and its code appears.
  r = testing::ValidateOverBackend(b, {2, 3}, testing::kUntilItFails, [&](int n) {
    if (n == 2) fake_.Xid(3, 31);
  });
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("device 3"), std::string::npos) << r.checks(0).message();
  EXPECT_NE(r.checks(0).evidence().find("XID_31"), std::string::npos) << r.checks(0).evidence();
  EXPECT_NE(r.checks(0).evidence().find("device 3 xid_events rose from 0 to 1"), std::string::npos)
      << r.checks(0).evidence();
}

}  // namespace
}  // namespace clusterd::noded
