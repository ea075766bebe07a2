#include <gtest/gtest.h>

#include "noded/rules/rules_config.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using nlohmann::json;
using std::chrono::minutes;
using std::chrono::seconds;

const Rule* Find(const RulesConfig& c, const std::string& name) {
  for (const auto& r : c.rules) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// Applies `doc` to the defaults and expects a refusal mentioning every `needles`.
void ExpectRefused(const json& doc, std::vector<std::string> needles) {
  auto r = ApplyRulesJson(DefaultRulesConfig(), doc);
  ASSERT_FALSE(r.ok()) << doc.dump();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const auto& n : needles) {
    EXPECT_NE(r.status().message().find(n), std::string::npos) << "'" << n << "' not in: " << r.status().message();
  }
}

TEST(RulesConfigTest, DefaultsAreValid) {
  auto c = DefaultRulesConfig();
  EXPECT_TRUE(ValidateRulesConfig(c).ok()) << ValidateRulesConfig(c).ToString();
  const Rule* disk = Find(c, "disk_full");
  ASSERT_NE(disk, nullptr);
  EXPECT_EQ(disk->code, "NODE_DISK_FULL");
  EXPECT_EQ(disk->raise, 95);
  EXPECT_EQ(disk->clear, 90);
  EXPECT_EQ(disk->for_duration, seconds(30));
}

TEST(RulesConfigTest, OverridesDisablesAndAdds) {
  json doc = json::parse(R"({
    "rules": [
      {"name": "disk_full", "raise": 97, "clear": 92, "for": "1m", "level": "PRE_SEPARATE"},
      {"name": "nic_errors", "enabled": false},
      {"name": "scratch_low", "metric": "memory.available_percent", "op": "below",
       "raise": 2, "clear": 4, "code": "NODE_MEMORY_CRITICAL", "level": "SEPARATE", "clear_for": "10s"},
      {"name": "nvme_timeouts", "metric": "kernel.KERNEL_NVME_TIMEOUT", "raise": 0,
       "window": "30m", "code": "KERNEL_NVME_TIMEOUT", "level": "SUB_HEALTH"}
    ],
    "kernel_patterns": [
      {"code": "KERNEL_NVME_TIMEOUT", "regex": "nvme\\d+: I/O \\d+ QID \\d+ timeout", "ignore_case": true},
      {"code": "KERNEL_OOM_KILL", "regex": "Out of memory"}
    ]
  })");
  auto r = ApplyRulesJson(DefaultRulesConfig(), doc);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Rule* disk = Find(*r, "disk_full");
  EXPECT_EQ(disk->raise, 97);
  EXPECT_EQ(disk->clear, 92);
  EXPECT_EQ(disk->for_duration, minutes(1));
  EXPECT_EQ(disk->level, Level::kPreSeparate);
  EXPECT_EQ(disk->metric, "disk.used_percent") << "fields not named keep their default";
  EXPECT_FALSE(Find(*r, "nic_errors")->enabled);
  const Rule* low = Find(*r, "scratch_low");
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(low->op, Op::kBelow);
  EXPECT_EQ(low->clear_for, seconds(10));
  const Rule* nvme = Find(*r, "nvme_timeouts");
  ASSERT_NE(nvme, nullptr);
  EXPECT_EQ(nvme->clear, 0) << "clear defaults to raise";
  EXPECT_EQ(nvme->window, minutes(30));
  EXPECT_EQ(r->kernel_patterns.size(), DefaultKernelPatterns().size() + 1);
  auto matcher = KmsgMatcher::Create(r->kernel_patterns);
  ASSERT_TRUE(matcher.ok());
  EXPECT_EQ(*matcher->Match("Out of memory: Kill process 1"), "KERNEL_OOM_KILL") << "pattern replaced by code";
  EXPECT_EQ(*matcher->Match("NVME0: I/O 12 QID 3 timeout, aborting"), "KERNEL_NVME_TIMEOUT");
}

TEST(RulesConfigTest, BadRulesAreRefusedNamingRuleAndField) {
  ExpectRefused(
      {{"rules", {{{"name", "x"}, {"metric", "disk.usage"}, {"raise", 1}, {"code", "X"}, {"level", "SUB_HEALTH"}}}}},
      {"rule 'x'", "'metric'", "unknown metric 'disk.usage'"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"clear", 96}}}}},
                {"rule 'disk_full'", "'clear'", "96", "<= 'raise' (95)"});
  ExpectRefused({{"rules", {{{"name", "memory_low"}, {"clear", 1}}}}}, {"rule 'memory_low'", "'clear'", ">="});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"for", "-5s"}}}}}, {"rule 'disk_full'", "'for'", "negative"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"for", 30}}}}}, {"rule 'disk_full'", "'for'", "duration"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"for", "30 parsecs"}}}}}, {"rule 'disk_full'", "'for'"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"level", "URGENT"}}}}}, {"rule 'disk_full'", "'level'", "URGENT"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"raize", 90}}}}}, {"rule 'disk_full'", "'raize'"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"op", "sideways"}}}}}, {"rule 'disk_full'", "'op'"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"raise", "high"}}}}}, {"rule 'disk_full'", "'raise'"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"window", "5m"}}}}}, {"rule 'disk_full'", "'window'", "gauge"});
  ExpectRefused({{"rules", {{{"name", "nic_errors"}, {"window", "0s"}}}}}, {"rule 'nic_errors'", "'window'"});
  ExpectRefused({{"rules", {{{"name", "brand_new"}, {"metric", "disk.used_percent"}}}}},
                {"rule 'brand_new'", "required"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"code", "NODE_LINK_DOWN"}}}}},
                {"rule 'disk_full'", "'code'", "link_down"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}, {"code", "lower case"}}}}}, {"rule 'disk_full'", "'code'"});
  ExpectRefused(
      {{"rules",
        {{{"name", "a"}, {"metric", "kernel.KERNEL_NOPE"}, {"raise", 0}, {"code", "K"}, {"level", "SUB_HEALTH"}}}}},
      {"rule 'a'", "'metric'", "no kernel pattern"});
  ExpectRefused({{"rules", {{{"name", "disk_full"}}, {{"name", "disk_full"}}}}}, {"disk_full", "twice"});
  ExpectRefused({{"rules", {{{"raise", 1}}}}}, {"rule 0", "'name'"});
  ExpectRefused({{"kernel_patterns", {{{"code", "K"}, {"regex", "([a-"}}}}}, {"'K'", "regex"});
  ExpectRefused({{"kernel_patterns", {{{"code", "K"}}}}}, {"kernel pattern 0", "'regex'"});
  ExpectRefused({{"rulez", json::array()}}, {"rulez"});
  ExpectRefused(json::array(), {"object"});
}

TEST(RulesConfigTest, LoadsFileAndReportsParseErrors) {
  testing::TempDir dir;
  dir.Write("good.json", R"({
    // comments are allowed
    "rules": [{"name": "disk_full", "raise": 98, "clear": 93}]
  })");
  auto good = LoadRulesFile(dir.path() + "/good.json");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(Find(*good, "disk_full")->raise, 98);

  dir.Write("bad.json", R"({"rules": [)");
  auto bad = LoadRulesFile(dir.path() + "/bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);

  dir.Write("wrong.json", R"({"rules": [{"name": "disk_full", "clear": 99}]})");
  auto wrong = LoadRulesFile(dir.path() + "/wrong.json");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("wrong.json"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("rule 'disk_full'"), std::string::npos);

  EXPECT_EQ(LoadRulesFile(dir.path() + "/missing.json").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace clusterd::noded
