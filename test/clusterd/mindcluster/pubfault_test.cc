// MindCluster public faults: the reference server's validation rules, the
// code table, the rate limiter, and the state they drive (occur / recover
// with minimum visibility / once, kept across a restart) — docs/mindcluster.md.
#include <gtest/gtest.h>

#include "clusterd/mindcluster/pubfault.h"
#include "clusterd/state/rules.h"
#include "test/support/state/state_fixtures.h"
#include "test/support/state/state_on_store.h"

namespace clusterd {
namespace {

using testing::MakeHello;

::PublicFaultRequest Valid(const std::string& assertion = "occur", const std::string& code = "010001001") {
  ::PublicFaultRequest r;
  r.set_id("req-00000001");
  r.set_timestamp(1'700'000'000'000);
  r.set_version("1.0");
  r.set_resource("pingmesh");
  auto* f = r.add_faults();
  f->set_faultid("fault-0001");
  f->set_faulttype("Network");
  f->set_faultcode(code);
  f->set_faulttime(1'700'000'000'000);
  f->set_assertion(assertion);
  (*f->mutable_faultlocation())["port"] = "eth0";
  auto* in = f->add_influence();
  in->set_nodename("worker01");
  in->add_deviceids(0);
  in->add_deviceids(3);
  f->set_description("link down");
  return r;
}

PubFaultVerdict Plan(const ::PublicFaultRequest& r, PubFaultPlan* plan) {
  static const PubFaultCodeTable table = PubFaultCodeTable::Default();
  return PlanPublicFaults(r, table, PubFaultOptions(), plan);
}

TEST(PubFaultPlanTest, AValidRequestBecomesOneFaultPerNodeAndDevice) {
  PubFaultPlan plan;
  auto v = Plan(Valid(), &plan);
  ASSERT_EQ(v.code, kPubFaultOk) << v.info;
  EXPECT_EQ(plan.reporter, "pubfault/pingmesh");
  ASSERT_EQ(plan.faults.size(), 2u);
  EXPECT_EQ(plan.faults[0].node, "worker01");
  EXPECT_EQ(plan.faults[0].device, 0u);
  EXPECT_EQ(plan.faults[1].device, 3u);
  EXPECT_EQ(plan.faults[0].level, v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_EQ(plan.faults[0].fault_id, "fault-0001");
}

// A public-fault ConfigMap carries the same request as JSON: it plans the
// same faults; what is not that JSON is refused; unknown fields are ignored.
TEST(PubFaultPlanTest, AConfigMapsJsonIsTheSameRequest) {
  auto req = ParsePublicFaultCm(R"({"id":"req-00000001","timestamp":1700000000000,"version":"1.0",
      "resource":"pingmesh","extra":true,"faults":[{"faultId":"fault-0001","faultType":"Network",
      "faultCode":"010001001","faultTime":1700000000000,"assertion":"occur","faultLocation":{"port":"eth0"},
      "influence":[{"nodeName":"worker01","deviceIds":[0,3]}],"description":"link down"}]})");
  ASSERT_TRUE(req.ok()) << req.status().message();
  EXPECT_EQ(req->SerializeAsString(), Valid().SerializeAsString());
  PubFaultPlan from_cm, from_grpc;
  EXPECT_EQ(Plan(*req, &from_cm).code, kPubFaultOk);
  EXPECT_EQ(Plan(Valid(), &from_grpc).code, kPubFaultOk);
  EXPECT_EQ(from_cm.faults.size(), from_grpc.faults.size());

  EXPECT_EQ(ParsePublicFaultCm("not json").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePublicFaultCm(R"({"faults":"x"})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePublicFaultCm(R"({"timestamp":"soon"})").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParsePublicFaultCm(std::string(2000, ' '), 1000).status().code(), StatusCode::kInvalidArgument);
}

TEST(PubFaultPlanTest, RequestLevelRules) {
  PubFaultPlan plan;
  auto check = [&](const std::function<void(::PublicFaultRequest&)>& mutate, int32_t code, const std::string& says) {
    auto r = Valid();
    mutate(r);
    auto v = Plan(r, &plan);
    EXPECT_EQ(v.code, code) << says << ": " << v.info;
    EXPECT_NE(v.info.find(says), std::string::npos) << v.info;
  };
  check([](auto& r) { r.set_resource("nobody"); }, kPubFaultRefused, "resource");
  check([](auto& r) { r.set_version("2.0"); }, kPubFaultInvalid, "version");
  check([](auto& r) { r.set_id("short"); }, kPubFaultInvalid, "id must match");
  check([](auto& r) { r.set_id("has space in it"); }, kPubFaultInvalid, "id must match");
  check([](auto& r) { r.set_id(std::string(129, 'a')); }, kPubFaultInvalid, "id must match");
  check([](auto& r) { r.set_timestamp(1'700'000'000); }, kPubFaultInvalid, "13 digits");
  check([](auto& r) { r.clear_faults(); }, kPubFaultInvalid, "1 to 100");
  check(
      [](auto& r) {
        for (int i = 0; i < 100; ++i) *r.add_faults() = r.faults(0);
      },
      kPubFaultInvalid, "1 to 100 faults, not 101");
}

// A request that names more (fault, node, device) entries than public faults
// may be active could never be applied: refused from the sizes of its
// repeated fields, before any element is looked at (so an invalid element
// in it does not change the answer), naming the limit and the count.
TEST(PubFaultPlanTest, ARequestOverTheSizeLimitIsRefusedBeforeAnyFaultIsChecked) {
  PubFaultOptions options;
  options.max_faults = 10;
  auto r = Valid();  // 1 fault x 1 node x 2 devices
  auto* in = r.mutable_faults(0)->add_influence();
  in->set_nodename("Not_A_DNS_Name");                 // an invalid element...
  for (int d = 0; d < 9; ++d) in->add_deviceids(99);  // ...with devices out of range, counted all the same
  r.mutable_faults(0)->set_faulttype("Disk");
  PubFaultPlan plan;
  const PubFaultVerdict v = PlanPublicFaults(r, PubFaultCodeTable::Default(), options, &plan);
  EXPECT_EQ(v.code, kPubFaultInvalid);
  EXPECT_NE(v.info.find("names 11 (fault, node, device) entries, more than the 10 public faults"), std::string::npos)
      << v.info;
  EXPECT_NE(v.info.find("pubfault_max_faults"), std::string::npos) << v.info;
  EXPECT_TRUE(plan.faults.empty());
  EXPECT_TRUE(plan.dropped.empty());  // no fault was checked
  EXPECT_EQ(CheckPubFaultRequest(r, options).info, v.info);
  // At the limit it is planned, and the invalid fault dropped for its first problem.
  options.max_faults = 11;
  EXPECT_EQ(PlanPublicFaults(r, PubFaultCodeTable::Default(), options, &plan).code, kPubFaultInvalid);
  ASSERT_EQ(plan.dropped.size(), 1u);
  EXPECT_NE(plan.dropped[0].find("faultType"), std::string::npos) << plan.dropped[0];

  // The issue's request at the default limit: 100 faults x 1,000 nodes x 32
  // devices, every node name invalid; one influence entry is counted, not
  // looked at.
  ::PublicFaultRequest huge = Valid();
  ::Fault fault = huge.faults(0);
  fault.clear_influence();
  for (int n = 0; n < 1000; ++n) {
    auto* node = fault.add_influence();
    node->set_nodename("Bad_Node_" + std::to_string(n));
    for (int d = 0; d < 32; ++d) node->add_deviceids(d);
  }
  huge.clear_faults();
  for (int i = 0; i < 100; ++i) *huge.add_faults() = fault;
  const PubFaultVerdict refused = Plan(huge, &plan);
  EXPECT_EQ(refused.code, kPubFaultInvalid);
  EXPECT_NE(refused.info.find("names 3200000 (fault, node, device) entries, more than the 50000"), std::string::npos)
      << refused.info;
  EXPECT_TRUE(plan.dropped.empty());
}

// The order of the cheap checks: an unknown resource is refused (410) before
// the request-level rules (409), and those before any fault.
TEST(PubFaultPlanTest, CheapChecksComeInOrder) {
  PubFaultOptions options;
  auto r = Valid();
  r.set_resource("nobody");
  r.set_version("2.0");
  EXPECT_EQ(CheckPubFaultResource(r, options).code, kPubFaultRefused);
  EXPECT_EQ(CheckPubFaultRequest(r, options).code, kPubFaultInvalid);
  PubFaultPlan plan;
  EXPECT_EQ(Plan(r, &plan).code, kPubFaultRefused);
  r.set_resource("pingmesh");
  EXPECT_EQ(CheckPubFaultResource(r, options).code, kPubFaultOk);
  r.mutable_faults(0)->set_faulttype("Disk");
  const auto v = Plan(r, &plan);
  EXPECT_EQ(v.code, kPubFaultInvalid);
  EXPECT_NE(v.info.find("version"), std::string::npos) << v.info;
}

TEST(PubFaultPlanTest, AnInvalidFaultIsDroppedAndTheRequestFailsOnlyWhenNoneIsLeft) {
  struct Case {
    std::function<void(::Fault&)> mutate;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](auto& f) { f.set_faultid("bad id!"); }, "faultId must match"},
      {[](auto& f) { f.set_faulttype("Disk"); }, "faultType"},
      {[](auto& f) { f.set_faultcode("01000100"); }, "9 characters"},
      {[](auto& f) { f.set_faultcode("999999999"); }, "not in the public-fault code table"},
      {[](auto& f) { f.set_assertion("maybe"); }, "assertion"},
      {[](auto& f) {
         for (int i = 0; i < 11; ++i) (*f.mutable_faultlocation())["k" + std::to_string(i)] = "v";
       },
       "more than 10"},
      {[](auto& f) { (*f.mutable_faultlocation())[std::string(17, 'k')] = "v"; }, "longer than 16"},
      {[](auto& f) { (*f.mutable_faultlocation())["k"] = std::string(129, 'v'); }, "longer than 128"},
      {[](auto& f) { f.set_description(std::string(513, 'd')); }, "description"},
      {[](auto& f) { f.set_description("bell\a"); }, "description"},
      {[](auto& f) { f.clear_influence(); }, "1 to 1000"},
      {[](auto& f) { f.mutable_influence(0)->set_nodename("Worker_01"); }, "DNS-1123"},
      {[](auto& f) { f.mutable_influence(0)->clear_nodename(); }, "nodeName or nodeSN"},
      {[](auto& f) { f.mutable_influence(0)->clear_deviceids(); }, "1 to 32 devices"},
      {[](auto& f) { f.mutable_influence(0)->add_deviceids(32); }, "not in 0..31"},
      {[](auto& f) { f.mutable_influence(0)->add_deviceids(0); }, "twice"},
      {[](auto& f) { *f.add_influence() = f.influence(0); }, "twice"},
  };
  for (const auto& c : cases) {
    auto r = Valid();
    c.mutate(*r.mutable_faults(0));
    PubFaultPlan plan;
    auto alone = Plan(r, &plan);
    EXPECT_EQ(alone.code, kPubFaultInvalid) << c.says;
    EXPECT_NE(alone.info.find(c.says), std::string::npos) << alone.info;
    // Next to a valid fault: the bad one is dropped, the request accepted.
    auto* good = r.add_faults();
    *good = Valid().faults(0);
    good->set_faultid("fault-0002");
    auto mixed = Plan(r, &plan);
    EXPECT_EQ(mixed.code, kPubFaultOk) << c.says << ": " << mixed.info;
    ASSERT_EQ(plan.dropped.size(), 1u) << c.says;
    EXPECT_NE(plan.dropped[0].find(c.says), std::string::npos) << plan.dropped[0];
    for (const auto& p : plan.faults) EXPECT_EQ(p.fault_id, "fault-0002");
  }
}

TEST(PubFaultCodeTableTest, DefaultTableAndOverride) {
  auto t = PubFaultCodeTable::Default();
  EXPECT_EQ(t.size(), 30u);
  EXPECT_EQ(t.Find("200001006"), v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(t.Find("110001020"), v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_EQ(t.Find("220001001"), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(t.Find("110001022"), v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_FALSE(t.Find("999999999").has_value());
  ASSERT_TRUE(t.MergeJson(R"({"SeparateNPU": ["110001020"], "RestartNPU": ["999999999"]})", "test").ok());
  EXPECT_EQ(t.Find("110001020"), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(t.Find("999999999"), v1::FAULT_LEVEL_RESTART_NPU);
  // A bad file changes nothing and says why.
  Status bad = t.MergeJson(R"({"Loud": ["123456789"]})", "file.json");
  EXPECT_NE(bad.message().find("Loud"), std::string::npos);
  EXPECT_FALSE(t.MergeJson(R"({"SeparateNPU": ["12345"]})", "file.json").ok());
  EXPECT_FALSE(t.MergeJson("[]", "file.json").ok());
  EXPECT_EQ(t.Find("999999999"), v1::FAULT_LEVEL_RESTART_NPU);
}

TEST(PubFaultRateLimiterTest, BurstThenSustainedRatePerResource) {
  FakeClock clock;
  PubFaultRateLimiter limiter(&clock, 1.0, 3, {"pingmesh", "CCAE"});
  EXPECT_TRUE(limiter.Allow("pingmesh"));
  EXPECT_TRUE(limiter.Allow("pingmesh"));
  EXPECT_TRUE(limiter.Allow("pingmesh"));
  EXPECT_FALSE(limiter.Allow("pingmesh"));
  EXPECT_TRUE(limiter.Allow("CCAE"));  // its own bucket
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(limiter.Allow("pingmesh"));
  EXPECT_FALSE(limiter.Allow("pingmesh"));
  // A bucket per allowed resource, made up front: other names are refused
  // and add none, whatever a client invents.
  EXPECT_EQ(limiter.buckets(), 2u);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limiter.Allow("invented-" + std::to_string(i)));
  EXPECT_EQ(limiter.buckets(), 2u);
  // A full bucket again after a long quiet spell, never more than the burst.
  clock.Advance(std::chrono::hours(1));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow("pingmesh"));
  EXPECT_FALSE(limiter.Allow("pingmesh"));
}

class PubFaultStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(s_.Open());
    ASSERT_TRUE(s_.Commit([&](Mutation* m) { return s_.state_->ApplyHello(MakeHello("worker01", 1), 1, m); }).ok());
  }

  ClusterState::PubFaultResult Send(const ::PublicFaultRequest& r) {
    PubFaultPlan plan;
    auto v = Plan(r, &plan);
    EXPECT_EQ(v.code, kPubFaultOk) << v.info;
    auto result = s_.Commit([&](Mutation* m) { return s_.state_->ApplyPublicFaults(plan, options_, m); });
    EXPECT_TRUE(result.ok()) << result.status().ToString();
    return result.ok() ? *result : ClusterState::PubFaultResult{};
  }

  int Active() {
    v1::ListFaultsRequest req;
    req.set_node("worker01");
    auto list = s_.state_->ListFaults(req);
    EXPECT_TRUE(list.ok());
    int n = 0;
    for (const auto& f : list->faults()) {
      if (f.state() == v1::FAULT_STATE_ACTIVE && f.reporter() == "pubfault/pingmesh") ++n;
    }
    return n;
  }

  TimePoint Expire() {
    AutoClearRule rule;
    return s_.Commit([&](Mutation* m) { return rule.Advance(*s_.state_, WriterTick{s_.clock_.Now(), m}); });
  }

  testing::StateOnStore<testing::MemoryBackend> s_;
  PubFaultOptions options_;
};

TEST_F(PubFaultStateTest, OccurRaisesWithTheTablesLevelAndRecoverClears) {
  auto r = Send(Valid("occur", "220001001"));
  EXPECT_EQ(r.applied, 2u);
  EXPECT_EQ(Active(), 2);
  EXPECT_EQ(s_.state_->active_public_faults(), 2u);
  v1::ListFaultsRequest req;
  req.set_node("worker01");
  auto list = s_.state_->ListFaults(req);
  ASSERT_TRUE(list.ok());
  for (const auto& f : list->faults()) {
    EXPECT_EQ(f.level(), v1::FAULT_LEVEL_SEPARATE);
    EXPECT_EQ(f.external_id(), "fault-0001");
    EXPECT_EQ(f.source(), v1::FAULT_SOURCE_EXTERNAL);
  }
  // Occurring again is no new fault.
  Send(Valid("occur", "220001001"));
  EXPECT_EQ(s_.state_->active_public_faults(), 2u);
  // Recovered after the minimum visibility: cleared at once.
  s_.clock_.Advance(std::chrono::seconds(6));
  Send(Valid("recover", "220001001"));
  EXPECT_EQ(Active(), 0);
  EXPECT_EQ(s_.state_->active_public_faults(), 0u);
}

TEST_F(PubFaultStateTest, AnEarlyRecoverStaysVisibleForItsMinimumAcrossARestart) {
  Send(Valid("occur"));
  s_.clock_.Advance(std::chrono::seconds(2));
  Send(Valid("recover"));
  EXPECT_EQ(Active(), 2);  // still visible: it occurred 2 s ago
  const TimePoint due = Expire();
  EXPECT_EQ(due, s_.clock_.Now() + std::chrono::seconds(3));
  ASSERT_NO_FATAL_FAILURE(s_.Open());  // a restart keeps the pending clear
  EXPECT_EQ(Active(), 2);
  s_.clock_.Advance(std::chrono::seconds(3));
  EXPECT_EQ(Expire(), TimePoint::max());
  EXPECT_EQ(Active(), 0);
}

TEST_F(PubFaultStateTest, OnceClearsItselfAndAnOccurCancelsAPendingRecover) {
  Send(Valid("once"));
  EXPECT_EQ(Active(), 2);
  s_.clock_.Advance(std::chrono::seconds(4));
  Expire();
  EXPECT_EQ(Active(), 2);
  s_.clock_.Advance(std::chrono::seconds(1));
  Expire();
  EXPECT_EQ(Active(), 0);

  Send(Valid("occur"));
  Send(Valid("recover"));  // pending: visible for 5 s
  Send(Valid("occur"));    // occurs again: stays
  s_.clock_.Advance(std::chrono::seconds(10));
  Expire();
  EXPECT_EQ(Active(), 2);
}

TEST_F(PubFaultStateTest, UnknownNodesAreDroppedSerialsResolvedAndTheTotalBounded) {
  auto r = Valid();
  auto* in = r.mutable_faults(0)->add_influence();
  in->set_nodename("worker99");
  in->add_deviceids(1);
  auto* sn = r.mutable_faults(0)->add_influence();
  sn->set_nodesn("SN-777");
  sn->add_deviceids(5);
  auto result = Send(r);
  EXPECT_EQ(result.applied, 2u);
  ASSERT_EQ(result.dropped.size(), 2u);
  EXPECT_NE(result.dropped[0].find("worker99 is not registered"), std::string::npos) << result.dropped[0];
  EXPECT_NE(result.dropped[1].find("no node has serial SN-777"), std::string::npos) << result.dropped[1];

  // A node labelled with the serial takes the SN's faults.
  auto hello = MakeHello("worker02", 1);
  (*hello.mutable_labels())["product-serial-number"] = "SN-777";
  ASSERT_TRUE(s_.Commit([&](Mutation* m) { return s_.state_->ApplyHello(hello, 2, m); }).ok());
  result = Send(r);
  EXPECT_EQ(result.dropped.size(), 1u);
  v1::ListFaultsRequest req;
  req.set_node("worker02");
  auto list = s_.state_->ListFaults(req);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->faults_size(), 1);
  EXPECT_EQ(list->faults(0).device_id(), 5u);

  // At most max_faults active: a request that would pass it changes nothing.
  options_.max_faults = 4;
  auto more = Valid();
  more.mutable_faults(0)->set_faultid("fault-0002");
  PubFaultPlan plan;
  ASSERT_EQ(Plan(more, &plan).code, kPubFaultOk);
  auto refused = s_.Commit([&](Mutation* m) { return s_.state_->ApplyPublicFaults(plan, options_, m); });
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s_.state_->active_public_faults(), 3u);
}

TEST_F(PubFaultStateTest, FaultServiceCannotReachPublicFaults) {
  v1::ReportRequest report;
  report.set_reporter("pubfault");
  report.set_id("pingmesh/fault-0001");
  report.set_node("worker01");
  report.set_code("X");
  report.set_action(v1::TRANSITION_ACTION_CLEAR);
  auto r = s_.Commit([&](Mutation* m) { return s_.state_->ApplyReport(report, m); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reserved"), std::string::npos);
}

}  // namespace
}  // namespace clusterd
