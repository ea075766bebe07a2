// The pingmesh's pure parts (docs/pingmesh.md): the probe plan covers every
// pair of a domain within its stated rounds and stays within its bounds; the
// attribution names the node, the link or the domain by majority; the
// tracker raises and clears with hysteresis and survives a restart.
#include <gtest/gtest.h>

#include <map>

#include <set>

#include "clusterd/pingmesh/attribution.h"
#include "clusterd/pingmesh/plan.h"

namespace clusterd::pingmesh {
namespace {

std::vector<std::string> Names(const std::string& prefix, int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%03d", prefix.c_str(), i);
    out.push_back(buf);
  }
  return out;
}

// Every ordered pair of every domain probed once within rounds_to_cover.
void ExpectCovers(const std::vector<ProbeDomain>& domains, const PlanLimits& limits) {
  const Plan first = PlanRound(domains, 0, limits);
  ASSERT_GT(first.rounds_to_cover, 0u);
  std::set<std::pair<std::string, std::string>> probed;
  for (uint64_t r = 0; r < first.rounds_to_cover; ++r) {
    const Plan p = PlanRound(domains, r, limits);
    EXPECT_LE(p.probes, limits.max_probes_per_round) << "round " << r;
    for (const auto& [node, peers] : p.peers) {
      EXPECT_LE(peers.size(), limits.peers_per_node * domains.size());
      for (const auto& peer : peers) {
        EXPECT_NE(node, peer);
        probed.insert({node, peer});
      }
    }
  }
  for (const auto& d : domains) {
    for (const auto& a : d.members) {
      for (const auto& b : d.members) {
        if (a == b) continue;
        EXPECT_TRUE(probed.count({a, b})) << d.id << ": " << a << " -> " << b << " never probed";
      }
    }
  }
}

TEST(PingmeshPlan, EveryPairOfADomainWithinTheStatedRounds) {
  const std::vector<ProbeDomain> domains = {{"superpod/1", Names("a", 48)}, {"superpod/2", Names("b", 7)}};
  const PlanLimits limits{4, 200'000};
  const Plan p = PlanRound(domains, 0, limits);
  EXPECT_EQ(p.fanout, 4u);
  EXPECT_EQ(p.stride, 1u);
  EXPECT_EQ(p.rounds_to_cover, 12u);  // 47 distances, 4 per round
  EXPECT_EQ(p.probes, 48u * 4 + 7u * 4);
  ExpectCovers(domains, limits);
}

TEST(PingmeshPlan, TheClusterWideBoundLowersTheFanoutThenTakesTurns) {
  const std::vector<ProbeDomain> domains = {{"d1", Names("a", 48)}, {"d2", Names("b", 48)}};
  PlanLimits limits{8, 200};  // 96 members: fan-out 2 fits (192)
  Plan p = PlanRound(domains, 0, limits);
  EXPECT_EQ(p.fanout, 2u);
  EXPECT_EQ(p.stride, 1u);
  ExpectCovers(domains, limits);

  limits.max_probes_per_round = 30;  // fan-out 1 is 96: members take turns
  p = PlanRound(domains, 5, limits);
  EXPECT_EQ(p.fanout, 1u);
  EXPECT_EQ(p.stride, 4u);
  EXPECT_EQ(p.rounds_to_cover, 47u * 4);
  ExpectCovers(domains, limits);
}

TEST(PingmeshPlan, ANodeInTwoDomainsProbesInBothAndSmallDomainsPlanNothing) {
  const std::vector<ProbeDomain> domains = {
      {"rack/1", {"n1", "n2", "n3"}}, {"superpod/1", {"n1", "n4"}}, {"rack/2", {"n9"}}};
  const Plan p = PlanRound(domains, 0, PlanLimits{4, 100});
  EXPECT_EQ(p.peers.at("n1"), (std::vector<std::string>{"n2", "n3", "n4"}));
  EXPECT_EQ(p.peers.count("n9"), 0u);
  ExpectCovers(domains, PlanLimits{1, 100});
}

TEST(PingmeshPlan, BadInputNamesTheOffence) {
  EXPECT_FALSE(ValidatePlanInput({}, PlanLimits{0, 1}).ok());
  EXPECT_FALSE(ValidatePlanInput({}, PlanLimits{65, 1}).ok());
  EXPECT_FALSE(ValidatePlanInput({}, PlanLimits{4, 0}).ok());
  const Status unsorted = ValidatePlanInput({{"d", {"b", "a"}}}, PlanLimits{});
  EXPECT_FALSE(unsorted.ok());
  EXPECT_NE(unsorted.message().find("not sorted"), std::string::npos) << unsorted.message();
  EXPECT_FALSE(ValidatePlanInput({{"d", {"a"}}, {"d", {"b"}}}, PlanLimits{}).ok());
  EXPECT_FALSE(ValidatePlanInput({{"", {"a"}}}, PlanLimits{}).ok());
  EXPECT_TRUE(ValidatePlanInput({{"d", {"a", "b"}}}, PlanLimits{}).ok());
}

// A full mesh of results over `members`, every pair sent 10, lost by `loss`.
template <typename LossFn>
std::vector<PairStats> Mesh(const std::vector<std::string>& members, LossFn loss) {
  std::vector<PairStats> out;
  for (const auto& a : members) {
    for (const auto& b : members) {
      if (a != b) out.push_back({a, b, 10, loss(a, b)});
    }
  }
  return out;
}

TEST(PingmeshAttribution, ANodeNothingReachesIsTheNodeNotItsPeers) {
  const auto members = Names("n", 8);
  const std::vector<ProbeDomain> domains = {{"rack/1", members}};
  // n003's probe port is blocked: every probe to it is lost, its own go out.
  const auto window = Mesh(members, [](const std::string&, const std::string& b) { return b == "n003" ? 10u : 0u; });
  const auto findings = Attribute(window, domains, AttributionRules{});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].Key(), "node/n003");
  EXPECT_EQ(findings[0].bad, 7u);
  EXPECT_EQ(findings[0].judged, 7u);
  EXPECT_DOUBLE_EQ(findings[0].loss, 1.0);
}

TEST(PingmeshAttribution, ANodeThatReachesNothingIsTheNode) {
  const auto members = Names("n", 8);
  const auto window = Mesh(members, [](const std::string& a, const std::string&) { return a == "n005" ? 9u : 0u; });
  const auto findings = Attribute(window, {{"rack/1", members}}, AttributionRules{});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].Key(), "node/n005");
}

TEST(PingmeshAttribution, OneBadPairIsALinkBetweenTwoHealthyNodes) {
  const auto members = Names("n", 6);
  const auto window = Mesh(members, [](const std::string& a, const std::string& b) {
    return (a == "n001" && b == "n004") || (a == "n004" && b == "n001") ? (a == "n001" ? 6u : 10u) : 0u;
  });
  const auto findings = Attribute(window, {{"rack/1", members}}, AttributionRules{});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].Key(), "link/n001/n004");
  EXPECT_DOUBLE_EQ(findings[0].loss, 1.0);  // the worse direction
}

TEST(PingmeshAttribution, AWholeDomainFailingIsTheDomain) {
  const auto a = Names("a", 6);
  const auto b = Names("b", 6);
  // Probes stay inside their domain (the plan's rule): inside rack a every
  // probe is lost, rack b is fine.
  auto window = Mesh(a, [](auto&, auto&) { return 10u; });
  const auto fine = Mesh(b, [](auto&, auto&) { return 0u; });
  window.insert(window.end(), fine.begin(), fine.end());
  const auto findings = Attribute(window, {{"rack/a", a}, {"rack/b", b}}, AttributionRules{});
  ASSERT_EQ(findings.size(), 1u) << findings[0].Key();
  EXPECT_EQ(findings[0].Key(), "domain/rack/a");
  EXPECT_EQ(findings[0].bad, 6u);
}

TEST(PingmeshAttribution, ExplainNamesWhatAccountsForEachBadDirection) {
  const auto a = Names("a", 6);
  const auto b = Names("b", 6);
  // Rack a is down as a whole; in rack b, b002 is unreachable and the cable
  // b000 <-> b004 is cut; one direction has too few probes to judge.
  auto window = Mesh(a, [](auto&, auto&) { return 10u; });
  const auto rack_b = Mesh(b, [](const std::string& s, const std::string& t) {
    if (t == "b002") return 10u;
    return (s == "b000" && t == "b004") || (s == "b004" && t == "b000") ? 10u : 0u;
  });
  window.insert(window.end(), rack_b.begin(), rack_b.end());
  window.push_back({"a000", "b000", 2, 2});
  const std::vector<ProbeDomain> domains = {{"rack=a", a}, {"rack=b", b}};
  const auto findings = Attribute(window, domains, AttributionRules{});
  const auto verdicts = Explain(window, findings, domains, AttributionRules{});
  ASSERT_EQ(verdicts.size(), window.size());
  std::map<std::string, std::string> by_pair;
  for (size_t i = 0; i < window.size(); ++i) by_pair[window[i].source + ">" + window[i].target] = verdicts[i];
  EXPECT_EQ(by_pair["a001>a003"], "domain:rack=a");
  EXPECT_EQ(by_pair["b001>b002"], "node:b002");
  EXPECT_EQ(by_pair["b002>b001"], "") << "its own probes went out";
  EXPECT_EQ(by_pair["b000>b004"], "link");
  EXPECT_EQ(by_pair["b004>b000"], "link");
  EXPECT_EQ(by_pair["b001>b003"], "");
  EXPECT_EQ(by_pair["a000>b000"], "") << "too few probes to judge";
}

TEST(PingmeshAttribution, TooFewSamplesOrPeersJudgeNothing) {
  const std::vector<std::string> two = {"x", "y"};
  // Two nodes, all lost: under min_peers no node is judged; the pair is a link.
  auto findings = Attribute(Mesh(two, [](auto&, auto&) { return 10u; }), {{"d", two}}, AttributionRules{});
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].Key(), "link/x/y");
  // Two probes only: not judged at all.
  findings = Attribute({{"x", "y", 2, 2}}, {{"d", two}}, AttributionRules{});
  EXPECT_TRUE(findings.empty());
  // Healthy: nothing.
  const auto members = Names("n", 5);
  EXPECT_TRUE(Attribute(Mesh(members, [](auto&, auto&) { return 1u; }), {{"d", members}}, AttributionRules{}).empty());
}

TEST(PingmeshAttribution, RulesOutOfRangeAreRefused) {
  AttributionRules r;
  r.bad_loss = 0;
  EXPECT_FALSE(ValidateRules(r).ok());
  r = AttributionRules{};
  r.domain_share = 1.5;
  EXPECT_FALSE(ValidateRules(r).ok());
  r = AttributionRules{};
  r.min_sent = 0;
  EXPECT_FALSE(ValidateRules(r).ok());
  EXPECT_TRUE(ValidateRules(AttributionRules{}).ok());
}

TEST(PingmeshTracker, AWindowThatDidNotJudgeAFindingCountsNeitherWay) {
  // A SuperPoD of 48 at a fan-out of 4 probes a pair once per 12 rounds: a
  // window may hold one direction of a cut link, the next none, the one
  // after the other direction. Windows without it do not reset it.
  const auto members = Names("n", 48);
  const std::vector<ProbeDomain> domains = {{"superpod=1", members}};
  const AttributionRules rules;
  auto window_with = [&](bool cut_probed) {
    std::vector<PairStats> w;
    for (size_t i = 0; i < members.size(); ++i) {
      // Everyone probes its 4 next members; the cut pair (n000, n030) only when asked.
      for (size_t d = 1; d <= 4; ++d) w.push_back({members[i], members[(i + d) % members.size()], 3, 0});
    }
    if (cut_probed) w.push_back({"n000", "n030", 3, 3});
    return w;
  };
  FindingTracker tracker(2, 2);
  for (bool probed : {true, false, false, true}) {
    std::set<std::string> judged;
    const auto findings = Attribute(window_with(probed), domains, rules, &judged);
    EXPECT_EQ(judged.contains("link/n000/n030"), probed);
    EXPECT_TRUE(judged.contains("node/n000"));
    EXPECT_TRUE(judged.contains("domain/superpod=1"));
    const auto changes = tracker.Update(findings, &judged);
    if (probed && !tracker.Active().empty()) {
      ASSERT_EQ(changes.size(), 1u);
      EXPECT_EQ(changes[0].finding.Key(), "link/n000/n030");
    }
  }
  ASSERT_EQ(tracker.Active().size(), 1u) << "raised on its second judged window, not reset by the two without it";
  // Healthy when probed again, twice: cleared; windows without it do not clear it.
  auto healthy = window_with(false);
  healthy.push_back({"n030", "n000", 3, 0});
  std::set<std::string> judged;
  EXPECT_TRUE(tracker.Update(Attribute(healthy, domains, rules, &judged), &judged).empty());
  judged.clear();
  EXPECT_TRUE(tracker.Update(Attribute(window_with(false), domains, rules, &judged), &judged).empty());
  judged.clear();
  const auto cleared = tracker.Update(Attribute(healthy, domains, rules, &judged), &judged);
  ASSERT_EQ(cleared.size(), 1u);
  EXPECT_FALSE(cleared[0].raised);
}

TEST(PingmeshTracker, RaisesAfterNWindowsClearsAfterMAndSurvivesARestart) {
  FindingTracker tracker(2, 3);
  const Finding node{FindingKind::kNode, "n1", "", 5, 6, 1.0};
  EXPECT_TRUE(tracker.Update({node}).empty());  // once: not yet
  auto changes = tracker.Update({node});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_TRUE(changes[0].raised);
  EXPECT_TRUE(tracker.Update({}).empty());
  EXPECT_TRUE(tracker.Update({}).empty());
  EXPECT_TRUE(tracker.Update({node}).empty());  // back before the clear: still active, no change
  EXPECT_TRUE(tracker.Update({}).empty());
  EXPECT_TRUE(tracker.Update({}).empty());
  changes = tracker.Update({});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].raised);
  EXPECT_TRUE(tracker.Active().empty());

  // A flapping finding that never lasts raise_after windows is never raised.
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(tracker.Update({node}).empty());
    EXPECT_TRUE(tracker.Update({}).empty());
  }

  // Restart: the stored finding is active again; it clears by the same rule.
  FindingTracker restarted(2, 1);
  restarted.Restore({node});
  EXPECT_EQ(restarted.Active().size(), 1u);
  EXPECT_TRUE(restarted.Update({node}).empty());
  changes = restarted.Update({});
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_FALSE(changes[0].raised);
}

}  // namespace
}  // namespace clusterd::pingmesh
