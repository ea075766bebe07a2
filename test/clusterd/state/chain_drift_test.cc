// The software chain's drift on synthetic fleets: pools, ties, small pools.
#include "clusterd/state/chain_drift.h"

#include <gtest/gtest.h>

namespace clusterd {
namespace {

NodeVersions N(const std::string& node, const std::string& pool, const std::string& driver,
               const std::string& cann = "") {
  NodeVersions n{node, pool, {}};
  if (!driver.empty()) n.versions["driver"] = driver;
  if (!cann.empty()) n.versions["cann"] = cann;
  return n;
}

std::vector<std::string> Named(const std::vector<DriftFinding>& found) {
  std::vector<std::string> out;
  for (const auto& f : found) out.push_back(f.node + "/" + f.link + ":" + f.version + "!=" + f.expected);
  return out;
}

TEST(ChainDrift, AJobSpanningTwoVersions) {
  const NodeVersions a = N("a", "910B3", "24.1.rc3", "8.0.RC3"), b = N("b", "910B3", "24.1.rc3", "8.0.RC3"),
                     c = N("c", "910B3", "24.1.rc2", "8.0.RC3"), d = N("d", "910B4", "24.1.rc2");
  // Three nodes: the odd one, against the job's majority (pools do not matter).
  auto found = FindJobChainDrift("train-1", {&a, &b, &c});
  EXPECT_EQ(Named(found), (std::vector<std::string>{"c/driver:24.1.rc2!=24.1.rc3"}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].Message(), "driver 24.1.rc2 where 2 of 3 nodes of job train-1 run 24.1.rc3");
  // Two nodes on two versions: no majority, both are named.
  found = FindJobChainDrift("train-2", {&a, &d});
  EXPECT_EQ(Named(found), (std::vector<std::string>{"a/driver:24.1.rc3!=24.1.rc2", "d/driver:24.1.rc2!=24.1.rc3"}));
  EXPECT_EQ(found[0].Message(),
            "driver 24.1.rc3 while other nodes of job train-2 run 24.1.rc2 (no majority among 2: the job's finding, "
            "not this node's)");
  // One version (CANN known on some nodes only): nothing.
  EXPECT_TRUE(FindJobChainDrift("train-3", {&a, &b}).empty());
  // Bounded per job.
  std::vector<NodeVersions> many;
  for (int i = 0; i < 1000; ++i) many.push_back(N("n" + std::to_string(i), "", i % 2 ? "1" : "2"));
  std::vector<const NodeVersions*> ptrs;
  for (const auto& n : many) ptrs.push_back(&n);
  EXPECT_EQ(FindJobChainDrift("huge", ptrs).size(), kChainJobDriftMax);
}

TEST(ChainDrift, ThreePoolsOneOddNodeEach) {
  std::vector<NodeVersions> fleet;
  for (int i = 0; i < 5; ++i) fleet.push_back(N("a" + std::to_string(i), "910B3", "24.1.rc3", "8.0.RC3"));
  for (int i = 0; i < 4; ++i) fleet.push_back(N("b" + std::to_string(i), "910B4", "24.1.rc2", "8.0.RC2"));
  for (int i = 0; i < 3; ++i) fleet.push_back(N("c" + std::to_string(i), "310P3", "23.0.0"));
  fleet[2].versions["driver"] = "24.1.rc2";  // a2: an old driver
  fleet[7].versions["cann"] = "8.0.RC3";     // b2: a newer CANN than its pool
  fleet[11].versions["driver"] = "23.0.1";   // c2
  EXPECT_EQ(Named(FindChainDrift(fleet)),
            (std::vector<std::string>{"a2/driver:24.1.rc2!=24.1.rc3", "b2/cann:8.0.RC3!=8.0.RC2",
                                      "c2/driver:23.0.1!=23.0.0"}));
  auto found = FindChainDrift(fleet);
  EXPECT_EQ(found[0].Message(), "driver 24.1.rc2 where 4 of 5 nodes of pool 910B3 run 24.1.rc3");
}

TEST(ChainDrift, NoStrictMajorityOrTooFewNodesIsNotJudged) {
  // Half and half: which half is right is not ClusterD's guess.
  EXPECT_TRUE(FindChainDrift({N("a", "p", "1"), N("b", "p", "1"), N("c", "p", "2"), N("d", "p", "2")}).empty());
  // Two nodes: not a pool to judge by.
  EXPECT_TRUE(FindChainDrift({N("a", "p", "1"), N("b", "p", "2")}).empty());
  // Three versions among three nodes: none has more than half.
  EXPECT_TRUE(FindChainDrift({N("a", "p", "1"), N("b", "p", "2"), N("c", "p", "3")}).empty());
  // Unknown versions do not count: 2 of the 3 known agree.
  EXPECT_EQ(Named(FindChainDrift({N("a", "p", "1"), N("b", "p", "1"), N("c", "p", "2"), N("d", "p", "")})),
            std::vector<std::string>{"c/driver:2!=1"});
  // A whole pool on another version than another pool is not drift.
  EXPECT_TRUE(FindChainDrift({N("a", "p", "1"), N("b", "p", "1"), N("c", "p", "1"), N("d", "q", "2"), N("e", "q", "2"),
                              N("f", "q", "2")})
                  .empty());
}

TEST(ChainDrift, ALargeFleetWithATenthDrifted) {
  std::vector<NodeVersions> fleet;
  for (int i = 0; i < 16000; ++i) {
    fleet.push_back(N("node" + std::to_string(i), i % 2 ? "910B3" : "910B4", i % 10 == 3 ? "old" : "new"));
  }
  auto found = FindChainDrift(fleet);
  EXPECT_EQ(found.size(), 1600u);
  for (const auto& f : found) EXPECT_EQ(f.version, "old");
}

}  // namespace
}  // namespace clusterd
