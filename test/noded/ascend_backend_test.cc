// The ascend backend against fake libdcmi.so libraries built by the tests
// (test/noded/fake_dcmi): the real dlopen/dlsym path, with scripted state.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "noded/accel/ascend_backend.h"
#include "noded/accel/backend.h"
#include "backend_validation.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

// The fake's scripting functions, resolved on the same handle the backend gets
// (dlopen of one path returns one shared object, so they share its state).
class FakeDcmi {
 public:
  explicit FakeDcmi(const char* path) : lib_(path, /*close_at_end=*/true) {
    if (!lib_.loaded()) return;
    reset_ = lib_.Sym<decltype(reset_)>("fake_dcmi_reset");
    set_health_ = lib_.Sym<decltype(set_health_)>("fake_dcmi_set_health");
    raise_ = lib_.Sym<decltype(raise_)>("fake_dcmi_raise");
    clear_ = lib_.Sym<decltype(clear_)>("fake_dcmi_clear");
    set_sensors_ = lib_.Sym<decltype(set_sensors_)>("fake_dcmi_set_sensors");
    set_chip_name_ = lib_.Sym<decltype(set_chip_name_)>("fake_dcmi_set_chip_name");
    set_ecc_ = lib_.Sym<decltype(set_ecc_)>("fake_dcmi_set_ecc");
    fail_ = lib_.Sym<decltype(fail_)>("fake_dcmi_fail");
    calls_ = lib_.Sym<decltype(calls_)>("fake_dcmi_calls");
  }
  FakeDcmi(const FakeDcmi&) = delete;
  FakeDcmi& operator=(const FakeDcmi&) = delete;

  bool loaded() const { return lib_.loaded() && calls_ != nullptr; }
  void Reset(int cards, int chips, int first_card_id = 0) { reset_(cards, chips, first_card_id); }
  void SetHealth(int logic, unsigned health) { ASSERT_EQ(set_health_(logic, health), 0); }
  void Raise(int logic, unsigned code) { ASSERT_EQ(raise_(logic, code), 0); }
  void Clear(int logic, unsigned code) { ASSERT_EQ(clear_(logic, code), 0); }
  void SetSensors(int logic, int temp, int power_decawatts) {
    ASSERT_EQ(set_sensors_(logic, temp, power_decawatts), 0);
  }
  void SetChipName(int logic, const char* name) { ASSERT_EQ(set_chip_name_(logic, name), 0); }
  void SetEcc(int logic, unsigned single_bit, unsigned double_bit) {
    ASSERT_EQ(set_ecc_(logic, single_bit, double_bit), 0);
  }
  void Fail(const char* fn, int rc, int logic = -1) { fail_(fn, logic, rc); }
  int Calls(const char* fn) { return calls_(fn); }

 private:
  testing::FakeLibrary lib_;
  void (*reset_)(int, int, int) = nullptr;
  int (*set_health_)(int, unsigned) = nullptr;
  int (*raise_)(int, unsigned) = nullptr;
  int (*clear_)(int, unsigned) = nullptr;
  int (*set_sensors_)(int, int, int) = nullptr;
  int (*set_chip_name_)(int, const char*) = nullptr;
  int (*set_ecc_)(int, unsigned, unsigned) = nullptr;
  void (*fail_)(const char*, int, int) = nullptr;
  int (*calls_)(const char*) = nullptr;
};

AscendBackend Backend(std::vector<std::string> paths) { return AscendBackend(AscendBackendOptions{std::move(paths)}); }

const DeviceStatus& ById(const std::vector<DeviceStatus>& v, int32_t id) {
  for (const DeviceStatus& s : v) {
    if (s.id == id) return s;
  }
  static const DeviceStatus kNone{};
  ADD_FAILURE() << "no device " << id;
  return kNone;
}

class AscendBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.loaded());
    fake_.Reset(2, 4, /*first_card_id=*/3);  // cards 3 and 4, logic ids 0..7
  }
  FakeDcmi fake_{FAKE_DCMI_PATH};
};

TEST_F(AscendBackendTest, EnumeratesCardsAndChipsByLogicId) {
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  Status st = b.Init();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(b.name(), "ascend");
  EXPECT_EQ(b.loaded_path(), FAKE_DCMI_PATH);
  EXPECT_EQ(b.card_list_symbol(), "dcmi_get_card_list");
  EXPECT_EQ(fake_.Calls("dcmi_init"), 1);
  auto devices = b.Devices();
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  ASSERT_EQ(devices->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ((*devices)[i].id, i);
    EXPECT_EQ((*devices)[i].vendor, "huawei");
    EXPECT_EQ((*devices)[i].model, "910B3");
  }
  EXPECT_EQ((*devices)[0].location, "card 3 chip 0");
  EXPECT_EQ((*devices)[5].location, "card 4 chip 1");
  EXPECT_TRUE(b.Init().ok()) << "a second Init is harmless";
  EXPECT_EQ(fake_.Calls("dcmi_init"), 1);
}

TEST_F(AscendBackendTest, ReadsModelTemperatureAndPower) {
  fake_.SetChipName(5, "910B4");
  fake_.SetChipName(6, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");  // fills the field, no NUL
  fake_.SetSensors(5, 71, 1234);
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  auto devices = b.Devices();
  ASSERT_TRUE(devices.ok());
  EXPECT_EQ((*devices)[5].model, "910B4");
  EXPECT_EQ((*devices)[6].model, "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345");
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok()) << poll.status().ToString();
  ASSERT_EQ(poll->size(), 8u);
  const DeviceStatus& s = ById(*poll, 5);
  EXPECT_TRUE(s.healthy);
  EXPECT_EQ(s.health_raw, 0u);
  EXPECT_TRUE(s.error_codes.empty());
  ASSERT_TRUE(s.temperature_c.has_value());
  EXPECT_DOUBLE_EQ(*s.temperature_c, 71.0);
  ASSERT_TRUE(s.power_w.has_value());
  EXPECT_DOUBLE_EQ(*s.power_w, 123.4) << "DCMI reports power in 0.1 W";
  EXPECT_DOUBLE_EQ(*ById(*poll, 0).temperature_c, 40.0);
}

TEST_F(AscendBackendTest, RaisedCodesAppearAsHexAndClearedCodesDisappear) {
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  fake_.Raise(3, 0x80E01801u);
  fake_.Raise(3, 0x8C084E00u);
  fake_.Raise(3, 0x80E01801u);
  fake_.SetHealth(3, 2);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  const DeviceStatus& s = ById(*poll, 3);
  EXPECT_EQ(s.error_codes, (std::vector<std::string>{"80E01801", "8C084E00"}));
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.health_raw, 2u);
  EXPECT_TRUE(s.read_error.empty());
  EXPECT_TRUE(ById(*poll, 2).error_codes.empty());
  EXPECT_TRUE(ById(*poll, 2).healthy);

  fake_.Clear(3, 0x80E01801u);
  poll = b.Poll();
  EXPECT_EQ(ById(*poll, 3).error_codes, (std::vector<std::string>{"8C084E00"}));
  fake_.Clear(3, 0x8C084E00u);
  fake_.SetHealth(3, 0);
  poll = b.Poll();
  EXPECT_TRUE(ById(*poll, 3).error_codes.empty());
  EXPECT_TRUE(ById(*poll, 3).healthy);
}

// The HBM's ECC counts are the chip's error counters; the validation's
// built-in check fails when one grows within its window, or when DCMI reports
// a code the window did not start with, and passes while both hold still.
TEST_F(AscendBackendTest, AValidationFailsOnEccGrowthOrANewCodeWithinItsWindow) {
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  fake_.SetEcc(2, 5, 1);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ(ById(*poll, 2).error_counters,
            (std::map<std::string, uint64_t>{{"ecc_double_bit", 1}, {"ecc_single_bit", 5}}));

  v1::ValidationResult r = testing::ValidateOverBackend(b, {2, 3}, std::chrono::milliseconds(30), nullptr);
  ASSERT_EQ(r.checks_size(), 1);
  EXPECT_TRUE(r.passed()) << r.checks(0).message();
  EXPECT_NE(r.checks(0).evidence().find("device 2 ecc_single_bit 5"), std::string::npos) << r.checks(0).evidence();

  r = testing::ValidateOverBackend(b, {2, 3}, testing::kUntilItFails, [&](int n) {
    if (n == 3) fake_.SetEcc(2, 5, 2);
  });
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("device 2 ecc_double_bit rose from 1 to 2"), std::string::npos)
      << r.checks(0).message();

  // A code while the chip's health stays 0 (a minor event DCMI reports).
  r = testing::ValidateOverBackend(b, {2, 3}, testing::kUntilItFails, [&](int n) {
    if (n == 2) fake_.Raise(3, 0x80CB8009u);
  });
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("device 3 code 80CB8009 appeared"), std::string::npos) << r.checks(0).message();

  // A chip that cannot be read does not pass.
  fake_.Clear(3, 0x80CB8009u);
  fake_.Fail("dcmi_get_device_health", -8020, 3);
  r = testing::ValidateOverBackend(b, {3}, testing::kUntilItFails, nullptr);
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("-8020"), std::string::npos) << r.checks(0).message();
}

TEST_F(AscendBackendTest, ManyCodesAreCappedAtTheListLength) {
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  for (unsigned i = 0; i < 200; ++i) fake_.Raise(0, 0x80000000u + i);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ(ById(*poll, 0).error_codes.size(), AscendBackend::kErrorCodeListLen);
  EXPECT_EQ(ById(*poll, 0).error_codes.front(), "80000000");
}

TEST_F(AscendBackendTest, DcmiInitFailureIsReportedAndRetried) {
  fake_.Fail("dcmi_init", -8005);
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  Status st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("dcmi_init"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("-8005"), std::string::npos) << st.message();
  EXPECT_EQ(b.Poll().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(b.Devices().status().code(), StatusCode::kFailedPrecondition);

  fake_.Fail("dcmi_init", 0);
  st = b.Init();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(b.Poll()->size(), 8u);
}

TEST_F(AscendBackendTest, EnumerationFailureNamesTheFunction) {
  fake_.Fail("dcmi_get_card_list", -8020);
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  Status st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dcmi_get_card_list returned -8020"), std::string::npos) << st.message();

  fake_.Fail("dcmi_get_card_list", 0);
  fake_.Fail("dcmi_get_device_logic_id", -9, /*logic=*/6);
  st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dcmi_get_device_logic_id(card 4, chip 2) returned -9"), std::string::npos)
      << st.message();
}

TEST_F(AscendBackendTest, OneUnreadableChipIsMarkedNotDropped) {
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  fake_.Fail("dcmi_get_device_health", -8020, /*logic=*/2);
  fake_.Fail("dcmi_get_device_temperature", -1, /*logic=*/2);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok()) << poll.status().ToString();
  ASSERT_EQ(poll->size(), 8u);
  const DeviceStatus& s = ById(*poll, 2);
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.health_raw, kHealthUnknown);
  EXPECT_EQ(s.read_error, "dcmi_get_device_health(card 3, chip 2) returned -8020");
  EXPECT_FALSE(s.temperature_c.has_value());
  EXPECT_TRUE(ById(*poll, 1).healthy);
  EXPECT_TRUE(ById(*poll, 1).read_error.empty());

  fake_.Fail("dcmi_get_device_errorcode_v2", -8007);  // every chip
  poll = b.Poll();
  ASSERT_FALSE(poll.ok());
  EXPECT_EQ(poll.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(poll.status().message().find("dcmi_get_device_errorcode_v2"), std::string::npos) << poll.status().message();
}

TEST_F(AscendBackendTest, RefusesAnAbsurdCardCount) {
  fake_.Reset(AscendBackend::kMaxCards + 1, 1);
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  Status st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
}

TEST_F(AscendBackendTest, NoCardsIsNoDevices) {
  fake_.Reset(0, 0);
  AscendBackend b = Backend({FAKE_DCMI_PATH});
  ASSERT_TRUE(b.Init().ok());
  EXPECT_TRUE(b.Devices()->empty());
  EXPECT_TRUE(b.Poll()->empty());
}

TEST(AscendLoadTest, MissingLibraryIsReportedNotFatal) {
  AscendBackend b = Backend({"/nonexistent/dir/libdcmi.so"});
  Status st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("/nonexistent/dir/libdcmi.so"), std::string::npos) << st.message();
  EXPECT_EQ(b.Poll().status().code(), StatusCode::kFailedPrecondition);

  AscendBackend none = Backend({});
  EXPECT_EQ(none.Init().code(), StatusCode::kUnavailable);
}

TEST(AscendLoadTest, FactoryTriesConfiguredPathsThenDefaults) {
  BackendOptions o;
  o.kind = "ascend";
  o.dcmi_paths = {"/nonexistent/libdcmi.so"};
  auto paths = MakeAscendPaths(o);
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(paths[0], "/nonexistent/libdcmi.so");
  EXPECT_EQ(paths[1], "/usr/local/Ascend/driver/lib64/driver/libdcmi.so");
  EXPECT_EQ(paths[2], "/usr/local/Ascend/driver/lib64/libdcmi.so");
  EXPECT_EQ(paths[3], "libdcmi.so");

  o.dcmi_search_default_paths = false;
  EXPECT_EQ(MakeAscendPaths(o).size(), 1u);
  auto b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Init().code(), StatusCode::kUnavailable);
}

TEST(AscendLoadTest, FallsBackToTheNextPath) {
  FakeDcmi fake(FAKE_DCMI_PATH);
  ASSERT_TRUE(fake.loaded());
  fake.Reset(1, 1);
  BackendOptions o;
  o.kind = "ascend";
  o.dcmi_paths = {"/nonexistent/libdcmi.so", FAKE_DCMI_PATH};
  o.dcmi_search_default_paths = false;
  auto b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  Status st = (*b)->Init();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(dynamic_cast<AscendBackend*>(b->get())->loaded_path(), FAKE_DCMI_PATH);
  EXPECT_EQ((*b)->Devices()->size(), 1u);
}

TEST(AscendLoadTest, OldCardListSymbolIsUsed) {
  FakeDcmi fake(FAKE_DCMI_OLD_PATH);
  ASSERT_TRUE(fake.loaded());
  fake.Reset(8, 1);
  AscendBackend b = Backend({FAKE_DCMI_OLD_PATH});
  Status st = b.Init();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(b.card_list_symbol(), "dcmi_get_card_num_list");
  EXPECT_EQ(fake.Calls("dcmi_get_card_num_list"), 1);
  fake.Raise(7, 0x80E01801u);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  ASSERT_EQ(poll->size(), 8u);
  EXPECT_EQ(ById(*poll, 7).error_codes, (std::vector<std::string>{"80E01801"}));

  fake.Fail("dcmi_get_card_num_list", -8005);
  auto devices = b.Devices();
  ASSERT_FALSE(devices.ok());
  EXPECT_NE(devices.status().message().find("dcmi_get_card_num_list returned -8005"), std::string::npos);
}

TEST(AscendLoadTest, MissingRequiredSymbolIsReported) {
  AscendBackend b = Backend({FAKE_DCMI_NO_ERRORCODE_PATH});
  Status st = b.Init();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("dcmi_get_device_errorcode_v2"), std::string::npos) << st.message();
  EXPECT_EQ(b.Poll().status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace clusterd::noded
