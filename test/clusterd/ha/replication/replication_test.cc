// The replicated commit log's entries and the leader's ReplicatedStore
// (clusterd/ha/replication), on MemoryStores and a fake log.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <zstd.h>

#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/ha/replication/replicated_store.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/memory_store.h"
#include "clusterd/storage/schema.h"
#include "clusterd/storage/v1/storage.pb.h"
#include "common/metrics.h"
#include "test/support/fakes/fake_log.h"

namespace clusterd::replication {
namespace {

using storage::Cf;
using storage::ChangeSet;
using storage::MemoryStore;

using Table = std::map<std::string, std::string>;

Table Dump(const storage::Store& store, Cf cf) {
  Table out;
  Status st = store.ForEach(cf, [&out](std::string_view k, std::string_view v) { out.emplace(k, v); });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

std::vector<Table> DumpAll(const storage::Store& store) {
  std::vector<Table> out;
  for (size_t i = 0; i < storage::kCfCount; ++i) out.push_back(Dump(store, static_cast<Cf>(i)));
  return out;
}

bool Has(const storage::Store& store, Cf cf, const std::string& key) { return Dump(store, cf).count(key) > 0; }

uint64_t LogIndexOf(const storage::Store& store) {
  auto index = ReadLogIndex(store);
  EXPECT_TRUE(index.ok()) << index.status().ToString();
  return index.ok() ? *index : ~uint64_t{0};
}

std::unique_ptr<MemoryStore> NewMemoryStore() {
  auto store = MemoryStore::Open();
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  return std::move(*store);
}

// A change set over several tables with every kind of operation.
ChangeSet MixedChanges(const std::string& tag) {
  ChangeSet c;
  c.Put(Cf::kNodes, "node-" + tag, "record-" + tag);
  c.Put(Cf::kFaults, "fault-" + tag + "-a", "fa");
  c.Put(Cf::kFaults, "fault-" + tag + "-b", "fb");
  c.Put(Cf::kJobs, "job-" + tag, "j");
  c.Delete(Cf::kFaults, "fault-" + tag + "-b");
  c.DeleteRange(Cf::kDevices, "a", "m");
  c.Put(Cf::kDevices, "z-" + tag, "dev");
  c.Put(Cf::kRecoveries, "rec-" + tag, std::string("\0bin\xff", 5));
  return c;
}

// ---- EncodeEntry / DecodeEntry -------------------------------------------

TEST(LogEntry, RoundTripAddsTheIndexPut) {
  ChangeSet changes = MixedChanges("1");
  changes.Delete(Cf::kMeta, "gone");
  const std::string bytes = EncodeEntry(42, changes, "replica-a");
  auto entry = DecodeEntry(bytes);
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->index, 42u);
  EXPECT_EQ(entry->leader, "replica-a");
  ChangeSet want = changes;
  PutLogIndex(&want, 42);
  EXPECT_EQ(entry->changes.changes(), want.changes());
  // The last change is the index put (u64 big-endian under meta "log_index").
  const storage::Change& last = entry->changes.changes().back();
  EXPECT_EQ(last.table, Cf::kMeta);
  EXPECT_EQ(last.key, kMetaLogIndex);
  EXPECT_EQ(storage::DecodeU64(last.value), std::optional<uint64_t>(42));
}

TEST(LogEntry, EmptyChangeSetCarriesOnlyTheIndex) {
  auto entry = DecodeEntry(EncodeEntry(1, ChangeSet{}, ""));
  ASSERT_TRUE(entry.ok()) << entry.status().ToString();
  EXPECT_EQ(entry->index, 1u);
  ASSERT_EQ(entry->changes.size(), 1u);
  EXPECT_EQ(entry->changes.changes().front().key, kMetaLogIndex);
}

storage::v1::LogEntry GoodProto() {
  storage::v1::LogEntry e;
  e.set_index(7);
  e.set_leader("x");
  auto* op = e.add_ops();
  op->set_op(0);
  op->set_table(static_cast<uint32_t>(Cf::kNodes));
  op->set_key("k");
  op->set_value("v");
  return e;
}

void ExpectInvalid(const std::string& bytes, const std::string& mentions) {
  auto entry = DecodeEntry(bytes);
  ASSERT_FALSE(entry.ok());
  EXPECT_EQ(entry.status().code(), StatusCode::kInvalidArgument) << entry.status().ToString();
  EXPECT_NE(entry.status().message().find(mentions), std::string::npos) << entry.status().message();
}

TEST(LogEntry, DecodeRejectsWhatIsNotAnEntry) {
  ASSERT_TRUE(DecodeEntry(GoodProto().SerializeAsString()).ok());
  ExpectInvalid(std::string("\xff\xff\xff\xff\x0f garbage", 10), "not a LogEntry");
  ExpectInvalid("", "no index");  // an empty message has index 0

  storage::v1::LogEntry no_index = GoodProto();
  no_index.set_index(0);
  ExpectInvalid(no_index.SerializeAsString(), "no index");

  storage::v1::LogEntry bad_table = GoodProto();
  bad_table.mutable_ops(0)->set_table(storage::kCfCount);
  ExpectInvalid(bad_table.SerializeAsString(), "unknown table");
  bad_table.mutable_ops(0)->set_table(0);  // kDefault is never written
  ExpectInvalid(bad_table.SerializeAsString(), "unknown table");

  storage::v1::LogEntry bad_op = GoodProto();
  bad_op.mutable_ops(0)->set_op(3);
  ExpectInvalid(bad_op.SerializeAsString(), "unknown operation");
}

// A group commit's worth of fault-like records: what the leader appends.
ChangeSet GroupLikeChanges(int records) {
  ChangeSet c;
  for (int i = 0; i < records; ++i) {
    const std::string node = "node-" + std::to_string(i % 64);
    c.Put(Cf::kFaults, node + "/npu-" + std::to_string(i % 8) + "/0x80C98008",
          "{node:" + node + ",code:0x80C98008,level:RestartBusiness,source:dcmi,device:" + std::to_string(i % 8) +
              ",message:HBM ECC multi-bit error on the chip,count:" + std::to_string(i) + "}");
  }
  return c;
}

TEST(LogEntry, CompressedRoundTripIsSmallerAndDecodesTheSame) {
  const ChangeSet changes = GroupLikeChanges(400);
  const std::string plain = EncodeEntry(5, changes, "replica-a", 77);
  const std::string packed = EncodeEntry(5, changes, "replica-a", 77, EntryCodec::kZstd);
  ASSERT_FALSE(packed.empty());
  EXPECT_EQ(packed[0], kCompressedMarker);
  EXPECT_EQ(static_cast<EntryCodec>(packed[1]), EntryCodec::kZstd);
  EXPECT_LT(packed.size() * 4, plain.size()) << packed.size() << " vs " << plain.size();
  auto a = DecodeEntry(plain);
  auto b = DecodeEntry(packed);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->index, 5u);
  EXPECT_EQ(b->leader, "replica-a");
  EXPECT_EQ(b->prev_revision, std::optional<uint64_t>(77));
  EXPECT_EQ(b->changes.changes(), a->changes.changes());
}

TEST(LogEntry, SmallEntriesStayPlainEvenWithCompression) {
  ChangeSet c;
  c.Put(Cf::kNodes, "n", "r");
  const std::string bytes = EncodeEntry(3, c, "l", std::nullopt, EntryCodec::kZstd);
  EXPECT_EQ(bytes, EncodeEntry(3, c, "l"));
  EXPECT_TRUE(DecodeEntry(bytes).ok());
}

TEST(LogEntry, AReplicaTooOldForCompressionFailsLoudlyInsteadOfApplyingNothing) {
  // What a release without the codec does with the bytes: parse them as a
  // LogEntry. The marker is a field-0 tag, so that parse must fail.
  const std::string packed = EncodeEntry(9, GroupLikeChanges(100), "l", std::nullopt, EntryCodec::kZstd);
  ASSERT_EQ(packed[0], kCompressedMarker);
  storage::v1::LogEntry old;
  EXPECT_FALSE(old.ParseFromString(packed));
}

TEST(LogEntry, DecodeRejectsBadCompressedEntries) {
  const std::string packed = EncodeEntry(9, GroupLikeChanges(100), "l", std::nullopt, EntryCodec::kZstd);
  std::string codec = packed;
  codec[1] = 7;
  ExpectInvalid(codec, "unknown codec 7");
  ExpectInvalid(std::string(1, kCompressedMarker), "unknown codec (none)");
  ExpectInvalid(packed.substr(0, 2) + "not zstd at all", "not a zstd frame");
  // A truncated frame: its header still states the size.
  ExpectInvalid(packed.substr(0, packed.size() / 2), "corrupt zstd frame");
  // A frame that says it is bigger than any entry may be (a zip bomb, or
  // garbage): refused before anything is allocated.
  std::string big(kMaxDecodedEntryBytes + 1, 'x');
  const size_t bound = ZSTD_compressBound(big.size());
  std::string frame(bound, '\0');
  const size_t n = ZSTD_compress(frame.data(), bound, big.data(), big.size(), 1);
  ASSERT_FALSE(ZSTD_isError(n));
  frame.resize(n);
  ExpectInvalid(std::string(1, kCompressedMarker) + std::string(1, '\1') + frame, "more than the");
}

TEST(LogEntry, ReadLogIndex) {
  auto store = NewMemoryStore();
  EXPECT_EQ(LogIndexOf(*store), 0u);  // a new store
  ChangeSet c;
  PutLogIndex(&c, 9);
  ASSERT_TRUE(store->Write(c).ok());
  EXPECT_EQ(LogIndexOf(*store), 9u);
  ChangeSet bad;
  bad.Put(Cf::kMeta, std::string(kMetaLogIndex), "short");
  ASSERT_TRUE(store->Write(bad).ok());
  auto index = ReadLogIndex(*store);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kDataLoss);
}

// ---- Fakes ----------------------------------------------------------------

// A local store that can fail its next Write, and counts Reopens.
class FlakyStore final : public storage::Store {
 public:
  explicit FlakyStore(std::unique_ptr<storage::Store> inner) : inner_(std::move(inner)) {}

  uint64_t revision_at_open() const override { return inner_->revision_at_open(); }
  uint64_t compacted_at_open() const override { return inner_->compacted_at_open(); }
  Status Write(const ChangeSet& changes) override {
    ++writes;
    if (!fail_next_write.ok()) return std::exchange(fail_next_write, Status::Ok());
    return inner_->Write(changes);
  }
  Status Reopen(bool read_only) override {
    ++reopens;
    return inner_->Reopen(read_only);
  }
  bool read_only() const override { return inner_->read_only(); }
  Status ForEach(Cf table, const std::function<void(std::string_view, std::string_view)>& fn) const override {
    return inner_->ForEach(table, fn);
  }
  StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const override {
    return inner_->ReadEvents(after, max_count);
  }
  StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff, size_t max_scan) const override {
    return inner_->LastRevisionBefore(after, cutoff, max_scan);
  }
  const std::string& path() const override { return inner_->path(); }

  Status fail_next_write;
  int writes = 0;
  int reopens = 0;

 private:
  std::unique_ptr<storage::Store> inner_;
};

class ReplicatedStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto flaky = std::make_unique<FlakyStore>(NewMemoryStore());
    local_ = flaky.get();
    store_ =
        std::make_unique<ReplicatedStore>(std::move(flaky), &log_, 0, "leader-1", &metrics_, [this](const Status& st) {
          ++fenced_calls_;
          fenced_status_ = st;
        });
  }

  MetricsRegistry metrics_;
  testing::FakeLog log_;
  FlakyStore* local_ = nullptr;  // owned by store_
  int fenced_calls_ = 0;
  Status fenced_status_;
  std::unique_ptr<ReplicatedStore> store_;
};

TEST_F(ReplicatedStoreTest, AppendsBeforeTheLocalWrite) {
  ChangeSet changes = MixedChanges("a");
  bool local_had_it = true;
  log_.OnAppend([&](uint64_t, const std::string&) {
    local_had_it = Has(*local_, Cf::kNodes, "node-a") || LogIndexOf(*local_) != 0;
  });
  ASSERT_TRUE(store_->Write(changes).ok());
  EXPECT_FALSE(local_had_it);
  ASSERT_EQ(log_.appends().size(), 1u);
  EXPECT_EQ(log_.appends()[0].first, 1u);
  auto entry = DecodeEntry(log_.appends()[0].second);
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->index, 1u);
  EXPECT_EQ(entry->leader, "leader-1");
  ChangeSet want = changes;
  PutLogIndex(&want, 1);
  EXPECT_EQ(entry->changes.changes(), want.changes());
  // The local store holds the changes and the index; reads go to it.
  EXPECT_TRUE(Has(*local_, Cf::kNodes, "node-a"));
  EXPECT_FALSE(Has(*local_, Cf::kFaults, "fault-a-b"));
  EXPECT_EQ(Dump(*store_, Cf::kJobs), Dump(*local_, Cf::kJobs));
  EXPECT_EQ(LogIndexOf(*local_), 1u);
  EXPECT_EQ(store_->applied_index(), 1u);

  ASSERT_TRUE(store_->Write(MixedChanges("b")).ok());
  ASSERT_EQ(log_.appends().size(), 2u);
  EXPECT_EQ(log_.appends()[1].first, 2u);
  EXPECT_EQ(LogIndexOf(*local_), 2u);
  EXPECT_EQ(store_->applied_index(), 2u);
  EXPECT_FALSE(store_->fenced());
  EXPECT_EQ(fenced_calls_, 0);
}

TEST_F(ReplicatedStoreTest, FailedAppendWritesNothingAndIsRetried) {
  ASSERT_TRUE(store_->Write(MixedChanges("a")).ok());
  const auto before = DumpAll(*local_);
  log_.FailAppends(Unavailable("etcd: no leader"));
  ChangeSet changes = MixedChanges("b");
  Status st = store_->Write(changes);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_EQ(DumpAll(*local_), before);
  EXPECT_EQ(local_->writes, 1);
  EXPECT_EQ(store_->applied_index(), 1u);
  EXPECT_FALSE(store_->fenced());

  log_.AppendsOk();
  ASSERT_TRUE(store_->Write(changes).ok());
  ASSERT_EQ(log_.appends().size(), 3u);
  EXPECT_EQ(log_.appends()[1].first, 2u);
  EXPECT_EQ(log_.appends()[2].first, 2u);  // the same index again
  EXPECT_EQ(log_.appends()[1].second, log_.appends()[2].second);
  EXPECT_TRUE(Has(*local_, Cf::kNodes, "node-b"));
  EXPECT_EQ(LogIndexOf(*local_), 2u);
  EXPECT_EQ(store_->applied_index(), 2u);
  EXPECT_EQ(fenced_calls_, 0);
}

TEST_F(ReplicatedStoreTest, LostAnswerIsSettledByTheLog) {
  log_.LoseAppendAnswers();
  ChangeSet changes = MixedChanges("a");
  ASSERT_FALSE(store_->Write(changes).ok());
  EXPECT_EQ(log_.entries().size(), 1u);              // it is in the log ...
  EXPECT_FALSE(Has(*local_, Cf::kNodes, "node-a"));  // ... not yet here
  EXPECT_EQ(store_->applied_index(), 0u);

  log_.AppendsOk();
  ASSERT_TRUE(store_->Write(changes).ok());  // same bytes: the log answers OK
  ASSERT_EQ(log_.appends().size(), 2u);
  EXPECT_EQ(log_.appends()[1].first, 1u);
  EXPECT_EQ(log_.entries().size(), 1u);
  EXPECT_TRUE(Has(*local_, Cf::kNodes, "node-a"));
  EXPECT_EQ(store_->applied_index(), 1u);
  EXPECT_FALSE(store_->fenced());
}

TEST_F(ReplicatedStoreTest, FailedLocalWriteIsRetriedWithoutAppendingAgain) {
  local_->fail_next_write = Internal("disk on fire");
  ChangeSet changes = MixedChanges("a");
  Status st = store_->Write(changes);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_EQ(log_.appends().size(), 1u);
  EXPECT_EQ(store_->applied_index(), 0u);
  EXPECT_FALSE(Has(*local_, Cf::kNodes, "node-a"));

  // The Engine reopens the store, then retries the same change set.
  ASSERT_TRUE(store_->Reopen(false).ok());
  EXPECT_EQ(local_->reopens, 1);
  ASSERT_TRUE(store_->Write(changes).ok());
  EXPECT_EQ(log_.appends().size(), 1u);  // not appended twice
  EXPECT_TRUE(Has(*local_, Cf::kNodes, "node-a"));
  EXPECT_EQ(LogIndexOf(*local_), 1u);
  EXPECT_EQ(store_->applied_index(), 1u);

  // The next change set is the next entry.
  ASSERT_TRUE(store_->Write(MixedChanges("b")).ok());
  ASSERT_EQ(log_.appends().size(), 2u);
  EXPECT_EQ(log_.appends()[1].first, 2u);
  EXPECT_EQ(store_->applied_index(), 2u);
  // A Reopen once the local store is fine again does nothing.
  ASSERT_TRUE(store_->Reopen(false).ok());
  EXPECT_EQ(local_->reopens, 1);
}

TEST_F(ReplicatedStoreTest, ReopenAfterAFailedAppendLeavesTheLocalStore) {
  log_.FailAppends(Unavailable("etcd: timeout"));
  ASSERT_FALSE(store_->Write(MixedChanges("a")).ok());
  ASSERT_TRUE(store_->Reopen(false).ok());
  EXPECT_EQ(local_->reopens, 0);
  log_.AppendsOk();
  ASSERT_TRUE(store_->Write(MixedChanges("a")).ok());
  EXPECT_EQ(store_->applied_index(), 1u);
  // Going read-only is passed on.
  ASSERT_TRUE(store_->Reopen(true).ok());
  EXPECT_EQ(local_->reopens, 1);
  EXPECT_TRUE(store_->read_only());
}

TEST_F(ReplicatedStoreTest, FencedOnceForGood) {
  ASSERT_TRUE(store_->Write(MixedChanges("a")).ok());
  const auto before = DumpAll(*local_);
  log_.FailAppends(FailedPrecondition("lease lost"));
  EXPECT_EQ(store_->Write(MixedChanges("b")).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(store_->fenced());
  EXPECT_EQ(fenced_calls_, 1);
  EXPECT_EQ(fenced_status_.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(log_.appends().size(), 2u);

  log_.AppendsOk();  // even when the log would take it
  for (int i = 0; i < 3; ++i) {
    Status st = store_->Write(MixedChanges("c"));
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  }
  EXPECT_EQ(log_.appends().size(), 2u);  // no Append once fenced
  EXPECT_EQ(fenced_calls_, 1);
  Status reopen = store_->Reopen(false);
  EXPECT_EQ(reopen.code(), StatusCode::kFailedPrecondition) << reopen.ToString();
  EXPECT_EQ(local_->reopens, 0);
  EXPECT_EQ(DumpAll(*local_), before);
  EXPECT_EQ(store_->applied_index(), 1u);
}

TEST_F(ReplicatedStoreTest, OtherBytesAtTheIndexFence) {
  // Another leader already wrote entry 1: the fake answers FAILED_PRECONDITION.
  log_.Seed(1, "someone else's entry");
  ASSERT_FALSE(store_->Write(MixedChanges("a")).ok());
  EXPECT_TRUE(store_->fenced());
  EXPECT_EQ(fenced_calls_, 1);
  EXPECT_EQ(LogIndexOf(*local_), 0u);
}

TEST(ReplicatedStore, StartsAfterTheGivenIndex) {
  testing::FakeLog log;
  for (uint64_t i = 1; i <= 5; ++i) log.Seed(i, "old");
  auto inner = NewMemoryStore();
  ChangeSet caught_up;
  PutLogIndex(&caught_up, 5);
  ASSERT_TRUE(inner->Write(caught_up).ok());
  ReplicatedStore store(std::move(inner), &log, 5, "leader-2", nullptr, nullptr);
  EXPECT_EQ(store.applied_index(), 5u);
  ASSERT_TRUE(store.Write(MixedChanges("a")).ok());
  ASSERT_EQ(log.appends().size(), 1u);
  EXPECT_EQ(log.appends()[0].first, 6u);
  EXPECT_EQ(LogIndexOf(store), 6u);
  // Fenced without a callback: no crash.
  log.FailAppends(FailedPrecondition("lost"));
  EXPECT_FALSE(store.Write(MixedChanges("b")).ok());
  EXPECT_TRUE(store.fenced());
}

// ---- ApplyLogEntry (a standby) --------------------------------------------

TEST_F(ReplicatedStoreTest, FollowerReplaysToTheSameContents) {
  ASSERT_TRUE(store_->Write(MixedChanges("a")).ok());
  ChangeSet second = MixedChanges("b");
  second.DeleteRange(Cf::kFaults, "fault-a", "fault-a\xff");
  second.Delete(Cf::kNodes, "node-a");
  ASSERT_TRUE(store_->Write(second).ok());
  ChangeSet third;
  third.Put(Cf::kMeta, "admin_state", "paused");
  third.Put(Cf::kEvents, std::string(8, '\0'), "event");
  ASSERT_TRUE(store_->Write(third).ok());
  ASSERT_EQ(log_.appends().size(), 3u);

  auto follower = NewMemoryStore();
  uint64_t applied = 0;
  for (const auto& [index, bytes] : log_.appends()) {
    ASSERT_TRUE(ApplyLogEntry(follower.get(), bytes, &applied).ok());
    EXPECT_EQ(applied, index);
  }
  for (size_t i = 0; i < storage::kCfCount; ++i) {
    const Cf cf = static_cast<Cf>(i);
    EXPECT_EQ(Dump(*follower, cf), Dump(*local_, cf)) << storage::kCfNames[i];
  }
  EXPECT_EQ(LogIndexOf(*follower), 3u);
  EXPECT_EQ(LogIndexOf(*follower), LogIndexOf(*local_));
  EXPECT_FALSE(Dump(*follower, Cf::kFaults).empty());

  // At or below applied: skipped, nothing changes.
  const auto before = DumpAll(*follower);
  ChangeSet stale;
  stale.Put(Cf::kNodes, "stale", "x");
  EXPECT_TRUE(ApplyLogEntry(follower.get(), EncodeEntry(2, stale, "old"), &applied).ok());
  EXPECT_TRUE(ApplyLogEntry(follower.get(), log_.appends()[2].second, &applied).ok());
  EXPECT_EQ(applied, 3u);
  EXPECT_EQ(DumpAll(*follower), before);

  // A gap: OUT_OF_RANGE, nothing changes.
  Status gap = ApplyLogEntry(follower.get(), EncodeEntry(5, stale, "leader-1"), &applied);
  EXPECT_EQ(gap.code(), StatusCode::kOutOfRange) << gap.ToString();
  EXPECT_EQ(applied, 3u);
  EXPECT_EQ(DumpAll(*follower), before);

  // Malformed: INVALID_ARGUMENT, nothing changes.
  Status bad = ApplyLogEntry(follower.get(), "not an entry \xff\xff\xff\xff\xff", &applied);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_EQ(applied, 3u);
  EXPECT_EQ(DumpAll(*follower), before);

  // The next entry applies.
  ASSERT_TRUE(ApplyLogEntry(follower.get(), EncodeEntry(4, stale, "leader-1"), &applied).ok());
  EXPECT_EQ(applied, 4u);
  EXPECT_TRUE(Has(*follower, Cf::kNodes, "stale"));
  EXPECT_EQ(LogIndexOf(*follower), 4u);
}

// Each entry names the revision it was written over: a follower whose store
// does not hold what the leader's held (one with data from before the log
// began) is refused instead of diverging, and one that does follows.
TEST_F(ReplicatedStoreTest, EntriesCarryThePreviousRevision) {
  ChangeSet first = MixedChanges("a");
  storage::PutRevision(&first, 7);
  ASSERT_TRUE(store_->Write(first).ok());
  ChangeSet second = MixedChanges("b");
  storage::PutRevision(&second, 9);
  ASSERT_TRUE(store_->Write(second).ok());
  ASSERT_EQ(log_.appends().size(), 2u);
  auto e1 = DecodeEntry(log_.appends()[0].second);
  auto e2 = DecodeEntry(log_.appends()[1].second);
  ASSERT_TRUE(e1.ok() && e2.ok());
  EXPECT_EQ(e1->prev_revision, std::optional<uint64_t>(0));
  EXPECT_EQ(e2->prev_revision, std::optional<uint64_t>(7));

  // A follower with history of its own (revision 3): refused, unchanged.
  auto diverged = NewMemoryStore();
  ChangeSet own;
  storage::PutRevision(&own, 3);
  ASSERT_TRUE(diverged->Write(own).ok());
  const auto before = DumpAll(*diverged);
  uint64_t applied = 0, revision = 3;
  Status st = ApplyLogEntry(diverged.get(), log_.appends()[0].second, &applied, &revision);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_EQ(applied, 0u);
  EXPECT_EQ(DumpAll(*diverged), before);

  // An empty follower applies both and tracks the revision.
  auto follower = NewMemoryStore();
  applied = 0;
  revision = 0;
  ASSERT_TRUE(ApplyLogEntry(follower.get(), log_.appends()[0].second, &applied, &revision).ok());
  EXPECT_EQ(revision, 7u);
  ASSERT_TRUE(ApplyLogEntry(follower.get(), log_.appends()[1].second, &applied, &revision).ok());
  EXPECT_EQ(revision, 9u);
  EXPECT_EQ(applied, 2u);
}

TEST(ApplyLogEntry, FailedLocalWriteLeavesAppliedAndCanBeRetried) {
  auto follower = NewMemoryStore();
  uint64_t applied = 0;
  ChangeSet c;
  c.Put(Cf::kNodes, "n", "v");
  const std::string entry = EncodeEntry(1, c, "l");
  follower->set_write_error(Unavailable("disk full"));
  EXPECT_EQ(ApplyLogEntry(follower.get(), entry, &applied).code(), StatusCode::kUnavailable);
  EXPECT_EQ(applied, 0u);
  follower->set_write_error(Status::Ok());
  ASSERT_TRUE(ApplyLogEntry(follower.get(), entry, &applied).ok());
  EXPECT_EQ(applied, 1u);
  EXPECT_EQ(LogIndexOf(*follower), 1u);
}

}  // namespace
}  // namespace clusterd::replication
