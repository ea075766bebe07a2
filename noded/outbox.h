// Outbox: NodeD's durable record of the fault transitions it raised and of its
// active fault set, so that a transition raised but not yet acknowledged by
// ClusterD survives a kill -9 (or a power loss) of NodeD and is resent after the
// restart with the id it was given when raised.
//
// ---------------------------------------------------------------------------
// Storage format (everything under state_dir)
// ---------------------------------------------------------------------------
//   LOCK         Empty file held with flock(LOCK_EX) while an Outbox is open, so
//                two agents can never share (and corrupt) one state dir.
//   epoch        The epoch of the latest start, as decimal ASCII plus "\n".
//                Replaced atomically (common/durable_file.h: a temp file
//                epoch.tmp.<pid>.<n>, fsync, rename, fsync of the directory;
//                Open() removes temp files a crash left). Open() reads it,
//                adds one and persists the result before accepting any
//                Record(). For safety the new epoch is also above every epoch
//                found in outbox.log, so a lost epoch file can never make ids
//                repeat.
//   instance     The agent incarnation of this state dir: 32 lowercase hex
//                digits (128 random bits) plus "\n", written atomically the
//                first time the dir is opened and never changed. Sent in
//                Hello: ClusterD keeps the applied sequences per incarnation, so
//                a wiped state dir (epochs start again at 1) is a new agent
//                whose transitions are all new, never "already applied".
//   outbox.log   Append-only log (O_APPEND, one write() + fdatasync per mutating
//                call). Layout:
//
//       file   := magic record*
//       magic  := "NDOUTBX1"                                   (8 bytes)
//       record := header payload
//       header := len:u32 type:u8 zero:u8[3] hcrc:u32 pcrc:u32 (16 bytes, LE)
//                 hcrc = CRC32C of the first 8 header bytes (protects len/type)
//                 pcrc = CRC32C of the payload
//       type 1 TRANSITION  payload = serialized v1::FaultTransition (with its id)
//       type 2 ACK         payload = epoch:u64 seq:u64 -- every pending
//                          transition of that epoch with seq <= seq is done
//       type 3 SNAPSHOT    payload = epoch:u64 count:u32
//                                    (len:u32 serialized v1::FaultReport)*count
//                          The active fault set is now exactly this list (it
//                          replaces whatever the earlier records built).
//
//   Replay (Open): records are applied in order. TRANSITION adds a pending
//   entry and applies RAISE/CLEAR to the active set; ACK drops pending entries;
//   SNAPSHOT replaces the active set. A record is "bad" when its header is
//   incomplete, its hcrc or pcrc does not match, or it runs past the end of the
//   file. A bad record after which no valid record exists anywhere in the rest of
//   the file (a record whose header is valid is skipped as a whole, its payload
//   is never searched; one that runs past the end of the file is torn by
//   definition) is a torn tail (a write cut short by a crash, or garbage/zeros the
//   file system left behind): it is truncated away with a warning and Open
//   succeeds. A bad record followed by a valid one is corruption in the middle:
//   Open fails with DataLoss naming the file and the byte offset. A record whose
//   checksums match but whose payload cannot be parsed, or whose type is unknown,
//   is also DataLoss (never a torn write).
//
//   Compaction: when the log holds more than compact_after_records records and
//   at least half of them are dead (live = pending transitions + 1 snapshot), it
//   is rewritten as: magic, the pending transitions in resend order, one
//   SNAPSHOT of the active set -- into outbox.log.tmp.<pid>.<n>, fdatasync,
//   close (checked), rename over outbox.log, fsync of the directory. A failed
//   compaction is logged and leaves the old (still valid) log in place.
//
// Memory: the active set plus the pending transitions (at most max_pending,
// except that entries replayed from disk are never dropped even if the limit
// was lowered). The log is read in fixed-size chunks on Open, never whole.
//
// Failures: a failed or short write is rolled back with ftruncate and reported;
// nothing in memory changes and the call may be retried. A failed fdatasync
// (or a failed rollback) leaves the on-disk state unknown: the Outbox then
// refuses every further mutation with the same error, and the agent must
// restart (which replays whatever reached the disk under a new epoch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "clusterd/v1/agent.pb.h"
#include "common/clock.h"
#include "common/status.h"

namespace clusterd::noded {

// Durable record of the agent's fault transitions and of its active fault set.
// Thread-safe (one internal mutex); every mutating call is durable (written and
// fdatasync'ed) before it returns.
class Outbox {
 public:
  struct Options {
    // Record() refuses with ResourceExhausted while this many transitions are
    // unacknowledged.
    size_t max_pending = 100'000;
    // Compact the log once it holds more than this many records (and at least
    // half of them are dead).
    size_t compact_after_records = 10'000;
    // Source of the time stamped on transitions; nullptr = the system clock.
    const Clock* clock = nullptr;
  };

  // A transition not yet acknowledged; transition.id() == {epoch, seq}.
  struct Pending {
    uint64_t epoch;
    uint64_t seq;
    v1::FaultTransition transition;
  };

  // Opens or creates the state in state_dir (created if missing). Reads the
  // persisted epoch, adds one, persists it durably: each start gets a new epoch
  // (the first start gets 1). Replays the log: pending (unacknowledged)
  // transitions of all epochs in order, and the active fault set.
  // Errors: FailedPrecondition if another Outbox holds state_dir; DataLoss on a
  // corrupt epoch file or corruption in the middle of the log; Internal on I/O
  // errors.
  static StatusOr<std::unique_ptr<Outbox>> Open(const std::string& state_dir, Options options);
  static StatusOr<std::unique_ptr<Outbox>> Open(const std::string& state_dir);  // default options

  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  uint64_t epoch() const;
  // This state dir's incarnation (see "instance" above); fixed while open.
  const std::string& instance_id() const;

  // Assigns id {epoch(), next seq} (seq starts at 1 per epoch), sets it on the
  // transition, stamps the time (the clock's now, unless the caller already set
  // a time, e.g. when the fault was observed), applies it to the active set
  // (RAISE adds/replaces the fault keyed by (device_id or none, source, code,
  // subject); CLEAR removes it), appends it durably, and returns the stored
  // transition. Invalid UTF-8 in the fault's code, message or subject is
  // replaced with U+FFFD first (proto3 could not parse it back on replay).
  //
  // A RAISE of a fault already active with the same level and message, or a
  // CLEAR of a fault not active, is a no-op: returns std::nullopt and writes
  // nothing.
  //
  // InvalidArgument: action not RAISE/CLEAR, or no fault code.
  // ResourceExhausted: max_pending transitions are unacknowledged. Nothing was
  // recorded and nothing is dropped: the CALLER MUST RETRY LATER (the agent keeps
  // the fault in its own state and records it again once acks have drained the
  // outbox). Any other error: nothing was recorded either; same rule.
  StatusOr<std::optional<v1::FaultTransition>> Record(v1::FaultTransition t);

  // Durably records that ClusterD acknowledged everything up to seq in epoch and
  // drops those pending entries: only entries with that epoch and seq <= the
  // acked seq (entries of older epochs are acknowledged by their own acks). Acks
  // that drop nothing (unknown epochs, repeats, seq 0) write nothing and return
  // Ok, so the call is idempotent. Also used for the Welcome's applied_seq of the
  // current epoch.
  Status Ack(uint64_t epoch, uint64_t seq);

  // A consistent snapshot: the active faults (as FaultReport, sorted by key) and
  // the pending transitions in the order to resend (older epochs first, then by
  // seq), taken under one lock so that the active set reflects exactly the end
  // of the pending list.
  struct Snapshot {
    std::vector<v1::FaultReport> active;
    std::vector<Pending> pending;
  };
  Snapshot Take() const;

  // At most `max` pending transitions that come after (epoch, seq) in resend
  // order (older epochs first, then by seq). A sender keeps the key of the last
  // one it sent and asks only for what is new: O(new) per wake, not a copy of
  // the whole backlog while ClusterD is slow to acknowledge.
  std::vector<Pending> PendingAfter(uint64_t epoch, uint64_t seq, size_t max) const;

  size_t pending_count() const;
  std::vector<v1::FaultReport> Active() const;

  // Rewrites the log now (see the format notes above). Normally automatic.
  Status Compact();
  // Records currently in outbox.log (snapshot included); for tests and metrics.
  size_t log_records() const;
  // Full path of the log file.
  std::string log_path() const;

 private:
  // (has device, device id, source, code, subject); "no device" sorts first.
  using FaultKey = std::tuple<bool, uint32_t, int, std::string, std::string>;
  using PendingKey = std::pair<uint64_t, uint64_t>;  // (epoch, seq)

  Outbox(std::string dir, Options options);

  static FaultKey KeyOf(const v1::FaultReport& f);
  Status Replay(uint64_t* max_epoch_seen);
  void ApplyToActive(const v1::FaultTransition& t);
  Status AppendLocked(uint8_t type, const std::string& payload);
  Status CompactLocked();
  void MaybeCompactLocked();
  std::vector<v1::FaultReport> ActiveLocked() const;

  const std::string dir_;
  const Options options_;
  int lock_fd_ = -1;

  mutable std::mutex mu_;
  int log_fd_ = -1;        // O_APPEND
  uint64_t log_size_ = 0;  // bytes known good (for rollback of a failed write)
  size_t log_records_ = 0;
  std::string instance_;  // set once by Open
  uint64_t epoch_ = 0;
  uint64_t next_seq_ = 1;
  Status broken_;  // sticky error after a failed fdatasync/rollback
  std::map<FaultKey, v1::FaultReport> active_;
  std::map<PendingKey, v1::FaultTransition> pending_;
};

}  // namespace clusterd::noded
