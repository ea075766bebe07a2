// A job's MindCluster view (clusterd.v1.MindClusterService, GET
// /api/v1/mindcluster/jobs/<job>; docs/mindcluster.md): its job.Job summary
// with the hccl.json servers, the rank table config.Config gives MindIE, and
// its NIC switches and stress tests, in one bounded answer. Pure domain: the
// adapter reads the summary book and the operations' records and hands them
// here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "clusterd/mindcluster/job_summary.h"
#include "clusterd/storage/v1/storage.pb.h"
#include "clusterd/v1/mindcluster.pb.h"
#include "common/status.h"

namespace clusterd::mindcluster {

// Servers per page: the default and the most.
inline constexpr uint32_t kViewMaxServers = 1000;
// What an operation carries at most (the rest is counted).
inline constexpr size_t kViewMaxRanks = 1024;
inline constexpr size_t kViewMaxChips = 256;
inline constexpr size_t kViewMaxMessageBytes = 2048;

struct JobViewInput {
  std::string job_id;
  const JobSummaryEntry* entry = nullptr;        // nullptr: no summary
  const storage::v1::OmJobRecord* om = nullptr;  // nullptr: no operation kept
  uint32_t page_size = 0;                        // 0: kViewMaxServers
  std::string page_token;                        // "" the first page
  size_t max_bytes = kAnswerBytes;               // the answer's encoded size at most
};

// NOT_FOUND when the job has neither a summary nor an operation;
// INVALID_ARGUMENT for a page token that is not one this gave, or a
// page_size above kViewMaxServers.
StatusOr<v1::GetMindClusterJobResponse> BuildJobView(const JobViewInput& in);

// An operation as the view shows it (bounded as above).
v1::MindClusterOperation OperationView(const storage::v1::OmOperation& op);

}  // namespace clusterd::mindcluster
