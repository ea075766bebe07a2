// The replicated log as its users see it (high availability, docs/ha.md):
// the leader appends one entry per group commit (LogWriter, under the
// ReplicatedStore), a standby reads the entries after the last one its store
// holds (LogReader, under the LogFollower in clusterd/ha). Entries are
// numbered 1, 2, 3 ... without gaps; the oldest go once every live replica
// is past them, so a reader may find the log starting later than it asked.
// Implemented over etcd in clusterd/ha (etcd_log.h); tests use a fake in
// memory (test/support/fakes/fake_log.h).
//
// Thread contract: an implementation's; the ones here may be called from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace clusterd::replication {

// The replicated log as its leader writes it.
class LogWriter {
 public:
  virtual ~LogWriter() = default;
  // Makes `entry` the log's entry number `index`, only while this replica
  // leads. OK: committed (also when an earlier attempt whose answer was lost
  // committed exactly these bytes). FAILED_PRECONDITION: fenced (another
  // replica leads, or entry `index` holds other bytes). Any other error: the
  // outcome is unknown; call again with the same arguments.
  virtual Status Append(uint64_t index, const std::string& entry) = 0;
};

// Entries as read: each one's bytes (log_entry.h: the entry names its own
// index), in index order.
struct LogRead {
  std::vector<std::string> entries;
  bool more = false;  // entries after these were left for the next read
};

// The replicated log as a follower reads it.
class LogReader {
 public:
  virtual ~LogReader() = default;
  // At most `limit` entries, the first ones with an index above `after`
  // that the log still holds (the first may be further on than after + 1:
  // the log was trimmed). `linearizable`: a read that sees every entry
  // committed before it (what a new leader needs); otherwise any member may
  // answer, perhaps a moment behind.
  virtual StatusOr<LogRead> ReadAfter(uint64_t after, size_t limit, bool linearizable) = 0;
};

}  // namespace clusterd::replication
