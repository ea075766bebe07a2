// Evidence bundles of incidents (state/evidence.h, docs/domains.md): the real
// rule set (MakeWriterRules) on a real ClusterState and Engine over a
// MemoryStore, stepped by hand on a FakeClock, with the agents' streams as an
// AgentOutbox that records what each node was sent. An incident's member
// nodes are asked (at most evidence_max_in_flight at once), their bundles
// stored and read back per member; a bundle from a node not asked, for
// another node, over the cap or sent twice is refused and changes nothing;
// bundles expire by total size (the oldest first) and by age, survive a
// restart, and an asked member that never answers fails at the timeout.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/state/agent_outbox.h"
#include "clusterd/state/evidence.h"
#include "clusterd/storage/schema.h"
#include "common/time_proto.h"
#include "incidents_fixture.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
using testing::MakeHello;

std::string Member(int i) { return "ev-n" + std::to_string(i); }

// The incidents' fixture, with the evidence rule's outbox and metrics.
class EvidenceTest : public testing::IncidentsTest {
 protected:
  void SetUp() override {
    config_.evidence_max_in_flight = 2;
    config_.evidence_max_bundle_bytes = 4096;
    config_.evidence_max_total_bytes = 3 * 4096;
    config_.evidence_timeout = 30s;
    config_.evidence_max_age = 1h;
    IncidentsTest::SetUp();
    Begin();
  }
  void Begin() {
    rule_ = state_->Attached<EvidenceRule>();
    ASSERT_NE(rule_, nullptr);
    rule_->set_outbox(&outbox_);
    m_.asked = &metrics_->AddCounter("asked", "");
    m_.stored = &metrics_->AddCounter("stored", "");
    m_.failed = &metrics_->AddCounter("failed", "");
    m_.refused = &metrics_->AddCounter("refused", "");
    m_.dropped = &metrics_->AddCounter("dropped", "");
    m_.expired_age = &metrics_->AddCounter("expired_age", "");
    m_.expired_size = &metrics_->AddCounter("expired_size", "");
    m_.bytes = &metrics_->AddGauge("bytes", "");
    m_.bundles = &metrics_->AddGauge("bundles", "");
    m_.in_flight = &metrics_->AddGauge("in_flight", "");
    m_.queued = &metrics_->AddGauge("queued", "");
    rule_->set_metrics(m_);
  }
  void RestartEvidence() {
    Restart();
    Begin();
  }

  Status WriteStatus(std::function<Status(ClusterState&, Mutation*)> fn) {
    auto st = std::make_shared<Status>();
    EXPECT_TRUE(engine_->Submit([fn, st](ClusterState& s, Mutation* m) -> Engine::Done {
      *st = fn(s, m);
      return nullptr;
    }));
    Idle();
    return *st;
  }

  // `n` nodes of SuperPoD 1, each with a connected agent that collects
  // evidence (session 1) whose stream records the requests it gets.
  void Fleet(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string node = Member(i);
      v1::Hello h = MakeHello(node, 1);
      (*h.mutable_labels())["huawei.com/topotree.superpodid"] = "1";
      ASSERT_TRUE(WriteStatus([h, this](ClusterState& s, Mutation* m) {
                    auto w = s.ApplyHello(h, 1, m);
                    if (w.ok()) rule_->AgentUp(h.node_name(), 1, true);
                    return w.status();
                  }).ok());
      Attach(node);
    }
  }
  void Attach(const std::string& node) {
    outbox_.Attach(node, 1, [this, node](const v1::ConnectResponse& msg) {
      if (msg.has_evidence_request()) asked_[node].push_back(msg.evidence_request());
    });
  }
  // Three nodes hit within the window: one incident; its id.
  std::string Incident(int first = 0) {
    for (int i = first; i < first + 3; ++i) ChipFault(Member(i), true);
    return state_->Read([&](const StateView&) {
      const IncidentRule* r = IncidentsOf(*state_);
      return r->open_by_domain().empty() ? std::string() : r->open_by_domain().begin()->second;
    });
  }
  v1::EvidenceBundle Bundle(const std::string& incident, const std::string& node, size_t bytes) {
    v1::EvidenceBundle b;
    b.set_incident_id(incident);
    b.set_node(node);
    auto* s = b.add_sections();
    s->set_name("kernel-log");
    s->set_content(std::string(bytes, 'k'));
    return b;
  }
  Status Upload(const std::string& node, const v1::EvidenceBundle& b) {
    return WriteStatus([=, this](ClusterState& s, Mutation* m) { return rule_->ApplyBundle(s, node, b, m); });
  }
  v1::GetIncidentEvidenceResponse Get(const std::string& id, const std::string& node = "",
                                      const std::string& token = "") {
    v1::GetIncidentEvidenceRequest req;
    req.set_id(id);
    req.set_node(node);
    req.set_page_token(token);
    return state_->Read([&](const StateView&) {
      auto r = rule_->Get(IncidentsOf(*state_), req);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      return r.ok() ? *r : v1::GetIncidentEvidenceResponse();
    });
  }
  std::map<std::string, v1::EvidenceState> States(const std::string& id) {
    std::map<std::string, v1::EvidenceState> out;
    const v1::GetIncidentEvidenceResponse resp = Get(id);
    for (const auto& m : resp.members()) out[m.node()] = m.state();
    return out;
  }
  // The stored evidence keys.
  std::vector<std::string> StoredKeys() {
    std::vector<std::string> keys;
    const std::string prefix(storage::kMetaEvidencePrefix);
    EXPECT_TRUE(store_
                    ->ForEach(storage::Cf::kMeta,
                              [&](std::string_view k, std::string_view) {
                                if (k.substr(0, prefix.size()) == prefix) keys.emplace_back(k);
                              })
                    .ok());
    return keys;
  }
  size_t AskedCount() {
    size_t n = 0;
    for (const auto& [node, reqs] : asked_) n += reqs.size();
    return n;
  }

  EvidenceMetrics m_;
  EvidenceRule* rule_ = nullptr;
  AgentOutbox outbox_;
  std::map<std::string, std::vector<v1::EvidenceRequest>> asked_;
};

TEST_F(EvidenceTest, EachMemberIsAskedAtMostInFlightAtOnceAndItsBundleStoredAndReadBack) {
  Fleet(4);
  const std::string id = Incident();
  ASSERT_FALSE(id.empty());
  // Two asked (evidence_max_in_flight), one waits; the fourth node is no member.
  EXPECT_EQ(AskedCount(), 2u);
  EXPECT_EQ(m_.queued->Value(), 1);
  EXPECT_EQ(asked_.count(Member(3)), 0u);
  const v1::EvidenceRequest first = asked_.begin()->second.front();
  EXPECT_EQ(first.incident_id(), id);
  EXPECT_EQ(first.max_bytes(), 4096u);
  // The kernel log from the member's first fault less evidence_log_before.
  EXPECT_LE(FromTimestamp(first.since()), clock_.Now() - std::chrono::minutes(1));
  EXPECT_GT(FromTimestamp(first.since()), clock_.Now() - std::chrono::minutes(2));

  const std::string a = asked_.begin()->first;
  ASSERT_TRUE(Upload(a, Bundle(id, a, 1000)).ok());
  // The freed slot asks the third member.
  EXPECT_EQ(AskedCount(), 3u);
  EXPECT_EQ(m_.queued->Value(), 0);
  for (const auto& [node, reqs] : asked_) {
    if (node == a) continue;
    ASSERT_TRUE(Upload(node, Bundle(id, node, 1500)).ok());
  }
  auto states = States(id);
  ASSERT_EQ(states.size(), 3u);
  for (const auto& [node, st] : states) EXPECT_EQ(st, v1::EVIDENCE_STATE_STORED) << node;
  EXPECT_EQ(m_.stored->Value(), 3u);
  EXPECT_EQ(StoredKeys().size(), 3u);

  // Paged one member per page, in node order, each bundle whole.
  std::vector<std::string> pages;
  std::string token;
  do {
    auto page = Get(id, "", token);
    ASSERT_TRUE(page.has_bundle());
    pages.push_back(page.bundle().node());
    EXPECT_GT(page.bundle().size_bytes(), 999u);
    EXPECT_GT(page.bundle().sections(0).content().size(), 999u);
    token = page.next_page_token();
  } while (!token.empty());
  EXPECT_EQ(pages, (std::vector<std::string>{Member(0), Member(1), Member(2)}));
  EXPECT_EQ(Get(id, Member(1)).bundle().node(), Member(1));
}

TEST_F(EvidenceTest, HostileBundlesAreRefusedAndChangeNothing) {
  Fleet(4);
  const std::string id = Incident();
  ASSERT_FALSE(id.empty());
  const std::string a = asked_.begin()->first;
  const auto keys = StoredKeys();
  // Not a member, or not asked.
  EXPECT_EQ(Upload(Member(3), Bundle(id, Member(3), 10)).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(Upload(a, Bundle("inc-999", a, 10)).code(), StatusCode::kPermissionDenied);
  // For another node.
  EXPECT_EQ(Upload(a, Bundle(id, Member(3), 10)).code(), StatusCode::kPermissionDenied);
  // Malformed.
  v1::EvidenceBundle nameless = Bundle(id, a, 10);
  nameless.mutable_sections(0)->clear_name();
  EXPECT_EQ(Upload(a, nameless).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(StoredKeys(), keys);
  EXPECT_EQ(States(id)[a], v1::EVIDENCE_STATE_ASKED);
  // Over the cap: refused, the member's evidence failed.
  EXPECT_EQ(Upload(a, Bundle(id, a, 5000)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(States(id)[a], v1::EVIDENCE_STATE_FAILED);
  EXPECT_EQ(StoredKeys(), keys);
  // Once stored, a second one is refused.
  ASSERT_TRUE(Upload(a, Bundle(id, a, 100)).ok());
  EXPECT_EQ(Upload(a, Bundle(id, a, 200)).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(Get(id, a).bundle().sections(0).content().size(), 100u);
  EXPECT_EQ(m_.refused->Value(), 6u);
}

TEST_F(EvidenceTest, BundlesExpireByTotalSizeOldestFirstAndByAge) {
  config_.evidence_max_in_flight = 16;
  RestartEvidence();
  Fleet(3);
  const std::string id = Incident();
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(AskedCount(), 3u);
  // Three of ~3.5 KiB fit in the 12 KiB total.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(1s);
    ASSERT_TRUE(Upload(Member(i), Bundle(id, Member(i), 3500)).ok());
  }
  EXPECT_EQ(StoredKeys().size(), 3u);
  EXPECT_EQ(m_.expired_size->Value(), 0u);
  // A new member of the incident: its bundle takes the oldest's place.
  v1::Hello h = MakeHello(Member(3), 1);
  (*h.mutable_labels())["huawei.com/topotree.superpodid"] = "1";
  ASSERT_TRUE(WriteStatus([h, this](ClusterState& s, Mutation* m) {
                auto w = s.ApplyHello(h, 1, m);
                rule_->AgentUp(h.node_name(), 1, true);
                return w.status();
              }).ok());
  Attach(Member(3));
  ChipFault(Member(3), true);
  ASSERT_EQ(asked_.count(Member(3)), 1u);
  clock_.Advance(1s);
  ASSERT_TRUE(Upload(Member(3), Bundle(id, Member(3), 3500)).ok());
  EXPECT_EQ(m_.expired_size->Value(), 1u);
  auto states = States(id);
  EXPECT_EQ(states[Member(0)], v1::EVIDENCE_STATE_EXPIRED);
  EXPECT_EQ(states[Member(3)], v1::EVIDENCE_STATE_STORED);
  EXPECT_EQ(StoredKeys().size(), 3u);
  EXPECT_LE(rule_->total_bytes(), config_.evidence_max_total_bytes);
  EXPECT_EQ(m_.bytes->Value(), static_cast<double>(rule_->total_bytes()));

  // The stored ones survive a restart.
  RestartEvidence();
  EXPECT_EQ(rule_->stored(), 3u);
  EXPECT_EQ(Get(id, Member(3)).bundle().sections(0).content().size(), 3500u);

  // By age: an hour after they were stored, every one is gone.
  AdvanceTo(clock_.Now() + 1h + 1s);
  EXPECT_TRUE(StoredKeys().empty());
  EXPECT_EQ(rule_->stored(), 0u);
  EXPECT_EQ(m_.expired_age->Value(), 3u);
  EXPECT_EQ(m_.bytes->Value(), 0);
}

TEST_F(EvidenceTest, AnAskedMemberThatNeverAnswersFailsAtTheTimeoutAndFreesItsSlot) {
  Fleet(3);
  const std::string id = Incident();
  ASSERT_EQ(AskedCount(), 2u);
  AdvanceTo(clock_.Now() + 31s);
  auto states = States(id);
  int failed = 0;
  for (const auto& [node, st] : states) failed += st == v1::EVIDENCE_STATE_FAILED ? 1 : 0;
  EXPECT_EQ(failed, 2);
  // The third was asked once the slots freed.
  EXPECT_EQ(AskedCount(), 3u);
  EXPECT_EQ(m_.failed->Value(), 2u);
  // A late bundle is still taken.
  const std::string a = asked_.begin()->first;
  EXPECT_TRUE(Upload(a, Bundle(id, a, 10)).ok());
  EXPECT_EQ(States(id)[a], v1::EVIDENCE_STATE_STORED);
}

TEST_F(EvidenceTest, AnAgentThatCollectsNoneFailsItsMembersAtOnce) {
  Fleet(3);
  ASSERT_TRUE(WriteStatus([this](ClusterState&, Mutation*) {
                rule_->AgentUp(Member(0), 1, false);
                return Status::Ok();
              }).ok());
  const std::string id = Incident();
  EXPECT_EQ(States(id)[Member(0)], v1::EVIDENCE_STATE_FAILED);
  EXPECT_EQ(asked_.count(Member(0)), 0u);
  EXPECT_EQ(AskedCount(), 2u);
}

TEST(EvidenceOptionsTest, OutOfBoundsNamesTheKey) {
  EvidenceOptions o;
  o.max_bundle_bytes = 4 << 20;
  EXPECT_NE(ValidateEvidenceOptions(o).message().find("evidence_max_bundle_bytes"), std::string::npos);
  o = EvidenceOptions();
  o.max_total_bytes = o.max_bundle_bytes - 1;
  EXPECT_NE(ValidateEvidenceOptions(o).message().find("evidence_max_total_bytes"), std::string::npos);
  EXPECT_TRUE(ValidateEvidenceOptions(EvidenceOptions()).ok());
}

}  // namespace
}  // namespace clusterd
