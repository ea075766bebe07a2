// Fan-out of durable events to watchers. The Engine publishes each commit's
// events after they are durable; watchers pull batches at their own pace from
// an in-memory cache of recent events, or from the store when they are further
// behind. A watcher never holds more than one batch, so a slow watcher costs
// the writer one notification, never a wait.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "clusterd/storage/store.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

using EventPtr = std::shared_ptr<const v1::Event>;

class WatchHub {
 public:
  // Listener called on the writer thread after each publish with the new
  // head revision. It must be quick and must not call back into the hub's
  // Subscribe/Unsubscribe.
  using Listener = std::function<void(uint64_t head)>;

  // The cache holds at most `cache_events` events and at most `cache_bytes`
  // bytes of them (their encoded size): one large event each (a node whose
  // inventory lists hundreds of pods) must not make the count the only bound
  // on memory. What falls out is served from the store.
  WatchHub(const storage::Store* store, size_t cache_events, size_t cache_bytes = SIZE_MAX);

  // Sets the head after the store is loaded, before any publish.
  void Init(uint64_t head);
  // Writer thread only, after the events are durable. Events have
  // consecutive revisions following head().
  void Publish(std::vector<v1::Event> events);
  uint64_t head() const;
  // What the cache holds now (events, their encoded bytes): any thread.
  size_t cached_events() const;
  size_t cached_bytes() const;

  uint64_t Subscribe(Listener listener);
  void Unsubscribe(uint64_t id);
  size_t watcher_count() const;

  // Events with revision > after, at most max, from the cache or the store.
  // May read the disk: never call on a gRPC callback thread.
  StatusOr<std::vector<EventPtr>> Fetch(uint64_t after, size_t max) const;

 private:
  bool ReadCached(uint64_t after, size_t max, std::vector<EventPtr>* out) const;

  const storage::Store* store_;
  const size_t cache_events_;
  const size_t cache_bytes_;
  mutable std::shared_mutex cache_mu_;
  std::deque<EventPtr> cache_;
  std::deque<size_t> cache_sizes_;  // encoded size of each cached event
  size_t cache_used_ = 0;           // their sum
  uint64_t head_ = 0;

  mutable std::mutex listeners_mu_;
  std::map<uint64_t, std::shared_ptr<Listener>> listeners_;
  uint64_t next_id_ = 1;
};

// Which events a watcher wants.
class WatchFilter {
 public:
  static StatusOr<WatchFilter> FromRequest(const v1::WatchRequest& req);
  bool Matches(const v1::Event& event) const;

 private:
  std::vector<std::string> nodes_;
  std::vector<std::string> jobs_;
  std::vector<v1::EventType> types_;
  v1::FaultLevel min_level_ = v1::FAULT_LEVEL_UNSPECIFIED;
};

}  // namespace clusterd
