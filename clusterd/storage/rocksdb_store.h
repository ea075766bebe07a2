// The production Store on RocksDB: one column family per table of schema.h,
// every change set one synced WriteBatch, the event log read by position.
// Its options (vector memtables for the record tables, no flush at
// recovery ...) are explained in rocksdb_store.cc and docs/storage.md. Only
// this file's .cc includes RocksDB headers; RocksDB is a PRIVATE dependency
// of clusterd_storage.
//
// Thread contract: Store's. Reads wait while Reopen swaps the database.
//
// Read-only mode: on a full disk RocksDB cannot open for writing (it writes a
// new MANIFEST, OPTIONS file and WAL at every open, and the Debian build
// asserts on a failed write), so the caller opens read-only instead
// (OpenForReadOnly writes nothing): reads work, Write() fails with
// UNAVAILABLE, and Reopen(false) makes it writable once space returns.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <shared_mutex>
#include <string>

#include "clusterd/storage/store.h"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
}  // namespace rocksdb

namespace clusterd::storage {

class RocksDbStore final : public Store {
 public:
  // Opens (creating it when missing) the database in directory `path`.
  // options.read_only: rocksdb::DB::OpenForReadOnly, the WAL is replayed
  // into memory only. options.sync: sync the WAL on every Write.
  static StatusOr<std::unique_ptr<RocksDbStore>> Open(const std::string& path, StoreOptions options = {});
  ~RocksDbStore() override;
  RocksDbStore(const RocksDbStore&) = delete;
  RocksDbStore& operator=(const RocksDbStore&) = delete;

  uint64_t revision_at_open() const override { return revision_at_open_; }
  uint64_t compacted_at_open() const override { return compacted_at_open_; }
  // One atomic WriteBatch, WAL-synced when options.sync.
  Status Write(const ChangeSet& changes) override;
  // A fresh RocksDB instance (no background error from a failed write, a
  // new WAL). If a writable open fails it falls back to read-only.
  Status Reopen(bool read_only) override;
  bool read_only() const override { return read_only_.load(std::memory_order_acquire); }
  // The record tables keep unsorted (vector) memtables, which every scan
  // sorts: a startup-only read.
  Status ForEach(Cf table, const std::function<void(std::string_view key, std::string_view value)>& fn) const override;
  StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const override;
  StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const override;
  const std::string& path() const override { return path_; }

  // A consistent copy of the database as of now in directory `dir` (which
  // must not exist; same filesystem: table files are hard links), openable
  // like any data dir. High availability hands it to a replica that
  // rebuilds (docs/ha.md). Safe while the writer writes.
  Status CreateCheckpoint(const std::string& dir) const;

 private:
  RocksDbStore() = default;
  rocksdb::ColumnFamilyHandle* Handle(Cf cf) const { return handles_[static_cast<size_t>(cf)]; }
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
