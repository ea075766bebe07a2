// The "mindcluster-jobs" integration: MindCluster's job-summary-<job>
// ConfigMaps (job_summary_cm.h), written into each job's namespace from
// ClusterD's job records, as the reference ClusterD writes them for iMaster
// NCE-Fabric and operators (docs/mindcluster.md, "Job summaries").
//
// - Jobs with a Kubernetes namespace and name (the labels k8s.namespace and
//   k8s.name that discovery sets, or that a JobService client gives) get
//   ConfigMaps; others have nowhere to go (nor do labels Kubernetes would
//   refuse as names: a JobService client may set any; skipped, not retried).
// - A job's ConfigMaps are written when its summary changes (status, rank
//   table, ...), at most writes_per_second a second (the reference's 5);
//   what waits is written on a later pass, the oldest first.
// - A deleted job's ConfigMaps are rewritten once with operator "delete"
//   and deleteTime, then deleted delete_after later (the reference's 60 s),
//   unless a live job has taken the same namespace and name.
// - Slices a job no longer needs (its rank table shrank) are deleted.
// - At start, ConfigMaps with the label outside-job-info=true whose job
//   ClusterD does not know (deleted while it was down) are deleted after
//   delete_after; the others are rewritten from the records.
//
// Leader only (integrations run on the leader). Writes and failures are
// counted (clusterd_mindcluster_job_summary_*); a failed write is tried
// again on the next pass.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "clusterd/config/config.h"
#include "clusterd/engine/integration.h"
#include "clusterd/k8s/api/client.h"
#include "clusterd/mindcluster/job_summary.h"
#include "clusterd/mindcluster/job_summary_cm.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/rate_limit.h"
#include "common/status.h"

namespace clusterd {

struct JobSummaryCmOptions {
  uint32_t writes_per_second = 5;
  std::chrono::nanoseconds delete_after = std::chrono::seconds(60);
  std::chrono::nanoseconds interval = std::chrono::seconds(1);  // between passes
  size_t max_slice_bytes = mindcluster::kMaxHcclSliceBytes;
};

class JobSummaryConfigMaps final : public Integration {
 public:
  enum class Driver { kThread, kManual };
  JobSummaryConfigMaps(std::shared_ptr<const k8s::ApiClient> client, JobSummaryCmOptions options,
                       Driver driver = Driver::kThread);
  ~JobSummaryConfigMaps() override;

  std::string_view name() const override { return "mindcluster-jobs"; }
  Status Start(const IntegrationEnv& env) override;
  void Stop() override;

  struct PassResult {
    size_t writes = 0;     // ConfigMaps created, updated or deleted
    bool pending = false;  // more to write (rate limit or a failure)
  };
  // One pass at the Clock's now (kManual: the test's thread).
  PassResult Pass();

 private:
  struct Written {
    std::string ns, name;          // the job's namespace and name
    std::vector<std::string> cms;  // the ConfigMap names written, in cm_index order
    std::string content;           // what was last written (all slices)
    uint64_t revision = 0;         // the job's revision it was written at
    bool deleted = false;          // the "delete" version written
    std::optional<TimePoint> delete_at;
  };
  using Want = std::vector<mindcluster::JobSummaryCm>;

  void Loop();
  bool Adopt();
  Status Put(const std::string& ns, const mindcluster::JobSummaryCm& cm);
  Status Remove(const std::string& ns, const std::string& name);
  bool Write(const std::string& id, Written& w, const Want& want, PassResult* r);

  const std::shared_ptr<const k8s::ApiClient> client_;
  const JobSummaryCmOptions options_;
  const Driver driver_;
  IntegrationEnv env_;
  RateLimit tokens_;
  mindcluster::JobSummaryBook book_;
  std::map<std::string, Written> written_;  // by job id ("" + ns/name: found at start, unknown job)
  bool adopted_ = false;

  Counter* writes_ = nullptr;
  Counter* write_errors_ = nullptr;
  Gauge* jobs_ = nullptr;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

StatusOr<std::unique_ptr<Integration>> MakeJobSummaryIntegration(const ClusterdConfig& config);

}  // namespace clusterd
