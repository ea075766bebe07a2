// The backend factory, the none backend and the sim backend.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "noded/accel/backend.h"
#include "noded/accel/sim_backend.h"

namespace clusterd::noded {
namespace {

TEST(AccelBackendTest, FormatsErrorCodesAsEightUpperCaseHexDigits) {
  EXPECT_EQ(FormatErrorCode(0x80E01801u), "80E01801");
  EXPECT_EQ(FormatErrorCode(0x1u), "00000001");
  EXPECT_EQ(FormatErrorCode(0xFFFFFFFFu), "FFFFFFFF");
}

TEST(AccelBackendTest, FactoryMakesEveryKind) {
  for (const char* kind : {"ascend", "npu-smi", "sim", "none"}) {
    BackendOptions o;
    o.kind = kind;
    auto b = MakeBackend(o);
    ASSERT_TRUE(b.ok()) << kind << ": " << b.status().ToString();
    EXPECT_EQ((*b)->name(), kind);
  }
}

TEST(AccelBackendTest, FactoryRejectsBadOptions) {
  BackendOptions o;
  o.kind = "cuda";
  auto b = MakeBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("cuda"), std::string::npos);

  o.kind = "sim";
  o.sim_devices = -1;
  EXPECT_EQ(MakeBackend(o).status().code(), StatusCode::kInvalidArgument);
  o.sim_devices = kMaxSimDevices + 1;
  EXPECT_EQ(MakeBackend(o).status().code(), StatusCode::kInvalidArgument);

  o = BackendOptions{};
  o.kind = "npu-smi";
  o.npu_smi_command = "  ";
  EXPECT_EQ(MakeBackend(o).status().code(), StatusCode::kInvalidArgument);
  o.npu_smi_command = "npu-smi info";
  o.npu_smi_timeout = std::chrono::milliseconds(0);
  EXPECT_EQ(MakeBackend(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(AccelBackendTest, NoneHasNoDevices) {
  auto b = MakeBackend(BackendOptions{});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE((*b)->Init().ok());
  auto devices = (*b)->Devices();
  ASSERT_TRUE(devices.ok());
  EXPECT_TRUE(devices->empty());
  auto poll = (*b)->Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_TRUE(poll->empty());
}

TEST(SimBackendTest, FactoryMakesEightHealthyDevicesByDefault) {
  BackendOptions o;
  o.kind = "sim";
  auto b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  auto* sim = dynamic_cast<SimBackend*>(b->get());
  ASSERT_NE(sim, nullptr);
  ASSERT_TRUE(sim->Init().ok());
  auto devices = sim->Devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ((*devices)[i].id, i);
    EXPECT_EQ((*devices)[i].vendor, "sim");
    EXPECT_EQ((*devices)[i].model, "SIM-910B");
    EXPECT_FALSE((*devices)[i].serial.empty());
  }
  auto poll = sim->Poll();
  ASSERT_TRUE(poll.ok());
  ASSERT_EQ(poll->size(), 8u);
  for (const DeviceStatus& s : *poll) {
    EXPECT_TRUE(s.healthy);
    EXPECT_EQ(s.health_raw, 0u);
    EXPECT_TRUE(s.error_codes.empty());
    EXPECT_TRUE(s.read_error.empty());
    EXPECT_TRUE(s.temperature_c.has_value());
  }
  EXPECT_TRUE(sim->NodeFaults().empty());
}

TEST(SimBackendTest, RaisedCodesShowUntilCleared) {
  SimBackend sim(4);
  ASSERT_TRUE(sim.Inject(3, "80E01801", InjectAction::kRaise).ok());
  ASSERT_TRUE(sim.Inject(3, "80CB8009", InjectAction::kRaise).ok());
  ASSERT_TRUE(sim.Inject(3, "80E01801", InjectAction::kRaise).ok()) << "raising twice is a no-op";
  auto poll = sim.Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ((*poll)[3].error_codes, (std::vector<std::string>{"80CB8009", "80E01801"}));
  EXPECT_FALSE((*poll)[3].healthy);
  EXPECT_NE((*poll)[3].health_raw, 0u);
  EXPECT_TRUE((*poll)[2].error_codes.empty());

  ASSERT_TRUE(sim.Inject(3, "80E01801", InjectAction::kClear).ok());
  ASSERT_TRUE(sim.Inject(3, "NOT_ACTIVE", InjectAction::kClear).ok()) << "clearing an inactive code is a no-op";
  poll = sim.Poll();
  EXPECT_EQ((*poll)[3].error_codes, (std::vector<std::string>{"80CB8009"}));
  ASSERT_TRUE(sim.Inject(3, "80CB8009", InjectAction::kClear).ok());
  poll = sim.Poll();
  EXPECT_TRUE((*poll)[3].error_codes.empty());
  EXPECT_TRUE((*poll)[3].healthy);
}

TEST(SimBackendTest, NodeFaultsAreSeparateFromDevices) {
  SimBackend sim(2);
  ASSERT_TRUE(sim.Inject(std::nullopt, "NODE_DISK_FULL", InjectAction::kRaise).ok());
  EXPECT_EQ(sim.NodeFaults(), (std::vector<std::string>{"NODE_DISK_FULL"}));
  auto poll = sim.Poll();
  for (const DeviceStatus& s : *poll) EXPECT_TRUE(s.error_codes.empty());
  ASSERT_TRUE(sim.Inject(std::nullopt, "NODE_DISK_FULL", InjectAction::kClear).ok());
  EXPECT_TRUE(sim.NodeFaults().empty());
}

TEST(SimBackendTest, RejectsBadDevicesAndCodes) {
  SimBackend sim(8);
  Status st = sim.Inject(8, "80E01801", InjectAction::kRaise);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out of range"), std::string::npos) << st.message();
  EXPECT_EQ(sim.Inject(0xFFFFFFFFu, "80E01801", InjectAction::kClear).code(), StatusCode::kInvalidArgument);
  for (std::string bad : {std::string(), std::string("80E0 1801"), std::string("a/b"), std::string(65, 'A'),
                          std::string("x\n"), std::string("\xc3\xa9")}) {
    EXPECT_EQ(sim.Inject(0, bad, InjectAction::kRaise).code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(sim.Inject(std::nullopt, bad, InjectAction::kRaise).code(), StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(sim.Inject(0, std::string(64, 'A'), InjectAction::kRaise).ok());
  EXPECT_TRUE(sim.Inject(0, "a-b_c.9", InjectAction::kRaise).ok());
  EXPECT_EQ(sim.Poll()->at(0).error_codes.size(), 2u);
  EXPECT_TRUE(sim.NodeFaults().empty());
}

TEST(SimBackendTest, ActiveCodesAreBounded) {
  SimBackend sim(1);
  for (size_t i = 0; i < SimBackend::kMaxActiveCodes; ++i) {
    ASSERT_TRUE(sim.Inject(0, "C" + std::to_string(i), InjectAction::kRaise).ok());
  }
  EXPECT_EQ(sim.Inject(0, "ONE_TOO_MANY", InjectAction::kRaise).code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(sim.Inject(0, "C0", InjectAction::kRaise).ok()) << "an active code may be raised again";
  EXPECT_TRUE(sim.Inject(0, "C0", InjectAction::kClear).ok());
  EXPECT_TRUE(sim.Inject(0, "ONE_TOO_MANY", InjectAction::kRaise).ok());
}

TEST(SimBackendTest, ZeroDevicesStillTakesNodeFaults) {
  SimBackend sim(0);
  EXPECT_TRUE(sim.Devices()->empty());
  EXPECT_EQ(sim.Inject(0, "X", InjectAction::kRaise).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sim.Inject(std::nullopt, "X", InjectAction::kRaise).ok());
}

// Writers on several threads while another polls; joined, then checked (no sleeps).
TEST(SimBackendTest, InjectIsThreadSafe) {
  SimBackend sim(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&sim, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string code = "T" + std::to_string(t) + "_" + std::to_string(i % 10);
        EXPECT_TRUE(sim.Inject(static_cast<uint32_t>(i % 8), code, InjectAction::kRaise).ok());
        EXPECT_TRUE(sim.Inject(std::nullopt, code, InjectAction::kRaise).ok());
      }
    });
  }
  threads.emplace_back([&sim] {
    for (int i = 0; i < 200; ++i) {
      auto poll = sim.Poll();
      EXPECT_TRUE(poll.ok());
      (void)sim.NodeFaults();
    }
  });
  for (auto& th : threads) th.join();
  auto poll = sim.Poll();
  size_t total = 0;
  for (const DeviceStatus& s : *poll) total += s.error_codes.size();
  // Thread t raises code (i % 10) on device (i % 8): 40 distinct (code, device) pairs per thread.
  EXPECT_EQ(total, 4u * 40u);
  EXPECT_EQ(sim.NodeFaults().size(), 40u);
}

}  // namespace
}  // namespace clusterd::noded
