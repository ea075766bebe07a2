// The replicated log in memory (clusterd/ha/replication/log.h): the leader's
// replicated store appends to it, a follower (or a test playing one) reads
// from it. Like etcd's log it refuses an entry that would leave a gap or
// change an index that holds other bytes (FailedPrecondition); a test can
// make appends fail, or commit and lose the answer, seed entries as another
// writer would, trim it like the real log, fail its reads, and read back
// every append and where each read started. Thread-safe: a leader's writer
// appends while a test or a follower reads. Hooks run outside its lock.
#pragma once

#include <algorithm>
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
  // Every call is recorded (appends()); then, unless appends fail, the
  // entry is kept: the same bytes at an index again (an append whose answer
  // was lost, retried) are taken, other bytes or a gap are refused.
  Status Append(uint64_t index, const std::string& entry) override {
    std::function<void(uint64_t, const std::string&)> hook;
    {
      std::lock_guard lock(mu_);
      appends_.emplace_back(index, entry);
      hook = on_append_;
    }
    if (hook) hook(index, entry);
    std::lock_guard lock(mu_);
    if (mode_ == Mode::kFail) return append_error_;
    if (auto it = entries_.find(index); it != entries_.end()) {
      if (it->second != entry) return FailedPrecondition("entry " + std::to_string(index) + " holds other bytes");
    } else {
      if (index != last_ + 1) return FailedPrecondition("gap");
      entries_.emplace(index, entry);
      last_ = index;
    }
    if (mode_ == Mode::kCommitLoseAnswer) return Unavailable("deadline exceeded (committed)");
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

  // Appends fail with `st` (nothing kept) until AppendsOk.
  void FailAppends(Status st) {
    std::lock_guard lock(mu_);
    mode_ = Mode::kFail;
    append_error_ = std::move(st);
  }
  // Appends are kept, but answered UNAVAILABLE (the answer lost), until AppendsOk.
  void LoseAppendAnswers() {
    std::lock_guard lock(mu_);
    mode_ = Mode::kCommitLoseAnswer;
  }
  void AppendsOk() {
    std::lock_guard lock(mu_);
    mode_ = Mode::kOk;
  }
  // Runs at the start of every append (not under the lock).
  void OnAppend(std::function<void(uint64_t index, const std::string& entry)> hook) {
    std::lock_guard lock(mu_);
    on_append_ = std::move(hook);
  }
  // Puts an entry as another writer would (not an append of the test's).
  void Seed(uint64_t index, std::string entry) {
    std::lock_guard lock(mu_);
    entries_[index] = std::move(entry);
    last_ = std::max(last_, index);
  }
  // Every Append call, failed ones too, in order: index and bytes.
  std::vector<std::pair<uint64_t, std::string>> appends() const {
    std::lock_guard lock(mu_);
    return appends_;
  }
  // What the log holds, by index.
  std::map<uint64_t, std::string> entries() const {
    std::lock_guard lock(mu_);
    return entries_;
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
  enum class Mode { kOk, kFail, kCommitLoseAnswer };

  mutable std::mutex mu_;
  std::map<uint64_t, std::string> entries_;
  uint64_t last_ = 0;  // the highest index kept (trimming keeps it)
  Mode mode_ = Mode::kOk;
  Status append_error_;
  std::vector<std::pair<uint64_t, std::string>> appends_;
  std::function<void(uint64_t, const std::string&)> on_append_;
  std::vector<std::pair<uint64_t, bool>> reads_;
  Status read_error_;
  std::function<void(uint64_t)> on_read_;
};

}  // namespace clusterd::testing
