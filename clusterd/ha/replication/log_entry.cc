#include "clusterd/ha/replication/log_entry.h"

#include <zstd.h>

#include <memory>

#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/v1/storage.pb.h"

namespace clusterd::replication {

void PutLogIndex(storage::ChangeSet* changes, uint64_t index) {
  std::string value;
  storage::AppendU64(&value, index);
  changes->Put(storage::Cf::kMeta, std::string(kMetaLogIndex), std::move(value));
}

namespace {

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

// zstd's fastest level: the leader compresses every group commit on the
// writer thread, so speed matters more than the last few percent.
constexpr int kZstdLevel = 1;

// kZstd bytes of a serialized LogEntry, or the plain bytes when compressing
// fails or does not pay.
std::string Compress(std::string plain) {
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> cctx(ZSTD_createCCtx());
  if (!cctx) return plain;
  std::string out(2 + ZSTD_compressBound(plain.size()), '\0');
  out[0] = kCompressedMarker;
  out[1] = static_cast<char>(EntryCodec::kZstd);
  const size_t n =
      ZSTD_compressCCtx(cctx.get(), out.data() + 2, out.size() - 2, plain.data(), plain.size(), kZstdLevel);
  if (ZSTD_isError(n) || n + 2 >= plain.size()) return plain;
  out.resize(n + 2);
  return out;
}

StatusOr<std::string> Decompress(std::string_view bytes) {
  if (bytes.size() < 2 || static_cast<EntryCodec>(bytes[1]) != EntryCodec::kZstd) {
    return InvalidArgument("log entry: unknown codec " +
                           (bytes.size() < 2 ? std::string("(none)") : std::to_string(static_cast<uint8_t>(bytes[1]))) +
                           " (written by a newer ClusterD?)");
  }
  const std::string_view frame = bytes.substr(2);
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    return InvalidArgument("log entry: not a zstd frame that states its size");
  }
  if (size > kMaxDecodedEntryBytes) {
    return InvalidArgument("log entry: decompresses to " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(kMaxDecodedEntryBytes) + " an entry may hold");
  }
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> dctx(ZSTD_createDCtx());
  if (!dctx) return Internal("log entry: zstd could not allocate a context");
  std::string out(size, '\0');
  const size_t n = ZSTD_decompressDCtx(dctx.get(), out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(n) || n != size) {
    return InvalidArgument(std::string("log entry: corrupt zstd frame: ") +
                           (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "shorter than it states"));
  }
  return out;
}

}  // namespace

std::string EncodeEntry(uint64_t index, const storage::ChangeSet& changes, std::string_view leader,
                        std::optional<uint64_t> prev_revision, EntryCodec codec) {
  storage::v1::LogEntry entry;
  entry.set_index(index);
  entry.set_leader(std::string(leader));
  if (prev_revision) entry.set_prev_revision(*prev_revision);
  entry.mutable_ops()->Reserve(static_cast<int>(changes.size() + 1));
  auto add = [&entry](const storage::Change& c) {
    auto* op = entry.add_ops();
    op->set_op(static_cast<uint32_t>(c.op));
    op->set_table(static_cast<uint32_t>(c.table));
    op->set_key(c.key);
    if (!c.value.empty()) op->set_value(c.value);
    if (!c.end.empty()) op->set_end(c.end);
  };
  for (const storage::Change& c : changes) add(c);
  storage::ChangeSet index_put;
  PutLogIndex(&index_put, index);
  add(index_put.changes().front());
  std::string plain = entry.SerializeAsString();
  if (codec == EntryCodec::kZstd && plain.size() >= kCompressMinBytes) return Compress(std::move(plain));
  return plain;
}

StatusOr<Entry> DecodeEntry(std::string_view bytes) {
  std::string inflated;
  if (!bytes.empty() && bytes[0] == kCompressedMarker) {
    auto d = Decompress(bytes);
    if (!d.ok()) return d.status();
    inflated = std::move(*d);
    bytes = inflated;
  }
  storage::v1::LogEntry entry;
  if (!entry.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return InvalidArgument("log entry: not a LogEntry message");
  }
  if (entry.index() == 0) return InvalidArgument("log entry: no index");
  Entry out;
  out.index = entry.index();
  out.leader = entry.leader();
  if (entry.has_prev_revision()) out.prev_revision = entry.prev_revision();
  for (auto& op : *entry.mutable_ops()) {
    if (op.table() == 0 || op.table() >= storage::kCfCount) {
      return InvalidArgument("log entry " + std::to_string(out.index) + ": unknown table " +
                             std::to_string(op.table()));
    }
    const auto table = static_cast<storage::Cf>(op.table());
    switch (static_cast<storage::Change::Op>(op.op())) {
      case storage::Change::Op::kPut:
        out.changes.Put(table, std::move(*op.mutable_key()), std::move(*op.mutable_value()));
        break;
      case storage::Change::Op::kDelete: out.changes.Delete(table, std::move(*op.mutable_key())); break;
      case storage::Change::Op::kDeleteRange:
        out.changes.DeleteRange(table, std::move(*op.mutable_key()), std::move(*op.mutable_end()));
        break;
      default:
        return InvalidArgument("log entry " + std::to_string(out.index) + ": unknown operation " +
                               std::to_string(op.op()));
    }
  }
  return out;
}

std::optional<uint64_t> RevisionPut(const storage::ChangeSet& changes) {
  std::optional<uint64_t> revision;
  for (const storage::Change& c : changes) {
    if (c.op == storage::Change::Op::kPut && c.table == storage::Cf::kMeta && c.key == storage::kMetaRevision) {
      if (auto v = storage::DecodeU64(c.value)) revision = *v;
    }
  }
  return revision;
}

StatusOr<uint64_t> ReadLogIndex(const storage::Store& store) {
  uint64_t index = 0;
  bool bad = false;
  Status st = store.ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (key != kMetaLogIndex) return;
    auto v = storage::DecodeU64(value);
    if (v) {
      index = *v;
    } else {
      bad = true;
    }
  });
  if (!st.ok()) return st;
  if (bad) return DataLoss("meta key log_index in " + store.path() + " is not a u64");
  return index;
}

}  // namespace clusterd::replication
