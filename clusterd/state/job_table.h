// Jobs as registered (placement, policy, state; never their impacts, which
// are computed from the faults when answered), indexed by node: the job
// aggregate. It checks and applies job changes, writes the records and
// their events.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "clusterd/state/journal.h"
#include "clusterd/storage/store.h"
#include "clusterd/v1/job.pb.h"
#include "common/status.h"

namespace clusterd {

class JobTable {
 public:
  using Map = std::map<std::string, v1::Job>;
  // Who writes a job: the API, or an integration by its name. A job is
  // changed or deleted only by its own source, except that the API may
  // delete any job.
  static constexpr const char* kApiSource = "api";

  JobTable(Journal* journal, const StateLimits* limits) : journal_(journal), limits_(limits) {}

  Status Load(const storage::Store& store);

  const Map& all() const { return jobs_; }
  size_t size() const { return jobs_.size(); }
  const v1::Job* Find(const std::string& id) const;
  // Jobs whose ranks the fault hits, sorted.
  std::vector<std::string> HitBy(const v1::Fault& f) const;
  // The devices the jobs' ranks use on `node`.
  std::set<uint32_t> DevicesInUse(const std::string& node) const;
  // node -> the revision of the last change to the ranks placed there (a
  // job created, moved or deleted), for readers that follow nodes.
  const std::map<std::string, uint64_t>& placement_changed() const { return placement_changed_; }

  // Each validates (ValidateJob, max_job_ranks), writes the record and a
  // JOB_* event, and returns the job as stored.
  StatusOr<v1::Job> Create(const v1::Job& requested, const std::string& source, Mutation* m);
  StatusOr<v1::Job> Update(const v1::Job& requested, const std::string& source, Mutation* m);
  // Returns the revision of the JOB_DELETED event.
  StatusOr<uint64_t> Delete(const std::string& id, const std::string& source, Mutation* m);
  // A job's state set by ClusterD (JOB_UPDATED with `reason`); no-op if
  // unchanged.
  Status SetState(const std::string& id, v1::JobState state, const std::string& reason, Mutation* m);
  // The job's progress (Job.progress, the progress monitor's): stored with
  // the job, a JOB_PROGRESS event (the progress, not the job) with `reason`;
  // NotFound for a job that is gone.
  Status SetProgress(const std::string& id, const v1::JobProgress& progress, const std::string& reason, Mutation* m);

 private:
  void Index(const v1::Job& job, bool add, uint64_t revision);
  // Stores a job ClusterD changed (its revision) with its event of `type`
  // (actor clusterd, `reason`): JOB_UPDATED carries the job, JOB_PROGRESS
  // its progress alone.
  void Changed(v1::Job& job, v1::EventType type, const std::string& reason, Mutation* m);
  Status Refused(Status st) const;

  Journal* journal_;
  const StateLimits* limits_;
  Map jobs_;  // id -> job as stored (no impacts)
  // node -> job id -> the devices the job's ranks use there (HitBy).
  // In by_node_'s device sets: a rank that may hold any device of the node.
  static constexpr uint32_t kAnyDevice = UINT32_MAX;
  std::map<std::string, std::map<std::string, std::set<uint32_t>>> by_node_;
  std::map<std::string, uint64_t> placement_changed_;
};

}  // namespace clusterd
