#include "clusterd/mindcluster/k8s/job_summaries.h"

#include <utility>

#include "clusterd/k8s/api/object.h"
#include "clusterd/k8s/context.h"
#include "clusterd/mindcluster/job_summary_cm.h"
#include "common/logging.h"

namespace clusterd {

namespace mc = mindcluster;
using nlohmann::json;

namespace {

int64_t UnixSeconds(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string Label(const v1::Job& job, const char* key) {
  auto it = job.labels().find(key);
  return it == job.labels().end() ? "" : it->second;
}

std::string Collection(const std::string& ns) { return "/api/v1/namespaces/" + k8s::UrlEncode(ns) + "/configmaps"; }

std::string ContentOf(const std::vector<mc::JobSummaryCm>& cms) {
  std::string out;
  for (const auto& cm : cms) {
    out += cm.name + '\n';
    for (const auto& [k, v] : cm.data) out += k + '=' + v + '\n';
  }
  return out;
}

// Whether `name` can name a Kubernetes object: a DNS subdomain (at most 253
// of [a-z0-9.-], alphanumeric at both ends). A job's labels come from any
// JobService client; one that names nothing writable is skipped, not retried.
bool ObjectName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '.') return false;
  }
  return true;
}

// An orphan's key in the written table: no job id is known for it.
std::string OrphanKey(const std::string& ns, const std::string& name) { return "~" + ns + "/" + name; }

}  // namespace

JobSummaryConfigMaps::JobSummaryConfigMaps(std::shared_ptr<const k8s::ApiClient> client, JobSummaryCmOptions options,
                                           Driver driver)
    : client_(std::move(client)), options_(options), driver_(driver), tokens_(options.writes_per_second) {}

JobSummaryConfigMaps::~JobSummaryConfigMaps() { Stop(); }

Status JobSummaryConfigMaps::Start(const IntegrationEnv& env) {
  env_ = env;
  if (env.metrics != nullptr) {
    writes_ = &env.metrics->AddCounter("clusterd_mindcluster_job_summary_writes_total",
                                       "job-summary ConfigMaps created, updated or deleted.");
    write_errors_ = &env.metrics->AddCounter("clusterd_mindcluster_job_summary_write_errors_total",
                                             "Failed job-summary ConfigMap writes (retried on the next pass).");
    jobs_ = &env.metrics->AddGauge("clusterd_mindcluster_job_summary_jobs",
                                   "Jobs with job-summary ConfigMaps (deleted ones until their ConfigMaps go).");
  }
  if (driver_ == Driver::kThread) thread_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

void JobSummaryConfigMaps::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void JobSummaryConfigMaps::Loop() {
  for (;;) {
    const PassResult r = Pass();
    std::unique_lock lock(mu_);
    const auto wait = r.pending ? std::chrono::nanoseconds(std::chrono::milliseconds(200)) : options_.interval;
    cv_.wait_for(lock, wait, [this] { return stopping_; });
    if (stopping_) return;
  }
}

Status JobSummaryConfigMaps::Put(const std::string& ns, const mc::JobSummaryCm& cm) {
  json body = {
      {"apiVersion", "v1"},
      {"kind", "ConfigMap"},
      {"metadata", {{"name", cm.name}, {"namespace", ns}, {"labels", {{std::string(mc::kJobSummaryCmLabel), "true"}}}}},
      {"data", cm.data}};
  // Unconditional: ClusterD's record is the truth; whoever wrote it since.
  auto put = client_->Put(Collection(ns) + "/" + k8s::UrlEncode(cm.name), body);
  if (put.ok()) return Status::Ok();
  if (put.status().code() != StatusCode::kNotFound) return put.status();
  return client_->Post(Collection(ns), body).status();
}

Status JobSummaryConfigMaps::Remove(const std::string& ns, const std::string& name) {
  auto gone = client_->Delete(Collection(ns) + "/" + k8s::UrlEncode(name));
  if (!gone.ok() && gone.status().code() != StatusCode::kNotFound) return gone.status();
  return Status::Ok();
}

bool JobSummaryConfigMaps::Adopt() {
  // What an earlier leader wrote: kept for the jobs ClusterD knows (rewritten
  // from their records), deleted for those it does not.
  auto list =
      client_->Get("/api/v1/configmaps?labelSelector=" + k8s::UrlEncode(std::string(mc::kJobSummaryCmLabel) + "=true"));
  if (!list.ok()) {
    GetLogger("mindcluster")
        ->warn("mindcluster-jobs: cannot list job-summary ConfigMaps: {} (retrying)", list.status().message());
    return false;
  }
  const TimePoint now = env_.clock->Now();
  for (const json& cm : list->value("items", json::array())) {
    const std::string ns = k8s::StringAt(cm, {"metadata", "namespace"});
    const std::string name = k8s::StringAt(cm, {"metadata", "name"});
    const std::string job_id = k8s::StringAt(cm, {"data", "job_id"});
    const std::string job_name = k8s::StringAt(cm, {"data", "job_name"});
    if (ns.empty() || name.empty()) continue;
    const bool known = !job_id.empty() && env_.commands->GetJob(job_id).ok();
    Written& w = written_[known ? job_id : OrphanKey(ns, job_name.empty() ? name : job_name)];
    w.ns = ns;
    w.name = job_name;
    w.cms.push_back(name);
    if (!known && !w.delete_at) {
      w.deleted = true;
      w.delete_at = now + options_.delete_after;
      GetLogger("mindcluster")
          ->info("mindcluster-jobs: {}/{} belongs to no job ClusterD knows: deleted in {} s", ns, name,
                 std::chrono::duration_cast<std::chrono::seconds>(options_.delete_after).count());
    }
  }
  return true;
}

bool JobSummaryConfigMaps::Write(const std::string& id, Written& w, const Want& want, PassResult* r) {
  const std::string content = ContentOf(want);
  if (content == w.content) return true;
  std::set<std::string> names;
  for (const auto& cm : want) {
    if (!tokens_.Take()) {
      r->pending = true;
      return false;
    }
    if (Status st = Put(w.ns, cm); !st.ok()) {
      if (write_errors_ != nullptr) write_errors_->Inc();
      GetLogger("mindcluster")
          ->warn("mindcluster-jobs: cannot write {}/{} (job {}): {} (retrying)", w.ns, cm.name, id, st.message());
      r->pending = true;
      return false;
    }
    ++r->writes;
    if (writes_ != nullptr) writes_->Inc();
    names.insert(cm.name);
  }
  // Slices the job no longer needs.
  std::vector<std::string> kept;
  for (const auto& cm : want) kept.push_back(cm.name);
  for (const std::string& old : w.cms) {
    if (names.count(old)) continue;
    if (!tokens_.Take()) {
      r->pending = true;
      return false;
    }
    if (Status st = Remove(w.ns, old); !st.ok()) {
      if (write_errors_ != nullptr) write_errors_->Inc();
      r->pending = true;
      return false;
    }
    ++r->writes;
    if (writes_ != nullptr) writes_->Inc();
  }
  w.cms = std::move(kept);
  w.content = content;
  return true;
}

JobSummaryConfigMaps::PassResult JobSummaryConfigMaps::Pass() {
  PassResult r;
  const TimePoint now = env_.clock->Now();
  const int64_t now_s = UnixSeconds(now);
  if (!adopted_) adopted_ = Adopt();

  // Every job, page by page.
  std::vector<v1::Job> jobs;
  v1::ListJobsRequest req;
  req.set_page_size(500);
  for (;;) {
    auto page = env_.commands->ListJobs(req);
    if (!page.ok()) {
      r.pending = true;
      return r;
    }
    for (auto& j : *page->mutable_jobs()) jobs.push_back(std::move(j));
    if (page->next_page_token().empty()) break;
    req.set_page_token(page->next_page_token());
  }
  std::map<std::string, v1::GetNodeResponse> nodes;  // this pass's node reads
  auto facts = [&](const std::string& node) {
    auto it = nodes.find(node);
    if (it == nodes.end()) {
      v1::GetNodeRequest get;
      get.set_name(node);
      auto got = env_.commands->GetNode(get);
      it = nodes.emplace(node, got.ok() ? *got : v1::GetNodeResponse()).first;
    }
    return mc::ServerFactsOf(node, it->second.has_node() ? &it->second.node() : nullptr);
  };

  std::set<std::string> live_ids, live_names;  // names: "ns/name"
  for (const v1::Job& job : jobs) {
    const std::string ns = Label(job, "k8s.namespace"), name = Label(job, "k8s.name");
    // Nowhere to write it: no namespace and name, or ones Kubernetes refuses
    // (with room for the slices' "-<i>").
    if (!ObjectName(ns) || ns.size() > 63 || !ObjectName(mc::JobSummaryCmName(name, 999))) continue;
    live_ids.insert(job.id());
    live_names.insert(ns + "/" + name);
    written_.erase(OrphanKey(ns, name));  // a ConfigMap found at start is this job's
    auto entry = book_.Upsert(job, job.revision(), now_s, facts);
    Written& w = written_[job.id()];
    if (w.deleted) w = Written{};  // the same id again
    w.ns = ns;
    w.name = name;
    if (!entry && w.revision == job.revision() && !w.content.empty()) continue;  // written as it is
    const mc::JobSummaryEntry* e = entry ? &*entry : book_.Find(job.id());
    if (e == nullptr) continue;
    const std::string table = mc::RankTableJson(job, facts);
    if (Write(job.id(), w, mc::JobSummaryConfigMaps(e->summary, table, options_.max_slice_bytes), &r)) {
      w.revision = job.revision();
    }
  }

  for (auto it = written_.begin(); it != written_.end();) {
    const std::string& id = it->first;
    Written& w = it->second;
    if (!w.deleted && !live_ids.count(id)) {
      // The job is gone: its summary once more with operator "delete".
      auto e = book_.Remove(id, 0, now_s);
      if (!e) {
        job::JobSummarySignal s;
        s.set_jobid(id);
        s.set_jobname(w.name);
        s.set_operator_(std::string(mc::kOperatorDelete));
        s.set_jobstatus(std::string(mc::kJobFailed));
        s.set_deletetime(std::to_string(now_s));
        e = mc::JobSummaryEntry{0, s, "", true};
      }
      if (Write(id, w, mc::JobSummaryConfigMaps(e->summary, "", options_.max_slice_bytes), &r)) {
        w.deleted = true;
        w.delete_at = now + options_.delete_after;
      }
    }
    if (w.deleted && w.delete_at && now >= *w.delete_at) {
      if (live_names.count(w.ns + "/" + w.name)) {  // a live job has the name now: its ConfigMaps
        it = written_.erase(it);
        continue;
      }
      while (!w.cms.empty()) {
        if (!tokens_.Take()) {
          r.pending = true;
          break;
        }
        if (Status st = Remove(w.ns, w.cms.back()); !st.ok()) {
          if (write_errors_ != nullptr) write_errors_->Inc();
          GetLogger("mindcluster")
              ->warn("mindcluster-jobs: cannot delete {}/{}: {} (retrying)", w.ns, w.cms.back(), st.message());
          r.pending = true;
          break;
        }
        ++r.writes;
        if (writes_ != nullptr) writes_->Inc();
        w.cms.pop_back();
      }
      if (w.cms.empty()) {
        it = written_.erase(it);
        continue;
      }
    }
    ++it;
  }
  if (jobs_ != nullptr) jobs_->Set(static_cast<double>(written_.size()));
  return r;
}

StatusOr<std::unique_ptr<Integration>> MakeJobSummaryIntegration(const ClusterdConfig& config) {
  auto ctx = KubernetesContext::For(config);
  if (!ctx.ok()) return ctx.status();
  JobSummaryCmOptions options;
  options.writes_per_second = config.mindcluster_stack.job_summary_writes_per_second;
  options.delete_after = config.mindcluster_stack.job_summary_delete_after;
  std::shared_ptr<const k8s::ApiClient> client(*ctx, &(*ctx)->client());
  return std::unique_ptr<Integration>(std::make_unique<JobSummaryConfigMaps>(std::move(client), options));
}

}  // namespace clusterd
