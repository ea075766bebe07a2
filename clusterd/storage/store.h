// RocksDB store: column families from schema.h, synced batch writes, event
// log reads and retention. Thread contract: Write(), Reopen() and Handle()
// are called by the single writer (the Engine's thread; Open's caller before
// it starts); ReadEvents(), ForEach() and LastRevisionBefore() may be called
// from any thread concurrently with it (they wait while Reopen swaps the
// database). Never call from a gRPC callback thread: every call may touch
// the disk.
//
// Read-only mode: on a full disk RocksDB cannot open for writing (it writes a
// new MANIFEST, OPTIONS file and WAL at every open, and the Debian build
// asserts on a failed write), so the caller opens read-only instead
// (OpenForReadOnly writes nothing): reads work, Write() fails with
// UNAVAILABLE, and Reopen(false) makes it writable once space returns.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "clusterd/storage/schema.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::storage {

struct StoreOptions {
  // Sync the WAL on every Write. Only tests of unrelated logic turn it off.
  bool sync = true;
  // Open with rocksdb::DB::OpenForReadOnly: nothing is written; the WAL is
  // replayed into memory only.
  bool read_only = false;
};

class Store {
 public:
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  rocksdb::ColumnFamilyHandle* Handle(Cf cf) const { return handles_[static_cast<size_t>(cf)]; }

  // Persisted counters, as read at Open (the writer keeps them current after).
  uint64_t revision_at_open() const { return revision_at_open_; }
  uint64_t compacted_at_open() const { return compacted_at_open_; }

  // One atomic, durable (WAL-synced when options.sync) write. UNAVAILABLE
  // while read-only. A batch that failed may be written again: batches hold
  // only puts and deletes, so a second write of one is idempotent.
  Status Write(rocksdb::WriteBatch* batch);

  // Closes the database and opens it again, read-only or not. Used to leave
  // read-only mode, and after a failed write (a fresh instance has no
  // background error and a new WAL). If a writable open fails the store
  // falls back to read-only, so reads keep working; the error is returned.
  // Handles from before are invalid after it.
  Status Reopen(bool read_only);
  bool read_only() const { return read_only_.load(std::memory_order_acquire); }

  // Calls fn for every key/value of a column family, in key order. Meant for
  // Load at startup: the record CFs keep unsorted (vector) memtables, which
  // every scan sorts, so do not scan them on a hot path (docs/storage.md).
  Status ForEach(Cf cf, const std::function<void(std::string_view key, std::string_view value)>& fn) const;

  // Events with revision > after, at most max_count, in order.
  StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const;

  // The first stored event with time >= cutoff_unix_seconds, scanning from
  // revision > after; returns its revision minus one, or the last scanned
  // revision when every scanned event is older (at most max_scan events).
  StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const;

  // Adds to batch the deletion of events (from, to] and the new compacted revision.
  void AddCompaction(rocksdb::WriteBatch* batch, uint64_t from, uint64_t to) const;

  const std::string& path() const { return path_; }

 private:
  Store() = default;
  Status OpenDb(bool read_only);  // with db_mu_ held exclusively (or before anyone else has the store)
  void CloseDb();                 // likewise

  std::string path_;
  StoreOptions options_;
  // Readers hold it shared; Reopen exclusively (the writer, which alone
  // changes db_, does not need it for its own calls).
  mutable std::shared_mutex db_mu_;
  std::atomic<bool> read_only_{false};
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  uint64_t revision_at_open_ = 0;
  uint64_t compacted_at_open_ = 0;
};

}  // namespace clusterd::storage
