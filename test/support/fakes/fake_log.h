// The replicated log in memory (clusterd/ha/replication/log.h): the leader's
// replicated store appends to it, a follower (or a test playing one) reads
// from it. It can be trimmed like the real log, fail its reads, and records
// where each read started. Thread-safe: a leader's writer appends while a
// test or a follower reads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/ha/replication/log.h"

namespace clusterd::testing {

class FakeLog final : public replication::LogWriter, public replication::LogReader {
 public:
  // Records the entry (an append whose answer was lost and is retried
  // records the same bytes again).
  Status Append(uint64_t index, const std::string& entry) override {
    std::lock_guard lock(mu_);
    entries_[index] = entry;
    return Status::Ok();
  }

  StatusOr<replication::LogRead> ReadAfter(uint64_t after, size_t limit, bool linearizable) override {
    std::function<void(uint64_t)> hook;
    {
      std::lock_guard lock(mu_);
      reads_.push_back({after, linearizable});
      hook = on_read_;
    }
    if (hook) hook(after);  // outside the lock: it may append or trim
    std::lock_guard lock(mu_);
    if (!read_error_.ok()) return read_error_;
    replication::LogRead read;
    for (auto it = entries_.upper_bound(after); it != entries_.end(); ++it) {
      if (read.entries.size() == limit) {
        read.more = true;
        break;
      }
      read.entries.push_back(it->second);
    }
    return read;
  }

  // Every entry after `index`, in order.
  std::vector<std::string> EntriesAfter(uint64_t index) const {
    std::lock_guard lock(mu_);
    std::vector<std::string> out;
    for (auto it = entries_.upper_bound(index); it != entries_.end(); ++it) out.push_back(it->second);
    return out;
  }
  uint64_t last_index() const {
    std::lock_guard lock(mu_);
    return entries_.empty() ? 0 : entries_.rbegin()->first;
  }
  // Removes the entries up to `through`, as the leader trims the log.
  void TrimThrough(uint64_t through) {
    std::lock_guard lock(mu_);
    entries_.erase(entries_.begin(), entries_.upper_bound(through));
  }
  // Reads fail with `st` from now on (OK: they answer again).
  void FailReads(Status st) {
    std::lock_guard lock(mu_);
    read_error_ = std::move(st);
  }
  // Runs at the start of every read with its `after` (not under the lock).
  void OnRead(std::function<void(uint64_t after)> hook) {
    std::lock_guard lock(mu_);
    on_read_ = std::move(hook);
  }
  // Each read's `after` and whether it was linearizable, in order.
  std::vector<std::pair<uint64_t, bool>> reads() const {
    std::lock_guard lock(mu_);
    return reads_;
  }

 private:
  mutable std::mutex mu_;
  std::map<uint64_t, std::string> entries_;
  std::vector<std::pair<uint64_t, bool>> reads_;
  Status read_error_;
  std::function<void(uint64_t)> on_read_;
};

}  // namespace clusterd::testing
