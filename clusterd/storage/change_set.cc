#include "clusterd/storage/change_set.h"

#include "clusterd/storage/key_codec.h"

namespace clusterd::storage {

void ChangeSet::Put(Cf table, std::string key, std::string value) {
  bytes_ += key.size() + value.size();
  Change& c = changes_.emplace_back();
  c.op = Change::Op::kPut;
  c.table = table;
  c.key = std::move(key);
  c.value = std::move(value);
}

void ChangeSet::Put(Cf table, std::string key, const google::protobuf::MessageLite& message) {
  Put(table, std::move(key), message.SerializeAsString());
}

void ChangeSet::Delete(Cf table, std::string key) {
  bytes_ += key.size();
  Change& c = changes_.emplace_back();
  c.op = Change::Op::kDelete;
  c.table = table;
  c.key = std::move(key);
}

void ChangeSet::DeleteRange(Cf table, std::string from, std::string to) {
  bytes_ += from.size() + to.size();
  Change& c = changes_.emplace_back();
  c.op = Change::Op::kDeleteRange;
  c.table = table;
  c.key = std::move(from);
  c.end = std::move(to);
}

void ChangeSet::Clear() {
  changes_.clear();
  bytes_ = 0;
}

void PutRevision(ChangeSet* changes, uint64_t revision) {
  std::string value;
  AppendU64(&value, revision);
  changes->Put(Cf::kMeta, std::string(kMetaRevision), std::move(value));
}

void AddCompaction(ChangeSet* changes, uint64_t from, uint64_t to) {
  // The range's end is exclusive: deletes (from, to].
  changes->DeleteRange(Cf::kEvents, EventKey(from + 1), EventKey(to + 1));
  std::string value;
  AppendU64(&value, to);
  changes->Put(Cf::kMeta, std::string(kMetaCompactedRevision), std::move(value));
}

}  // namespace clusterd::storage
