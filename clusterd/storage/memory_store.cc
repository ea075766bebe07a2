#include "clusterd/storage/memory_store.h"

#include <mutex>

#include "clusterd/storage/key_codec.h"

namespace clusterd::storage {
namespace {

using Table = std::map<std::string, std::string, std::less<>>;

StatusOr<uint64_t> ReadMetaU64(const Table& meta, std::string_view key) {
  auto it = meta.find(key);
  if (it == meta.end()) return uint64_t{0};
  auto v = DecodeU64(it->second);
  if (!v) {
    return DataLoss("meta key " + std::string(key) + " has " + std::to_string(it->second.size()) + " bytes, want 8");
  }
  return *v;
}

}  // namespace

StatusOr<std::unique_ptr<MemoryStore>> MemoryStore::Open(std::shared_ptr<MemoryDisk> disk, StoreOptions options) {
  std::unique_ptr<MemoryStore> store(new MemoryStore());
  store->disk_ = disk ? std::move(disk) : std::make_shared<MemoryDisk>();
  store->read_only_ = options.read_only;
  std::unique_lock lock(store->disk_->mu);
  Table& meta = store->disk_->tables[static_cast<size_t>(Cf::kMeta)];
  auto version = ReadMetaU64(meta, kMetaSchemaVersion);
  if (!version.ok()) return version.status();
  if (*version == 0) {
    if (options.read_only) return Unavailable("memory store has no schema version and is open read-only");
    std::string value;
    AppendU64(&value, kSchemaVersion);
    meta[std::string(kMetaSchemaVersion)] = std::move(value);
  } else if (*version != kSchemaVersion) {
    return FailedPrecondition("memory store has schema version " + std::to_string(*version) +
                              ", this binary supports " + std::to_string(kSchemaVersion));
  }
  auto revision = ReadMetaU64(meta, kMetaRevision);
  if (!revision.ok()) return revision.status();
  auto compacted = ReadMetaU64(meta, kMetaCompactedRevision);
  if (!compacted.ok()) return compacted.status();
  store->revision_at_open_ = *revision;
  store->compacted_at_open_ = *compacted;
  return store;
}

void MemoryStore::set_write_error(Status error) {
  std::unique_lock lock(error_mu_);
  write_error_ = std::move(error);
}

Status MemoryStore::Write(const ChangeSet& changes) {
  if (read_only()) return Unavailable("store at " + path_ + " is open read-only");
  {
    std::shared_lock lock(error_mu_);
    if (!write_error_.ok()) return write_error_;
  }
  std::unique_lock lock(disk_->mu);
  for (const Change& c : changes) {
    Table& table = disk_->tables[static_cast<size_t>(c.table)];
    switch (c.op) {
      case Change::Op::kPut: table.insert_or_assign(c.key, c.value); break;
      case Change::Op::kDelete: table.erase(c.key); break;
      case Change::Op::kDeleteRange:
        if (c.key < c.end) table.erase(table.lower_bound(c.key), table.lower_bound(c.end));
        break;
    }
  }
  return Status::Ok();
}

Status MemoryStore::Reopen(bool read_only) {
  read_only_.store(read_only, std::memory_order_release);
  return Status::Ok();
}

Status MemoryStore::ForEach(Cf table, const std::function<void(std::string_view, std::string_view)>& fn) const {
  std::shared_lock lock(disk_->mu);
  for (const auto& [key, value] : disk_->tables[static_cast<size_t>(table)]) fn(key, value);
  return Status::Ok();
}

StatusOr<std::vector<::clusterd::v1::Event>> MemoryStore::ReadEvents(uint64_t after, size_t max_count) const {
  std::shared_lock lock(disk_->mu);
  const Table& events = disk_->tables[static_cast<size_t>(Cf::kEvents)];
  std::vector<::clusterd::v1::Event> out;
  for (auto it = events.lower_bound(EventKey(after + 1)); it != events.end() && out.size() < max_count; ++it) {
    ::clusterd::v1::Event event;
    if (!event.ParseFromString(it->second)) return DataLoss("event at key " + HexEncode(it->first) + " does not parse");
    out.push_back(std::move(event));
  }
  return out;
}

StatusOr<uint64_t> MemoryStore::LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds, size_t max_scan) const {
  std::shared_lock lock(disk_->mu);
  const Table& events = disk_->tables[static_cast<size_t>(Cf::kEvents)];
  uint64_t last = after;
  size_t scanned = 0;
  for (auto it = events.lower_bound(EventKey(after + 1)); it != events.end() && scanned < max_scan; ++it, ++scanned) {
    ::clusterd::v1::Event event;
    if (!event.ParseFromString(it->second)) return DataLoss("event at key " + HexEncode(it->first) + " does not parse");
    if (event.time().seconds() >= cutoff_unix_seconds) return event.revision() - 1;
    last = event.revision();
  }
  return last;
}

}  // namespace clusterd::storage
