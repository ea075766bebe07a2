// MindCluster's operators' separation ConfigMaps, pure
// (clusterd/mindcluster/manual_separation.h): the policy's YAML with the
// reference's checks, and clusterd-manual-info-cm's values in Go's bytes.
#include "clusterd/mindcluster/manual_separation.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace clusterd::mindcluster {
namespace {

using namespace std::chrono_literals;

// The reference's Helm default (component/clusterd/build/clusterd.yaml).
constexpr const char* kDefault = R"(enabled: true
separate:
  fault_window_hours: 24
  fault_threshold: 3
release:
  fault_free_hours: 48
)";

TEST(ManualSeparatePolicyTest, ParsesTheReferencesDefault) {
  auto p = ParseManualSeparatePolicy(kDefault);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, (ManualSeparatePolicy{true, 24, 3, 48}));
  SeparationPolicy base;
  base.settle = 7s;
  const auto policy = ToSeparationPolicy(*p, base);
  EXPECT_TRUE(policy.enabled);
  EXPECT_EQ(policy.threshold, 3u);
  EXPECT_EQ(policy.window, std::chrono::hours(24));
  EXPECT_EQ(policy.release_after, std::optional<std::chrono::nanoseconds>(std::chrono::hours(48)));
  EXPECT_EQ(policy.settle, 7s);  // ClusterD's own
  EXPECT_TRUE(ValidateSeparationPolicy(policy).ok());
}

TEST(ManualSeparatePolicyTest, AcceptsWhatYamlV2Accepts) {
  // Comments, a document marker, other indentation, YAML 1.1 booleans,
  // unknown keys, -1 (never released by time).
  auto p = ParseManualSeparatePolicy(
      "---\n# operators' policy\nenabled: yes   # on\nother: {ignored: 1}\nseparate:\n    fault_threshold: +5\n"
      "    fault_window_hours: 720\n    note: \"x\"\nrelease:\n    fault_free_hours: -1\n");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, (ManualSeparatePolicy{true, 720, 5, -1}));
  EXPECT_EQ(ToSeparationPolicy(*p, {}).release_after, std::nullopt);
  auto off = ParseManualSeparatePolicy(
      "enabled: Off\nseparate:\n  fault_window_hours: 1\n  fault_threshold: 1\n"
      "release:\n  fault_free_hours: 240\n");
  ASSERT_TRUE(off.ok()) << off.status().message();
  EXPECT_FALSE(off->enabled);
}

TEST(ManualSeparatePolicyTest, RefusesOutOfRangeWithTheReferencesWords) {
  auto check = [](const std::string& yaml) {
    auto p = ParseManualSeparatePolicy(yaml);
    EXPECT_FALSE(p.ok()) << yaml;
    return p.ok() ? std::string() : p.status().message();
  };
  const std::string release = "release:\n  fault_free_hours: 48\n";
  EXPECT_EQ(check("enabled: true\nseparate:\n  fault_window_hours: 721\n  fault_threshold: 3\n" + release),
            "fault_window_hours must be in [1, 720]");
  EXPECT_EQ(check("enabled: true\nseparate:\n  fault_window_hours: 0\n  fault_threshold: 3\n" + release),
            "fault_window_hours must be in [1, 720]");
  EXPECT_EQ(check("enabled: true\nseparate:\n  fault_window_hours: 24\n  fault_threshold: 51\n" + release),
            "fault_threshold must be in [1, 50]");
  EXPECT_EQ(check("enabled: true\nseparate:\n  fault_window_hours: 24\n  fault_threshold: 3\nrelease:\n"
                  "  fault_free_hours: 241\n"),
            "fault_free_hours must be in [1, 240] or -1");
  EXPECT_EQ(check("enabled: true\nseparate:\n  fault_window_hours: 24\n  fault_threshold: 3\nrelease:\n"
                  "  fault_free_hours: -2\n"),
            "fault_free_hours must be in [1, 240] or -1");
  // Missing fields are zero, as yaml.Unmarshal leaves them: out of range.
  EXPECT_EQ(check("enabled: true\n"), "fault_window_hours must be in [1, 720]");
  EXPECT_EQ(check(""), "fault_window_hours must be in [1, 720]");
}

TEST(ManualSeparatePolicyTest, RefusesMalformedAndHuge) {
  const std::string good_rest =
      "separate:\n  fault_window_hours: 24\n  fault_threshold: 3\nrelease:\n"
      "  fault_free_hours: 48\n";
  for (const std::string& bad : {
           std::string("enabled: maybe\n") + good_rest,                                            // not a boolean
           std::string("enabled: true\nseparate:\n  fault_window_hours: \"24\"\n"),                // a quoted number
           std::string("enabled: true\nseparate:\n  fault_window_hours: 99999999999999999999\n"),  // too large
           std::string("enabled: true\nseparate:\n  fault_window_hours: 2x\n"),
           std::string("enabled: true\nenabled: false\n") + good_rest,  // a key twice
           std::string("enabled: true\nseparate: 5\n"),                 // a value where a mapping belongs
           std::string("enabled:\n  x: 1\n") + good_rest,               // a mapping where a boolean belongs
           std::string("enabled: true\nseparate: {fault_window_hours: 24}\n"),
           std::string("- enabled\n"),
           std::string("enabled: true\n\tseparate:\n"),
           std::string("enabled: true\n   bad indentation: 1\n  worse: 2\n"),
           std::string("enabled: true\nno colon here\n"),
           std::string("enabled: 'unterminated\n"),
       }) {
    EXPECT_FALSE(ParseManualSeparatePolicy(bad).ok()) << bad;
  }
  std::string huge(kMaxPolicyBytes + 1, '#');
  auto p = ParseManualSeparatePolicy(huge);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("bytes"), std::string::npos);
}

TEST(ManualInfoCmTest, WritesTheReferencesShapeInGoBytes) {
  ManualInfo info;
  info["node-b"] = {ManualChip{"Ascend910-7", {"80E01801", "80C98009"}, 1'700'000'000'123},
                    ManualChip{"Ascend910-10", {}, 1'700'000'001'000}};
  info["node-a"] = {};  // nothing separated: no key
  const auto data = ManualInfoCmData(info);
  ASSERT_EQ(data.size(), 1u);
  // Total and Detail sorted as Go sorts strings; one Detail entry per code.
  EXPECT_EQ(data.at("node-b"),
            R"({"Total":["Ascend910-10","Ascend910-7"],"Detail":{"Ascend910-10":[{"FaultCode":"","FaultLevel":)"
            R"("ManuallySeparateNPU","LastSeparateTime":1700000001000}],"Ascend910-7":[{"FaultCode":"80E01801",)"
            R"("FaultLevel":"ManuallySeparateNPU","LastSeparateTime":1700000000123},{"FaultCode":"80C98009",)"
            R"("FaultLevel":"ManuallySeparateNPU","LastSeparateTime":1700000000123}]}})");
  // And read back: the chips Total lists.
  nlohmann::json cm_data = data;
  auto totals = ParseManualInfoTotals(cm_data.dump());
  ASSERT_TRUE(totals.ok()) << totals.status().message();
  EXPECT_EQ(totals->at("node-b"), (std::set<std::string>{"Ascend910-10", "Ascend910-7"}));
}

TEST(ManualInfoCmTest, ReadsTotalsAndRefusesOtherShapes) {
  // Unknown fields ignored, a null Total lists nothing (Go's json.Unmarshal).
  auto ok = ParseManualInfoTotals(R"({"n1":"{\"Total\":[\"Ascend910-1\"],\"Other\":1}","n2":"{\"Total\":null}"})");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->at("n1"), (std::set<std::string>{"Ascend910-1"}));
  EXPECT_TRUE(ok->at("n2").empty());
  EXPECT_TRUE(ParseManualInfoTotals("null")->empty());  // no data
  for (const std::string& bad : {
           std::string(R"(["x"])"),
           std::string(R"({"n1":5})"),
           std::string(R"({"n1":"not json"})"),
           std::string(R"({"n1":"{\"Total\":\"Ascend910-1\"}"})"),
           std::string(R"({"n1":"{\"Total\":[1]}"})"),
       }) {
    EXPECT_FALSE(ParseManualInfoTotals(bad).ok()) << bad;
  }
  // Past the limits: refused whole.
  nlohmann::json many = nlohmann::json::object();
  nlohmann::json chips = nlohmann::json::array();
  for (size_t i = 0; i <= kMaxManualInfoChipsPerNode; ++i) chips.push_back("Ascend910-" + std::to_string(i));
  many["n"] = nlohmann::json{{"Total", chips}}.dump();
  EXPECT_FALSE(ParseManualInfoTotals(many.dump()).ok());
}

TEST(ManualInfoCmTest, ListingRoundTrips) {
  const std::map<std::string, std::set<std::string>> listing = {{"a", {"Ascend910-1", "Ascend910-2"}}, {"b", {}}};
  auto back = ParseListingJson(ListingJson(listing));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->size(), 1u);  // a node without chips is left out
  EXPECT_EQ(back->at("a"), listing.at("a"));
  EXPECT_FALSE(ParseListingJson("[").ok());
  EXPECT_FALSE(ParseListingJson(R"({"a":[1]})").ok());
}

}  // namespace
}  // namespace clusterd::mindcluster
