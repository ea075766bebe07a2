// NodeD's validation (noded/validator.h): the built-in check over what the
// probe says, configured commands with their pass rule and evidence, and
// each validation id run once.
#include "noded/validator.h"

#include <condition_variable>
#include <mutex>

#include <google/protobuf/util/time_util.h>
#include <gtest/gtest.h>

#include "test/support/temp_dir.h"

namespace clusterd::noded {
namespace {

using google::protobuf::util::TimeUtil;

v1::ValidationRequest Request(const std::string& id, std::vector<std::string> checks) {
  v1::ValidationRequest r;
  r.set_validation_id(id);
  r.set_node("worker01");
  r.add_device_ids(0);
  r.add_device_ids(3);
  for (auto& c : checks) r.add_checks(c);
  *r.mutable_stable_window() = TimeUtil::MillisecondsToDuration(0);
  return r;
}

ValidationCommand Command(const std::string& name, std::vector<std::string> argv, const std::string& regex = "") {
  ValidationCommand c;
  c.name = name;
  c.vendor = "huawei";
  c.model = "910B";
  c.argv = std::move(argv);
  c.timeout = std::chrono::seconds(20);
  c.pass_regex = regex;
  return c;
}

class ValidatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<Validator> Make(std::vector<ValidationCommand> commands) {
    ValidatorOptions o;
    o.commands = std::move(commands);
    return std::make_unique<Validator>(
        o,
        [this](const std::vector<uint32_t>&, bool) {
          ValidationSample s;
          s.problems = problems_;
          return s;
        },
        [](uint32_t) {
          return std::pair<std::string, std::string>{"huawei", "910B3"};
        },
        [] {
          return std::vector<uint32_t>{0, 1};
        },
        [this] {
          std::lock_guard lock(mu_);
          ++ready_;
          cv_.notify_all();
        });
  }
  // The results, once `n` are ready (or the deadline passed).
  std::vector<v1::ValidationResult> WaitFor(Validator& v, size_t n) {
    std::vector<v1::ValidationResult> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (out.size() < n && std::chrono::steady_clock::now() < deadline) {
      for (auto& r : v.TakeReady()) out.push_back(std::move(r));
      std::unique_lock lock(mu_);
      cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
    }
    return out;
  }

  std::vector<std::string> problems_;
  std::mutex mu_;
  std::condition_variable cv_;
  int ready_ = 0;
};

TEST_F(ValidatorTest, HealthStablePassesWithNothingWrongAndFailsWithTheProblemAsEvidence) {
  auto v = Make({});
  v1::ValidationResult r = v->Run(Request("val-1", {"health-stable"}));
  EXPECT_TRUE(r.passed());
  ASSERT_EQ(r.checks_size(), 1);
  EXPECT_EQ(r.checks(0).name(), "health-stable");
  problems_ = {"fault 80E01801 active on device 3"};
  r = v->Run(Request("val-2", {"health-stable"}));
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("80E01801"), std::string::npos) << r.checks(0).message();
  EXPECT_NE(r.checks(0).evidence().find("device 3"), std::string::npos);
}

TEST_F(ValidatorTest, ACommandPassesOnExitZeroAndItsRegexAndKeepsItsOutput) {
  auto v = Make({Command("link", {"/bin/sh", "-c", "echo devices {devices}; echo link status: UP"}, "status: UP")});
  v1::ValidationResult r = v->Run(Request("val-1", {"commands"}));
  ASSERT_EQ(r.checks_size(), 1);
  EXPECT_TRUE(r.passed()) << r.checks(0).message();
  EXPECT_EQ(r.checks(0).exit_code(), 0);
  EXPECT_NE(r.checks(0).evidence().find("devices 0,3"), std::string::npos) << r.checks(0).evidence();
}

TEST_F(ValidatorTest, AFailingCommandFailsWithItsExitCodeAndOutputTail) {
  auto v = Make(
      {Command("loopback", {"/bin/sh", "-c", "yes x | head -c 40000; echo; echo HCCL loopback failed >&2; exit 3"})});
  v1::ValidationResult r = v->Run(Request("val-1", {"commands"}));
  EXPECT_FALSE(r.passed());
  ASSERT_EQ(r.checks_size(), 1);
  EXPECT_EQ(r.checks(0).exit_code(), 3);
  EXPECT_EQ(r.checks(0).message(), "exited with status 3");
  EXPECT_LE(r.checks(0).evidence().size(), 16u * 1024);
  EXPECT_NE(r.checks(0).evidence().find("HCCL loopback failed"), std::string::npos);
}

TEST_F(ValidatorTest, OutputNotMatchingTheRegexFailsAndOtherModelsCommandsDoNotRun) {
  ValidationCommand gpu = Command("dcgm", {"/bin/false"});
  gpu.vendor = "nvidia";
  gpu.model = "";
  auto v = Make({Command("link", {"/bin/echo", "link status: DOWN"}, "status: UP"), gpu});
  v1::ValidationResult r = v->Run(Request("val-1", {"commands"}));
  EXPECT_FALSE(r.passed());
  ASSERT_EQ(r.checks_size(), 1);  // the NVIDIA command does not apply to 910B3
  EXPECT_NE(r.checks(0).message().find("does not match"), std::string::npos);
}

TEST_F(ValidatorTest, AnUnknownCheckFails) {
  auto v = Make({});
  v1::ValidationResult r = v->Run(Request("val-1", {"burn-in"}));
  EXPECT_FALSE(r.passed());
  EXPECT_NE(r.checks(0).message().find("does not know"), std::string::npos);
}

TEST_F(ValidatorTest, EachIdRunsOnceAndARepeatedRequestGetsTheKeptResult) {
  // The command waits for `go`, so that the second request comes while the
  // first runs (not after it finished, which would be answered again).
  clusterd::testing::TempDir dir;
  const std::string go = dir.Sub("go");
  auto v = Make({Command("count", {"/bin/sh", "-c", "while [ ! -f " + go + " ]; do sleep 0.01; done; echo ran"})});
  const v1::ValidationRequest req = Request("val-7", {"health-stable", "commands"});
  v->Submit(req);
  v->Submit(req);  // while it runs or waits: ignored
  dir.Write("go", "");
  auto results = WaitFor(*v, 1);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].passed());
  // Asked again after a reconnect: the same result, not a second run.
  v->Submit(req);
  auto again = WaitFor(*v, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].validation_id(), "val-7");
  EXPECT_EQ(v->duplicates(), 2u);
  EXPECT_TRUE(v->TakeReady().empty());
}

TEST_F(ValidatorTest, TheCommandsFileIsCheckedWithTheEntryNamed) {
  auto ok = ParseValidationCommands(
      R"({"commands": [{"name": "link", "vendor": "huawei", "model": "910B", "argv": ["hccn_tool", "-i", "{devices}"],
          "timeout_seconds": 30, "pass_regex": "UP"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].timeout, std::chrono::seconds(30));
  EXPECT_NE(ParseValidationCommands(R"({"commands": [{"name": "x", "argv": []}]})").status().message().find("[0].argv"),
            std::string::npos);
  EXPECT_NE(ParseValidationCommands(R"({"commands": [{"name": "x", "argv": ["a"], "pass_regex": "("}]})")
                .status()
                .message()
                .find("pass_regex"),
            std::string::npos);
  EXPECT_NE(ParseValidationCommands(R"({"commands": [{"name": "x", "argv": ["a"], "timeout_seconds": 0}]})")
                .status()
                .message()
                .find("timeout_seconds"),
            std::string::npos);
  EXPECT_FALSE(ParseValidationCommands("not json").ok());
}

}  // namespace
}  // namespace clusterd::noded
