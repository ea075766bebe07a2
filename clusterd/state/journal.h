// The revision counter and the event log that every aggregate writes
// through. Each change takes the next revision; its event is stored in the
// events table of the same change set and queued for the watchers, who get
// it once the commit is durable. The counter itself is written once per
// commit (Flush), however many revisions the commit took.
#pragma once

#include <atomic>
#include <cstdint>

#include "clusterd/state/mutation.h"
#include "common/clock.h"

namespace clusterd {

class Journal {
 public:
  explicit Journal(const Clock* clock) : clock_(clock) {}

  // The revision and compaction floor the store was opened at.
  void Load(uint64_t revision, uint64_t compacted);
  // The next revision, for a record and the event that reports it.
  uint64_t Next();
  // Stamps the event (the next revision unless it carries one) and the
  // time, stores it and queues it for the watchers.
  void Emit(Mutation* m, v1::Event event);
  // Adds the revision counter to m if it moved since the last flush.
  void Flush(Mutation* m);
  // Deletes events (compacted, to] and records the new floor.
  void Compact(uint64_t to, Mutation* m);

  TimePoint Now() const { return clock_->Now(); }
  uint64_t revision() const { return revision_; }
  uint64_t compacted() const { return compacted_.load(); }
  uint64_t durable() const { return durable_.load(); }
  void set_durable(uint64_t r) { durable_.store(r); }

 private:
  const Clock* clock_;
  uint64_t revision_ = 0;
  bool dirty_ = false;
  std::atomic<uint64_t> compacted_{0};
  std::atomic<uint64_t> durable_{0};
};

}  // namespace clusterd
