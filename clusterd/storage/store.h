// The store: the tables of schema.h behind an interface, so that the state,
// the writer and the watch fan-out never see a storage engine. Implementations:
// RocksDbStore (rocksdb_store.h, production) and MemoryStore (memory_store.h,
// tests). A new engine implements this interface and applies ChangeSets; it
// never touches ClusterState or the gRPC adapters.
//
// Thread contract (every implementation): Write() and Reopen() are called by
// the single writer (the Engine's thread; the opener before it starts);
// ReadEvents(), ForEach() and LastRevisionBefore() may be called from any
// thread concurrently with it. Never call from a gRPC callback thread: every
// call may touch the disk.
//
// Read-only mode: a store may be open read-only (RocksDB on a full disk, see
// rocksdb_store.h): reads work, Write() fails with UNAVAILABLE, and
// Reopen(false) makes it writable once that is possible again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/storage/change_set.h"
#include "clusterd/storage/schema.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd::storage {

struct StoreOptions {
  // Make every Write durable before it returns (RocksDB: sync the WAL). Only
  // tests of unrelated logic turn it off.
  bool sync = true;
  // Open read-only: nothing is written; reads work.
  bool read_only = false;
};

class Store {
 public:
  virtual ~Store() = default;

  // Persisted counters, as read when the store was opened (the writer keeps
  // them current after, in memory).
  virtual uint64_t revision_at_open() const = 0;
  virtual uint64_t compacted_at_open() const = 0;

  // Applies the change set atomically, in order, durably (when
  // options.sync). UNAVAILABLE while read-only. A change set that failed may
  // be written again (it is idempotent).
  virtual Status Write(const ChangeSet& changes) = 0;

  // Closes the store and opens it again, read-only or not. Used to leave
  // read-only mode, and after a failed write. If a writable open fails the
  // store stays readable (read-only); the error is returned.
  virtual Status Reopen(bool read_only) = 0;
  virtual bool read_only() const = 0;

  // Calls fn for every key/value of a table, in key (bytewise) order. Meant
  // for ClusterState::Load at startup, not for a hot path (docs/storage.md).
  virtual Status ForEach(Cf table,
                         const std::function<void(std::string_view key, std::string_view value)>& fn) const = 0;

  // Events with revision > after, at most max_count, in order.
  virtual StatusOr<std::vector<::clusterd::v1::Event>> ReadEvents(uint64_t after, size_t max_count) const = 0;

  // The first stored event with time >= cutoff_unix_seconds, scanning from
  // revision > after; returns its revision minus one, or the last scanned
  // revision when every scanned event is older (at most max_scan events).
  virtual StatusOr<uint64_t> LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const = 0;

  // Where the data lives, for messages (a directory for RocksDB).
  virtual const std::string& path() const = 0;
};

}  // namespace clusterd::storage
