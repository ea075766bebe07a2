// common/chain_doctor.h on its own: which links and faults become findings,
// their order, what blocks a node's return to service, the summary line and
// the JSON answer (what clusterctl doctor and GET /api/v1/doctor show).
#include "common/chain_doctor.h"

#include <gtest/gtest.h>

namespace clusterd {
namespace {

v1::Node NodeWith(const std::string& name, std::vector<std::pair<std::string, v1::ChainLinkState>> links) {
  v1::Node n;
  n.set_name(name);
  for (const auto& [link, state] : links) {
    auto* l = n.mutable_inventory()->add_chain();
    l->set_name(link);
    l->set_state(state);
    l->set_version(link + "-1.0");
    l->set_evidence("read " + link);
    if (state == v1::CHAIN_LINK_STATE_BROKEN) l->set_code("NODE_CHAIN_DRIVER_NOT_LOADED");
  }
  return n;
}

v1::Fault FaultOf(const std::string& node, const std::string& code, v1::FaultState state = v1::FAULT_STATE_ACTIVE) {
  v1::Fault f;
  f.set_node(node);
  f.set_code(code);
  f.set_state(state);
  f.set_message(code + " on " + node);
  f.set_external_id(node + "/driver");
  return f;
}

TEST(ChainDoctor, OnlyBrokenLinksUnlessAllAreAskedFor) {
  const v1::Node n = NodeWith("n1", {{"driver", v1::CHAIN_LINK_STATE_BROKEN},
                                     {"runtime", v1::CHAIN_LINK_STATE_OK},
                                     {"device_plugin", v1::CHAIN_LINK_STATE_UNKNOWN}});
  std::vector<ChainFinding> broken;
  AddChainLinks(n, /*all=*/false, &broken);
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(broken[0].link, "driver");
  EXPECT_EQ(broken[0].state, "BROKEN");
  EXPECT_EQ(broken[0].fix, ChainFix("NODE_CHAIN_DRIVER_NOT_LOADED"));
  EXPECT_FALSE(broken[0].fix.empty());
  std::vector<ChainFinding> all;
  AddChainLinks(n, /*all=*/true, &all);
  ASSERT_EQ(all.size(), 3u);
  SortChainFindings(&all);
  EXPECT_EQ(all[0].link, "driver") << "broken first";
  EXPECT_EQ(all[1].state, "unknown");
  EXPECT_EQ(all[2].state, "ok");
}

TEST(ChainDoctor, ActiveChainFaultsBecomeFindingsAndOthersDoNot) {
  google::protobuf::RepeatedPtrField<v1::Fault> faults;
  *faults.Add() = FaultOf("n2", "CHAIN_VERSION_DRIFT");
  *faults.Add() = FaultOf("n1", "NODE_ALLOCATABLE_MISMATCH");
  *faults.Add() = FaultOf("n1", "CHAIN_FIRMWARE_MISMATCH", v1::FAULT_STATE_CLEARED);
  *faults.Add() = FaultOf("n1", "80E01801");  // a chip's fault: not the chain's
  std::vector<ChainFinding> found;
  AddChainFaults(faults, &found);
  ASSERT_EQ(found.size(), 2u);
  SortChainFindings(&found);
  EXPECT_EQ(found[0].node, "n1");
  EXPECT_EQ(found[0].link, "kubelet_allocatable");
  EXPECT_EQ(found[0].state, "SHORT");
  EXPECT_EQ(found[1].link, "driver") << "the drift's link, from its id <node>/<link>";
  EXPECT_EQ(found[1].state, "DRIFT");
}

TEST(ChainDoctor, DriftAndUnknownLinksNeverBlockAReturnToService) {
  const v1::Node n = NodeWith("n1", {{"driver", v1::CHAIN_LINK_STATE_OK}, {"runtime", v1::CHAIN_LINK_STATE_UNKNOWN}});
  const v1::Fault drift = FaultOf("n1", "CHAIN_VERSION_DRIFT");
  EXPECT_TRUE(ChainReleaseBlockers(n, {&drift}).empty());
  const v1::Fault firmware = FaultOf("n1", "CHAIN_FIRMWARE_MISMATCH");
  const v1::Node broken = NodeWith("n1", {{"driver", v1::CHAIN_LINK_STATE_BROKEN}});
  const auto blockers = ChainReleaseBlockers(broken, {&drift, &firmware});
  ASSERT_EQ(blockers.size(), 2u);
  const std::string text = ChainBlockersText(blockers);
  EXPECT_NE(text.find("link driver BROKEN (read driver): "), std::string::npos) << text;
  EXPECT_NE(text.find("; link firmware MISMATCH (CHAIN_FIRMWARE_MISMATCH on n1): "), std::string::npos) << text;
}

TEST(ChainDoctor, SchedulingFindingsAreThePodsNoNodeCanTake) {
  google::protobuf::RepeatedPtrField<v1::SchedulingFinding> findings;
  auto* f = findings.Add();
  f->set_pod_namespace("ml");
  f->set_pod("train-0");
  f->set_count(16);
  f->set_resource("huawei.com/Ascend910");
  f->set_reason("too-few");
  f->set_evidence("8 on the largest node");
  std::vector<ChainFinding> found;
  AddSchedulingFindings(findings, &found);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].node, "pod ml/train-0");
  EXPECT_EQ(found[0].link, "scheduler");
  EXPECT_EQ(found[0].version, "16 huawei.com/Ascend910");
  EXPECT_EQ(found[0].fix, ChainFix("too-few"));
  found.push_back(ChainFinding{0, "n1", "driver", "BROKEN", "", "", ""});
  found.push_back(ChainFinding{1, "n1", "runtime", "DRIFT", "", "", ""});
  EXPECT_EQ(
      ChainClusterSummary(3, 2, found),
      "3 node(s), 2 reporting a software chain; 1 with a broken link or drift; 1 Pending pod(s) no node can take");
  EXPECT_EQ(ChainClusterSummary(3, 0, {}), "3 node(s), 0 reporting a software chain; 0 with a broken link or drift");
}

TEST(ChainDoctor, TheJsonAnswerIsCutAtItsMaximumAndSaysSo) {
  std::vector<ChainFinding> found;
  for (int i = 0; i < 5; ++i) found.push_back(ChainFinding{0, "n" + std::to_string(i), "driver", "BROKEN", "", "", ""});
  const nlohmann::json whole = ChainFindingsJson(found, "summary");
  EXPECT_EQ(whole["findings"].size(), 5u);
  EXPECT_FALSE(whole.contains("truncated"));
  EXPECT_EQ(whole["summary"], "summary");
  const nlohmann::json cut = ChainFindingsJson(found, "summary", 2);
  ASSERT_EQ(cut["findings"].size(), 2u);
  EXPECT_EQ(cut["findings"][1]["node"], "n1");
  EXPECT_EQ(cut["truncated"], true);
  EXPECT_EQ(cut["total"], 5u);
  EXPECT_EQ(ChainFix("no such code"), "");
  EXPECT_EQ(ChainLinkStateText(v1::CHAIN_LINK_STATE_UNSPECIFIED), "unknown");
}

}  // namespace
}  // namespace clusterd
