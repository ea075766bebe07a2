// A typed change set: the stored effect of one commit, as an ordered list of
// operations on the tables of schema.h (keys from key_codec.h). It is what
// ClusterState writes and what every Store implementation applies atomically;
// a replica or another storage engine would consume exactly this stream, so
// it is plain data, iterable in the order the operations were added, and
// knows nothing of RocksDB.
//
// Applying a change set twice has the same effect as applying it once (it
// holds only puts and deletes): a commit that failed may be written again.
//
// Thread contract: none (a value type); the single writer builds one per
// commit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/message_lite.h>

#include "clusterd/storage/schema.h"

namespace clusterd::storage {

struct Change {
  enum class Op : uint8_t {
    kPut,          // key -> value
    kDelete,       // key
    kDeleteRange,  // every key in [key, end)
  };
  Op op = Op::kPut;
  Cf table = Cf::kDefault;
  std::string key;
  std::string value;  // kPut only
  std::string end;    // kDeleteRange only: the first key kept

  bool operator==(const Change&) const = default;
};

class ChangeSet {
 public:
  void Put(Cf table, std::string key, std::string value);
  // Stores the message's serialized bytes.
  void Put(Cf table, std::string key, const google::protobuf::MessageLite& message);
  void Delete(Cf table, std::string key);
  // Deletes every key in [from, to) of the table.
  void DeleteRange(Cf table, std::string from, std::string to);

  bool empty() const { return changes_.empty(); }
  size_t size() const { return changes_.size(); }
  // Bytes of keys and values held (what a write batch would need).
  size_t byte_size() const { return bytes_; }
  void Clear();

  using const_iterator = std::vector<Change>::const_iterator;
  const_iterator begin() const { return changes_.begin(); }
  const_iterator end() const { return changes_.end(); }
  const std::vector<Change>& changes() const { return changes_; }

 private:
  std::vector<Change> changes_;
  size_t bytes_ = 0;
};

// Schema-level changes shared by every writer (what RocksDB's own code used
// to add to its write batch).

// Sets the meta revision counter.
void PutRevision(ChangeSet* changes, uint64_t revision);
// Deletes events (from, to] and records `to` as the compacted revision.
void AddCompaction(ChangeSet* changes, uint64_t from, uint64_t to);

}  // namespace clusterd::storage
