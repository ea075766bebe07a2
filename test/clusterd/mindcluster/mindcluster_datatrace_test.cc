// MindCluster's profiling switches per job (mindcluster/data_trace.h), pure:
// a fake store and a fake job table. Validation as the reference's clients
// use the API, what a Modify stores and who is told, the limits with their
// errors and metrics, and that a refused call changes nothing.
#include "clusterd/mindcluster/data_trace.h"

#include <deque>

#include <gtest/gtest.h>

namespace clusterd::mindcluster {
namespace {

using storage::v1::DataTraceRecord;

// Keeps the records in memory; writes complete at once, or are held until
// Release() when hold is set; a failure can be injected.
class FakeStore final : public DataTraceStore {
 public:
  StatusOr<std::vector<DataTraceRecord>> LoadAll() const override {
    std::vector<DataTraceRecord> out;
    for (const auto& [k, r] : records) out.push_back(r);
    return out;
  }
  void Write(DataTraceRecord put, std::vector<std::string> erase, std::function<void(Status)> done) override {
    ++writes;
    if (!fail.ok()) return done(fail);
    auto apply = [this, put = std::move(put), erase = std::move(erase), done = std::move(done)] {
      for (const auto& k : erase) records.erase(k);
      records[put.job_ns_name()] = put;
      done(Status::Ok());
    };
    if (hold) {
      held.push_back(std::move(apply));
    } else {
      apply();
    }
  }
  void Release() {
    while (!held.empty()) {
      auto next = std::move(held.front());
      held.pop_front();
      next();
    }
  }
  std::map<std::string, DataTraceRecord> records;
  Status fail;
  bool hold = false;
  std::deque<std::function<void()>> held;
  int writes = 0;
};

class FakeJobs final : public DataTraceJobs {
 public:
  std::optional<std::string> IdOf(const JobNsName& job) const override {
    for (const auto& [id, name] : jobs) {
      if (name == job.str()) return id;
    }
    return std::nullopt;
  }
  std::optional<std::string> NsNameOf(const std::string& id) const override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return std::nullopt;
    return it->second;
  }
  std::map<std::string, std::string> Index() const override {
    std::map<std::string, std::string> out;
    for (const auto& [id, name] : jobs) {
      if (!name.empty()) out.emplace(name, id);
    }
    return out;
  }
  std::map<std::string, std::string> jobs;  // id -> "namespace/name" ("" none)
};

class Recorder final : public DataTraceSubscriber {
 public:
  void Switch(const ::ProfilingSwitch& s) override { got.push_back(s); }
  std::vector<::ProfilingSwitch> got;
};

::ProfilingSwitch Make(const std::string& comm, const std::string& rest) {
  ::ProfilingSwitch s;
  s.set_communicationoperator(comm);
  s.set_step(rest);
  s.set_savecheckpoint(rest);
  s.set_fp(rest);
  s.set_dataloader(rest);
  return s;
}
const ::ProfilingSwitch kAllOn = Make("on", "on");
const ::ProfilingSwitch kLight = Make("off", "on");  // faultdiag-online's StopHeavyProfiling

bool Same(const ::ProfilingSwitch& a, const ::ProfilingSwitch& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

class DataTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    jobs_.jobs = {{"uid-a", "default/job-a"}, {"uid-b", "team-1/job-b"}, {"uid-api", ""}};
    Reset();
  }
  void Reset(DataTraceOptions options = {}) {
    metrics_ = std::make_unique<MetricsRegistry>();
    switches_ = std::make_unique<DataTraceSwitches>(&store_, &jobs_, &clock_, options, metrics_.get());
    ASSERT_TRUE(switches_->Load().ok());
  }
  Status Modify(const std::string& job, const ::ProfilingSwitch* s, const std::string& actor = "fd-online") {
    std::optional<Status> out;
    switches_->Modify(job, s, actor, [&](Status st) { out = st; });
    EXPECT_TRUE(out.has_value()) << "the fake store completes at once";
    return out.value_or(Internal("no answer"));
  }
  std::string Metrics() { return metrics_->Render(); }

  FakeStore store_;
  FakeJobs jobs_;
  FakeClock clock_;
  std::unique_ptr<MetricsRegistry> metrics_;
  std::unique_ptr<DataTraceSwitches> switches_;
};

TEST(JobNsNameTest, TheReferencesFormWithKubernetesNames) {
  auto ok = ParseJobNsName("default/test-pytorch");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->ns, "default");
  EXPECT_EQ(ok->name, "test-pytorch");
  EXPECT_TRUE(ParseJobNsName("kube-system/job.v1-2").ok());
  for (const char* bad : {"", "default", "/job", "default/", "a/b/c", "Default/job", "default/Job", "de fault/job",
                          "default/job_1", "-ns/job", "default/job-", "default/job\n"}) {
    auto st = ParseJobNsName(bad);
    EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.status().message().find("jobNsName"), std::string::npos) << st.status().message();
  }
  EXPECT_FALSE(ParseJobNsName(std::string(64, 'a') + "/job").ok());
  EXPECT_TRUE(ParseJobNsName(std::string(63, 'a') + "/job").ok());
  EXPECT_FALSE(ParseJobNsName("default/" + std::string(254, 'a')).ok());
}

TEST(ProfilingSwitchTest, EachSwitchIsOnOrOff) {
  EXPECT_TRUE(ValidateProfilingSwitch(kAllOn).ok());
  EXPECT_TRUE(ValidateProfilingSwitch(Make("off", "off")).ok());
  for (const char* bad : {"", "ON", "true", "1", "on "}) {
    ::ProfilingSwitch s = kAllOn;
    s.set_fp(bad);
    Status st = ValidateProfilingSwitch(s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("profilingSwitch.FP"), std::string::npos) << st.message();
  }
}

TEST_F(DataTraceTest, ModifyThenGetAndTheStoredRecord) {
  EXPECT_EQ(switches_->Get("default/job-a").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(Modify("default/job-a", &kLight).ok());
  auto got = switches_->Get("default/job-a");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(Same(*got, kLight));
  ASSERT_EQ(store_.records.count("default/job-a"), 1u);
  const DataTraceRecord& r = store_.records["default/job-a"];
  EXPECT_EQ(r.job_id(), "uid-a");
  EXPECT_EQ(r.actor(), "fd-online");
  EXPECT_EQ(r.communication_operator(), "off");
  EXPECT_EQ(r.data_loader(), "on");
  EXPECT_TRUE(r.has_update_time());
  // Another job is untouched.
  EXPECT_EQ(switches_->Get("team-1/job-b").status().code(), StatusCode::kNotFound);
  EXPECT_NE(Metrics().find("clusterd_mindcluster_datatrace_changes_total 1"), std::string::npos);
  EXPECT_NE(Metrics().find("clusterd_mindcluster_datatrace_jobs 1"), std::string::npos);
}

TEST_F(DataTraceTest, BadInputIsRefusedAndChangesNothing) {
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  const int writes = store_.writes;
  ::ProfilingSwitch bad = kLight;
  bad.set_step("enable");
  EXPECT_EQ(Modify("default/job-a", &bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Modify("default/job-a", nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Modify("job-a", &kLight).code(), StatusCode::kInvalidArgument);
  Status unknown = Modify("default/no-such-job", &kLight);
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("default/no-such-job"), std::string::npos) << unknown.message();
  EXPECT_EQ(store_.writes, writes);
  EXPECT_TRUE(Same(*switches_->Get("default/job-a"), kAllOn));
  EXPECT_EQ(switches_->Get("no-slash").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(switches_->Get("default/no-such-job").status().code(), StatusCode::kNotFound);
}

TEST_F(DataTraceTest, AFailedWriteChangesNothingAndSaysWhy) {
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  auto sub = std::make_shared<Recorder>();
  ASSERT_TRUE(switches_->Subscribe("uid-a", sub).ok());
  store_.fail = Unavailable("the data dir is below its free-space reserve");
  EXPECT_EQ(Modify("default/job-a", &kLight).code(), StatusCode::kUnavailable);
  EXPECT_EQ(Modify("team-1/job-b", &kLight).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Same(*switches_->Get("default/job-a"), kAllOn));
  EXPECT_EQ(switches_->Get("team-1/job-b").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(sub->got.size(), 1u);  // only the current one, at subscription
  EXPECT_EQ(switches_->job_count(), 1u);
}

TEST_F(DataTraceTest, ASubscriberGetsTheCurrentSwitchAtOnceThenEveryChange) {
  auto before = std::make_shared<Recorder>();
  ASSERT_TRUE(switches_->Subscribe("uid-a", before).ok());
  EXPECT_TRUE(before->got.empty());  // nothing set: nothing said (TaskD takes an empty switch for "on")
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  ASSERT_EQ(before->got.size(), 1u);
  EXPECT_TRUE(Same(before->got[0], kAllOn));

  auto after = std::make_shared<Recorder>();
  auto other = std::make_shared<Recorder>();
  auto handle = switches_->Subscribe("uid-a", after);
  ASSERT_TRUE(handle.ok());
  ASSERT_TRUE(switches_->Subscribe("uid-b", other).ok());
  ASSERT_EQ(after->got.size(), 1u);
  EXPECT_TRUE(Same(after->got[0], kAllOn));

  ASSERT_TRUE(Modify("default/job-a", &kLight).ok());
  ASSERT_EQ(before->got.size(), 2u);
  ASSERT_EQ(after->got.size(), 2u);
  EXPECT_TRUE(Same(after->got[1], kLight));
  EXPECT_TRUE(other->got.empty());  // another job's subscriber hears nothing

  switches_->Unsubscribe(*handle);
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  EXPECT_EQ(after->got.size(), 2u);
  EXPECT_EQ(before->got.size(), 3u);
  EXPECT_EQ(switches_->subscriber_count(), 2u);
}

TEST_F(DataTraceTest, SubscribeNeedsAKnownJob) {
  EXPECT_EQ(switches_->Subscribe("", std::make_shared<Recorder>()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(switches_->Subscribe("uid with space", std::make_shared<Recorder>()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(switches_->Subscribe(std::string(254, 'u'), std::make_shared<Recorder>()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(switches_->Subscribe("uid-unknown", std::make_shared<Recorder>()).status().code(), StatusCode::kNotFound);
  // A job without a Kubernetes name can subscribe; it never has a switch.
  auto quiet = std::make_shared<Recorder>();
  EXPECT_TRUE(switches_->Subscribe("uid-api", quiet).ok());
  EXPECT_EQ(switches_->subscriber_count(), 1u);
}

TEST_F(DataTraceTest, SubscriberLimitsRefuseWithTheirErrorAndMetric) {
  DataTraceOptions o;
  o.max_subscribers = 3;
  o.max_subscribers_per_job = 2;
  Reset(o);
  std::vector<uint64_t> handles;
  for (int i = 0; i < 2; ++i) handles.push_back(*switches_->Subscribe("uid-a", std::make_shared<Recorder>()));
  auto per_job = switches_->Subscribe("uid-a", std::make_shared<Recorder>());
  EXPECT_EQ(per_job.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(per_job.status().message().find("datatrace_max_subscribers_per_job"), std::string::npos)
      << per_job.status().message();
  ASSERT_TRUE(switches_->Subscribe("uid-b", std::make_shared<Recorder>()).ok());
  auto total = switches_->Subscribe("uid-api", std::make_shared<Recorder>());
  EXPECT_EQ(total.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(total.status().message().find("datatrace_max_subscribers)"), std::string::npos) << total.status().message();
  const std::string m = Metrics();
  EXPECT_NE(m.find("clusterd_mindcluster_datatrace_refused_total{limit=\"max_subscribers_per_job\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("clusterd_mindcluster_datatrace_refused_total{limit=\"max_subscribers\"} 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find("clusterd_mindcluster_datatrace_subscribers 3"), std::string::npos) << m;
  // A slot freed is a slot again.
  switches_->Unsubscribe(handles[0]);
  EXPECT_TRUE(switches_->Subscribe("uid-a", std::make_shared<Recorder>()).ok());
}

TEST_F(DataTraceTest, MaxJobsRefusesANewJobButGoneJobsGiveTheirSlotUp) {
  jobs_.jobs["uid-c"] = "default/job-c";
  DataTraceOptions o;
  o.max_jobs = 2;
  Reset(o);
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  ASSERT_TRUE(Modify("team-1/job-b", &kAllOn).ok());
  Status full = Modify("default/job-c", &kAllOn);
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("datatrace_max_jobs"), std::string::npos) << full.message();
  EXPECT_NE(Metrics().find("clusterd_mindcluster_datatrace_refused_total{limit=\"max_jobs\"} 1"), std::string::npos);
  EXPECT_EQ(store_.records.count("default/job-c"), 0u);
  // A job already kept may always change.
  EXPECT_TRUE(Modify("default/job-a", &kLight).ok());

  // job-b is deleted: its slot goes to job-c, in the same write.
  jobs_.jobs.erase("uid-b");
  ASSERT_TRUE(Modify("default/job-c", &kLight).ok());
  EXPECT_EQ(store_.records.count("team-1/job-b"), 0u);
  EXPECT_EQ(store_.records.count("default/job-c"), 1u);
  EXPECT_EQ(switches_->job_count(), 2u);
}

TEST_F(DataTraceTest, ANewJobOfTheSameNameDoesNotInheritTheSwitch) {
  ASSERT_TRUE(Modify("default/job-a", &kAllOn).ok());
  jobs_.jobs.erase("uid-a");
  jobs_.jobs["uid-a2"] = "default/job-a";
  EXPECT_EQ(switches_->Get("default/job-a").status().code(), StatusCode::kNotFound);
  auto sub = std::make_shared<Recorder>();
  ASSERT_TRUE(switches_->Subscribe("uid-a2", sub).ok());
  EXPECT_TRUE(sub->got.empty());
  ASSERT_TRUE(Modify("default/job-a", &kLight).ok());
  EXPECT_EQ(store_.records["default/job-a"].job_id(), "uid-a2");
  ASSERT_EQ(sub->got.size(), 1u);
}

TEST_F(DataTraceTest, LoadedFromTheStoreAfterARestart) {
  ASSERT_TRUE(Modify("default/job-a", &kLight).ok());
  Reset();  // a new process over the same store
  auto got = switches_->Get("default/job-a");
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(Same(*got, kLight));
  auto sub = std::make_shared<Recorder>();
  ASSERT_TRUE(switches_->Subscribe("uid-a", sub).ok());
  ASSERT_EQ(sub->got.size(), 1u);
  EXPECT_TRUE(Same(sub->got[0], kLight));
}

TEST_F(DataTraceTest, NothingIsToldOrAnsweredBeforeTheWriteIsDurable) {
  auto sub = std::make_shared<Recorder>();
  ASSERT_TRUE(switches_->Subscribe("uid-a", sub).ok());
  store_.hold = true;
  std::vector<Status> answers;
  switches_->Modify("default/job-a", &kAllOn, "op", [&](Status st) { answers.push_back(st); });
  switches_->Modify("default/job-a", &kLight, "op", [&](Status st) { answers.push_back(st); });
  EXPECT_TRUE(answers.empty());
  EXPECT_TRUE(sub->got.empty());
  EXPECT_EQ(switches_->Get("default/job-a").status().code(), StatusCode::kNotFound);
  store_.Release();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(answers[0].ok() && answers[1].ok());
  ASSERT_EQ(sub->got.size(), 2u);
  EXPECT_TRUE(Same(sub->got[1], kLight));  // in the order they were written
  EXPECT_TRUE(Same(*switches_->Get("default/job-a"), kLight));
}

TEST_F(DataTraceTest, NewJobsBeingWrittenCountAgainstMaxJobs) {
  DataTraceOptions o;
  o.max_jobs = 1;
  Reset(o);
  store_.hold = true;
  std::vector<Status> answers;
  switches_->Modify("default/job-a", &kAllOn, "op", [&](Status st) { answers.push_back(st); });
  switches_->Modify("team-1/job-b", &kAllOn, "op", [&](Status st) { answers.push_back(st); });
  ASSERT_EQ(answers.size(), 1u);  // job-b at once: job-a holds the one slot
  EXPECT_EQ(answers[0].code(), StatusCode::kResourceExhausted);
  store_.Release();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_TRUE(answers[1].ok());
  EXPECT_EQ(switches_->job_count(), 1u);
}

}  // namespace
}  // namespace clusterd::mindcluster
