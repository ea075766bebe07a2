// The two Store implementations behind one shape, for tests that run the
// same thing on both: Open() opens the next store over one directory (or one
// in-memory disk), as a restart would.
#pragma once

#include <memory>

#include "clusterd/storage/memory_store.h"
#include "clusterd/storage/rocksdb_store.h"
#include "test/support/temp_dir.h"

namespace clusterd::testing {

struct RocksDbBackend {
  StatusOr<std::unique_ptr<storage::Store>> Open(storage::StoreOptions options = {}) {
    options.sync = false;  // the contract, not the fsync
    auto store = storage::RocksDbStore::Open(dir.Sub("db"), options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<storage::Store>(std::move(*store));
  }
  TempDir dir;
};

struct MemoryBackend {
  StatusOr<std::unique_ptr<storage::Store>> Open(storage::StoreOptions options = {}) {
    auto store = storage::MemoryStore::Open(disk, options);
    if (!store.ok()) return store.status();
    return std::unique_ptr<storage::Store>(std::move(*store));
  }
  std::shared_ptr<storage::MemoryDisk> disk = std::make_shared<storage::MemoryDisk>();
};

}  // namespace clusterd::testing
