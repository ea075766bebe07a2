#include "clusterd/mindcluster/statistics.h"

#include <algorithm>
#include <tuple>

#include "clusterd/mindcluster/go_json.h"

namespace clusterd::mindcluster {

namespace {

// Appends ,"name":value to an object being built (the first field without
// the comma).
void Field(std::string* out, std::string_view name, const std::string& json_value) {
  if (out->back() != '{') *out += ',';
  *out += GoJsonString(name) + ":" + json_value;
}

std::string NodeFaultJson(const PublicFaultStat& f) {
  std::string out = "{";
  if (!f.resource.empty()) Field(&out, "resource", GoJsonString(f.resource));
  if (!f.dev_ids.empty()) {
    std::string ids;
    for (int32_t id : f.dev_ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    Field(&out, "devIds", "[" + ids + "]");
  }
  if (!f.fault_id.empty()) Field(&out, "faultId", GoJsonString(f.fault_id));
  if (!f.type.empty()) Field(&out, "type", GoJsonString(f.type));
  if (!f.code.empty()) Field(&out, "faultCode", GoJsonString(f.code));
  if (!f.level.empty()) Field(&out, "level", GoJsonString(f.level));
  if (f.time_ms != 0) Field(&out, "faultTime", std::to_string(f.time_ms));
  return out + "}";
}

}  // namespace

std::map<std::string, std::string> StatisticFaultCmData(
    const std::map<std::string, std::vector<PublicFaultStat>>& by_node) {
  size_t total = 0;
  for (const auto& [node, faults] : by_node) total += faults.size();
  std::string listed;
  size_t shown = 0;
  for (const auto& [node, faults] : by_node) {
    if (faults.empty()) continue;
    if (shown + faults.size() > kMaxStatisticFaults) break;
    std::vector<const PublicFaultStat*> sorted;
    for (const auto& f : faults) sorted.push_back(&f);
    std::sort(sorted.begin(), sorted.end(), [](const PublicFaultStat* a, const PublicFaultStat* b) {
      return std::tie(a->resource, a->fault_id, a->code) < std::tie(b->resource, b->fault_id, b->code);
    });
    std::string list;
    for (const PublicFaultStat* f : sorted) list += (list.empty() ? "" : ",") + NodeFaultJson(*f);
    listed += (listed.empty() ? "" : ",") + GoJsonString(node) + ":[" + list + "]";
    shown += faults.size();
  }
  std::map<std::string, std::string> data;
  data["PublicFaults"] = "{" + listed + "}";
  data["FaultNum"] = "{\"publicFaultNum\":" + std::to_string(total) + "}";
  if (total > kMaxStatisticFaults) data["Description"] = std::string(kTooManyFaultsDescription);
  return data;
}

std::map<std::string, std::string> JobStatisticCmData(std::vector<JobStat> jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const JobStat& a, const JobStat& b) { return a.id < b.id; });
  if (jobs.size() > kMaxJobStatistics) jobs.resize(kMaxJobStatistics);
  std::string list;
  for (const JobStat& j : jobs) {
    std::string out = "{";
    Field(&out, "id", GoJsonString(j.id));
    if (!j.custom_id.empty()) Field(&out, "customID", GoJsonString(j.custom_id));
    if (j.card_num != 0) Field(&out, "cardNum", std::to_string(j.card_num));
    if (j.first_run_ms != 0) Field(&out, "podFirstRunTime", std::to_string(j.first_run_ms));
    if (j.stop_ms != 0) Field(&out, "stopTime", std::to_string(j.stop_ms));
    if (j.last_run_ms != 0) Field(&out, "podLastRunTime", std::to_string(j.last_run_ms));
    if (j.last_fault_ms != 0) Field(&out, "podLastFaultTime", std::to_string(j.last_fault_ms));
    if (j.fault_times != 0) Field(&out, "podFaultTimes", std::to_string(j.fault_times));
    list += (list.empty() ? "" : ",") + out + "}";
  }
  return {{"data", "[" + list + "]"}, {"totalJob", std::to_string(jobs.size())}};
}

std::map<std::string, std::string> SchedulingExceptionCmData(const std::vector<SchedulingException>& exceptions) {
  std::map<std::string, std::string> data;
  for (const SchedulingException& e : exceptions) {
    std::string message;
    for (char c : e.message) {
      if (c == '<') {
        message += ' ';
      } else if (c != '>') {
        message += c;
      }
    }
    data[e.key] = "{\"jobName\":" + GoJsonString(e.job_name) + ",\"jobType\":" + GoJsonString(e.job_type) +
                  ",\"nameSpace\":" + GoJsonString(e.name_space) +
                  ",\"conditions\":{\"status\":" + GoJsonString(e.status) + ",\"reason\":" + GoJsonString(e.reason) +
                  ",\"message\":" + GoJsonString(message) + "}}";
  }
  return data;
}

}  // namespace clusterd::mindcluster
