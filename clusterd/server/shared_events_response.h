// A WatchResponse whose events are the watch hub's shared, immutable events,
// borrowed rather than copied. A watcher's response used to deep-copy every
// event (strings, timestamps, the fault) and free the copies after the write:
// at 1,000 watchers that was most of clusterd's CPU in scenario 6 of the
// benchmark (docs/performance.md). The response now points at the hub's
// events; the shared_ptrs it keeps hold them alive until the response is
// released, and the pointers are taken back out before the message could
// delete them.
//
// Sharing is safe: nothing writes an event once the hub holds it, and
// serializing from several threads at once only stores the same cached sizes
// (protobuf's CachedSize is a relaxed atomic). gRPC serializes a message in
// StartWrite; the StreamWriter keeps the response until the next write
// anyway.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "clusterd/engine/watch_hub.h"
#include "clusterd/v1/cluster.pb.h"

namespace clusterd {

class SharedEventsResponse {
 public:
  SharedEventsResponse() = default;
  SharedEventsResponse(SharedEventsResponse&& other) noexcept { Take(other); }
  SharedEventsResponse& operator=(SharedEventsResponse&& other) noexcept {
    if (this != &other) {
      Release();
      Take(other);
    }
    return *this;
  }
  SharedEventsResponse(const SharedEventsResponse&) = delete;
  SharedEventsResponse& operator=(const SharedEventsResponse&) = delete;
  ~SharedEventsResponse() { Release(); }

  void Add(EventPtr event) {
    // The message never owns the event: Release takes it back out.
    msg_.mutable_events()->UnsafeArenaAddAllocated(const_cast<v1::Event*>(event.get()));
    keep_.push_back(std::move(event));
  }
  int events_size() const { return msg_.events_size(); }
  void set_revision(uint64_t revision) { msg_.set_revision(revision); }
  const v1::WatchResponse& message() const { return msg_; }

 private:
  void Release() {
    auto* events = msg_.mutable_events();
    events->UnsafeArenaExtractSubrange(0, events->size(), nullptr);
    keep_.clear();
  }
  void Take(SharedEventsResponse& other) {
    msg_.Clear();
    msg_.Swap(&other.msg_);  // both on the heap: a pointer swap, no copy
    keep_.swap(other.keep_);
  }

  v1::WatchResponse msg_;
  std::vector<EventPtr> keep_;
};

// What StreamWriter hands to StartWrite (stream_writer.h).
inline const v1::WatchResponse& WireMessage(const SharedEventsResponse& r) { return r.message(); }

}  // namespace clusterd
