// An in-memory Store for tests: the tables of schema.h as sorted maps, with
// the same semantics as RocksDbStore (atomic change sets, bytewise key order,
// read-only mode, schema version and counters read at open) and no disk.
// Several MemoryStores over one MemoryDisk behave like successive opens of
// one RocksDB directory: a test "restarts" by opening a new one on the same
// disk. Not for production: nothing survives the process.
//
// Thread contract: Store's; every call is safe from any thread (one lock per
// disk).
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>

#include "clusterd/storage/store.h"

namespace clusterd::storage {

// What survives a "restart" of a MemoryStore.
struct MemoryDisk {
  mutable std::shared_mutex mu;
  std::array<std::map<std::string, std::string, std::less<>>, kCfCount> tables;
};

class MemoryStore final : public Store {
 public:
  // Opens a store on `disk` (a new empty one when null). Fails like
  // RocksDbStore::Open on an uninitialised disk opened read-only or a
  // schema version this binary does not know.
  static StatusOr<std::unique_ptr<MemoryStore>> Open(std::shared_ptr<MemoryDisk> disk = nullptr,
                                                     StoreOptions options = {});

  uint64_t revision_at_open() const override { return revision_at_open_; }
  uint64_t compacted_at_open() const override { return compacted_at_open_; }
  Status Write(const ChangeSet& changes) override;
  Status Reopen(bool read_only) override;
  bool read_only() const override { return read_only_.load(std::memory_order_acquire); }
  Status ForEach(Cf table, const std::function<void(std::string_view key, std::string_view value)>& fn) const override;
  StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const override;
  StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const override;
  const std::string& path() const override { return path_; }

  const std::shared_ptr<MemoryDisk>& disk() const { return disk_; }
  // Every later Write fails with `error` (and changes nothing) until it is
  // set back to OK: a failing disk, for tests of the writer.
  void set_write_error(Status error);

 private:
  MemoryStore() = default;

  std::shared_ptr<MemoryDisk> disk_;
  std::string path_ = "(memory)";
  std::atomic<bool> read_only_{false};
  uint64_t revision_at_open_ = 0;
  uint64_t compacted_at_open_ = 0;
  mutable std::shared_mutex error_mu_;
  Status write_error_;
};

}  // namespace clusterd::storage
