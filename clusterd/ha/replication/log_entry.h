// The replicated commit log's entries (high availability, docs/ha.md): one
// entry per group commit, carrying its change set, numbered 1, 2, 3 ...
// without gaps. Every replica's store records the last entry it applied
// (meta key "log_index", written in the same atomic write as the entry's
// changes), so a replica knows exactly where it stands after any crash.
//
// Thread contract: none (pure functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "clusterd/storage/change_set.h"
#include "clusterd/storage/store.h"
#include "common/status.h"

namespace clusterd::replication {

// Meta key: the index of the last log entry applied (u64 big-endian).
inline constexpr std::string_view kMetaLogIndex = "log_index";

// Adds the log index to a change set (it is applied atomically with it).
void PutLogIndex(storage::ChangeSet* changes, uint64_t index);

// The entry's bytes: the changes, then the log index put, who wrote it and
// the store's revision before it (when known).
std::string EncodeEntry(uint64_t index, const storage::ChangeSet& changes, std::string_view leader,
                        std::optional<uint64_t> prev_revision = std::nullopt);

struct Entry {
  uint64_t index = 0;
  std::string leader;
  std::optional<uint64_t> prev_revision;
  // Ready to write: includes the log index put.
  storage::ChangeSet changes;
};
// INVALID_ARGUMENT (naming what is wrong) for bytes that are not an entry
// this version writes: an unknown table or operation, no index.
StatusOr<Entry> DecodeEntry(std::string_view bytes);

// The revision counter a change set sets (storage::PutRevision), if any.
std::optional<uint64_t> RevisionPut(const storage::ChangeSet& changes);

// The last log entry the store holds (0: none; a store from before HA, or new).
StatusOr<uint64_t> ReadLogIndex(const storage::Store& store);

}  // namespace clusterd::replication
