// The leader election (clusterd/ha/election.h) on a fake of etcd's leases
// and keys in memory, on a FakeClock: who wins, who does not, when a leader
// stops leading, and what resigning and a restarted replica do.
#include "clusterd/ha/election.h"

#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/ha/lease_kv.h"
#include "common/clock.h"
#include "test/support/wait.h"

namespace clusterd::ha {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Etcd's leases and keys as the election uses them: a key attached to a
// lease goes with it (revoked or expired); revisions count every creation.
class FakeLeaseKv final : public LeaseKv {
 public:
  StatusOr<Lease> LeaseGrant(int64_t ttl_seconds) override {
    std::lock_guard lock(mu_);
    if (!fail_.ok()) return fail_;
    asked_ttl_ = ttl_seconds;
    const int64_t id = next_lease_++;
    leases_[id] = ttl_seconds;
    return Lease{id, ttl_seconds};
  }
  StatusOr<int64_t> LeaseKeepAlive(int64_t id) override {
    std::function<void()> hook;
    {
      std::lock_guard lock(mu_);
      ++keepalives_;
      hook = on_keepalive_;
    }
    if (hook) hook();
    std::lock_guard lock(mu_);
    if (!keepalive_error_.ok()) return keepalive_error_;
    auto it = leases_.find(id);
    return it == leases_.end() ? 0 : it->second;
  }
  Status LeaseRevoke(int64_t id) override {
    std::lock_guard lock(mu_);
    if (!fail_.ok()) return fail_;
    revoked_.push_back(id);
    EndLease(id);
    return Status::Ok();
  }
  StatusOr<Claim> CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease) override {
    std::lock_guard lock(mu_);
    if (!fail_.ok()) return fail_;
    if (auto it = keys_.find(key); it != keys_.end()) return Claim{false, it->second};
    if (lease != 0 && leases_.count(lease) == 0) return NotFound("etcdserver: requested lease not found");
    keys_[key] = KeyValue{value, lease, ++revision_};
    return Claim{true, keys_[key]};
  }
  StatusOr<std::optional<KeyValue>> Get(const std::string& key) override {
    std::lock_guard lock(mu_);
    if (!fail_.ok()) return fail_;
    auto it = keys_.find(key);
    if (it == keys_.end()) return std::optional<KeyValue>();
    return std::optional<KeyValue>(it->second);
  }

  // What etcd does when a lease's TTL passes without a renewal.
  void Expire(int64_t id) {
    std::lock_guard lock(mu_);
    EndLease(id);
  }
  // A key as a replica's previous process left it: on a lease of its own.
  int64_t PutOnNewLease(const std::string& key, const std::string& value) {
    std::lock_guard lock(mu_);
    const int64_t id = next_lease_++;
    leases_[id] = 2;
    keys_[key] = KeyValue{value, id, ++revision_};
    return id;
  }
  // Every call but a keep-alive fails with `st` (OK: they answer again).
  void Fail(Status st) {
    std::lock_guard lock(mu_);
    fail_ = std::move(st);
  }
  void FailKeepAlives(Status st) {
    std::lock_guard lock(mu_);
    keepalive_error_ = std::move(st);
  }
  // Runs in every keep-alive, before it answers.
  void OnKeepAlive(std::function<void()> hook) {
    std::lock_guard lock(mu_);
    on_keepalive_ = std::move(hook);
  }
  std::optional<KeyValue> Key(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = keys_.find(key);
    return it == keys_.end() ? std::nullopt : std::optional<KeyValue>(it->second);
  }
  std::vector<int64_t> revoked() {
    std::lock_guard lock(mu_);
    return revoked_;
  }
  int keepalives() {
    std::lock_guard lock(mu_);
    return keepalives_;
  }
  int64_t asked_ttl() {
    std::lock_guard lock(mu_);
    return asked_ttl_;
  }

 private:
  void EndLease(int64_t id) {
    leases_.erase(id);
    for (auto it = keys_.begin(); it != keys_.end();) {
      it = it->second.lease == id ? keys_.erase(it) : std::next(it);
    }
  }

  std::mutex mu_;
  std::map<int64_t, int64_t> leases_;  // id -> TTL
  std::map<std::string, KeyValue> keys_;
  int64_t next_lease_ = 0x100;
  int64_t revision_ = 1;
  int64_t asked_ttl_ = 0;
  int keepalives_ = 0;
  std::vector<int64_t> revoked_;
  Status fail_;
  Status keepalive_error_;
  std::function<void()> on_keepalive_;
};

constexpr char kKey[] = "/clusterd/leader";

class ElectionTest : public ::testing::Test {
 protected:
  std::unique_ptr<Election> NewElection(const std::string& candidate,
                                        std::chrono::nanoseconds ttl = std::chrono::seconds(2)) {
    Election::Options options;
    options.key = kKey;
    options.candidate = candidate;
    options.ttl = ttl;
    options.campaigns = &metrics_.AddCounter("campaigns_" + candidate, "Campaigns of one candidate.");
    campaigns_[candidate] = options.campaigns;
    return std::make_unique<Election>(&kv_, std::move(options), &clock_);
  }
  // r1 leads; r2 has a lease and has campaigned (and lost): it knows r1 leads.
  void R1LeadsR2Waits() {
    r1_ = Candidate("r1");
    r2_ = Candidate("r2");
    ASSERT_TRUE(r1_->Campaign());
    ASSERT_FALSE(r2_->Campaign());
  }
  // A candidate with a lease, ready to campaign.
  std::unique_ptr<Election> Candidate(const std::string& candidate) {
    auto election = NewElection(candidate);
    Status st = election->GrantLease();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return election;
  }

  FakeLeaseKv kv_;
  FakeClock clock_;
  MetricsRegistry metrics_;
  std::map<std::string, Counter*> campaigns_;
  std::unique_ptr<Election> r1_, r2_;
};

TEST_F(ElectionTest, WinsWhenTheKeyIsFree) {
  auto r1 = NewElection("r1", milliseconds(1500));
  ASSERT_TRUE(r1->GrantLease().ok());
  EXPECT_EQ(kv_.asked_ttl(), 2);  // whole seconds, rounded up
  EXPECT_TRUE(r1->LeaseHeld());
  EXPECT_FALSE(r1->Leads());

  ASSERT_TRUE(r1->Campaign());
  EXPECT_TRUE(r1->Leads());
  EXPECT_EQ(r1->leader(), "r1");
  auto key = kv_.Key(kKey);
  ASSERT_TRUE(key);
  EXPECT_EQ(key->value, "r1");
  EXPECT_EQ(key->lease, r1->lease_id());
  // The fencing token is the key's create revision.
  EXPECT_EQ(r1->fence_revision(), key->create_revision);
  EXPECT_NE(r1->fence_revision(), 0);
}

TEST_F(ElectionTest, DoesNotWinWhileAnotherHoldsTheKey) {
  R1LeadsR2Waits();
  const int64_t fence = r1_->fence_revision();
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(r2_->Campaign());
  EXPECT_FALSE(r2_->Leads());
  EXPECT_EQ(r2_->fence_revision(), 0);
  EXPECT_EQ(r2_->leader(), "r1");  // a campaign that loses says who won
  EXPECT_TRUE(kv_.revoked().empty());
  // The key is r1's as it was: a losing campaign changes nothing.
  EXPECT_EQ(kv_.Key(kKey)->create_revision, fence);
  EXPECT_TRUE(r1_->Leads());
}

TEST_F(ElectionTest, LosesLeadershipWhenEtcdSaysTheLeaseExpired) {
  R1LeadsR2Waits();
  ASSERT_TRUE(r1_->KeepAlive().ok());
  EXPECT_TRUE(r1_->Leads());

  kv_.Expire(r1_->lease_id());  // its key goes with it
  EXPECT_TRUE(r1_->KeepAlive().ok());
  EXPECT_TRUE(r1_->LeaseLost());
  EXPECT_FALSE(r1_->LeaseHeld());
  EXPECT_FALSE(r1_->Leads());  // at once, though its TTL has not passed here

  r2_->ReadLeader();  // nobody leads for a moment: r2 still knows whom it replaces
  EXPECT_EQ(r2_->leader(), "");
  ASSERT_TRUE(r2_->Campaign());
  EXPECT_EQ(r2_->replaced(), "r1");  // whose pod it marks a standby
  EXPECT_GT(r2_->fence_revision(), r1_->fence_revision());
}

TEST_F(ElectionTest, LosesLeadershipWhenNoKeepAliveIsAnsweredWithinTheTtl) {
  auto r1 = Candidate("r1");  // TTL 2 s, granted at t0
  ASSERT_TRUE(r1->Campaign());
  kv_.FailKeepAlives(Unavailable("etcd: no leader"));

  clock_.Advance(seconds(1));
  EXPECT_FALSE(r1->KeepAlive().ok());
  EXPECT_TRUE(r1->Leads());  // not answered, but the lease still runs
  clock_.Advance(milliseconds(999));
  EXPECT_FALSE(r1->KeepAlive().ok());
  EXPECT_TRUE(r1->Leads());
  clock_.Advance(milliseconds(1));  // t0 + TTL
  EXPECT_FALSE(r1->KeepAlive().ok());
  EXPECT_FALSE(r1->LeaseValid());
  EXPECT_TRUE(r1->LeaseLost());
  EXPECT_FALSE(r1->Leads());

  // An answer later does not bring that lease back: a new one is needed.
  kv_.FailKeepAlives(Status::Ok());
  ASSERT_TRUE(r1->KeepAlive().ok());
  EXPECT_TRUE(r1->LeaseLost());
  EXPECT_FALSE(r1->Leads());
  ASSERT_TRUE(r1->GrantLease().ok());
  EXPECT_FALSE(r1->LeaseLost());
  EXPECT_TRUE(r1->LeaseHeld());
}

TEST_F(ElectionTest, ARenewalCountsFromWhenItWasSentNotAnswered) {
  auto r1 = Candidate("r1");
  ASSERT_TRUE(r1->Campaign());
  // The answer takes a second: the lease runs from the request, since etcd
  // may have renewed it as soon as it arrived.
  kv_.OnKeepAlive([this] { clock_.Advance(seconds(1)); });
  clock_.Advance(seconds(1));
  ASSERT_TRUE(r1->KeepAlive().ok());  // sent at t0 + 1 s, answered at t0 + 2 s
  EXPECT_TRUE(r1->Leads());
  clock_.Advance(milliseconds(999));
  EXPECT_TRUE(r1->LeaseValid());
  clock_.Advance(milliseconds(1));  // t0 + 1 s + TTL
  EXPECT_FALSE(r1->LeaseValid());
  EXPECT_FALSE(r1->Leads());
}

TEST_F(ElectionTest, ResigningFreesTheKeyAtOnce) {
  R1LeadsR2Waits();
  const int64_t lease = r1_->lease_id();

  r1_->Resign();
  EXPECT_EQ(kv_.revoked(), std::vector<int64_t>{lease});
  EXPECT_FALSE(kv_.Key(kKey).has_value());
  EXPECT_FALSE(r1_->Leads());
  // The standby wins at its next campaign, without waiting for r1's TTL.
  ASSERT_TRUE(r2_->Campaign());
  EXPECT_EQ(r2_->leader(), "r2");
  r1_->ReadLeader();
  EXPECT_EQ(r1_->leader(), "r2");
}

TEST_F(ElectionTest, ARestartedReplicaRevokesTheLeaseOfItsPreviousProcess) {
  const int64_t old_lease = kv_.PutOnNewLease(kKey, "r1");  // r1 died while leading
  auto r1 = Candidate("r1");                                // and started again
  EXPECT_FALSE(r1->Campaign());
  EXPECT_EQ(kv_.revoked(), std::vector<int64_t>{old_lease});
  EXPECT_FALSE(kv_.Key(kKey).has_value());
  EXPECT_TRUE(r1->Campaign());  // instead of after the old lease's TTL
}

TEST_F(ElectionTest, AnotherReplicasKeyIsNeverRevoked) {
  kv_.PutOnNewLease(kKey, "r2");
  auto r1 = Candidate("r1");
  EXPECT_FALSE(r1->Campaign());
  EXPECT_TRUE(kv_.revoked().empty());
  EXPECT_EQ(r1->leader(), "r2");
}

TEST_F(ElectionTest, ACampaignThatFailsDoesNotWinAndKeepsWhatItKnew) {
  auto r2 = Candidate("r2");
  auto r1 = Candidate("r1");
  ASSERT_TRUE(r2->Campaign());
  EXPECT_FALSE(r1->Campaign());
  kv_.Fail(Unavailable("etcd: timeout"));
  EXPECT_FALSE(r1->Campaign());
  r1->ReadLeader();
  EXPECT_EQ(r1->leader(), "r2");
  EXPECT_EQ(campaigns_["r1"]->Value(), 2u);
  kv_.Fail(Status::Ok());
  r2->Resign();
  r1->ReadLeader();
  EXPECT_EQ(r1->leader(), "");
}

TEST_F(ElectionTest, TheKeepAliveThreadRenewsUntilStopped) {
  auto r1 = Candidate("r1");
  ASSERT_TRUE(r1->Campaign());
  clock_.Advance(seconds(3));  // past the TTL: only a renewal makes it valid
  const int before = kv_.keepalives();
  r1->StartKeepAlive();
  ASSERT_TRUE(testing::WaitFor([&] { return kv_.keepalives() > before && r1->LeaseValid(); }));
  r1->StopKeepAlive();
  const int after = kv_.keepalives();
  EXPECT_TRUE(r1->Leads());
  // Stopped means joined: nothing renews any more.
  clock_.Advance(seconds(2));
  EXPECT_EQ(kv_.keepalives(), after);
  EXPECT_FALSE(r1->LeaseValid());
}

}  // namespace
}  // namespace clusterd::ha
