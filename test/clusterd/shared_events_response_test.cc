// SharedEventsResponse: a Watch response that borrows the hub's events
// instead of copying them must serialize exactly like a copied one, never
// free or change an event it borrowed, and survive the moves StreamWriter
// makes (queue -> current -> replaced).
#include "clusterd/server/shared_events_response.h"

#include <memory>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "clusterd/edge/stream_writer.h"

namespace clusterd {
namespace {

EventPtr MakeEvent(uint64_t revision, const std::string& node) {
  auto e = std::make_shared<v1::Event>();
  e->set_revision(revision);
  e->set_type(v1::EVENT_TYPE_FAULT_RAISED);
  e->set_node(node);
  e->mutable_fault()->set_code("020000002");
  e->mutable_fault()->set_message(std::string(300, 'm'));  // a heap string, so a wrong free shows under ASan
  e->mutable_time()->set_seconds(1700000000);
  return e;
}

TEST(SharedEventsResponseTest, SerializesLikeACopyAndLeavesTheEventsAlone) {
  const auto a = MakeEvent(7, "worker01");
  const auto b = MakeEvent(8, "worker02");
  const std::string a_before = a->SerializeAsString();
  v1::WatchResponse copied;
  *copied.add_events() = *a;
  *copied.add_events() = *b;
  copied.set_revision(8);
  {
    SharedEventsResponse shared;
    shared.Add(a);
    shared.Add(b);
    shared.set_revision(8);
    EXPECT_EQ(shared.events_size(), 2);
    EXPECT_EQ(a.use_count(), 2);  // the response keeps its own reference
    EXPECT_EQ(WireMessage(shared).SerializeAsString(), copied.SerializeAsString());
  }
  // Released: the events are the caller's again, unchanged and not freed.
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(a->SerializeAsString(), a_before);
  EXPECT_EQ(b->node(), "worker02");
}

TEST(SharedEventsResponseTest, MovesKeepTheEventsAndReleaseThemOnce) {
  const auto a = MakeEvent(1, "n1");
  const auto b = MakeEvent(2, "n2");
  SharedEventsResponse first;
  first.Add(a);
  first.set_revision(1);
  SharedEventsResponse moved(std::move(first));
  EXPECT_EQ(moved.events_size(), 1);
  EXPECT_EQ(moved.message().events(0).node(), "n1");
  EXPECT_EQ(first.events_size(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract

  SharedEventsResponse second;
  second.Add(b);
  second.Add(a);
  moved = std::move(second);  // moved's borrowed event is released, second's taken over
  EXPECT_EQ(moved.events_size(), 2);
  EXPECT_EQ(moved.message().events(0).node(), "n2");
  EXPECT_EQ(a.use_count(), 2);
  EXPECT_EQ(b.use_count(), 2);
  moved = SharedEventsResponse();
  EXPECT_EQ(a.use_count(), 1);
  EXPECT_EQ(b.use_count(), 1);
  EXPECT_EQ(a->node(), "n1");
}

// A plain message is written as itself.
TEST(SharedEventsResponseTest, WireMessageOfAPlainMessageIsItself) {
  v1::WatchResponse plain;
  EXPECT_EQ(&WireMessage(plain), &plain);
}

}  // namespace
}  // namespace clusterd
