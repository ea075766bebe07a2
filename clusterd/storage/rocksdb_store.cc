#include "clusterd/storage/rocksdb_store.h"

#include <rocksdb/db.h>
#include <rocksdb/memtablerep.h>
#include <rocksdb/options.h>
#include <rocksdb/table.h>
#include <rocksdb/utilities/checkpoint.h>
#include <rocksdb/write_batch.h>

#include "clusterd/storage/key_codec.h"
#include "common/logging.h"

namespace clusterd::storage {
namespace {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::Ok();
  if (s.IsCorruption()) return DataLoss(what + ": " + s.ToString());
  if (s.IsIOError()) return Unavailable(what + ": " + s.ToString());
  return Internal(what + ": " + s.ToString());
}

StatusOr<uint64_t> ReadMetaU64(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, std::string_view key) {
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), cf, rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return uint64_t{0};
  if (!s.ok()) return FromRocks(s, "read meta " + std::string(key));
  auto v = DecodeU64(value);
  if (!v) return DataLoss("meta key " + std::string(key) + " has " + std::to_string(value.size()) + " bytes, want 8");
  return *v;
}

}  // namespace

namespace {

rocksdb::DBOptions MakeDbOptions() {
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  // Two cores by default; RocksDB's background work must not starve ingest.
  db_options.IncreaseParallelism(2);
  db_options.max_total_wal_size = 256 << 20;
  db_options.keep_log_file_num = 4;
  // One writer thread (the Engine's): no concurrent memtable inserts, which
  // also allows the vector memtables below.
  db_options.allow_concurrent_memtable_write = false;
  // Recovery replays the WAL into memtables and keeps the WAL, instead of
  // flushing them into new SST files at every open: an open then needs only
  // a few KB (MANIFEST, OPTIONS, a new WAL), and an open that fails (full
  // disk) leaves no orphaned SSTs behind (it used to leak ~2.6 MB per try).
  db_options.avoid_flush_during_recovery = true;
  return db_options;
}

std::vector<rocksdb::ColumnFamilyDescriptor> MakeDescriptors() {
  rocksdb::ColumnFamilyOptions cf_options;
  cf_options.OptimizeLevelStyleCompaction(64 << 20);
  // The record CFs (nodes, devices, faults, jobs, recoveries) are read only by
  // the full scans of ClusterState::Load at startup: everything else is
  // served from memory. An unsorted vector memtable makes their puts O(1)
  // (sorted once, at flush or at that scan) instead of a skip-list search
  // among every version of the same few hot keys (a group commit rewrites a
  // node's record and its devices' records). Events are read by position
  // (watch catch-up, retention) and meta by Get at open: they keep the
  // sorted skip list.
  rocksdb::ColumnFamilyOptions record_options = cf_options;
  record_options.memtable_factory = std::make_shared<rocksdb::VectorRepFactory>();
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (size_t i = 0; i < kCfCount; ++i) {
    const bool sorted = i == static_cast<size_t>(Cf::kDefault) || i == static_cast<size_t>(Cf::kMeta) ||
                        i == static_cast<size_t>(Cf::kEvents);
    descriptors.emplace_back(std::string(kCfNames[i]), sorted ? cf_options : record_options);
  }
  return descriptors;
}

}  // namespace

Status RocksDbStore::OpenDb(bool read_only) {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  const auto db_options = MakeDbOptions();
  const auto descriptors = MakeDescriptors();
  rocksdb::Status s = read_only ? rocksdb::DB::OpenForReadOnly(db_options, path_, descriptors, &handles, &raw)
                                : rocksdb::DB::Open(db_options, path_, descriptors, &handles, &raw);
  if (!s.ok()) {
    return FromRocks(s, std::string(read_only ? "open store read-only at " : "open store at ") + path_);
  }
  db_.reset(raw);
  for (size_t i = 0; i < kCfCount; ++i) handles_[i] = handles[i];
  read_only_.store(read_only, std::memory_order_release);
  return Status::Ok();
}

void RocksDbStore::CloseDb() {
  if (!db_) return;
  for (auto*& h : handles_) {
    if (h) db_->DestroyColumnFamilyHandle(h);
    h = nullptr;
  }
  rocksdb::Status s = db_->Close();
  if (!s.ok()) GetLogger("store")->warn("close: {}", s.ToString());
  db_.reset();
}

StatusOr<std::unique_ptr<RocksDbStore>> RocksDbStore::Open(const std::string& path, StoreOptions options) {
  auto log = GetLogger("store");
  std::unique_ptr<RocksDbStore> store(new RocksDbStore());
  store->path_ = path;
  store->options_ = options;
  CLUSTERD_RETURN_IF_ERROR(store->OpenDb(options.read_only));
  rocksdb::DB* raw = store->db_.get();

  auto version = ReadMetaU64(raw, store->Handle(Cf::kMeta), kMetaSchemaVersion);
  if (!version.ok()) return version.status();
  if (*version == 0) {
    if (options.read_only) {
      return Unavailable("store at " + path +
                         " has no schema version and is open read-only (disk full?): "
                         "cannot initialise it");
    }
    std::string value;
    AppendU64(&value, kSchemaVersion);
    rocksdb::WriteOptions wo;
    wo.sync = true;
    rocksdb::Status s = raw->Put(wo, store->Handle(Cf::kMeta), std::string(kMetaSchemaVersion), value);
    if (!s.ok()) return FromRocks(s, "write schema version");
  } else if (*version != kSchemaVersion) {
    return FailedPrecondition("store at " + path + " has schema version " + std::to_string(*version) +
                              ", this binary supports " + std::to_string(kSchemaVersion));
  }
  auto revision = ReadMetaU64(raw, store->Handle(Cf::kMeta), kMetaRevision);
  if (!revision.ok()) return revision.status();
  auto compacted = ReadMetaU64(raw, store->Handle(Cf::kMeta), kMetaCompactedRevision);
  if (!compacted.ok()) return compacted.status();
  store->revision_at_open_ = *revision;
  store->compacted_at_open_ = *compacted;
  log->info("opened store at {}{} (revision {}, compacted {})", path, options.read_only ? " read-only" : "", *revision,
            *compacted);
  return store;
}

RocksDbStore::~RocksDbStore() { CloseDb(); }

Status RocksDbStore::Reopen(bool read_only) {
  std::unique_lock lock(db_mu_);
  CloseDb();
  Status st = OpenDb(read_only);
  if (st.ok()) {
    GetLogger("store")->info("reopened store at {}{}", path_, read_only ? " read-only" : " for writing");
    return st;
  }
  if (!read_only) {
    // Keep serving reads.
    Status ro = OpenDb(true);
    if (!ro.ok()) GetLogger("store")->error("cannot reopen store read-only either: {}", ro.ToString());
  }
  return st;
}

Status RocksDbStore::CreateCheckpoint(const std::string& dir) const {
  std::shared_lock lock(db_mu_);
  if (!db_) return Unavailable("store at " + path_ + " is closed (a reopen failed)");
  rocksdb::Checkpoint* raw = nullptr;
  if (auto s = rocksdb::Checkpoint::Create(db_.get(), &raw); !s.ok()) return FromRocks(s, "checkpoint");
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  // log_size_for_flush 0: the memtables are flushed first, so the copy is
  // table files (hard links) and a short WAL.
  return FromRocks(checkpoint->CreateCheckpoint(dir, 0), "checkpoint to " + dir);
}

Status RocksDbStore::Write(const ChangeSet& changes) {
  if (!db_) return Unavailable("store at " + path_ + " is closed (a reopen failed)");
  if (read_only()) return Unavailable("store at " + path_ + " is open read-only");
  // One batch per write: a change set that failed is translated again when
  // it is retried (after a Reopen the handles are new).
  rocksdb::WriteBatch batch(changes.byte_size() + 16 * changes.size() + 64);
  for (const Change& c : changes) {
    rocksdb::Status s;
    switch (c.op) {
      case Change::Op::kPut: s = batch.Put(Handle(c.table), c.key, c.value); break;
      case Change::Op::kDelete: s = batch.Delete(Handle(c.table), c.key); break;
      case Change::Op::kDeleteRange: s = batch.DeleteRange(Handle(c.table), c.key, c.end); break;
    }
    if (!s.ok()) return FromRocks(s, "build write batch");
  }
  rocksdb::WriteOptions wo;
  wo.sync = options_.sync;
  return FromRocks(db_->Write(wo, &batch), "write batch");
}

Status RocksDbStore::ForEach(Cf cf, const std::function<void(std::string_view, std::string_view)>& fn) const {
  std::shared_lock lock(db_mu_);
  if (!db_) return Unavailable("store at " + path_ + " is closed (a reopen failed)");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), Handle(cf)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    fn(std::string_view(it->key().data(), it->key().size()), std::string_view(it->value().data(), it->value().size()));
  }
  return FromRocks(it->status(), "scan " + std::string(kCfNames[static_cast<size_t>(cf)]));
}

StatusOr<std::vector<::clusterd::v1::Event>> RocksDbStore::ReadEvents(uint64_t after, size_t max_count) const {
  std::shared_lock lock(db_mu_);
  if (!db_) return Unavailable("store at " + path_ + " is closed (a reopen failed)");
  std::vector<::clusterd::v1::Event> out;
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, Handle(Cf::kEvents)));
  std::string start = EventKey(after + 1);
  for (it->Seek(start); it->Valid() && out.size() < max_count; it->Next()) {
    ::clusterd::v1::Event event;
    if (!event.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return DataLoss("event at key " + HexEncode(it->key().ToStringView()) + " does not parse");
    }
    out.push_back(std::move(event));
  }
  CLUSTERD_RETURN_IF_ERROR(FromRocks(it->status(), "read events"));
  return out;
}

StatusOr<uint64_t> RocksDbStore::LastRevisionBefore(uint64_t after, int64_t cutoff_unix_seconds,
                                                    size_t max_scan) const {
  std::shared_lock lock(db_mu_);
  if (!db_) return Unavailable("store at " + path_ + " is closed (a reopen failed)");
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), Handle(Cf::kEvents)));
  uint64_t last = after;
  size_t scanned = 0;
  for (it->Seek(EventKey(after + 1)); it->Valid() && scanned < max_scan; it->Next(), ++scanned) {
    ::clusterd::v1::Event event;
    if (!event.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return DataLoss("event at key " + HexEncode(it->key().ToStringView()) + " does not parse");
    }
    if (event.time().seconds() >= cutoff_unix_seconds) return event.revision() - 1;
    last = event.revision();
  }
  CLUSTERD_RETURN_IF_ERROR(FromRocks(it->status(), "scan events by age"));
  return last;
}

}  // namespace clusterd::storage
