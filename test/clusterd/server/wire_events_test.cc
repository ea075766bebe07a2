// Watch responses built from events framed once (wire_events.h): a response
// must be byte for byte the serialized v1::WatchResponse of the same events,
// a cached event must be framed only once for every watcher, a different
// event at the same revision must never get another's bytes, and the cache
// must stay within its byte budget.
#include "clusterd/server/wire_events.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/edge/stream_writer.h"
#include "common/metrics.h"

namespace clusterd {
namespace {

EventPtr MakeEvent(uint64_t revision, const std::string& node, size_t message_bytes = 300) {
  auto e = std::make_shared<v1::Event>();
  e->set_revision(revision);
  e->set_type(v1::EVENT_TYPE_FAULT_RAISED);
  e->set_node(node);
  e->mutable_fault()->set_code("020000002");
  e->mutable_fault()->set_message(std::string(message_bytes, 'm'));
  e->mutable_time()->set_seconds(1700000000);
  return e;
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

TEST(WireEventsTest, AResponseIsTheSerializedWatchResponse) {
  WireEventCache cache;
  const auto a = MakeEvent(7, "worker01");
  const auto b = MakeEvent(300, "worker02", 200'000);  // larger than a slot keeps: framed per response
  v1::WatchResponse want;
  *want.add_events() = *a;
  *want.add_events() = *b;
  want.set_revision(1ULL << 40);  // a multi-byte varint
  WireResponseBuilder builder;
  builder.Add(cache.Framed(a));
  builder.Add(cache.Framed(b));
  EXPECT_EQ(builder.events(), 2u);
  WireResponse resp = builder.Finish(1ULL << 40);
  EXPECT_EQ(builder.events(), 0u);
  EXPECT_EQ(Bytes(WireMessage(resp)), want.SerializeAsString());
  v1::WatchResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(Bytes(resp.buffer)));
  EXPECT_EQ(parsed.events(1).node(), "worker02");

  // No event: only the revision (a response that only moves the revision).
  WireResponse empty = builder.Finish(5);
  v1::WatchResponse only_revision;
  only_revision.set_revision(5);
  EXPECT_EQ(Bytes(empty.buffer), only_revision.SerializeAsString());
}

TEST(WireEventsTest, AnEventIsFramedOnceForEveryWatcher) {
  MetricsRegistry metrics;
  WireEventCache cache;
  Counter& hits = metrics.AddCounter("hits", "");
  Counter& misses = metrics.AddCounter("misses", "");
  cache.set_counters(&hits, &misses);
  const auto a = MakeEvent(11, "n1");
  const grpc::Slice first = cache.Framed(a);
  for (int watcher = 0; watcher < 999; ++watcher) {
    const grpc::Slice again = cache.Framed(a);
    ASSERT_EQ(again.begin(), first.begin());  // the same bytes, by reference
  }
  EXPECT_EQ(cache.misses(), 1u);
  EXPECT_EQ(cache.hits(), 999u);
  EXPECT_EQ(misses.Value(), 1u);
  EXPECT_EQ(hits.Value(), 999u);
  EXPECT_EQ(cache.bytes(), first.size());
  EXPECT_EQ(a.use_count(), 2);  // the slot keeps the event it framed
}

TEST(WireEventsTest, AnotherEventAtTheSameRevisionGetsItsOwnBytes) {
  WireEventCache cache;
  const auto before = MakeEvent(21, "old-node");
  const auto after = MakeEvent(21, "new-node");  // e.g. read again from a store rebuilt under a standby
  WireResponseBuilder b1, b2;
  b1.Add(cache.Framed(before));
  b2.Add(cache.Framed(after));
  v1::WatchResponse r1, r2;
  ASSERT_TRUE(r1.ParseFromString(Bytes(b1.Finish(21).buffer)));
  ASSERT_TRUE(r2.ParseFromString(Bytes(b2.Finish(21).buffer)));
  EXPECT_EQ(r1.events(0).node(), "old-node");
  EXPECT_EQ(r2.events(0).node(), "new-node");
  // Revisions a ring apart share a slot: each still gets its own bytes.
  WireEventCache small(WireEventCache::Options{.slots = 4});
  const auto x = MakeEvent(1, "x"), y = MakeEvent(5, "y");
  WireResponseBuilder bx, by;
  bx.Add(small.Framed(x));
  by.Add(small.Framed(y));
  bx.Add(small.Framed(x));
  ASSERT_TRUE(r1.ParseFromString(Bytes(bx.Finish(5).buffer)));
  ASSERT_TRUE(r2.ParseFromString(Bytes(by.Finish(5).buffer)));
  EXPECT_EQ(r1.events(0).node(), "x");
  EXPECT_EQ(r1.events(1).node(), "x");
  EXPECT_EQ(r2.events(0).node(), "y");
  EXPECT_EQ(small.misses(), 3u);
}

TEST(WireEventsTest, TheCacheStaysWithinItsByteBudget) {
  WireEventCache cache(WireEventCache::Options{.slots = 1024, .max_event_bytes = 4096, .max_bytes = 10'000});
  std::vector<EventPtr> events;
  for (uint64_t r = 1; r <= 100; ++r) events.push_back(MakeEvent(r, "n", 1000));
  for (const auto& e : events) {
    WireResponseBuilder b;
    b.Add(cache.Framed(e));
    v1::WatchResponse parsed;
    ASSERT_TRUE(parsed.ParseFromString(Bytes(b.Finish(e->revision()).buffer)));  // served either way
    EXPECT_EQ(parsed.events(0).revision(), e->revision());
    EXPECT_LE(cache.bytes(), 10'000u);
  }
  EXPECT_GT(cache.bytes(), 5'000u);  // it did keep what fit
  // An event above max_event_bytes is served, never kept.
  const size_t kept = cache.bytes();
  (void)cache.Framed(MakeEvent(2000, "big", 8000));
  EXPECT_EQ(cache.bytes(), kept);
}

// The writer queues WireResponses: moves keep the bytes.
TEST(WireEventsTest, MovesKeepTheBytes) {
  WireEventCache cache;
  WireResponseBuilder b;
  b.Add(cache.Framed(MakeEvent(3, "n3")));
  WireResponse first = b.Finish(3);
  const std::string bytes = Bytes(first.buffer);
  WireResponse moved(std::move(first));
  EXPECT_EQ(Bytes(moved.buffer), bytes);
  WireResponse assigned;
  assigned = std::move(moved);
  EXPECT_EQ(Bytes(WireMessage(assigned)), bytes);
  v1::WatchResponse plain;
  EXPECT_EQ(&WireMessage(plain), &plain);  // a plain message is written as itself
}

}  // namespace
}  // namespace clusterd
