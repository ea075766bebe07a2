// Recovery records by id, indexed by job: the recovery aggregate. The
// Coordinator writes them (on the writer thread); finished ones are
// removed by retention.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "clusterd/state/journal.h"
#include "clusterd/storage/store.h"
#include "clusterd/v1/cluster.pb.h"
#include "common/status.h"

namespace clusterd {

class RecoveryTable {
 public:
  using Map = std::map<std::string, v1::Recovery>;
  // Finished recovery records kept. Never removed: a recovery still waiting
  // or running, the newest recovery of a job that exists, and any recovery
  // created or ended within `protect` (retry budgets and escalation count
  // those). Of the rest, the oldest (by end time) go while more than
  // max_count records are stored, and any that ended before now - max_age.
  struct Retention {
    size_t max_count = 10'000;
    std::chrono::nanoseconds max_age = std::chrono::hours(24 * 30);
    std::chrono::nanoseconds protect = std::chrono::hours(24);
  };

  explicit RecoveryTable(Journal* journal) : journal_(journal) {}

  Status Load(const storage::Store& store);

  const Map& all() const { return recoveries_; }
  size_t size() const { return recoveries_.size(); }
  // The job's recoveries (any state), oldest first.
  std::vector<const v1::Recovery*> OfJob(const std::string& job_id) const;
  // The next recovery id for a job: "<job>.<n>".
  std::string NextId(const std::string& job_id);
  // Stores `r` with a new revision (and update_time) and emits one event of
  // `type` carrying it and its job id. Returns the stored record.
  const v1::Recovery& Put(v1::Recovery r, v1::EventType type, Mutation* m);
  // Deletes what retention allows (no event: like the event-log compaction,
  // it removes history, not state); job_exists tells whose newest record to
  // keep. Returns how many records it removed.
  size_t ApplyRetention(const Retention& retention, TimePoint now,
                        const std::function<bool(const std::string&)>& job_exists, Mutation* m);

  StatusOr<v1::ListRecoveriesResponse> List(const v1::ListRecoveriesRequest& req) const;
  StatusOr<v1::Recovery> Get(const std::string& id) const;

 private:
  void Add(v1::Recovery r);

  Journal* journal_;
  Map recoveries_;                       // id -> record
  std::map<std::string, uint64_t> seq_;  // job id -> last n used
  std::map<std::string, std::set<std::string>> by_job_;
};

}  // namespace clusterd
