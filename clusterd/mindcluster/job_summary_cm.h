// MindCluster's job-summary-<job> ConfigMaps (docs/mindcluster.md, "Job
// summaries"): what the reference ClusterD writes into each job's namespace
// for iMaster NCE-Fabric and operators, built from a job's summary
// (job_summary.h). Pure: names, data and the hccl.json slices; the writer
// (k8s/job_summaries.h) decides when.
//
// The reference's shape (component/clusterd/pkg/domain/job/job_cm_util.go):
//  - "job-summary-<job name>", then "job-summary-<job name>-<i>" for the
//    further slices of a large rank table; label outside-job-info=true.
//  - data: job_id, job_name, framework, job_status, time, operator
//    (add/delete), cm_index, total, hccl.json, sid; deleteTime once the job
//    ended or was deleted; sharedTorIp and masterAddr for a PyTorch job.
//  - hccl.json: the rank table, its server_list cut into slices of at most
//    800 KiB each ("total" the number of slices), one per ConfigMap.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mindcluster/job.pb.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kJobSummaryCmPrefix = "job-summary-";
inline constexpr std::string_view kJobSummaryCmLabel = "outside-job-info";
inline constexpr size_t kMaxHcclSliceBytes = 800 * 1024;

// "job-summary-<job>" for slice 0, "job-summary-<job>-<i>" after.
std::string JobSummaryCmName(std::string_view job_name, size_t index);

// The hccl.json of each ConfigMap: `table` as it is when it fits max_bytes
// (or is not a rank table with a server_list); else its server_list cut in
// order into parts of at most max_bytes each (a server alone over it goes
// alone), every part with the table's other keys and "total" = the number
// of parts.
std::vector<std::string> HcclSlices(const std::string& table, size_t max_bytes = kMaxHcclSliceBytes);

struct JobSummaryCm {
  std::string name;
  std::map<std::string, std::string> data;
};
// The ConfigMaps of a job's summary: one per slice of `table` (the job's
// whole rank table, or the initializing one), in cm_index order.
std::vector<JobSummaryCm> JobSummaryConfigMaps(const job::JobSummarySignal& s, const std::string& table,
                                               size_t max_slice_bytes = kMaxHcclSliceBytes);

}  // namespace clusterd::mindcluster
