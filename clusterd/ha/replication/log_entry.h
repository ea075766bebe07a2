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

// How an entry's bytes are stored in the log.
enum class EntryCodec : uint8_t {
  // The serialized clusterd.storage.v1.LogEntry (every version reads it).
  kPlain = 0,
  // kCompressedMarker, the codec byte 1, then one zstd frame (level 1) of the
  // serialized LogEntry whose header states its size. A group commit's
  // records repeat node names, fault codes and field tags, so a large entry
  // shrinks several times, and every etcd member writes, syncs and
  // replicates that much less (docs/ha.md, "Log compression"). The marker
  // is a protobuf tag with field number 0, which no LogEntry parser accepts:
  // a replica too old to read this form fails loudly on it instead of
  // applying an empty entry.
  kZstd = 1,
};
inline constexpr char kCompressedMarker = '\0';
// Entries whose serialized LogEntry is smaller than this stay plain even
// with compression on: zstd gains nothing worth its frame on a heartbeat.
inline constexpr size_t kCompressMinBytes = 512;
// A compressed entry may say it decompresses to at most this many bytes
// (ha_max_entry_bytes is at most 64 MiB; one change alone may exceed it by
// a 4 MiB hello): a corrupt or hostile value in etcd cannot make a replica
// allocate more.
inline constexpr size_t kMaxDecodedEntryBytes = (64u << 20) + (8u << 20);

// The entry's bytes: the changes, then the log index put, who wrote it and
// the store's revision before it (when known); compressed with kZstd when
// asked and worth it.
std::string EncodeEntry(uint64_t index, const storage::ChangeSet& changes, std::string_view leader,
                        std::optional<uint64_t> prev_revision = std::nullopt, EntryCodec codec = EntryCodec::kPlain);

struct Entry {
  uint64_t index = 0;
  std::string leader;
  std::optional<uint64_t> prev_revision;
  // Ready to write: includes the log index put.
  storage::ChangeSet changes;
};
// Reads both forms. INVALID_ARGUMENT (naming what is wrong) for bytes that
// are not an entry this version writes: an unknown table, operation or
// codec, no index, a frame that does not decompress to the size it states
// or states more than kMaxDecodedEntryBytes.
StatusOr<Entry> DecodeEntry(std::string_view bytes);

// The revision counter a change set sets (storage::PutRevision), if any.
std::optional<uint64_t> RevisionPut(const storage::ChangeSet& changes);

// The last log entry the store holds (0: none; a store from before HA, or new).
StatusOr<uint64_t> ReadLogIndex(const storage::Store& store);

}  // namespace clusterd::replication
