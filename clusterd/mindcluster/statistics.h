// The observability ConfigMaps MindCluster's ClusterD writes for operators
// and dashboards (docs/mindcluster.md, "Separation and observability through
// ConfigMaps"): cluster-system/statistic-fault-info (public faults),
// mindx-dl/current-job-statistic (jobs) and
// cluster-system/scheduling-exception-report (why jobs' pods wait). Pure:
// their data in the reference's Go-JSON bytes, built from what ClusterD
// knows. No Kubernetes client (mindcluster/k8s/stack.h writes them).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace clusterd::mindcluster {

inline constexpr std::string_view kStatisticFaultCmName = "statistic-fault-info";
inline constexpr std::string_view kStatisticFaultLabel = "mc-statistic-fault";  // = "true"
inline constexpr std::string_view kJobStatisticCmName = "current-job-statistic";
inline constexpr std::string_view kSchedulingExceptionCmName = "scheduling-exception-report";
// The reference lists at most this many public faults in detail.
inline constexpr size_t kMaxStatisticFaults = 4500;
// ... and at most this many jobs.
inline constexpr size_t kMaxJobStatistics = 10'000;
inline constexpr std::string_view kTooManyFaultsDescription =
    "The current total number of faults is too large, and only a portion of the detailed fault data is displayed";

// One public fault on one node (the reference's NodeFault; empty and zero
// fields are left out, as its omitempty tags do).
struct PublicFaultStat {
  std::string resource;          // the sender: CCAE, pingmesh, ...
  std::vector<int32_t> dev_ids;  // the node's chips it names
  std::string fault_id;
  std::string type;  // NPU, Node, Network, Storage ("" when not known)
  std::string code;
  std::string level;  // MindCluster's level name
  int64_t time_ms = 0;
  bool operator==(const PublicFaultStat&) const = default;
};

// statistic-fault-info's data: PublicFaults (node -> its faults, sorted by
// resource and fault id), FaultNum ({"publicFaultNum":N}), and Description
// when there are more than kMaxStatisticFaults (then only that many, whole
// nodes in name order, are listed).
std::map<std::string, std::string> StatisticFaultCmData(
    const std::map<std::string, std::vector<PublicFaultStat>>& by_node);

// One job (the reference's JobStatistic; zero fields left out).
struct JobStat {
  std::string id;  // the job's id: its Kubernetes UID for discovered jobs
  std::string custom_id;
  int64_t card_num = 0;
  int64_t first_run_ms = 0;  // podFirstRunTime
  int64_t stop_ms = 0;       // stopTime
  int64_t last_run_ms = 0;   // podLastRunTime
  int64_t last_fault_ms = 0;
  int64_t fault_times = 0;
  bool operator==(const JobStat&) const = default;
};

// current-job-statistic's data: "data" (a JSON list, by id, at most
// kMaxJobStatistics) and "totalJob" (their number, as text).
std::map<std::string, std::string> JobStatisticCmData(std::vector<JobStat> jobs);

// Why a job (or, where ClusterD knows only the pod, a pod) cannot be
// scheduled (the reference's jobExceptionInfo).
struct SchedulingException {
  std::string key;  // the data key: "<jobName>.<job key>"
  std::string job_name;
  std::string job_type;
  std::string name_space;
  std::string status;  // PodGroupInqueue, PodGroupPending, ...
  std::string reason;  // NotEnoughResources, NodePredicateFailed, ...
  std::string message;
};

// scheduling-exception-report's data: key -> {"jobName","jobType",
// "nameSpace","conditions":{"status","reason","message"}}, the message with
// '<' made ' ' and '>' dropped, as the reference writes it.
std::map<std::string, std::string> SchedulingExceptionCmData(const std::vector<SchedulingException>& exceptions);

}  // namespace clusterd::mindcluster
