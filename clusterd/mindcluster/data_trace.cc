#include "clusterd/mindcluster/data_trace.h"

#include <utility>

#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd::mindcluster {
namespace {

constexpr size_t kMaxJobIdLength = 253;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool IsDnsLabel(std::string_view s, size_t max) {
  if (s.empty() || s.size() > max || !IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-') return false;
  }
  return true;
}

// A DNS-1123 subdomain: labels joined by '.', at most 253 characters.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!IsDnsLabel(label, 63)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// How a value shows in a message: quoted, cut, without control characters.
std::string Shown(std::string_view v) {
  std::string out = "\"";
  for (char c : v.substr(0, 64)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  if (v.size() > 64) out += "...";
  return out + "\"";
}

}  // namespace

StatusOr<JobNsName> ParseJobNsName(std::string_view text) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos || text.find('/', slash + 1) != std::string_view::npos) {
    return InvalidArgument("jobNsName: must be namespace/jobName (one '/'), got " + Shown(text));
  }
  JobNsName out{std::string(text.substr(0, slash)), std::string(text.substr(slash + 1))};
  if (!IsDnsLabel(out.ns, 63)) {
    return InvalidArgument("jobNsName: the namespace " + Shown(out.ns) +
                           " is not a Kubernetes namespace (1-63 characters of a-z, 0-9, '-')");
  }
  if (!IsDnsSubdomain(out.name)) {
    return InvalidArgument("jobNsName: the job name " + Shown(out.name) +
                           " is not a Kubernetes name (1-253 characters of a-z, 0-9, '-', '.')");
  }
  return out;
}

Status ValidateProfilingSwitch(const ::ProfilingSwitch& s) {
  const std::pair<std::string_view, const std::string*> fields[] = {
      {"CommunicationOperator", &s.communicationoperator()},
      {"Step", &s.step()},
      {"SaveCheckpoint", &s.savecheckpoint()},
      {"FP", &s.fp()},
      {"DataLoader", &s.dataloader()},
  };
  for (const auto& [name, value] : fields) {
    if (*value != kSwitchOn && *value != kSwitchOff) {
      return InvalidArgument("profilingSwitch." + std::string(name) + ": must be \"on\" or \"off\", got " +
                             Shown(*value));
    }
  }
  return Status::Ok();
}

::ProfilingSwitch SwitchOf(const storage::v1::DataTraceRecord& r) {
  ::ProfilingSwitch s;
  s.set_communicationoperator(r.communication_operator());
  s.set_step(r.step());
  s.set_savecheckpoint(r.save_checkpoint());
  s.set_fp(r.fp());
  s.set_dataloader(r.data_loader());
  return s;
}

void SetSwitch(const ::ProfilingSwitch& s, storage::v1::DataTraceRecord* r) {
  r->set_communication_operator(s.communicationoperator());
  r->set_step(s.step());
  r->set_save_checkpoint(s.savecheckpoint());
  r->set_fp(s.fp());
  r->set_data_loader(s.dataloader());
}

DataTraceSwitches::DataTraceSwitches(DataTraceStore* store, const DataTraceJobs* jobs, const Clock* clock,
                                     DataTraceOptions options, MetricsRegistry* metrics)
    : store_(store), jobs_(jobs), clock_(clock), options_(options) {
  if (metrics == nullptr) return;
  jobs_gauge_ = &metrics->AddGauge("clusterd_mindcluster_datatrace_jobs",
                                   "Jobs whose MindCluster profiling switches (TrainingDataTrace) are kept.");
  subscribers_gauge_ =
      &metrics->AddGauge("clusterd_mindcluster_datatrace_subscribers", "TrainingDataTrace subscription streams open.");
  changes_ = &metrics->AddCounter("clusterd_mindcluster_datatrace_changes_total",
                                  "Profiling switches set (ModifyTrainingDataTraceSwitch, stored).");
  messages_ = &metrics->AddCounter("clusterd_mindcluster_datatrace_messages_total",
                                   "Profiling switches given to subscription streams.");
  const std::string refused = "clusterd_mindcluster_datatrace_refused_total";
  const std::string help = "TrainingDataTrace calls refused at a limit.";
  refused_jobs_ = &metrics->AddCounter(refused, help, {{"limit", "max_jobs"}});
  refused_subscribers_ = &metrics->AddCounter(refused, help, {{"limit", "max_subscribers"}});
  refused_job_subscribers_ = &metrics->AddCounter(refused, help, {{"limit", "max_subscribers_per_job"}});
}

Status DataTraceSwitches::Load() {
  auto loaded = store_->LoadAll();
  if (!loaded.ok()) return loaded.status();
  std::lock_guard lock(mu_);
  for (auto& r : *loaded) {
    std::string key = r.job_ns_name();
    records_[std::move(key)] = std::move(r);
  }
  UpdateGaugesLocked();
  return Status::Ok();
}

void DataTraceSwitches::UpdateGaugesLocked() {
  if (jobs_gauge_ != nullptr) jobs_gauge_->Set(static_cast<double>(records_.size()));
  if (subscribers_gauge_ != nullptr) subscribers_gauge_->Set(static_cast<double>(subscribers_));
}

Status DataTraceSwitches::RefuseLocked(Counter* counter, std::string why) {
  if (counter != nullptr) counter->Inc();
  return ResourceExhausted(std::move(why));
}

void DataTraceSwitches::Modify(std::string_view job_ns_name, const ::ProfilingSwitch* s, const std::string& actor,
                               std::function<void(Status)> done) {
  auto job = ParseJobNsName(job_ns_name);
  if (!job.ok()) return done(job.status());
  if (s == nullptr) return done(InvalidArgument("profilingSwitch: required"));
  if (Status st = ValidateProfilingSwitch(*s); !st.ok()) return done(st);
  const std::string key = job->str();
  auto id = jobs_->IdOf(*job);
  if (!id) {
    return done(NotFound("job " + key + " is not known to ClusterD (no job with the labels k8s.namespace=" + job->ns +
                         ", k8s.name=" + job->name + ")"));
  }
  // One Modify decides and submits its write at a time, so that the store
  // applies them in the order they were decided (an eviction never overtakes
  // a later Modify of the job it evicts).
  std::lock_guard order(write_mu_);
  // A new job needs a slot: when every one is taken, those of jobs that are
  // gone are given up (the index is read outside mu_: it takes the state's
  // lock).
  std::map<std::string, std::string> index;
  bool full = false;
  {
    std::lock_guard lock(mu_);
    full =
        !records_.contains(key) && !reserved_.contains(key) && records_.size() + reserved_.size() >= options_.max_jobs;
  }
  if (full) index = jobs_->Index();
  storage::v1::DataTraceRecord record;
  record.set_job_ns_name(key);
  record.set_job_id(*id);
  SetSwitch(*s, &record);
  record.set_actor(actor);
  *record.mutable_update_time() = ToTimestamp(clock_->Now());
  std::vector<std::string> erase;
  bool reserved = false;
  {
    std::lock_guard lock(mu_);
    if (!records_.contains(key) && !reserved_.contains(key)) {
      if (records_.size() + reserved_.size() >= options_.max_jobs) {
        for (const auto& [k, r] : records_) {
          auto it = index.find(k);
          if (it == index.end() || it->second != r.job_id()) erase.push_back(k);
        }
        if (records_.size() - erase.size() + reserved_.size() >= options_.max_jobs) {
          return done(
              RefuseLocked(refused_jobs_, "profiling switches are kept for " + std::to_string(options_.max_jobs) +
                                              " jobs at most (datatrace_max_jobs), all of them still known; job " +
                                              key + " gets none"));
        }
      }
      reserved_.insert(key);
      reserved = true;
    }
  }
  const std::string job_id = *id;
  store_->Write(record, erase, [this, record, erase, key, job_id, reserved, done = std::move(done)](Status st) mutable {
    {
      std::lock_guard lock(mu_);
      if (reserved) reserved_.erase(key);
      if (st.ok()) {
        for (const auto& k : erase) records_.erase(k);
        const ::ProfilingSwitch now = SwitchOf(record);
        records_[key] = std::move(record);
        if (changes_ != nullptr) changes_->Inc();
        auto g = groups_.find(job_id);
        if (g != groups_.end()) {
          for (auto& [handle, sub] : g->second.subscribers) sub->Switch(now);
          if (messages_ != nullptr) messages_->Inc(g->second.subscribers.size());
        }
        UpdateGaugesLocked();
      }
    }
    done(std::move(st));
  });
}

StatusOr<::ProfilingSwitch> DataTraceSwitches::Get(std::string_view job_ns_name) const {
  auto job = ParseJobNsName(job_ns_name);
  if (!job.ok()) return job.status();
  const std::string key = job->str();
  auto id = jobs_->IdOf(*job);
  if (!id) return NotFound("job " + key + " is not known to ClusterD");
  std::lock_guard lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end() || it->second.job_id() != *id) {
    return NotFound("no profiling switch is set for job " + key);
  }
  return SwitchOf(it->second);
}

StatusOr<uint64_t> DataTraceSwitches::Subscribe(const std::string& job_id,
                                                std::shared_ptr<DataTraceSubscriber> subscriber) {
  if (job_id.empty()) return InvalidArgument("jobId: required");
  if (job_id.size() > kMaxJobIdLength) return InvalidArgument("jobId: longer than 253 characters");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("jobId", job_id));
  auto ns_name = jobs_->NsNameOf(job_id);
  if (!ns_name) return NotFound("job " + job_id + " is not known to ClusterD");
  std::lock_guard lock(mu_);
  if (subscribers_ >= options_.max_subscribers) {
    return RefuseLocked(refused_subscribers_, "TrainingDataTrace subscriptions are limited to " +
                                                  std::to_string(options_.max_subscribers) +
                                                  " at once (datatrace_max_subscribers)");
  }
  Group& group = groups_[job_id];
  if (group.subscribers.size() >= options_.max_subscribers_per_job) {
    return RefuseLocked(refused_job_subscribers_, "job " + job_id + " has " + std::to_string(group.subscribers.size()) +
                                                      " TrainingDataTrace subscriptions, the most one job may have "
                                                      "(datatrace_max_subscribers_per_job)");
  }
  const uint64_t handle = next_handle_++;
  if (!ns_name->empty()) {
    auto it = records_.find(*ns_name);
    if (it != records_.end() && it->second.job_id() == job_id) {
      subscriber->Switch(SwitchOf(it->second));
      if (messages_ != nullptr) messages_->Inc();
    }
  }
  group.subscribers.emplace(handle, std::move(subscriber));
  handles_.emplace(handle, job_id);
  ++subscribers_;
  UpdateGaugesLocked();
  return handle;
}

void DataTraceSwitches::Unsubscribe(uint64_t handle) {
  std::lock_guard lock(mu_);
  auto h = handles_.find(handle);
  if (h == handles_.end()) return;
  auto g = groups_.find(h->second);
  if (g != groups_.end()) {
    g->second.subscribers.erase(handle);
    if (g->second.subscribers.empty()) groups_.erase(g);
  }
  handles_.erase(h);
  --subscribers_;
  UpdateGaugesLocked();
}

size_t DataTraceSwitches::job_count() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

size_t DataTraceSwitches::subscriber_count() const {
  std::lock_guard lock(mu_);
  return subscribers_;
}

}  // namespace clusterd::mindcluster
