#include "clusterd/ha/replication/replicated_store.h"

#include <chrono>

#include "clusterd/ha/replication/log_entry.h"
#include "common/logging.h"

namespace clusterd::replication {

ReplicatedStore::ReplicatedStore(std::unique_ptr<storage::Store> inner, LogWriter* log, uint64_t index,
                                 std::string leader_id, MetricsRegistry* metrics,
                                 std::function<void(const Status&)> on_fenced, EntryCodec codec)
    : inner_(std::move(inner)),
      log_(log),
      applied_(index),
      revision_(inner_->revision_at_open()),
      leader_id_(std::move(leader_id)),
      on_fenced_(std::move(on_fenced)),
      codec_(codec) {
  if (metrics) {
    appends_ = &metrics->AddCounter("clusterd_ha_log_appends_total", "Group commits appended to the replicated log.");
    append_failures_ = &metrics->AddCounter("clusterd_ha_log_append_failures_total",
                                            "Log appends that failed (held and retried; fenced ones step down).");
    append_seconds_ = &metrics->AddHistogram("clusterd_ha_log_append_duration_seconds",
                                             "Latency of one fenced log append (an etcd transaction).",
                                             ExponentialBuckets(0.0001, 2, 16));
    entry_bytes_ = &metrics->AddHistogram("clusterd_ha_log_entry_bytes", "Bytes of one log entry, as stored.",
                                          ExponentialBuckets(256, 2, 16));
    change_bytes_ = &metrics->AddCounter("clusterd_ha_log_change_bytes_total",
                                         "Bytes of the change sets appended to the log, before encoding.");
    stored_bytes_ =
        &metrics->AddCounter("clusterd_ha_log_stored_bytes_total",
                             "Bytes appended to the log as stored (compressed with ha_log_compression); over "
                             "clusterd_ha_log_change_bytes_total: the compression ratio.");
    metrics->AddCallbackGauge("clusterd_ha_log_index", "The last log entry durable in the log and this store.",
                              [this] { return static_cast<double>(applied_index()); });
  }
}

Status ReplicatedStore::Write(const storage::ChangeSet& changes) {
  if (fenced()) return FailedPrecondition("this replica no longer leads: writes go to the new leader");
  const uint64_t index = applied_.load(std::memory_order_relaxed) + 1;
  if (appended_ != index) {
    const std::string entry = EncodeEntry(index, changes, leader_id_, revision_, codec_);
    if (entry_bytes_) entry_bytes_->Observe(static_cast<double>(entry.size()));
    if (change_bytes_) change_bytes_->Inc(changes.byte_size());
    if (stored_bytes_) stored_bytes_->Inc(entry.size());
    const auto start = std::chrono::steady_clock::now();
    Status st = log_->Append(index, entry);
    if (append_seconds_) {
      append_seconds_->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    if (!st.ok()) {
      if (append_failures_) append_failures_->Inc();
      if (st.code() == StatusCode::kFailedPrecondition && !fenced_.exchange(true)) {
        GetLogger("ha")->error("log entry {} fenced: {}", index, st.message());
        if (on_fenced_) on_fenced_(st);
      }
      if (st.code() == StatusCode::kFailedPrecondition) return st;
      return Unavailable("replicated log: " + st.message());
    }
    if (appends_) appends_->Inc();
    appended_ = index;
  }
  // The local write carries the index with the changes (one atomic batch).
  storage::ChangeSet local = changes;
  PutLogIndex(&local, index);
  Status st = inner_->Write(local);
  if (!st.ok()) {
    inner_failed_ = true;
    return st;
  }
  appended_ = 0;
  if (auto r = RevisionPut(changes)) revision_ = *r;
  applied_.store(index, std::memory_order_release);
  return Status::Ok();
}

Status ReplicatedStore::Reopen(bool read_only) {
  if (fenced()) return FailedPrecondition("this replica no longer leads");
  if (!inner_failed_ && read_only == inner_->read_only()) return Status::Ok();
  Status st = inner_->Reopen(read_only);
  if (st.ok()) inner_failed_ = false;
  return st;
}

Status ApplyLogEntry(storage::Store* store, std::string_view bytes, uint64_t* applied, uint64_t* revision,
                     storage::ChangeSet* written) {
  if (written) written->Clear();
  auto entry = DecodeEntry(bytes);
  if (!entry.ok()) return entry.status();
  if (entry->index <= *applied) return Status::Ok();
  if (entry->index != *applied + 1) {
    return OutOfRange("log entry " + std::to_string(entry->index) + " follows " + std::to_string(*applied) +
                      ": entries in between are missing");
  }
  if (revision && entry->prev_revision && *entry->prev_revision != *revision) {
    return FailedPrecondition("log entry " + std::to_string(entry->index) + " was written over revision " +
                              std::to_string(*entry->prev_revision) + ", this store is at revision " +
                              std::to_string(*revision) +
                              ": it does not hold what the leader held (was it not empty when the log began?)");
  }
  CLUSTERD_RETURN_IF_ERROR(store->Write(entry->changes));
  *applied = entry->index;
  if (revision) {
    if (auto r = RevisionPut(entry->changes)) *revision = *r;
  }
  if (written) *written = std::move(entry->changes);
  return Status::Ok();
}

}  // namespace clusterd::replication
