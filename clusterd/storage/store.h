// RocksDB store: column families from schema.h, synced batch writes, event
// log reads and retention. Thread contract: Write() and Compact() are called
// by the single writer (the Engine's thread); ReadEvents() and ForEach() may
// be called from any thread concurrently with it. Never call from a gRPC
// callback thread: every call may touch the disk.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
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

  // One atomic, durable (WAL-synced when options.sync) write.
  Status Write(rocksdb::WriteBatch* batch);

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
  std::string path_;
  StoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::array<rocksdb::ColumnFamilyHandle*, kCfCount> handles_{};
  uint64_t revision_at_open_ = 0;
  uint64_t compacted_at_open_ = 0;
};

}  // namespace clusterd::storage
