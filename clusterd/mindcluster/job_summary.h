// MindCluster's job summaries (job.Job) and rank tables (config.Config),
// docs/mindcluster.md: what MindCluster's ClusterD tells faultdiag-online
// and MindIE about each job, built from ClusterD's own job records (created
// through JobService or discovered from pods and PodGroups). Pure domain: no
// gRPC; the adapters (mindcluster/grpc/job_service.h, config_service.h)
// decide who is told and when.
//
// Rules (the reference's, component/clusterd/pkg/application/jobinfo):
//  - jobStatus: "pending" while the job is PENDING or has no rank placed,
//    "running" (RUNNING, RECOVERING), "complete" (SUCCEEDED), "failed"
//    (FAILED). A deleted job is told once more with operator "delete", its
//    status "failed" unless it completed, and deleteTime; "add" otherwise.
//  - HcclJson: {"status":"initializing"} while pending; else the rank table
//    (status "complete", server_list: one server per node in the order of
//    its lowest rank, with server_id (the node's node-ip label, else its
//    name), host_ip, server_name, server_sn and one device per rank that has
//    a device: device_id, device_ip ("": ClusterD does not know chips'
//    addresses), rank_id). "" above max_hccl_npus chips (40,000), or when
//    the summary would not fit max_summary_bytes.
//  - sharedTorIp, masterAddr: for a PyTorch job only (label
//    mindcluster/framework "pytorch"), its labels mindcluster/shared-tor-ip
//    and mindcluster/master-addr (discovery reads them from the pods), a
//    Volcano Job's (owner kind Job) masterAddr its first server's host IP.
//  - time: the job's create time (Unix seconds); cmIndex "0", total "1"
//    (ClusterD writes no ConfigMap slices); sid the job's label
//    custom-job-id, else its id; frameWork its label mindcluster/framework.
//  - Each change of a job's summary (anything but its uuid) gets a sequence
//    number, the ClusterD revision that made it, and a fresh uuid.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/state/response_limits.h"
#include "clusterd/v1/types.pb.h"
#include "mindcluster/job.pb.h"

namespace clusterd::mindcluster {

inline constexpr std::string_view kJobPending = "pending";
inline constexpr std::string_view kJobRunning = "running";
inline constexpr std::string_view kJobComplete = "complete";
inline constexpr std::string_view kJobFailed = "failed";
inline constexpr std::string_view kOperatorAdd = "add";
inline constexpr std::string_view kOperatorDelete = "delete";
// The HcclJson of a job not yet placed (the reference's DefaultHcclJson).
inline constexpr std::string_view kHcclInitializing = R"({"status":"initializing"})";
// The reference's MaxNPUsPerBatch: a job above it is told without HcclJson,
// and the summaries at subscription go in batches of at most this many chips.
inline constexpr size_t kMaxHcclNpus = 40000;
// Job labels read into the summary.
inline constexpr std::string_view kFrameworkLabel = "mindcluster/framework";
inline constexpr std::string_view kSidLabel = "custom-job-id";
// Set by Kubernetes discovery from the pods (k8s/discovery.h): a PyTorch
// job's sharedTorIp and masterAddr.
inline constexpr std::string_view kSharedTorIpLabel = "mindcluster/shared-tor-ip";
inline constexpr std::string_view kMasterAddrLabel = "mindcluster/master-addr";
inline constexpr std::string_view kFrameworkPytorch = "pytorch";

// What the rank table says of a node.
struct ServerFacts {
  std::string server_id;  // the node-ip label, else the node's name
  std::string host_ip;    // the node-ip label
  std::string server_sn;  // the product-serial-number label
};
// The facts of a node; nullptr: a node ClusterD does not know (its name).
ServerFacts ServerFactsOf(const std::string& name, const v1::Node* node);
using ServerFactsFn = std::function<ServerFacts(const std::string& node)>;

// The reference's status string of a job that exists.
std::string_view JobStatusName(const v1::Job& job);
// Chips the job's ranks use (ranks with a device id).
size_t NpuCount(const v1::Job& job);
// The rank table of a placed job (status "complete"); kHcclInitializing for
// a pending one. Unbounded: callers check its size.
std::string RankTableJson(const v1::Job& job, const ServerFactsFn& facts);

struct JobSummaryOptions {
  size_t max_hccl_npus = kMaxHcclNpus;
  // A summary whose encoding would exceed this goes without HcclJson, so
  // that every message fits a client's 4 MiB receive limit.
  size_t max_summary_bytes = kAnswerBytes;
  // Deleted jobs whose last summary is kept (and given to new subscribers,
  // as the reference keeps a deleted job until it is cleaned up); the
  // oldest goes first.
  size_t max_deleted = 1000;
};

struct JobSummaryEntry {
  uint64_t seq = 0;  // the revision of the change
  job::JobSummarySignal summary;
  // The job's rank table for config.Config; empty while it is pending,
  // deleted, or above max_summary_bytes.
  std::string rank_table;
  bool deleted = false;
};

// Every job's latest summary. Not thread-safe: the owner serialises calls.
class JobSummaryBook {
 public:
  explicit JobSummaryBook(JobSummaryOptions options = {}) : options_(options) {}

  // The job's record now (created or updated) at revision seq, at now_s
  // (Unix seconds). The new entry when the summary changed; nullopt when it
  // says what it said (then nothing is recorded). A job deleted before and
  // created again (the same id) starts afresh.
  std::optional<JobSummaryEntry> Upsert(const v1::Job& job, uint64_t seq, int64_t now_s, const ServerFactsFn& facts);
  // The job was deleted at revision seq: its last summary, told once more
  // (operator "delete"); nullopt for a job the book does not hold or holds
  // deleted already.
  std::optional<JobSummaryEntry> Remove(const std::string& job_id, uint64_t seq, int64_t now_s);

  // Every job's latest entry (deleted ones kept included), in seq order.
  std::vector<JobSummaryEntry> All() const;
  const JobSummaryEntry* Find(const std::string& job_id) const;
  size_t size() const { return entries_.size(); }
  // The last seq recorded (0: none).
  uint64_t head() const { return head_; }

 private:
  void Record(const std::string& id, JobSummaryEntry entry);
  void TrimDeleted();

  const JobSummaryOptions options_;
  std::map<std::string, JobSummaryEntry> entries_;
  // The kept deleted jobs by (seq, job id), oldest first (several may share a
  // seq: deletions found by one resync).
  std::set<std::pair<uint64_t, std::string>> deleted_;
  uint64_t head_ = 0;
};

// What a summary says, for change detection: everything but the uuid.
std::string SummaryContent(const job::JobSummarySignal& s);
// Splits summaries into batches of at most max_npus chips (a job above it
// alone) and max_bytes encoded: the messages a subscriber gets at once.
std::vector<std::vector<job::JobSummarySignal>> Batches(const std::vector<JobSummaryEntry>& entries,
                                                        size_t max_npus = kMaxHcclNpus,
                                                        size_t max_bytes = kAnswerBytes);

}  // namespace clusterd::mindcluster
