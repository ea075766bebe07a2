// Watch responses built from events serialized once, not once per watcher.
//
// At 1,000 watchers every event used to be serialized 1,000 times (gRPC
// serializes a message per stream), and that serialization was the largest
// share of clusterd's own CPU in the benchmark's fan-out (scenario 6,
// docs/performance.md). Watch is now a raw method (its responses are byte
// buffers): each event is framed as a WatchResponse `events` field (tag,
// length, the Event's bytes) once, into a reference-counted gRPC slice kept
// in a bounded cache, and a watcher's response is those slices and a
// trailing `revision` field, concatenated by reference. What a client
// receives is byte for byte a serialized v1::WatchResponse.
//
// The cache is a ring indexed by revision, each slot holding the event it
// framed: a hit is the same event object (which keeps it alive), so an
// event read again from disk, or a store replaced under a standby, never
// gets another event's bytes. Events larger than max_event_bytes, or past
// the cache's byte budget, are framed per response and not kept.
//
// Thread contract: WireEventCache is thread-safe (a mutex per slot);
// WireResponseBuilder is used by one watcher at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "clusterd/engine/watch_hub.h"
#include "common/metrics.h"

namespace clusterd {

class WireEventCache {
 public:
  struct Options {
    size_t slots = 16384;
    size_t max_event_bytes = 64 << 10;
    size_t max_bytes = 64 << 20;
  };
  WireEventCache() : WireEventCache(Options{}) {}
  explicit WireEventCache(Options options);
  WireEventCache(const WireEventCache&) = delete;
  WireEventCache& operator=(const WireEventCache&) = delete;

  // The event framed as a WatchResponse `events` field: from the cache, or
  // framed now (and kept when it fits).
  grpc::Slice Framed(const EventPtr& event);

  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  uint64_t hits() const { return hits_.load(std::memory_order_relaxed); }
  uint64_t misses() const { return misses_.load(std::memory_order_relaxed); }
  // Counted there too (before any Framed; may be null).
  void set_counters(Counter* hits, Counter* misses) {
    hits_counter_ = hits;
    misses_counter_ = misses;
  }

 private:
  struct Slot {
    std::mutex mu;
    EventPtr event;  // what `bytes` frames; keeps it alive, so a pointer match is the same event
    grpc::Slice bytes;
  };
  const Options options_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<size_t> bytes_{0};
  std::atomic<uint64_t> hits_{0}, misses_{0};
  Counter* hits_counter_ = nullptr;
  Counter* misses_counter_ = nullptr;
};

// A serialized WatchResponse as StreamWriter queues it (movable, which
// grpc::ByteBuffer alone is not).
struct WireResponse {
  WireResponse() = default;
  WireResponse(WireResponse&& other) noexcept { buffer.Swap(&other.buffer); }
  WireResponse& operator=(WireResponse&& other) noexcept {
    if (this != &other) {
      buffer.Clear();
      buffer.Swap(&other.buffer);
    }
    return *this;
  }
  grpc::ByteBuffer buffer;
};
// What StreamWriter hands to StartWrite (stream_writer.h).
inline const grpc::ByteBuffer& WireMessage(const WireResponse& r) { return r.buffer; }

// One watcher's next response.
class WireResponseBuilder {
 public:
  void Add(grpc::Slice framed) {
    bytes_ += framed.size();
    slices_.push_back(std::move(framed));
  }
  size_t events() const { return slices_.size(); }
  size_t bytes() const { return bytes_; }
  // The serialized WatchResponse: the events added, then `revision`. Leaves
  // the builder empty.
  WireResponse Finish(uint64_t revision);

 private:
  std::vector<grpc::Slice> slices_;
  size_t bytes_ = 0;
};

}  // namespace clusterd
