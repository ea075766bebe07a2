// The npu-smi backend: the `npu-smi info` parser on fixture outputs, the command
// runner, and the backend over both.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "noded/accel/backend.h"
#include "noded/accel/npu_smi.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using testing::FixtureDir;
using testing::TempDir;

std::string FixturePath(const std::string& name) { return FixtureDir("npu-smi") + "/" + name; }

std::string Fixture(const std::string& name) {
  std::ifstream in(FixturePath(name));
  EXPECT_TRUE(in.good()) << FixturePath(name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

NpuSmiBackend::Source Text(std::string text) {
  return [text = std::move(text)]() -> StatusOr<std::string> { return text; };
}

TEST(NpuSmiParseTest, EightHealthy910B) {
  auto chips = ParseNpuSmiInfo(Fixture("910b-8x-healthy.txt"));
  ASSERT_TRUE(chips.ok()) << chips.status().ToString();
  ASSERT_EQ(chips->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const NpuSmiChip& c = (*chips)[i];
    EXPECT_EQ(c.id, i);
    EXPECT_EQ(c.npu_id, i);
    EXPECT_EQ(c.chip, 0);
    EXPECT_FALSE(c.column_id.has_value());
    EXPECT_EQ(c.name, "910B3");
    EXPECT_EQ(c.health, "OK");
    EXPECT_TRUE(c.power_w.has_value());
    EXPECT_TRUE(c.temperature_c.has_value());
  }
  EXPECT_DOUBLE_EQ(*(*chips)[0].power_w, 95.1);
  EXPECT_DOUBLE_EQ(*(*chips)[0].temperature_c, 36.0);
  EXPECT_EQ((*chips)[0].bus_id, "0000:C1:00.0");
  EXPECT_EQ((*chips)[7].bus_id, "0000:42:00.0");
}

TEST(NpuSmiParseTest, WarningAlarmAndMissingReadings) {
  auto chips = ParseNpuSmiInfo(Fixture("910b-8x-fault.txt"));
  ASSERT_TRUE(chips.ok()) << chips.status().ToString();
  ASSERT_EQ(chips->size(), 8u) << "the process table is not read as chips";
  EXPECT_EQ((*chips)[3].health, "Warning");
  EXPECT_FALSE((*chips)[3].power_w.has_value());
  EXPECT_FALSE((*chips)[3].temperature_c.has_value());
  EXPECT_EQ((*chips)[6].health, "Alarm");
  EXPECT_DOUBLE_EQ(*(*chips)[6].temperature_c, 88.0);
  EXPECT_EQ((*chips)[0].health, "OK");
}

TEST(NpuSmiParseTest, DeviceColumnGivesTheIds) {
  auto chips = ParseNpuSmiInfo(Fixture("310p-duo.txt"));
  ASSERT_TRUE(chips.ok()) << chips.status().ToString();
  ASSERT_EQ(chips->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*chips)[i].id, i);
    EXPECT_EQ((*chips)[i].column_id, i);
    EXPECT_EQ((*chips)[i].name, "310P3");
    EXPECT_FALSE((*chips)[i].power_w.has_value()) << "NA";
  }
  EXPECT_EQ((*chips)[1].npu_id, 1);
  EXPECT_EQ((*chips)[1].chip, 1);
  EXPECT_EQ((*chips)[2].npu_id, 2);
  EXPECT_EQ((*chips)[2].health, "Critical");
}

TEST(NpuSmiParseTest, MultiChipWithoutIdColumnUsesPosition) {
  const std::string text =
      "| NPU   Name   | Health | Power(W) Temp(C) Hugepages-Usage(page) |\n"
      "| Chip         | Bus-Id | AICore(%) Memory-Usage(MB) |\n"
      "+==============+========+==================================+\n"
      "| 4     910    | OK     | 171.3  41  0 / 0 |\n"
      "| 0            | 0000:9D:00.0 | 0 0 / 0 |\n"
      "| 4     910    | OK     | -      43  0 / 0 |\n"
      "| 1            | 0000:9F:00.0 | 0 0 / 0 |\n";
  auto chips = ParseNpuSmiInfo(text);
  ASSERT_TRUE(chips.ok()) << chips.status().ToString();
  ASSERT_EQ(chips->size(), 2u);
  EXPECT_EQ((*chips)[0].id, 0);
  EXPECT_EQ((*chips)[1].id, 1);
  EXPECT_FALSE((*chips)[1].power_w.has_value());
}

TEST(NpuSmiParseTest, MalformedOutputIsRefusedWithTheLine) {
  auto chips = ParseNpuSmiInfo(Fixture("malformed.txt"));
  ASSERT_FALSE(chips.ok());
  EXPECT_EQ(chips.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(chips.status().message().find("line 10"), std::string::npos) << chips.status().message();

  for (const char* bad : {"", "dcmi module initialize failed. ret is -8005\n", "| foo | bar |\n",
                          "| NPU Name | Health | Power(W) Temp(C) |\n"}) {
    auto r = ParseNpuSmiInfo(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  const std::string head =
      "| NPU   Name   | Health | Power(W) Temp(C) Hugepages-Usage(page) |\n"
      "| Chip         | Bus-Id | AICore(%) Memory-Usage(MB) |\n";
  EXPECT_FALSE(ParseNpuSmiInfo(head + "| x 910B3 | OK | 1 2 |\n| 0 | 0000:01:00.0 |\n").ok()) << "NPU id";
  EXPECT_FALSE(ParseNpuSmiInfo(head + "| 0 910B3 | OK | hot 2 |\n| 0 | 0000:01:00.0 |\n").ok()) << "power";
  EXPECT_FALSE(ParseNpuSmiInfo(head + "| 0 910B3 | OK | 1 2 |\n").ok()) << "no chip row";
  EXPECT_FALSE(ParseNpuSmiInfo(head + "| 0 910B3 |  | 1 2 |\n| 0 | 0000:01:00.0 |\n").ok()) << "empty health";
  EXPECT_FALSE(ParseNpuSmiInfo(head + "| 0 910B3 | OK | 1 2 |\n| 0 | a |\n| 0 910B3 | OK | 1 2 |\n| 0 | b |\n").ok())
      << "duplicate id";
  auto empty = ParseNpuSmiInfo(head + "+====+\n");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(NpuSmiParseTest, HealthMapping) {
  EXPECT_EQ(NpuSmiHealthRaw("OK"), 0u);
  EXPECT_EQ(NpuSmiHealthCode("OK"), std::nullopt);
  EXPECT_EQ(NpuSmiHealthRaw("Warning"), 1u);
  EXPECT_EQ(NpuSmiHealthCode("Warning"), "NPU_SMI_HEALTH_WARNING");
  EXPECT_EQ(NpuSmiHealthRaw("Alarm"), 2u);
  EXPECT_EQ(NpuSmiHealthCode("alarm"), "NPU_SMI_HEALTH_ALARM");
  EXPECT_EQ(NpuSmiHealthRaw("Critical"), 3u);
  EXPECT_EQ(NpuSmiHealthCode("Critical"), "NPU_SMI_HEALTH_CRITICAL");
  EXPECT_EQ(NpuSmiHealthRaw("Broken"), kHealthUnknown);
  EXPECT_EQ(NpuSmiHealthCode("Broken"), "NPU_SMI_HEALTH_UNKNOWN");
}

TEST(NpuSmiBackendTest, HealthyNodeReportsNoCodes) {
  NpuSmiBackend b(Text(Fixture("910b-8x-healthy.txt")));
  EXPECT_EQ(b.name(), "npu-smi");
  EXPECT_EQ(b.Poll().status().code(), StatusCode::kFailedPrecondition) << "before Init";
  ASSERT_TRUE(b.Init().ok());
  auto devices = b.Devices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 8u);
  EXPECT_EQ((*devices)[2].model, "910B3");
  EXPECT_EQ((*devices)[2].vendor, "huawei");
  EXPECT_NE((*devices)[2].location.find("0000:C2:00.0"), std::string::npos);
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  ASSERT_EQ(poll->size(), 8u);
  for (const DeviceStatus& s : *poll) {
    EXPECT_TRUE(s.healthy);
    EXPECT_EQ(s.health_raw, 0u);
    EXPECT_TRUE(s.error_codes.empty());
  }
  EXPECT_DOUBLE_EQ(*(*poll)[1].power_w, 93.8);
}

TEST(NpuSmiBackendTest, NonOkHealthBecomesASyntheticCode) {
  NpuSmiBackend b(Text(Fixture("910b-8x-fault.txt")));
  ASSERT_TRUE(b.Init().ok());
  auto poll = b.Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_FALSE((*poll)[3].healthy);
  EXPECT_EQ((*poll)[3].health_raw, 1u);
  EXPECT_EQ((*poll)[3].error_codes, (std::vector<std::string>{kNpuSmiHealthWarning}));
  EXPECT_EQ((*poll)[6].error_codes, (std::vector<std::string>{kNpuSmiHealthAlarm}));
  EXPECT_TRUE((*poll)[0].error_codes.empty());
  EXPECT_TRUE((*poll)[0].healthy);
}

TEST(NpuSmiBackendTest, SourceFailureAndMalformedOutputAreErrors) {
  NpuSmiBackend missing([]() -> StatusOr<std::string> { return Unavailable("cannot run 'npu-smi'"); });
  EXPECT_EQ(missing.Init().code(), StatusCode::kUnavailable);
  NpuSmiBackend malformed(Text(Fixture("malformed.txt")));
  EXPECT_EQ(malformed.Init().code(), StatusCode::kInvalidArgument);

  // Good at Init, broken later: Poll reports it, it does not return stale data.
  int calls = 0;
  std::string good = Fixture("910b-8x-healthy.txt");
  NpuSmiBackend flaky([&]() -> StatusOr<std::string> { return ++calls == 1 ? good : std::string("garbage\n"); });
  ASSERT_TRUE(flaky.Init().ok());
  EXPECT_EQ(flaky.Poll().status().code(), StatusCode::kInvalidArgument);
}

TEST(RunCommandTest, ReturnsStdout) {
  auto out = RunCommand({"cat", FixturePath("910b-8x-healthy.txt")}, std::chrono::seconds(10));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, Fixture("910b-8x-healthy.txt"));
}

TEST(RunCommandTest, ReportsFailures) {
  auto missing = RunCommand({"/nonexistent/npu-smi", "info"}, std::chrono::seconds(10));
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("/nonexistent/npu-smi"), std::string::npos);

  auto fails = RunCommand({"false"}, std::chrono::seconds(10));
  EXPECT_EQ(fails.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(fails.status().message().find("exited with status 1"), std::string::npos) << fails.status().message();

  auto big = RunCommand({"cat", FixturePath("910b-8x-healthy.txt")}, std::chrono::seconds(10), 100);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);

  EXPECT_EQ(RunCommand({}, std::chrono::seconds(1)).status().code(), StatusCode::kInvalidArgument);
}

TEST(RunCommandTest, KillsACommandThatHangs) {
  // The child never finishes on its own; the runner must give up at the deadline.
  auto hung = RunCommand({"sleep", "600"}, std::chrono::milliseconds(100));
  EXPECT_EQ(hung.status().code(), StatusCode::kDeadlineExceeded);
  // Closes its output but does not exit.
  auto lingering = RunCommand({"sh", "-c", "exec >&-; sleep 600"}, std::chrono::milliseconds(100));
  EXPECT_EQ(lingering.status().code(), StatusCode::kDeadlineExceeded);
}

TEST(NpuSmiBackendTest, FactoryRunsTheConfiguredCommand) {
  TempDir dir;
  dir.Write("npu-smi.out", Fixture("910b-8x-fault.txt"));
  BackendOptions o;
  o.kind = "npu-smi";
  o.npu_smi_command = "cat " + dir.path() + "/npu-smi.out";
  auto b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  Status st = (*b)->Init();
  ASSERT_TRUE(st.ok()) << st.ToString();
  auto poll = (*b)->Poll();
  ASSERT_TRUE(poll.ok());
  EXPECT_EQ((*poll)[6].error_codes, (std::vector<std::string>{kNpuSmiHealthAlarm}));

  o.npu_smi_command = dir.path() + "/no-such-npu-smi info";
  b = MakeBackend(o);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->Init().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace clusterd::noded
