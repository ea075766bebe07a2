#include "clusterd/mindcluster/job_view.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/om.h"

namespace clusterd::mindcluster {
namespace {

using nlohmann::json;

google::protobuf::Timestamp ViewTime(int64_t unix_ms) {
  google::protobuf::Timestamp t;
  t.set_seconds(unix_ms / 1000);
  t.set_nanos(static_cast<int32_t>(unix_ms % 1000) * 1000000);
  return t;
}

// A JSON value as text: strings as they are, anything else dumped.
std::string ViewText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string StressOpsText(const storage::v1::OmStressOps& ops) {
  std::string out;
  for (int64_t o : ops.ops()) {
    out += out.empty() ? "" : ",";
    out += o == kStressOpAic ? "AIC" : o == kStressOpP2p ? "P2P" : std::to_string(o);
  }
  return out;
}

// The stored result (node -> chip -> {"rankResult": {op: {code, result}}})
// that the stress test's outcome message carries after "result:".
void AddChipResults(const storage::v1::OmOperation& op, v1::MindClusterOperation* out) {
  for (auto m = op.messages().rbegin(); m != op.messages().rend(); ++m) {
    const size_t at = m->find("result:{");
    if (at == std::string::npos) continue;
    const json result = json::parse(m->substr(at + 7), nullptr, /*allow_exceptions=*/false);
    if (!result.is_object()) return;
    uint32_t total = 0;
    for (const auto& [node, chips] : result.items()) {
      if (!chips.is_object()) continue;
      for (const auto& [device, chip] : chips.items()) {
        if (!chip.is_object() || !chip.contains("rankResult") || !chip["rankResult"].is_object()) continue;
        for (const auto& [o, r] : chip["rankResult"].items()) {
          ++total;
          if (static_cast<size_t>(out->chip_results_size()) >= kViewMaxChips) continue;
          v1::MindClusterStressChip* c = out->add_chip_results();
          c->set_node(node);
          c->set_device(device);
          c->set_op(o);
          if (r.is_object()) {
            if (r.contains("code")) c->set_code(ViewText(r["code"]));
            if (r.contains("result")) c->set_result(ViewText(r["result"]));
          }
        }
      }
    }
    out->set_total_chip_results(total);
    return;
  }
}

v1::MindClusterJobSummary SummaryView(const JobSummaryEntry& e) {
  const job::JobSummarySignal& s = e.summary;
  v1::MindClusterJobSummary v;
  v.set_job_id(s.jobid());
  v.set_job_name(s.jobname());
  v.set_namespace_(s.namespace_());
  v.set_framework(s.framework());
  v.set_job_status(s.jobstatus());
  v.set_time(s.time());
  v.set_operator_(s.operator_());
  v.set_delete_time(s.deletetime());
  v.set_sid(s.sid());
  v.set_shared_tor_ip(s.sharedtorip());
  v.set_master_addr(s.masteraddr());
  v.set_cm_index(s.cmindex());
  v.set_total(s.total());
  v.set_sequence(e.seq);
  v.set_uuid(s.uuid());
  v.set_deleted(e.deleted);
  if (!s.hccljson().empty()) {
    const json h = json::parse(s.hccljson(), nullptr, /*allow_exceptions=*/false);
    if (h.is_object() && h.contains("status")) v.set_hccl_status(ViewText(h["status"]));
  }
  return v;
}

// The servers of a rank table (hccl.json's server_list).
std::vector<v1::MindClusterServer> Servers(const std::string& table) {
  std::vector<v1::MindClusterServer> out;
  if (table.empty()) return out;
  const json h = json::parse(table, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object() || !h.contains("server_list") || !h["server_list"].is_array()) return out;
  auto text = [](const json& o, const char* key) {
    return o.is_object() && o.contains(key) ? ViewText(o[key]) : std::string();
  };
  for (const auto& s : h["server_list"]) {
    v1::MindClusterServer v;
    v.set_server_id(text(s, "server_id"));
    v.set_host_ip(text(s, "host_ip"));
    v.set_server_name(text(s, "server_name"));
    v.set_server_sn(text(s, "server_sn"));
    if (s.is_object() && s.contains("device") && s["device"].is_array()) {
      for (const auto& d : s["device"]) {
        v1::MindClusterDevice* dv = v.add_devices();
        dv->set_device_id(text(d, "device_id"));
        dv->set_device_ip(text(d, "device_ip"));
        dv->set_rank_id(text(d, "rank_id"));
      }
    }
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

v1::MindClusterOperation OperationView(const storage::v1::OmOperation& op) {
  v1::MindClusterOperation v;
  v.set_id(op.id());
  v.set_kind(op.kind());
  v.set_stage(op.stage());
  v.set_actor(op.actor());
  if (op.started_unix_ms() != 0) *v.mutable_started() = ViewTime(op.started_unix_ms());
  if (op.deadline_unix_ms() != 0) *v.mutable_deadline() = ViewTime(op.deadline_unix_ms());
  if (op.finished_unix_ms() != 0) *v.mutable_finished() = ViewTime(op.finished_unix_ms());
  if (op.kind() == kOmNicSwitch) {
    v.set_total_ranks(static_cast<uint32_t>(op.ranks_size()));
    for (int i = 0; i < op.ranks_size() && static_cast<size_t>(i) < kViewMaxRanks; ++i) {
      v.add_ranks(op.ranks(i));
      v.add_planes(i < op.ops_size() && op.ops(i) ? "backup" : "primary");
    }
  } else {
    v.set_total_ranks(static_cast<uint32_t>(op.stress_size()));
    // By rank, in number order, so that the first kViewMaxRanks are the lowest.
    std::map<std::pair<size_t, std::string>, const storage::v1::OmStressOps*> sorted;
    for (const auto& [rank, ops] : op.stress()) sorted.emplace(std::make_pair(rank.size(), rank), &ops);
    for (const auto& [key, ops] : sorted) {
      if (static_cast<size_t>(v.stress_ops_size()) >= kViewMaxRanks) break;
      (*v.mutable_stress_ops())[key.second] = StressOpsText(*ops);
    }
  }
  for (const auto& m : op.messages()) {
    v.add_messages(m.size() > kViewMaxMessageBytes ? m.substr(0, kViewMaxMessageBytes) + "...(cut)" : m);
  }
  v.set_fault_reported(op.fault_reported());
  if (op.kind() == kOmStressTest) AddChipResults(op, &v);
  return v;
}

StatusOr<v1::GetMindClusterJobResponse> BuildJobView(const JobViewInput& in) {
  if (in.page_size > kViewMaxServers) {
    return InvalidArgument("page_size " + std::to_string(in.page_size) + " is above " +
                           std::to_string(kViewMaxServers));
  }
  size_t offset = 0;
  if (!in.page_token.empty()) {
    const char* end = in.page_token.data() + in.page_token.size();
    auto [p, ec] = std::from_chars(in.page_token.data(), end, offset);
    if (ec != std::errc() || p != end) return InvalidArgument("page_token is not one this call gave");
  }
  const bool has_om = in.om != nullptr && (in.om->has_current() || in.om->history_size() > 0);
  if (in.entry == nullptr && !has_om) {
    return NotFound("job " + in.job_id.substr(0, 253) +
                    " has no MindCluster summary and no NIC switch or stress test kept");
  }
  v1::GetMindClusterJobResponse resp;
  resp.set_job_id(in.job_id);
  if (has_om) {
    if (in.om->has_current()) *resp.mutable_current_operation() = OperationView(in.om->current());
    for (auto it = in.om->history().rbegin(); it != in.om->history().rend(); ++it) {
      *resp.add_history() = OperationView(*it);
    }
  }
  std::vector<v1::MindClusterServer> servers;
  if (in.entry != nullptr) {
    *resp.mutable_summary() = SummaryView(*in.entry);
    // The rank table (kept above the NPU limit, where HcclJson is left out).
    servers = Servers(!in.entry->rank_table.empty() ? in.entry->rank_table : in.entry->summary.hccljson());
  }
  resp.set_total_servers(static_cast<uint32_t>(servers.size()));
  if (offset > servers.size()) return InvalidArgument("page_token is not one this call gave");
  const std::string& table = in.entry != nullptr ? in.entry->rank_table : std::string();
  // The rank table on the first page, if it fits beside the rest with room
  // for one server at least.
  if (!table.empty()) {
    if (offset == 0 && resp.ByteSizeLong() + table.size() + 64 < in.max_bytes / 2) {
      resp.set_rank_table(table);
    } else {
      resp.set_rank_table_omitted(true);
    }
  }
  const size_t limit = in.page_size == 0 ? kViewMaxServers : in.page_size;
  size_t bytes = resp.ByteSizeLong();
  size_t i = offset;
  for (; i < servers.size() && i - offset < limit; ++i) {
    const size_t add = servers[i].ByteSizeLong() + 8;
    // Always one server a page, so that paging goes on.
    if (i > offset && bytes + add > in.max_bytes) break;
    bytes += add;
    *resp.add_servers() = std::move(servers[i]);
  }
  if (i < servers.size()) resp.set_next_page_token(std::to_string(i));
  return resp;
}

}  // namespace clusterd::mindcluster
