// The leader's store under high availability (docs/ha.md): a Store that
// makes every group commit an entry of the replicated log BEFORE it writes
// it to the local store. The Engine is unchanged: it acknowledges a change
// only after Write returns OK, and Write returns OK only once the entry is
// committed in the log (a fenced etcd transaction: it succeeds only while
// this replica leads) AND written, synced, to the local RocksDB. So anything
// acknowledged is on a quorum of etcd members and can be replayed by every
// replica, whichever machine dies.
//
// Failures keep the Engine's held-group contract (engine.h): Write fails,
// the Engine holds the group, refuses client writes with UNAVAILABLE and
// retries the same change set. A retry does not append twice: an entry
// whose append was answered is not appended again, and an append whose
// answer was lost is settled by the log (LogWriter::Append reads it back).
// Once fenced (another replica leads) every Write fails with
// FAILED_PRECONDITION and the replica must step down.
//
// Thread contract: Store's (Write/Reopen on the writer; reads anywhere).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "clusterd/ha/replication/log.h"
#include "clusterd/ha/replication/log_entry.h"
#include "clusterd/storage/store.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd::replication {

class ReplicatedStore final : public storage::Store {
 public:
  // `inner` is the local store, already holding every log entry up to
  // `index` (the caller caught up with the log). `log` is borrowed
  // and must outlive this store. `on_fenced` runs (on the writer) the first
  // time the log says this replica no longer leads. `codec`: how entries
  // are stored in the log (ha_log_compression).
  ReplicatedStore(std::unique_ptr<storage::Store> inner, LogWriter* log, uint64_t index, std::string leader_id,
                  MetricsRegistry* metrics, std::function<void(const Status&)> on_fenced,
                  EntryCodec codec = EntryCodec::kPlain);

  uint64_t revision_at_open() const override { return inner_->revision_at_open(); }
  uint64_t compacted_at_open() const override { return inner_->compacted_at_open(); }
  Status Write(const storage::ChangeSet& changes) override;
  // Reopens the local store only when it was what failed (a failed append
  // leaves it as it is); FAILED_PRECONDITION once fenced.
  Status Reopen(bool read_only) override;
  bool read_only() const override { return inner_->read_only(); }
  Status ForEach(storage::Cf table,
                 const std::function<void(std::string_view key, std::string_view value)>& fn) const override {
    return inner_->ForEach(table, fn);
  }
  StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const override {
    return inner_->ReadEvents(after, max_count);
  }
  StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const override {
    return inner_->LastRevisionBefore(after, cutoff_unix_seconds, max_scan);
  }
  const std::string& path() const override { return inner_->path(); }
  // The local store it wraps (a checkpoint is made of it).
  storage::Store* inner() const { return inner_.get(); }

  // The last entry durable in the log and in the local store. Any thread.
  uint64_t applied_index() const { return applied_.load(std::memory_order_acquire); }
  bool fenced() const { return fenced_.load(std::memory_order_acquire); }

 private:
  std::unique_ptr<storage::Store> inner_;
  LogWriter* log_;
  std::atomic<uint64_t> applied_;
  // Writer only: the local store's revision counter (what each entry says
  // it was written over).
  uint64_t revision_ = 0;
  // Writer only: the entry appended to the log but not yet written locally
  // (its local write failed); 0: none.
  uint64_t appended_ = 0;
  bool inner_failed_ = false;
  std::atomic<bool> fenced_{false};
  const std::string leader_id_;
  std::function<void(const Status&)> on_fenced_;
  const EntryCodec codec_;
  Counter* appends_ = nullptr;
  Counter* append_failures_ = nullptr;
  Histogram* append_seconds_ = nullptr;
  Histogram* entry_bytes_ = nullptr;
  Counter* change_bytes_ = nullptr;  // the change sets' own bytes, before encoding
  Counter* stored_bytes_ = nullptr;  // what went to the log
};

// A standby's step: applies one log entry to the local store, which must
// hold exactly the entries before it (`*applied` is updated). An entry at or
// below *applied is skipped (OK); a gap is OUT_OF_RANGE (the log was trimmed
// past this store). With `revision` (the store's revision counter, kept
// current here): an entry written over another revision is
// FAILED_PRECONDITION (the stores diverged) and changes nothing. With
// `written`: the change set written (left empty for a skipped entry).
Status ApplyLogEntry(storage::Store* store, std::string_view bytes, uint64_t* applied, uint64_t* revision = nullptr,
                     storage::ChangeSet* written = nullptr);

}  // namespace clusterd::replication
