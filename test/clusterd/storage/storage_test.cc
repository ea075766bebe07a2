// The Store contract, run against both implementations: a ChangeSet applies
// atomically and in order, reads see it in key order, the event log reads by
// revision, counters survive a reopen, and read-only mode refuses writes.
// Links only clusterd_storage: the storage library stands on its own.
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "clusterd/storage/change_set.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/memory_store.h"
#include "clusterd/storage/rocksdb_store.h"
#include "test/support/state/store_backends.h"

namespace clusterd::storage {
namespace {

using testing::MemoryBackend;
using testing::RocksDbBackend;
using Table = std::map<std::string, std::string>;

template <typename Backend>
class StoreContractTest : public ::testing::Test {
 protected:
  std::unique_ptr<Store> Open(StoreOptions options = {}) {
    auto store = backend_.Open(options);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(*store) : nullptr;
  }
  Backend backend_;
};

using Backends = ::testing::Types<RocksDbBackend, MemoryBackend>;
TYPED_TEST_SUITE(StoreContractTest, Backends);

Table Dump(const Store& store, Cf cf) {
  Table out;
  std::string last;
  Status st = store.ForEach(cf, [&](std::string_view key, std::string_view value) {
    EXPECT_TRUE(out.empty() || last < key) << "keys out of order";
    last = key;
    out.emplace(key, value);
  });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

v1::Event MakeEvent(uint64_t revision, int64_t unix_seconds) {
  v1::Event e;
  e.set_revision(revision);
  e.set_type(v1::EVENT_TYPE_NODE_REGISTERED);
  e.set_node("worker01");
  e.mutable_time()->set_seconds(unix_seconds);
  return e;
}

// Events 1..5 at t=100..500, records in two tables, a put overwritten by a
// later delete and put, the compaction of events (0, 2], the revision.
ChangeSet Scenario() {
  ChangeSet c;
  for (uint64_t r = 1; r <= 5; ++r) c.Put(Cf::kEvents, EventKey(r), MakeEvent(r, static_cast<int64_t>(r) * 100));
  c.Put(Cf::kNodes, NodeKey("b"), "2");
  c.Put(Cf::kNodes, NodeKey("a"), "1");
  c.Delete(Cf::kNodes, NodeKey("a"));
  c.Put(Cf::kNodes, NodeKey("a"), "3");
  c.Put(Cf::kNodes, NodeKey("gone"), "x");
  c.Delete(Cf::kNodes, NodeKey("gone"));
  c.Put(Cf::kDevices, DeviceKey("a", 256), "d256");
  c.Put(Cf::kDevices, DeviceKey("a", 1), "d1");
  c.Put(Cf::kDevices, DeviceKey("ab", 0), "ab0");
  AddCompaction(&c, 0, 2);
  PutRevision(&c, 5);
  return c;
}

TEST(ChangeSetTest, KeepsOperationsInOrder) {
  ChangeSet c;
  EXPECT_TRUE(c.empty());
  c.Put(Cf::kJobs, JobKey("j"), "v");
  c.Delete(Cf::kJobs, JobKey("k"));
  c.DeleteRange(Cf::kEvents, EventKey(1), EventKey(3));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_FALSE(c.empty());
  EXPECT_EQ(c.byte_size(), 1u + 1u + 1u + 16u);
  std::vector<Change> ops(c.begin(), c.end());
  EXPECT_EQ(ops[0], (Change{.op = Change::Op::kPut, .table = Cf::kJobs, .key = "j", .value = "v", .end = ""}));
  EXPECT_EQ(ops[1], (Change{.op = Change::Op::kDelete, .table = Cf::kJobs, .key = "k", .value = "", .end = ""}));
  EXPECT_EQ(
      ops[2],
      (Change{
          .op = Change::Op::kDeleteRange, .table = Cf::kEvents, .key = EventKey(1), .value = "", .end = EventKey(3)}));
  c.Clear();
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(c.byte_size(), 0u);
}

TEST(ChangeSetTest, SchemaChangesUseTheKeyCodec) {
  ChangeSet c;
  PutRevision(&c, 7);
  AddCompaction(&c, 2, 5);
  ASSERT_EQ(c.size(), 3u);
  const auto& ops = c.changes();
  EXPECT_EQ(ops[0].table, Cf::kMeta);
  EXPECT_EQ(ops[0].key, kMetaRevision);
  EXPECT_EQ(DecodeU64(ops[0].value), 7u);
  // (2, 5]: [3, 6) in keys.
  EXPECT_EQ(ops[1].op, Change::Op::kDeleteRange);
  EXPECT_EQ(ops[1].key, EventKey(3));
  EXPECT_EQ(ops[1].end, EventKey(6));
  EXPECT_EQ(ops[2].key, kMetaCompactedRevision);
  EXPECT_EQ(DecodeU64(ops[2].value), 5u);
}

TYPED_TEST(StoreContractTest, ChangeSetRoundTrip) {
  auto store = this->Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->revision_at_open(), 0u);
  EXPECT_FALSE(store->read_only());
  ASSERT_TRUE(store->Write(Scenario()).ok());

  const Table nodes = {{NodeKey("a"), "3"}, {NodeKey("b"), "2"}};
  EXPECT_EQ(Dump(*store, Cf::kNodes), nodes);
  // Bytewise order: a's devices by big-endian id, then ab's.
  std::vector<std::string> device_keys;
  ASSERT_TRUE(
      store->ForEach(Cf::kDevices, [&](std::string_view k, std::string_view) { device_keys.emplace_back(k); }).ok());
  EXPECT_EQ(device_keys, (std::vector<std::string>{DeviceKey("a", 1), DeviceKey("a", 256), DeviceKey("ab", 0)}));

  auto events = store->ReadEvents(0, 100);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 3u);  // 1 and 2 compacted
  EXPECT_EQ(events->front().revision(), 3u);
  EXPECT_EQ(events->back().node(), "worker01");
  events = store->ReadEvents(3, 1);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ(events->front().revision(), 4u);
  EXPECT_TRUE(store->ReadEvents(5, 10)->empty());
  // The first event at or after t=400 is 4: everything up to 3 is older.
  EXPECT_EQ(*store->LastRevisionBefore(2, 400, 100), 3u);
  EXPECT_EQ(*store->LastRevisionBefore(2, 10'000, 100), 5u);  // all older
  EXPECT_EQ(*store->LastRevisionBefore(2, 10'000, 1), 3u);    // at most one scanned

  // Written twice: the same result (a held commit may be written again).
  const Table meta = Dump(*store, Cf::kMeta);
  ASSERT_TRUE(store->Write(Scenario()).ok());
  EXPECT_EQ(Dump(*store, Cf::kNodes), nodes);
  EXPECT_EQ(Dump(*store, Cf::kMeta), meta);
  EXPECT_EQ(store->ReadEvents(0, 100)->size(), 3u);

  // Counters as of the next open.
  store.reset();
  store = this->Open();
  ASSERT_TRUE(store);
  EXPECT_EQ(store->revision_at_open(), 5u);
  EXPECT_EQ(store->compacted_at_open(), 2u);
  EXPECT_EQ(Dump(*store, Cf::kNodes), nodes);
  EXPECT_EQ(store->ReadEvents(0, 100)->size(), 3u);
}

TYPED_TEST(StoreContractTest, ReadOnlyRefusesWritesUntilReopened) {
  // Nothing to read yet: a read-only open cannot initialise the store.
  EXPECT_EQ(this->backend_.Open(StoreOptions{.read_only = true}).status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(this->Open());  // initialised
  auto store = this->Open(StoreOptions{.read_only = true});
  ASSERT_TRUE(store);
  EXPECT_TRUE(store->read_only());
  ChangeSet c;
  c.Put(Cf::kJobs, JobKey("j"), "v");
  Status st = store->Write(c);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Dump(*store, Cf::kJobs).empty());
  ASSERT_TRUE(store->Reopen(false).ok());
  EXPECT_FALSE(store->read_only());
  ASSERT_TRUE(store->Write(c).ok());
  EXPECT_EQ(Dump(*store, Cf::kJobs), (Table{{"j", "v"}}));
}

TEST(MemoryStoreTest, InjectedWriteErrorChangesNothing) {
  auto store = MemoryStore::Open();
  ASSERT_TRUE(store.ok());
  (*store)->set_write_error(Unavailable("disk on fire"));
  ChangeSet c;
  c.Put(Cf::kJobs, JobKey("j"), "v");
  EXPECT_EQ((*store)->Write(c).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(Dump(**store, Cf::kJobs).empty());
  (*store)->set_write_error(Status::Ok());
  EXPECT_TRUE((*store)->Write(c).ok());
  EXPECT_EQ(Dump(**store, Cf::kJobs).size(), 1u);
}

}  // namespace
}  // namespace clusterd::storage
