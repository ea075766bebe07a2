#include "clusterd/mindcluster/job_summary.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/signal.h"

namespace clusterd::mindcluster {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string Label(const v1::Job& job, std::string_view key) {
  auto it = job.labels().find(std::string(key));
  return it == job.labels().end() ? std::string() : it->second;
}

bool Pending(const v1::Job& job) { return job.state() == v1::JOB_STATE_PENDING || job.placement_size() == 0; }

// The host IP of the server of the job's lowest rank (the rank table's first).
std::string FirstHostIp(const v1::Job& job, const ServerFactsFn& facts) {
  const v1::RankPlacement* first = nullptr;
  for (const auto& r : job.placement()) {
    if (first == nullptr || r.rank() < first->rank()) first = &r;
  }
  if (first == nullptr) return "";
  return (facts ? facts(first->node()) : ServerFactsOf(first->node(), nullptr)).host_ip;
}

}  // namespace

ServerFacts ServerFactsOf(const std::string& name, const v1::Node* node) {
  ServerFacts f;
  f.server_id = name;
  if (node == nullptr) return f;
  auto ip = node->labels().find(std::string(kNodeIpLabel));
  if (ip != node->labels().end() && !ip->second.empty()) {
    f.server_id = ip->second;
    f.host_ip = ip->second;
  }
  auto sn = node->labels().find(std::string(kNodeSnLabel));
  if (sn != node->labels().end()) f.server_sn = sn->second;
  return f;
}

std::string_view JobStatusName(const v1::Job& job) {
  switch (job.state()) {
    case v1::JOB_STATE_SUCCEEDED: return kJobComplete;
    case v1::JOB_STATE_FAILED: return kJobFailed;
    default: return Pending(job) ? kJobPending : kJobRunning;
  }
}

size_t NpuCount(const v1::Job& job) {
  return static_cast<size_t>(std::count_if(job.placement().begin(), job.placement().end(),
                                           [](const v1::RankPlacement& r) { return r.has_device_id(); }));
}

std::string RankTableJson(const v1::Job& job, const ServerFactsFn& facts) {
  if (Pending(job)) return std::string(kHcclInitializing);
  // Ranks in order; a node is listed where its lowest rank is.
  std::vector<const v1::RankPlacement*> ranks;
  ranks.reserve(static_cast<size_t>(job.placement_size()));
  for (const auto& r : job.placement()) ranks.push_back(&r);
  std::sort(ranks.begin(), ranks.end(), [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
  std::vector<std::string> order;
  std::map<std::string, ordered_json> devices;
  for (const auto* r : ranks) {
    auto [it, fresh] = devices.try_emplace(r->node(), ordered_json::array());
    if (fresh) order.push_back(r->node());
    if (!r->has_device_id()) continue;
    ordered_json d;
    d["device_id"] = std::to_string(r->device_id());
    d["device_ip"] = r->device_ip();
    d["rank_id"] = std::to_string(r->rank());
    it->second.push_back(std::move(d));
  }
  ordered_json servers = ordered_json::array();
  for (const auto& node : order) {
    const ServerFacts f = facts ? facts(node) : ServerFactsOf(node, nullptr);
    ordered_json s;
    s["device"] = std::move(devices[node]);
    s["server_id"] = f.server_id;
    s["host_ip"] = f.host_ip;
    s["super_pod_id"] = 0;
    s["server_name"] = node;
    s["server_sn"] = f.server_sn;
    s["pod_name"] = "";
    s["container_ids"] = nullptr;
    servers.push_back(std::move(s));
  }
  ordered_json table;
  table["status"] = "complete";
  const size_t count = servers.size();
  table["server_list"] = std::move(servers);
  table["server_count"] = std::to_string(count);
  table["total"] = 1;
  return table.dump();
}

std::string SummaryContent(const job::JobSummarySignal& s) {
  job::JobSummarySignal copy = s;
  copy.clear_uuid();
  std::string out;
  copy.SerializeToString(&out);
  return out;
}

std::optional<JobSummaryEntry> JobSummaryBook::Upsert(const v1::Job& job, uint64_t seq, int64_t now_s,
                                                      const ServerFactsFn& facts) {
  const std::string& id = job.id();
  auto it = entries_.find(id);
  const JobSummaryEntry* old = it == entries_.end() || it->second.deleted ? nullptr : &it->second;

  JobSummaryEntry e;
  e.seq = seq;
  job::JobSummarySignal& s = e.summary;
  s.set_jobid(id);
  s.set_jobname(Label(job, "k8s.name"));
  if (s.jobname().empty()) s.set_jobname(id);
  s.set_namespace_(Label(job, "k8s.namespace"));
  s.set_framework(Label(job, kFrameworkLabel));
  const std::string_view status = JobStatusName(job);
  s.set_jobstatus(std::string(status));
  s.set_time(std::to_string(job.has_create_time() ? job.create_time().seconds() : now_s));
  s.set_cmindex("0");
  s.set_total("1");
  s.set_operator_(std::string(kOperatorAdd));
  const std::string sid = Label(job, kSidLabel);
  s.set_sid(sid.empty() ? id : sid);
  if (status == kJobComplete || status == kJobFailed) {
    // When it ended: kept from the summary that first said so.
    const bool ended_before =
        old && (old->summary.jobstatus() == kJobComplete || old->summary.jobstatus() == kJobFailed);
    s.set_deletetime(ended_before ? old->summary.deletetime() : std::to_string(now_s));
  }
  const bool pending = status == kJobPending;
  std::string table = RankTableJson(job, facts);
  if (!pending && NpuCount(job) > options_.max_hccl_npus) {
    // The reference leaves such a job's HcclJson empty.
    s.clear_hccljson();
  } else {
    s.set_hccljson(table);
  }
  // PyTorch jobs (the reference's initJobShareTorInfo): the shared ToR IPs
  // and the master discovery read from the pods; a Volcano Job's master is
  // its first server's host IP.
  if (s.framework() == kFrameworkPytorch) {
    s.set_sharedtorip(Label(job, kSharedTorIpLabel));
    if (Label(job, "k8s.owner-kind") == "Job") {
      if (!pending) s.set_masteraddr(FirstHostIp(job, facts));
    } else {
      s.set_masteraddr(Label(job, kMasterAddrLabel));
    }
  }
  // uuid: unique per change, the same for the same change after a restart.
  s.set_uuid(id + "/" + std::to_string(seq));
  if (s.ByteSizeLong() > options_.max_summary_bytes) s.clear_hccljson();
  if (!pending && table.size() <= options_.max_summary_bytes) e.rank_table = std::move(table);

  if (old && SummaryContent(old->summary) == SummaryContent(s) && old->rank_table == e.rank_table) {
    return std::nullopt;
  }
  Record(id, e);
  return e;
}

std::optional<JobSummaryEntry> JobSummaryBook::Remove(const std::string& job_id, uint64_t seq, int64_t now_s) {
  auto it = entries_.find(job_id);
  if (it == entries_.end() || it->second.deleted) return std::nullopt;
  JobSummaryEntry e = it->second;
  e.seq = seq;
  e.deleted = true;
  e.rank_table.clear();
  job::JobSummarySignal& s = e.summary;
  s.set_operator_(std::string(kOperatorDelete));
  // A deleted job that did not complete failed (the reference's rule).
  if (s.jobstatus() != kJobComplete) s.set_jobstatus(std::string(kJobFailed));
  s.set_deletetime(std::to_string(now_s));
  s.set_uuid(job_id + "/" + std::to_string(seq));
  Record(job_id, e);
  return e;
}

void JobSummaryBook::Record(const std::string& id, JobSummaryEntry entry) {
  head_ = std::max(head_, entry.seq);
  auto it = entries_.find(id);
  if (it != entries_.end() && it->second.deleted) deleted_.erase({it->second.seq, id});
  if (entry.deleted) deleted_.emplace(entry.seq, id);
  entries_[id] = std::move(entry);
  TrimDeleted();
}

void JobSummaryBook::TrimDeleted() {
  while (deleted_.size() > options_.max_deleted) {
    auto oldest = deleted_.begin();
    entries_.erase(oldest->second);
    deleted_.erase(oldest);
  }
}

std::vector<JobSummaryEntry> JobSummaryBook::All() const {
  std::vector<JobSummaryEntry> out;
  out.reserve(entries_.size());
  for (const auto& [id, e] : entries_) out.push_back(e);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.seq < b.seq; });
  return out;
}

const JobSummaryEntry* JobSummaryBook::Find(const std::string& job_id) const {
  auto it = entries_.find(job_id);
  return it == entries_.end() ? nullptr : &it->second;
}

std::vector<std::vector<job::JobSummarySignal>> Batches(const std::vector<JobSummaryEntry>& entries, size_t max_npus,
                                                        size_t max_bytes) {
  std::vector<std::vector<job::JobSummarySignal>> out;
  std::vector<job::JobSummarySignal> batch;
  size_t npus = 0, bytes = 0;
  auto flush = [&] {
    if (!batch.empty()) out.push_back(std::move(batch));
    batch.clear();
    npus = bytes = 0;
  };
  for (const auto& e : entries) {
    // Chips as the reference counts them: the rank_ids its HcclJson lists.
    size_t n = 0;
    for (size_t pos = e.summary.hccljson().find("\"rank_id\""); pos != std::string::npos;
         pos = e.summary.hccljson().find("\"rank_id\"", pos + 1)) {
      ++n;
    }
    // A repeated field's element costs its size and a few bytes of framing.
    const size_t size = e.summary.ByteSizeLong() + 8;
    if (!batch.empty() && (npus + n > max_npus || bytes + size > max_bytes)) flush();
    batch.push_back(e.summary);
    npus += n;
    bytes += size;
  }
  flush();
  return out;
}

}  // namespace clusterd::mindcluster
