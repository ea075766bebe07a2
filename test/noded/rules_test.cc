#include <gtest/gtest.h>

#include "noded/rules/engine.h"
#include "noded/rules/metrics.h"
#include "noded/rules/rules_config.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using Action = Transition::Action;

Snapshot Disk(std::vector<std::pair<std::string, double>> used) {
  Snapshot s;
  s.sources.insert(Source::kDisk);
  for (auto& [mount, pct] : used) s.samples.push_back({"disk.used_percent", mount, pct, "/dev/x (ext4)"});
  return s;
}

Rule Find(const std::string& name) {
  for (const auto& r : DefaultRules()) {
    if (r.name == name) return r;
  }
  ADD_FAILURE() << "no default rule " << name;
  return {};
}

TEST(RuleEngineTest, DiskFullNeedsMinimumDurationAndClearsWithHysteresis) {
  FakeClock clock;
  RuleEngine engine({Find("disk_full")}, clock);

  EXPECT_TRUE(engine.Evaluate(Disk({{"/data", 96}})).empty()) << "not yet 30 s";
  clock.Advance(seconds(29));
  EXPECT_TRUE(engine.Evaluate(Disk({{"/data", 97}})).empty());
  clock.Advance(seconds(1));
  auto raised = engine.Evaluate(Disk({{"/data", 97}}));
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].action, Action::kRaise);
  EXPECT_EQ(raised[0].code, "NODE_DISK_FULL");
  EXPECT_EQ(raised[0].level, Level::kSubHealth);
  EXPECT_EQ(raised[0].source, Source::kDisk);
  EXPECT_EQ(raised[0].subject, "/data");
  EXPECT_EQ(raised[0].rule, "disk_full");
  EXPECT_EQ(raised[0].at, clock.Now());
  EXPECT_NE(raised[0].message.find("/data"), std::string::npos) << raised[0].message;
  EXPECT_NE(raised[0].message.find("30s"), std::string::npos) << raised[0].message;
  ASSERT_EQ(engine.Active().size(), 1u);
  EXPECT_EQ(engine.Active()[0].subject, "/data");

  // Between the thresholds nothing changes; at the clear threshold it clears.
  clock.Advance(seconds(5));
  EXPECT_TRUE(engine.Evaluate(Disk({{"/data", 93}})).empty());
  EXPECT_TRUE(engine.Evaluate(Disk({{"/data", 96}})).empty()) << "already raised";
  auto cleared = engine.Evaluate(Disk({{"/data", 90}}));
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared[0].action, Action::kClear);
  EXPECT_EQ(cleared[0].subject, "/data");
  EXPECT_TRUE(engine.Active().empty());
}

TEST(RuleEngineTest, DipBelowRaiseRestartsTheMinimumDuration) {
  FakeClock clock;
  RuleEngine engine({Find("disk_full")}, clock);
  EXPECT_TRUE(engine.Evaluate(Disk({{"/", 99}})).empty());
  clock.Advance(seconds(20));
  EXPECT_TRUE(engine.Evaluate(Disk({{"/", 94}})).empty());  // dip
  clock.Advance(seconds(20));
  EXPECT_TRUE(engine.Evaluate(Disk({{"/", 99}})).empty()) << "the 30 s start again";
  clock.Advance(seconds(29));
  EXPECT_TRUE(engine.Evaluate(Disk({{"/", 99}})).empty());
  clock.Advance(seconds(1));
  EXPECT_EQ(engine.Evaluate(Disk({{"/", 99}})).size(), 1u);
}

TEST(RuleEngineTest, SubjectsAreIndependentAndVanishedOnesClear) {
  FakeClock clock;
  Rule r = Find("disk_full");
  r.for_duration = seconds(0);
  RuleEngine engine({r}, clock);
  auto t = engine.Evaluate(Disk({{"/a", 99}, {"/b", 50}}));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].subject, "/a");
  t = engine.Evaluate(Disk({{"/a", 99}, {"/b", 99}}));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].subject, "/b");
  EXPECT_EQ(engine.Active().size(), 2u);

  // A failed disk collection (source not in the snapshot) changes nothing ...
  Snapshot failed;
  EXPECT_TRUE(engine.Evaluate(failed).empty());
  EXPECT_EQ(engine.Active().size(), 2u);
  // ... but a collected round without /a means /a was unmounted: its fault clears.
  t = engine.Evaluate(Disk({{"/b", 99}}));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].action, Action::kClear);
  EXPECT_EQ(t[0].subject, "/a");
  EXPECT_NE(t[0].message.find("no longer reported"), std::string::npos);
}

TEST(RuleEngineTest, BelowRuleAndClearFor) {
  FakeClock clock;
  Rule r = Find("memory_low");  // below 5 for 30s, clears at >= 10
  r.clear_for = seconds(10);
  RuleEngine engine({r}, clock);
  auto mem = [](double pct) {
    Snapshot s;
    s.sources.insert(Source::kMemory);
    s.samples.push_back({"memory.available_percent", "", pct, ""});
    return s;
  };
  EXPECT_TRUE(engine.Evaluate(mem(4)).empty());
  clock.Advance(seconds(30));
  auto t = engine.Evaluate(mem(3));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].code, "NODE_MEMORY_LOW");
  EXPECT_EQ(t[0].subject, "");
  EXPECT_TRUE(engine.Evaluate(mem(12)).empty()) << "clear_for not yet met";
  clock.Advance(seconds(9));
  EXPECT_TRUE(engine.Evaluate(mem(12)).empty());
  clock.Advance(seconds(1));
  t = engine.Evaluate(mem(12));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].action, Action::kClear);
}

Snapshot Counter(const std::string& metric, Source source, double value, std::string detail = "") {
  Snapshot s;
  s.sources.insert(source);
  s.samples.push_back({metric, "", value, std::move(detail)});
  return s;
}

TEST(RuleEngineTest, CounterRaisesOnGrowthAndClearsAfterAQuietWindow) {
  FakeClock clock;
  RuleEngine engine({Find("kernel_oom_kill")}, clock);  // growth > 0 within 10 min
  const Source k = Source::kKernel;
  EXPECT_TRUE(engine.Evaluate(Counter("kernel.KERNEL_OOM_KILL", k, 3)).empty()) << "first value is the baseline";
  clock.Advance(seconds(1));
  EXPECT_TRUE(engine.Evaluate(Counter("kernel.KERNEL_OOM_KILL", k, 3)).empty());
  clock.Advance(seconds(1));
  auto t = engine.Evaluate(Counter("kernel.KERNEL_OOM_KILL", k, 4, "last: Killed process 9 (x)"));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].code, "KERNEL_OOM_KILL");
  EXPECT_EQ(t[0].source, Source::kKernel);
  EXPECT_DOUBLE_EQ(t[0].value, 1);
  EXPECT_NE(t[0].message.find("Killed process 9"), std::string::npos) << t[0].message;

  clock.Advance(minutes(9));
  EXPECT_TRUE(engine.Evaluate(Counter("kernel.KERNEL_OOM_KILL", k, 4)).empty());
  clock.Advance(minutes(1));
  t = engine.Evaluate(Counter("kernel.KERNEL_OOM_KILL", k, 4));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].action, Action::kClear);
}

TEST(RuleEngineTest, CounterThresholdCountsOnlyTheWindow) {
  FakeClock clock;
  RuleEngine engine({Find("nic_errors")}, clock);  // > 100 in 5 min, clear at 0
  auto nic = [](double v) {
    Snapshot s;
    s.sources.insert(Source::kNetwork);
    s.samples.push_back({"network.errors", "eth0", v, ""});
    return s;
  };
  EXPECT_TRUE(engine.Evaluate(nic(1000)).empty());
  for (int i = 1; i <= 10; ++i) {
    clock.Advance(minutes(1));
    auto t = engine.Evaluate(nic(1000 + 20 * i));  // +20 per minute: at most 100 per 5 min
    EXPECT_TRUE(t.empty()) << "minute " << i;
  }
  clock.Advance(minutes(1));
  auto t = engine.Evaluate(nic(1200 + 21));  // last 5 min: 1221 - 1120 = 101
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].subject, "eth0");
  EXPECT_DOUBLE_EQ(t[0].value, 101);
}

TEST(RuleEngineTest, CounterResetStartsANewBaseline) {
  FakeClock clock;
  RuleEngine engine({Find("ecc_uncorrected")}, clock);
  const Source m = Source::kMemory;
  EXPECT_TRUE(engine.Evaluate(Counter("memory.ecc_uncorrected", m, 5)).empty());
  clock.Advance(seconds(1));
  EXPECT_TRUE(engine.Evaluate(Counter("memory.ecc_uncorrected", m, 0)).empty()) << "reset, not growth";
  clock.Advance(seconds(1));
  auto t = engine.Evaluate(Counter("memory.ecc_uncorrected", m, 1));
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].level, Level::kPreSeparate);
}

TEST(RuleEngineTest, DisabledAndInvalidRulesAreIgnored) {
  FakeClock clock;
  Rule off = Find("disk_full");
  off.enabled = false;
  Rule bad = Find("inodes_full");
  bad.metric = "disk.nope";
  RuleEngine engine({off, bad}, clock);
  Snapshot s = Disk({{"/", 100}});
  s.samples.push_back({"disk.inodes_used_percent", "/", 100, ""});
  clock.Advance(minutes(1));
  EXPECT_TRUE(engine.Evaluate(s).empty());

  // A second rule with the same code would fight over the same fault: dropped.
  Rule first = Find("disk_full");
  first.for_duration = seconds(0);
  Rule second = first;
  second.name = "disk_full_too";
  second.raise = 10;
  second.clear = 5;
  RuleEngine dup({first, second}, clock);
  auto t = dup.Evaluate(Disk({{"/", 50}}));
  EXPECT_TRUE(t.empty()) << "only the first rule (95%) judges";
}

// End to end on the fixture tree: readings -> samples -> default rules.
TEST(RuleEngineTest, DefaultRulesOnFixtureReadings) {
  FakeClock clock;
  RuleEngine engine(DefaultRules(), clock);
  NetworkCollectorOptions nopts;
  nopts.root = testing::FixtureDir("full");
  auto net = NetworkCollector(nopts).Collect();
  ASSERT_TRUE(net.ok());
  MemoryReading mem;
  mem.total_kib = 100;
  mem.available_kib = 50;
  mem.available_percent = 50;
  DiskReading disk;
  MountReading data;
  data.mount_point = "/data";
  data.device = "/dev/nvme0n1";
  data.fs_type = "xfs";
  data.read_only = data.unexpected_read_only = true;
  disk.mounts.push_back(data);

  Snapshot s;
  AddNetwork(*net, &s);
  AddMemory(mem, &s);
  AddDisk(disk, &s);
  auto t = engine.Evaluate(s);
  ASSERT_EQ(t.size(), 1u) << "the link needs 2 s; read-only raises at once";
  EXPECT_EQ(t[0].code, "NODE_DISK_READONLY");
  EXPECT_EQ(t[0].subject, "/data");
  EXPECT_NE(t[0].message.find("/dev/nvme0n1"), std::string::npos);

  clock.Advance(seconds(2));
  t = engine.Evaluate(s);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].code, "NODE_LINK_DOWN");
  EXPECT_EQ(t[0].source, Source::kNetwork);
  EXPECT_EQ(t[0].subject, "eth1");
  EXPECT_NE(t[0].message.find("no carrier"), std::string::npos) << t[0].message;
}

TEST(LevelTest, NamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(Level::kSeparate); ++i) {
    auto level = static_cast<Level>(i);
    EXPECT_EQ(ParseLevel(LevelName(level)), level);
  }
  EXPECT_STREQ(LevelName(Level::kFreeRestartNpu), "FREE_RESTART_NPU");
  EXPECT_FALSE(ParseLevel("SOMETIMES"));
}

}  // namespace
}  // namespace clusterd::noded
