// Decisions by domain (docs/domains.md, "What an incident changes in
// decisions"): an open incident that does not isolate its domain keeps
// placement out of it (avoid-domain, lifted when it closes, kept across a
// restart, only recorded in dry-run), and a job whose placement requires the
// domain (SuperPoD affinity) moves as a unit. Synthetic SuperPoD fleets
// through the real rules, Engine and Coordinator (incidents_fixture.h).
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/state/domains.h"
#include "clusterd/state/incidents.h"
#include "incidents_fixture.h"
#include "test/support/state/state_fixtures.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::IncidentsTest;
using testing::kSuperPodLabel;
using testing::MakeHello;
using testing::MakeTransition;
using testing::NodeName;

class AvoidDomainTest : public IncidentsTest {
 protected:
  // `pods` SuperPoDs of `per_pod` nodes, no jobs.
  void Nodes(int pods, int per_pod) {
    for (int p = 1; p <= pods; ++p) {
      for (int i = 0; i < per_pod; ++i) {
        v1::Hello h = MakeHello(NodeName(p, i), 1);
        (*h.mutable_labels())[kSuperPodLabel] = std::to_string(p);
        Write([h](ClusterState& s, Mutation* m) { return s.ApplyHello(h, 1, m).status(); });
      }
    }
  }
  // A job on chips 0-1 of nodes [from, to) of SuperPoD 1, with `labels`.
  void Job(const std::string& id, int from, int to, const std::map<std::string, std::string>& labels,
           const std::vector<v1::RecoveryStrategy>& allowed = {}) {
    v1::Job job;
    job.set_id(id);
    job.set_kind(v1::JOB_KIND_TRAINING);
    uint32_t rank = 0;
    for (int i = from; i < to; ++i) {
      for (uint32_t d = 0; d < 2; ++d) {
        auto* pl = job.add_placement();
        pl->set_rank(rank++);
        pl->set_node(NodeName(1, i));
        pl->set_device_id(d);
      }
    }
    for (const auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
    job.mutable_policy()->mutable_hold_down()->set_seconds(1);
    for (v1::RecoveryStrategy a : allowed) job.mutable_policy()->add_allowed_strategies(a);
    Write([job](ClusterState& s, Mutation* m) { return s.ApplyCreateJob(job, m).status(); });
  }
  // A chip lost (SEPARATE: its ranks move, POD_RESCHEDULE) on chip 0.
  void ChipLost(const std::string& node) {
    const uint64_t seq = ++seq_[node];
    Write([=](ClusterState& s, Mutation* m) {
      v1::FaultTransition t = MakeTransition(1, seq, true, 0u, "TEST_CHIP_LOST");
      t.mutable_fault()->set_level(v1::FAULT_LEVEL_SEPARATE);
      return s.ApplyTransition(node, 1, t, m).status();
    });
  }
  void ClearChipFault(const std::string& node) {
    const std::string fault = node + "/0/accelerator/80E01801";
    Write([fault](ClusterState& s, Mutation* m) { return s.ApplyClearFault(fault, "alice", "replaced", m).status(); });
  }
  std::map<std::string, std::string> AvoidedNodes() {
    return state_->Read([&](const StateView& v) { return IncidentsOf(*state_)->AvoidedNodes(v); });
  }
  std::vector<std::string> KeptOut() {
    return state_->Read([&](const StateView&) { return Coordinator::KeptOutDomains(*state_); });
  }
  // superpod=<pod>'s Domain as ListDomains answers it.
  v1::Domain DomainOf(int pod) {
    const auto list = state_->Read(
        [&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), v1::ListDomainsRequest()); });
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    for (const auto& d : list->domains()) {
      if (DomainKey(d.ref()) == "superpod=" + std::to_string(pod)) return d;
    }
    ADD_FAILURE() << "no domain superpod=" << pod;
    return v1::Domain();
  }
  static std::vector<v1::IncidentDecision> DecisionsOf(const v1::Incident& inc, const std::string& action) {
    std::vector<v1::IncidentDecision> out;
    for (const auto& d : inc.decisions()) {
      if (d.action() == action) out.push_back(d);
    }
    return out;
  }
  // Chip faults on nodes 0..3 of SuperPoD 1 within the window: 4 of 12
  // nodes, one incident, under the isolation share.
  std::string FourNodeIncident() {
    for (int i = 0; i < 4; ++i) {
      AdvanceTo(clock_.Now() + 100ms);
      ChipFault(NodeName(1, i), true);
    }
    const auto list = Incidents();
    EXPECT_EQ(list.total_size(), 1);
    return list.incidents_size() == 1 ? list.incidents(0).id() : std::string();
  }
};

TEST_F(AvoidDomainTest, ALoneChipFaultStaysAChipFaultAndAddsNoAvoidHint) {
  Nodes(2, 12);
  ChipFault(NodeName(1, 5), true);
  AdvanceTo(clock_.Now() + 20s);
  EXPECT_EQ(Incidents().total_size(), 0);
  EXPECT_TRUE(AvoidedNodes().empty());
  EXPECT_TRUE(KeptOut().empty());
  EXPECT_FALSE(DomainOf(1).avoided());
}

// 4 of 12 nodes hit: not isolated (the share is 50 %), but no rank is placed
// into the domain while the incident is open; the hint is stored with the
// incident, survives a restart, and is lifted when the incident closes.
TEST_F(AvoidDomainTest, AnOpenIncidentUnderTheShareAvoidsItsDomainUntilItCloses) {
  Nodes(2, 12);
  const std::string id = FourNodeIncident();
  ASSERT_FALSE(id.empty());
  v1::Incident inc = Incident(id);
  EXPECT_FALSE(inc.isolated());
  EXPECT_TRUE(inc.avoid());
  const auto avoid = DecisionsOf(inc, "avoid-domain");
  ASSERT_EQ(avoid.size(), 1u);
  EXPECT_FALSE(avoid[0].dry_run());
  EXPECT_NE(avoid[0].detail().find("superpod=1"), std::string::npos) << avoid[0].detail();
  EXPECT_EQ(IsolatedIn(1, 12), 0);
  EXPECT_TRUE(DomainOf(1).avoided());
  EXPECT_FALSE(DomainOf(2).avoided());
  // Every node of the domain (the hit ones too), none of SuperPoD 2.
  const auto nodes = AvoidedNodes();
  EXPECT_EQ(nodes.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(nodes.count(NodeName(1, i)), 1u) << i;
  EXPECT_EQ(nodes.at(NodeName(1, 0)), id);
  EXPECT_EQ(KeptOut(), std::vector<std::string>{std::string(kSuperPodLabel) + "=1"});
  // Further faults of the incident decide nothing again.
  AdvanceTo(clock_.Now() + 100ms);
  ChipFault(NodeName(1, 4), true);
  EXPECT_EQ(DecisionsOf(Incident(id), "avoid-domain").size(), 1u);

  Restart();
  inc = Incident(id);
  EXPECT_TRUE(inc.avoid());
  EXPECT_TRUE(DomainOf(1).avoided());
  EXPECT_EQ(AvoidedNodes().size(), 12u);
  EXPECT_EQ(DecisionsOf(inc, "avoid-domain").size(), 1u);

  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(Incident(id).state(), v1::INCIDENT_STATE_OPEN);
    EXPECT_EQ(AvoidedNodes().size(), 12u);
    ClearChipFault(NodeName(1, i));
  }
  inc = Incident(id);
  EXPECT_EQ(inc.state(), v1::INCIDENT_STATE_CLOSED);
  EXPECT_FALSE(inc.avoid());
  EXPECT_EQ(DecisionsOf(inc, "avoid-domain-lifted").size(), 1u);
  EXPECT_TRUE(AvoidedNodes().empty());
  EXPECT_TRUE(KeptOut().empty());
  EXPECT_FALSE(DomainOf(1).avoided());
  Restart();
  EXPECT_FALSE(Incident(id).avoid());
  EXPECT_TRUE(AvoidedNodes().empty());
}

// Dry-run: the hint is recorded (dry_run) and not applied; once dry-run is
// off, the incident's next change applies it.
TEST_F(AvoidDomainTest, InDryRunTheHintIsRecordedNotApplied) {
  Nodes(1, 12);
  SetDryRun(true);
  const std::string id = FourNodeIncident();
  ASSERT_FALSE(id.empty());
  v1::Incident inc = Incident(id);
  EXPECT_FALSE(inc.avoid());
  auto avoid = DecisionsOf(inc, "avoid-domain");
  ASSERT_EQ(avoid.size(), 1u);
  EXPECT_TRUE(avoid[0].dry_run());
  EXPECT_TRUE(AvoidedNodes().empty());
  EXPECT_FALSE(DomainOf(1).avoided());

  SetDryRun(false);
  AdvanceTo(clock_.Now() + 100ms);
  ChipFault(NodeName(1, 4), true);
  inc = Incident(id);
  EXPECT_TRUE(inc.avoid());
  avoid = DecisionsOf(inc, "avoid-domain");
  ASSERT_EQ(avoid.size(), 2u);
  EXPECT_FALSE(avoid[1].dry_run());
  EXPECT_EQ(AvoidedNodes().size(), 12u);
}

// Past the share the domain is isolated: isolation keeps work out (its nodes'
// isolation taint), so it is not also "avoided"; the recoveries' cluster
// actions still name it.
TEST_F(AvoidDomainTest, AnIsolatedDomainIsKeptOutByItsIsolation) {
  Nodes(2, 8);
  for (int i = 0; i < 8; ++i) {
    AdvanceTo(clock_.Now() + 100ms);
    ChipFault(NodeName(1, i), true);
  }
  ASSERT_EQ(Incidents().total_size(), 1);
  const v1::Incident inc = Incident(Incidents().incidents(0).id());
  EXPECT_TRUE(inc.isolated());
  EXPECT_EQ(IsolatedIn(1, 8), 8);
  EXPECT_FALSE(DomainOf(1).avoided());
  EXPECT_TRUE(AvoidedNodes().empty());
  EXPECT_EQ(KeptOut(), std::vector<std::string>{std::string(kSuperPodLabel) + "=1"});
}

// A job with SuperPoD affinity (MindCluster's sp-block) whose chips are lost
// in a domain with an open incident is rescheduled whole (JOB_RESCHEDULE),
// recorded as the incident's move-job decision; a job without affinity has
// its hit ranks rescheduled (POD_RESCHEDULE); both recoveries say no
// replacement is placed into the domain.
TEST_F(AvoidDomainTest, AJobThatRequiresTheDomainMovesAsAUnit) {
  Nodes(2, 12);
  Job("sp-job", 0, 6, {{"mindcluster/sp-block", "16"}});
  Job("plain", 6, 12, {});
  for (int i : {0, 1, 6, 7}) {
    AdvanceTo(clock_.Now() + 100ms);
    ChipLost(NodeName(1, i));
  }
  AdvanceTo(clock_.Now() + 5s);  // past the hold-downs
  ASSERT_EQ(Incidents().total_size(), 1);
  const v1::Incident inc = Incident(Incidents().incidents(0).id());
  EXPECT_FALSE(inc.isolated());
  EXPECT_TRUE(inc.avoid());
  std::map<std::string, v1::Recovery> by_job;
  state_->Read([&](const StateView& v) {
    for (const auto& [id, r] : v.recoveries()) by_job[r.job_id()] = r;
    return 0;
  });
  ASSERT_EQ(by_job.size(), 2u);
  const v1::Recovery& moved = by_job.at("sp-job");
  EXPECT_EQ(moved.strategy(), v1::RECOVERY_STRATEGY_JOB_RESCHEDULE);
  ASSERT_GT(moved.reasons_size(), 0);
  EXPECT_NE(moved.reasons(moved.reasons_size() - 1).find("moved as a unit out of superpod=1"), std::string::npos)
      << moved.reasons(moved.reasons_size() - 1);
  EXPECT_EQ(by_job.at("plain").strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  const auto moves = DecisionsOf(inc, "move-job");
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0].job_id(), "sp-job");
  EXPECT_EQ(moves[0].recovery_id(), moved.id());
  EXPECT_FALSE(moves[0].dry_run());
  const auto recoveries = DecisionsOf(inc, "recovery");
  ASSERT_EQ(recoveries.size(), 2u);
  for (const auto& d : recoveries) {
    EXPECT_NE(d.detail().find("no replacement is placed into superpod=1"), std::string::npos) << d.detail();
  }
}

// A job whose policy does not allow JOB_RESCHEDULE keeps its rank-by-rank
// move, and its recovery says why.
TEST_F(AvoidDomainTest, AJobThatRequiresTheDomainButMayNotRestartWholeMovesItsRanks) {
  Nodes(1, 12);
  Job("sp-job", 0, 6, {{std::string(kDomainAffinityLabel), "superpod"}}, {v1::RECOVERY_STRATEGY_POD_RESCHEDULE});
  for (int i : {0, 1, 2, 3}) {
    AdvanceTo(clock_.Now() + 100ms);
    ChipLost(NodeName(1, i));
  }
  AdvanceTo(clock_.Now() + 5s);
  ASSERT_EQ(Incidents().total_size(), 1);
  v1::Recovery r;
  state_->Read([&](const StateView& v) {
    for (const auto& [id, rec] : v.recoveries()) r = rec;
    return 0;
  });
  EXPECT_EQ(r.strategy(), v1::RECOVERY_STRATEGY_POD_RESCHEDULE);
  bool said = false;
  for (const auto& reason : r.reasons())
    said = said || reason.find("does not allow JOB_RESCHEDULE") != std::string::npos;
  EXPECT_TRUE(said);
  EXPECT_TRUE(DecisionsOf(Incident(Incidents().incidents(0).id()), "move-job").empty());
}

TEST(DomainAffinityTest, MindClusterSuperPodAffinityAndTheLabel) {
  auto with = [](std::map<std::string, std::string> labels) {
    v1::Job job;
    for (const auto& [k, v] : labels) (*job.mutable_labels())[k] = v;
    return DomainAffinityOf(job);
  };
  EXPECT_FALSE(with({}));
  EXPECT_FALSE(with({{"mindcluster/recover-strategy", "retry"}}));
  EXPECT_TRUE(with({{"mindcluster/sp-block", "16"}}));
  EXPECT_TRUE(with({{"mindcluster/huawei.com/schedule_policy", "chip2-node16-sp"}}));
  EXPECT_TRUE(with({{"mindcluster/huawei.com/schedule_policy", "chip8-node8-ra64-sp"}}));
  // The schedule policy decides when it is there (ascend-for-volcano's
  // IsSuperPodJob): a policy that is not a SuperPoD one wins over an sp-block.
  EXPECT_FALSE(with({{"mindcluster/huawei.com/schedule_policy", "chip4-node8"}, {"mindcluster/sp-block", "16"}}));
  EXPECT_TRUE(with({{std::string(kDomainAffinityLabel), "superpod"}}));
  EXPECT_FALSE(with({{std::string(kDomainAffinityLabel), ""}}));
}

TEST(ActionJsonTest, TheDomainsToAvoidTravelWithARescheduleAndOnlyWhenSet) {
  ActionRequest req;
  req.idempotency_key = "j.1/2";
  req.action = v1::CLUSTER_ACTION_RESTART_JOB;
  EXPECT_EQ(ActionJson(req).find("avoid"), std::string::npos);
  req.avoid = {"huawei.com/topotree.superpodid=7"};
  EXPECT_NE(ActionJson(req).find(R"("avoid":["huawei.com/topotree.superpodid=7"])"), std::string::npos)
      << ActionJson(req);
}

}  // namespace
}  // namespace clusterd
