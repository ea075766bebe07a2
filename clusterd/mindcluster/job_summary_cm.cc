#include "clusterd/mindcluster/job_summary_cm.h"

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/job_summary.h"

namespace clusterd::mindcluster {

using ordered_json = nlohmann::ordered_json;

std::string JobSummaryCmName(std::string_view job_name, size_t index) {
  std::string name = std::string(kJobSummaryCmPrefix) + std::string(job_name);
  if (index > 0) name += "-" + std::to_string(index);
  return name;
}

std::vector<std::string> HcclSlices(const std::string& table, size_t max_bytes) {
  if (table.size() <= max_bytes) return {table};
  ordered_json doc = ordered_json::parse(table, nullptr, false);
  if (!doc.is_object() || !doc.contains("server_list") || !doc["server_list"].is_array() ||
      doc["server_list"].size() < 2) {
    return {table};
  }
  ordered_json servers = std::move(doc["server_list"]);
  doc["server_list"] = ordered_json::array();
  doc["total"] = 0;
  // The frame's bytes (every key but the servers), then each server's: a
  // part is frame + its servers + the commas between them.
  const size_t frame = doc.dump().size();
  std::vector<std::vector<size_t>> parts(1);
  size_t bytes = frame;
  for (size_t i = 0; i < servers.size(); ++i) {
    const size_t one = servers[i].dump().size() + 1;
    if (!parts.back().empty() && bytes + one > max_bytes) {
      parts.emplace_back();
      bytes = frame;
    }
    parts.back().push_back(i);
    bytes += one;
  }
  std::vector<std::string> out;
  out.reserve(parts.size());
  for (const auto& part : parts) {
    ordered_json slice = doc;
    slice["total"] = parts.size();
    for (size_t i : part) slice["server_list"].push_back(servers[i]);
    out.push_back(slice.dump());
  }
  return out;
}

std::vector<JobSummaryCm> JobSummaryConfigMaps(const job::JobSummarySignal& s, const std::string& table,
                                               size_t max_slice_bytes) {
  const std::vector<std::string> slices =
      HcclSlices(table.empty() ? std::string(kHcclInitializing) : table, max_slice_bytes);
  std::map<std::string, std::string> common = {
      {"job_id", s.jobid()},
      {"job_name", s.jobname()},
      {"framework", s.framework()},
      {"job_status", s.jobstatus()},
      {"time", s.time()},
      {"operator", s.operator_()},
      {"total", std::to_string(slices.size())},
      {"sid", s.sid()},
  };
  if (!s.deletetime().empty()) common["deleteTime"] = s.deletetime();
  if (s.framework() == "pytorch") {
    common["sharedTorIp"] = s.sharedtorip();
    common["masterAddr"] = s.masteraddr();
  }
  std::vector<JobSummaryCm> out;
  out.reserve(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    JobSummaryCm cm{JobSummaryCmName(s.jobname(), i), common};
    cm.data["cm_index"] = std::to_string(i);
    cm.data["hccl.json"] = slices[i];
    out.push_back(std::move(cm));
  }
  return out;
}

}  // namespace clusterd::mindcluster
