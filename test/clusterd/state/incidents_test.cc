// Fault domains and incidents (state/domains.h, state/incidents.h,
// docs/domains.md) on synthetic fleets: the real rule set (MakeWriterRules)
// and the recovery Coordinator on a real ClusterState and Engine, stepped by
// hand on a FakeClock. A cascade across the 72 nodes of one SuperPoD (8 nodes
// within 0.5 s, the rest within 7 s) is one incident naming the switch fault
// as its root, each job gets one recovery for it, the domain is isolated as a
// whole once past its share (and only recorded in dry-run); a lone chip fault
// stays a chip fault; incidents survive a restart and close when their faults
// clear.
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/engine/writer_rules.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/state/domains.h"
#include "clusterd/state/incidents.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/storage/memory_store.h"
#include "common/metrics.h"
#include "test/support/state/state_fixtures.h"
#include "incidents_fixture.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::IncidentsTest;
using testing::kSuperPodLabel;
using testing::MakeHello;
using testing::MakeTransition;
using testing::NodeName;

TEST(DomainModelTest, LevelsParseAndNameEachNodesDomainsInOrder) {
  auto model = DomainModel::Make({"superpod=huawei.com/topotree.superpodid", "rack=rack"});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  v1::Node node;
  (*node.mutable_labels())["rack"] = "r3";
  (*node.mutable_labels())["huawei.com/topotree.superpodid"] = "7";
  const auto domains = model->Of(node);
  ASSERT_EQ(domains.size(), 2u);
  EXPECT_EQ(DomainKey(domains[0]), "superpod=7");
  EXPECT_EQ(DomainKey(domains[1]), "rack=r3");
  auto term = model->SelectorOf(domains[0]);
  ASSERT_TRUE(term.ok());
  EXPECT_EQ(*term, "huawei.com/topotree.superpodid=7");
  EXPECT_EQ(model->SelectorOf(*ParseDomainRef("block=1")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DomainModel::Make({"superpod"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DomainModel::Make({"a=x", "a=y"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseDomainRef("nodomain").status().code(), StatusCode::kInvalidArgument);
}

TEST_F(IncidentsTest, TheIncidentRuleRunsAfterThePoliciesAndBeforeTheCoordinator) {
  std::vector<std::string> names;
  for (WriterRule* r : rules_.Ordered(coordinator_.get())) names.emplace_back(r->name());
  ASSERT_GE(names.size(), 3u);
  // The evidence rule between them asks the members of what the incident
  // rule formed in the same turn; it changes nothing the Coordinator reads.
  EXPECT_EQ(names[names.size() - 3], "incidents");
  EXPECT_EQ(names[names.size() - 2], "evidence");
  EXPECT_EQ(names.back(), "recoveries");
}

TEST_F(IncidentsTest, NodesKnowTheirDomainsAndListDomainsCountsMembersAndHealth) {
  Fleet(2, 6);
  ChipFault(NodeName(1, 2), true);
  const auto node = state_->Read([&](const StateView& v) {
    v1::GetNodeRequest req;
    req.set_name(NodeName(1, 2));
    return GetNodeWithDomains(v, IncidentsOf(*state_), req);
  });
  ASSERT_TRUE(node.ok());
  ASSERT_EQ(node->node().domains_size(), 1);
  EXPECT_EQ(DomainKey(node->node().domains(0)), "superpod=1");

  const auto members = state_->Read([&](const StateView& v) {
    v1::ListNodesRequest req;
    req.set_domain("superpod=2");
    return ListNodesWithDomains(v, IncidentsOf(*state_), req);
  });
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  EXPECT_EQ(members->total_size(), 6);
  for (const auto& n : members->nodes()) EXPECT_EQ(n.name().substr(0, 3), "sp2");

  const auto bad = state_->Read([&](const StateView& v) {
    v1::ListNodesRequest req;
    req.set_domain("block=1");
    return ListNodesWithDomains(v, IncidentsOf(*state_), req);
  });
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);

  const auto domains = state_->Read(
      [&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), v1::ListDomainsRequest()); });
  ASSERT_TRUE(domains.ok()) << domains.status().ToString();
  ASSERT_EQ(domains->domains_size(), 2);
  EXPECT_EQ(DomainKey(domains->domains(0).ref()), "superpod=1");
  EXPECT_EQ(domains->domains(0).nodes(), 6u);
  EXPECT_EQ(domains->domains(0).devices(), 48u);
  EXPECT_EQ(domains->domains(0).nodes_faulted(), 1u);
  EXPECT_EQ(domains->domains(0).devices_faulted(), 1u);
  EXPECT_EQ(domains->domains(1).nodes_faulted(), 0u);
  // The metric's count: SuperPoD 1 degraded, SuperPoD 2 not.
  const auto degraded = state_->Read([&](const StateView& v) {
    const IncidentRule* rule = IncidentsOf(*state_);
    return DegradedDomainsByLevel(v, rule->model(), rule);
  });
  EXPECT_EQ(degraded.at("superpod"), 1u);
  EXPECT_EQ(degraded.at("rack"), 0u);
  // Paged one at a time: the token resumes after the first.
  v1::ListDomainsRequest one;
  one.set_page_size(1);
  const auto first = state_->Read([&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), one); });
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->domains_size(), 1);
  ASSERT_FALSE(first->next_page_token().empty());
  one.set_page_token(first->next_page_token());
  const auto second = state_->Read([&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), one); });
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(second->domains_size(), 1);
  EXPECT_EQ(DomainKey(second->domains(0).ref()), "superpod=2");
}

TEST_F(IncidentsTest, ALoneChipFaultInADomainStaysAChipFault) {
  Fleet(1, 72);
  ChipFault(NodeName(1, 5), true);
  AdvanceTo(clock_.Now() + 20s);
  EXPECT_EQ(Incidents().total_size(), 0);
  EXPECT_TRUE(Events(v1::EVENT_TYPE_INCIDENT_OPENED).empty());
  // Its job's recovery is decided as before.
  EXPECT_EQ(RecoveriesByJob()["train-a"], 1);
  EXPECT_EQ(IsolatedIn(1, 72), 0);
}

TEST_F(IncidentsTest, ACascadeAcrossOneSuperPodIsOneIncidentWithTheSwitchAsRoot) {
  Fleet(2, 72);
  Cascade(72);
  const auto list = Incidents();
  ASSERT_EQ(list.total_size(), 1);
  const v1::Incident inc = Incident(list.incidents(0).id());
  EXPECT_EQ(DomainKey(inc.domain()), "superpod=1");
  EXPECT_EQ(inc.state(), v1::INCIDENT_STATE_OPEN);
  EXPECT_EQ(inc.root().kind(), v1::INCIDENT_ROOT_KIND_SWITCH);
  EXPECT_EQ(inc.root().subject(), "switch:leaf-7");
  EXPECT_EQ(inc.nodes_hit(), 72u);
  EXPECT_EQ(inc.domain_nodes(), 72u);
  EXPECT_EQ(inc.devices_hit(), 72u);
  EXPECT_EQ(Events(v1::EVENT_TYPE_INCIDENT_OPENED).size(), 1u);
  EXPECT_FALSE(Events(v1::EVENT_TYPE_INCIDENT_UPDATED).empty());
  // The domain, past 50 % hit, is isolated as a whole; the other SuperPoD is
  // untouched.
  EXPECT_TRUE(inc.isolated());
  EXPECT_EQ(IsolatedIn(1, 72), 72);
  EXPECT_EQ(IsolatedIn(2, 72), 0);
  bool isolate_decided = false;
  for (const auto& d : inc.decisions()) isolate_decided = isolate_decided || d.action() == "isolate-domain";
  EXPECT_TRUE(isolate_decided);
  const auto domains = state_->Read(
      [&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), v1::ListDomainsRequest()); });
  ASSERT_TRUE(domains.ok());
  EXPECT_EQ(domains->domains(0).open_incident(), inc.id());
  EXPECT_TRUE(domains->domains(0).isolated());
  EXPECT_TRUE(domains->domains(1).open_incident().empty());
}

// The pingmesh (docs/pingmesh.md) finds every member of SuperPoD 1
// unreachable by its peers for two windows: its DOMAIN_PINGMESH_LOSS on each
// member is one incident whose root is the domain's network, with the
// pingmesh's fault as evidence.
TEST_F(IncidentsTest, ThePingmeshJudgingADomainsNetworkIsItsIncidentsRoot) {
  constexpr int kNodes = 12;
  Fleet(2, kNodes);
  auto* pingmesh = state_->Attached<PingmeshRule>();
  ASSERT_NE(pingmesh, nullptr);
  Write([&](ClusterState&, Mutation*) {
    for (int i = 0; i < kNodes; ++i) pingmesh->AgentUp(NodeName(1, i), 1, "10.0.0." + std::to_string(i + 1), 11255);
    return Status::Ok();
  });
  for (int window = 0; window < 2; ++window) {
    Write([&](ClusterState&, Mutation*) {
      for (int i = 0; i < kNodes; ++i) {
        std::vector<pingmesh::PairStats> lost;
        for (int j = 0; j < kNodes; ++j) {
          if (j != i) lost.push_back({NodeName(1, i), NodeName(1, j), 3, 3});
        }
        pingmesh->Record(NodeName(1, i), lost);
      }
      return Status::Ok();
    });
    AdvanceTo(clock_.Now() + config_.pingmesh_window);
  }
  const auto list = Incidents();
  ASSERT_EQ(list.total_size(), 1);
  const v1::Incident inc = Incident(list.incidents(0).id());
  EXPECT_EQ(DomainKey(inc.domain()), "superpod=1");
  EXPECT_EQ(inc.nodes_hit(), static_cast<uint32_t>(kNodes));
  EXPECT_EQ(inc.root().kind(), v1::INCIDENT_ROOT_KIND_DOMAIN);
  EXPECT_EQ(inc.root().subject(), "superpod=1");
  EXPECT_NE(inc.root().fault_id().find("pingmesh/domain/superpod=1"), std::string::npos) << inc.root().fault_id();
  EXPECT_EQ(inc.root().evidence().rfind("the pingmesh: ", 0), 0u) << inc.root().evidence();
}

// Dry-run: the jobs' recoveries end at once (DRY_RUN), so each new fault of
// a job would be decided again; within the incident each job gets one, and
// the domain's isolation is recorded, not done.
TEST_F(IncidentsTest, InDryRunEachJobGetsOneRecoveryForTheIncidentAndNothingIsIsolated) {
  Fleet(2, 72);
  SetDryRun(true);
  Cascade(72);
  ASSERT_EQ(Incidents().total_size(), 1);
  const v1::Incident inc = Incident(Incidents().incidents(0).id());
  const auto by_job = RecoveriesByJob();
  EXPECT_EQ(by_job.at("train-a"), 1);
  EXPECT_EQ(by_job.at("train-b"), 1);
  std::set<std::string> jobs_decided;
  bool isolation_recorded = false;
  for (const auto& d : inc.decisions()) {
    if (d.action() == "recovery") jobs_decided.insert(d.job_id());
    if (d.action() == "isolate-domain") isolation_recorded = d.dry_run();
  }
  EXPECT_EQ(jobs_decided, (std::set<std::string>{"train-a", "train-b"}));
  EXPECT_TRUE(isolation_recorded);
  EXPECT_FALSE(inc.isolated());
  EXPECT_EQ(IsolatedIn(1, 72), 0);
}

TEST_F(IncidentsTest, ThePerDomainBlastRadiusHoldsASecondDomainsIsolation) {
  Fleet(2, 16);
  const auto cascade_in = [&](int pod) {
    for (int i = 0; i < 16; ++i) {
      AdvanceTo(clock_.Now() + 100ms);
      ChipFault(NodeName(pod, i), true);
    }
    AdvanceTo(clock_.Now() + 5s);
  };
  cascade_in(1);
  cascade_in(2);
  ASSERT_EQ(Incidents().total_size(), 2);
  EXPECT_EQ(IsolatedIn(1, 16), 16);
  EXPECT_EQ(IsolatedIn(2, 16), 0);
  const v1::Incident second = Incident(Incidents().incidents(0).id());
  EXPECT_EQ(DomainKey(second.domain()), "superpod=2");
  ASSERT_FALSE(second.decisions().empty());
  bool held = false;
  for (const auto& d : second.decisions()) {
    held = held || (d.action() == "isolate-domain-held" &&
                    d.detail().find("incident_max_isolated_domains") != std::string::npos);
  }
  EXPECT_TRUE(held);
}

TEST_F(IncidentsTest, AnIncidentSurvivesARestartAndClosesWhenItsFaultsClear) {
  Fleet(1, 12);
  for (int i = 0; i < 4; ++i) {
    AdvanceTo(clock_.Now() + 100ms);
    ChipFault(NodeName(1, i), true);
  }
  ASSERT_EQ(Incidents().total_size(), 1);
  const std::string id = Incidents().incidents(0).id();
  const v1::Incident before = Incident(id);
  EXPECT_EQ(before.nodes_hit(), 4u);
  EXPECT_EQ(before.root().kind(), v1::INCIDENT_ROOT_KIND_DOMAIN);

  Restart();
  const v1::Incident after = Incident(id);
  EXPECT_EQ(after.state(), v1::INCIDENT_STATE_OPEN);
  EXPECT_EQ(after.nodes_hit(), 4u);
  EXPECT_EQ(after.members_size(), 4);
  EXPECT_EQ(after.active_faults(), 4u);
  const auto domains = state_->Read(
      [&](const StateView& v) { return ListDomainsWith(v, IncidentsOf(*state_), v1::ListDomainsRequest()); });
  ASSERT_TRUE(domains.ok());
  EXPECT_EQ(domains->domains(0).open_incident(), id);

  // An operator clears the faults (the agents are not back yet): the last
  // one closes it.
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Incident(id).state(), v1::INCIDENT_STATE_OPEN);
    const std::string fault = NodeName(1, i) + "/0/accelerator/80E01801";
    Write([fault](ClusterState& s, Mutation* m) { return s.ApplyClearFault(fault, "alice", "replaced", m).status(); });
  }
  const v1::Incident closed = Incident(id);
  EXPECT_EQ(closed.state(), v1::INCIDENT_STATE_CLOSED);
  EXPECT_EQ(closed.active_faults(), 0u);
  EXPECT_TRUE(closed.has_close_time());
  EXPECT_EQ(Events(v1::EVENT_TYPE_INCIDENT_CLOSED).size(), 1u);
  Restart();
  EXPECT_EQ(Incident(id).state(), v1::INCIDENT_STATE_CLOSED);
  EXPECT_EQ(GetIncidentWith(IncidentsOf(*state_), "inc-999").status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace clusterd

namespace clusterd {
namespace {

// The benchmark shape, in process (MemoryStore, fake clock): 16,032
// nodes in 334 SuperPoDs of 48 (MindCluster's size), one job per SuperPoD, and a
// cascade of 1,000 chip faults within one second across 20 SuperPoDs (50
// nodes' worth: every node of each, then two more chips on two of them).
// Every incident forms, one per SuperPoD, and every hit job is decided in
// that same second of fake time. The writer's wall time for the cascade is
// printed (a figure for docs/domains.md, not asserted).
TEST_F(IncidentsTest, SixteenThousandNodesAThousandFaultsInOneSecondAcrossTwentyDomains) {
  constexpr int kPods = 334, kPerPod = 48, kHitPods = 20;
  for (int p = 1; p <= kPods; ++p) {
    for (int i = 0; i < kPerPod; ++i) {
      v1::Hello h = MakeHello(NodeName(p, i), 1);
      (*h.mutable_labels())[kSuperPodLabel] = std::to_string(p);
      ASSERT_TRUE(engine_->Submit([h](ClusterState& s, Mutation* m) -> Engine::Done {
        EXPECT_TRUE(s.ApplyHello(h, 1, m).ok());
        return nullptr;
      }));
    }
    v1::Job job;
    job.set_id("job-" + std::to_string(p));
    job.set_kind(v1::JOB_KIND_TRAINING);
    uint32_t rank = 0;
    for (int i = 0; i < kPerPod; ++i) {
      auto* pl = job.add_placement();
      pl->set_rank(rank++);
      pl->set_node(NodeName(p, i));
      pl->set_device_id(1);
    }
    job.mutable_policy()->mutable_hold_down()->set_seconds(0);
    ASSERT_TRUE(engine_->Submit([job](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyCreateJob(job, m).ok());
      return nullptr;
    }));
    Idle();
  }
  const TimePoint t0 = clock_.Now();
  const auto wall0 = std::chrono::steady_clock::now();
  int faults = 0;
  for (int k = 0; faults < 1000; ++k) {
    const int pod = 1 + k % kHitPods;
    const int node = (k / kHitPods) % kPerPod;
    const uint32_t device = k < kHitPods * kPerPod ? 1 : 2;  // the job's chip, then a second one
    clock_.Set(t0 + std::chrono::microseconds(999 * faults));
    const std::string name = NodeName(pod, node);
    const uint64_t seq = ++seq_[name];
    ASSERT_TRUE(engine_->Submit([=](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(s.ApplyTransition(name, 1, MakeTransition(1, seq, true, device, "80E01801"), m).ok());
      return nullptr;
    }));
    ++faults;
    if (faults % 50 == 0) Idle();
  }
  Idle();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  EXPECT_LE(clock_.Now() - t0, 1s);
  const auto list = Incidents();
  EXPECT_EQ(list.total_size(), kHitPods);
  std::set<std::string> domains;
  for (const auto& inc : list.incidents()) domains.insert(DomainKey(inc.domain()));
  EXPECT_EQ(domains.size(), static_cast<size_t>(kHitPods));
  const auto by_job = RecoveriesByJob();
  for (int p = 1; p <= kHitPods; ++p) EXPECT_EQ(by_job.count("job-" + std::to_string(p)), 1u) << p;
  std::printf("[ figure ] 16032 nodes, 1000 faults across %d SuperPoDs: writer wall time %.3f s for the cascade\n",
              kHitPods, wall);
}

}  // namespace
}  // namespace clusterd
