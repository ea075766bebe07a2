#include "clusterd/state/job_table.h"

#include <algorithm>

#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/metrics.h"
#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd {

using storage::Cf;

namespace {

std::string SourceOf(const v1::Job& job) { return job.source().empty() ? JobTable::kApiSource : job.source(); }

Status CheckSource(const v1::Job& stored, const std::string& source, const char* verb) {
  if (SourceOf(stored) == source) return Status::Ok();
  return FailedPrecondition("job " + stored.id() + " was registered by " + SourceOf(stored) + "; " + source +
                            " may not " + verb + " it");
}

}  // namespace

Status JobTable::Load(const storage::Store& store) {
  Status parse_error;
  CLUSTERD_RETURN_IF_ERROR(store.ForEach(Cf::kJobs, [&](std::string_view key, std::string_view value) {
    v1::Job job;
    if (!job.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      if (parse_error.ok()) parse_error = DataLoss("job record " + storage::HexEncode(key) + " does not parse");
      return;
    }
    Index(job, true, job.revision());
    jobs_.emplace(std::string(key), std::move(job));
  }));
  return parse_error;
}

const v1::Job* JobTable::Find(const std::string& id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobTable::Index(const v1::Job& job, bool add, uint64_t revision) {
  for (const auto& p : job.placement()) {
    uint64_t& changed = placement_changed_[p.node()];
    changed = std::max(changed, revision);
    if (add) {
      std::set<uint32_t>& devices = by_node_[p.node()][job.id()];
      if (p.has_device_id()) {
        devices.insert(p.device_id());
      } else if (p.any_device()) {
        devices.insert(kAnyDevice);
      }
    } else if (auto it = by_node_.find(p.node()); it != by_node_.end()) {
      it->second.erase(job.id());
      if (it->second.empty()) by_node_.erase(it);
    }
  }
}

std::set<uint32_t> JobTable::DevicesInUse(const std::string& node) const {
  std::set<uint32_t> out;
  if (auto it = by_node_.find(node); it != by_node_.end()) {
    for (const auto& [id, devices] : it->second) out.insert(devices.begin(), devices.end());
  }
  return out;
}

std::vector<std::string> JobTable::HitBy(const v1::Fault& f) const {
  // RanksHit's rule, indexed: a node-level fault hits every job with a rank
  // on the node, a device fault those with a rank on the device or one that
  // may hold it (any_device).
  std::vector<std::string> out;
  auto it = by_node_.find(f.node());
  if (it == by_node_.end()) return out;
  for (const auto& [id, devices] : it->second) {
    if (!f.has_device_id() || devices.contains(f.device_id()) || devices.contains(kAnyDevice)) out.push_back(id);
  }
  return out;
}

Status JobTable::Refused(Status st) const {
  if (!st.ok() && limits_->jobs_refused) limits_->jobs_refused->Inc();
  return st;
}

StatusOr<v1::Job> JobTable::Create(const v1::Job& requested, const std::string& source, Mutation* m) {
  v1::Job job = requested;
  job.clear_impacts();
  job.clear_progress();
  job.set_source(source);
  if (job.state() == v1::JOB_STATE_UNSPECIFIED) job.set_state(v1::JOB_STATE_RUNNING);
  CLUSTERD_RETURN_IF_ERROR(Refused(ValidateJob(job, limits_->max_job_ranks)));
  if (jobs_.count(job.id())) return Status(StatusCode::kAlreadyExists, "job " + job.id() + " already exists");
  const auto now = ToTimestamp(journal_->Now());
  *job.mutable_create_time() = now;
  *job.mutable_update_time() = now;
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_CREATED);
  ev.set_revision(journal_->Next());
  job.set_revision(ev.revision());
  ev.add_job_ids(job.id());
  *ev.mutable_job() = job;
  m->changes.Put(Cf::kJobs, storage::JobKey(job.id()), job);
  journal_->Emit(m, std::move(ev));
  jobs_[job.id()] = job;
  Index(job, true, job.revision());
  return job;
}

StatusOr<v1::Job> JobTable::Update(const v1::Job& requested, const std::string& source, Mutation* m) {
  auto it = jobs_.find(requested.id());
  if (it == jobs_.end()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job.id", requested.id()));
    return NotFound("job " + requested.id() + " does not exist");
  }
  CLUSTERD_RETURN_IF_ERROR(CheckSource(it->second, source, "change"));
  v1::Job job = requested;
  job.clear_impacts();
  // Output only: the progress monitor's, kept across a client's update.
  if (it->second.has_progress()) {
    *job.mutable_progress() = it->second.progress();
  } else {
    job.clear_progress();
  }
  job.set_source(it->second.source());
  if (job.kind() == v1::JOB_KIND_UNSPECIFIED) job.set_kind(it->second.kind());
  if (job.kind() != it->second.kind()) return InvalidArgument("job.kind: cannot change");
  if (job.state() == v1::JOB_STATE_UNSPECIFIED) job.set_state(it->second.state());
  CLUSTERD_RETURN_IF_ERROR(Refused(ValidateJob(job, limits_->max_job_ranks)));
  *job.mutable_create_time() = it->second.create_time();
  *job.mutable_update_time() = ToTimestamp(journal_->Now());
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_UPDATED);
  ev.set_revision(journal_->Next());
  job.set_revision(ev.revision());
  ev.add_job_ids(job.id());
  *ev.mutable_job() = job;
  m->changes.Put(Cf::kJobs, storage::JobKey(job.id()), job);
  journal_->Emit(m, std::move(ev));
  Index(it->second, false, job.revision());
  it->second = job;
  Index(job, true, job.revision());
  return job;
}

StatusOr<uint64_t> JobTable::Delete(const std::string& id, const std::string& source, Mutation* m) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("id", id));
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  // The API may remove any job (an operator cleaning up after an
  // integration); an integration only its own.
  if (source != kApiSource) CLUSTERD_RETURN_IF_ERROR(CheckSource(it->second, source, "delete"));
  v1::Event ev;
  ev.set_type(v1::EVENT_TYPE_JOB_DELETED);
  ev.set_revision(journal_->Next());
  ev.add_job_ids(id);
  *ev.mutable_job() = it->second;
  m->changes.Delete(Cf::kJobs, storage::JobKey(id));
  const uint64_t rev = ev.revision();
  journal_->Emit(m, std::move(ev));
  Index(it->second, false, rev);
  jobs_.erase(it);
  return rev;
}

Status JobTable::SetState(const std::string& id, v1::JobState state, const std::string& reason, Mutation* m) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  if (it->second.state() == state) return Status::Ok();
  it->second.set_state(state);
  *it->second.mutable_update_time() = ToTimestamp(journal_->Now());
  Changed(it->second, v1::EVENT_TYPE_JOB_UPDATED, reason, m);
  return Status::Ok();
}

Status JobTable::SetProgress(const std::string& id, const v1::JobProgress& progress, const std::string& reason,
                             Mutation* m) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("job " + id + " does not exist");
  *it->second.mutable_progress() = progress;
  Changed(it->second, v1::EVENT_TYPE_JOB_PROGRESS, reason, m);
  return Status::Ok();
}

void JobTable::Changed(v1::Job& job, v1::EventType type, const std::string& reason, Mutation* m) {
  v1::Event ev;
  ev.set_type(type);
  ev.set_revision(journal_->Next());
  job.set_revision(ev.revision());
  ev.add_job_ids(job.id());
  ev.set_actor("clusterd");
  ev.set_reason(reason);
  // JOB_PROGRESS carries the progress alone: a job's placement (up to MiBs)
  // is not written into the log every snapshot.
  if (type == v1::EVENT_TYPE_JOB_PROGRESS) {
    *ev.mutable_progress() = job.progress();
  } else {
    *ev.mutable_job() = job;
  }
  m->changes.Put(Cf::kJobs, storage::JobKey(job.id()), job);
  journal_->Emit(m, std::move(ev));
}

}  // namespace clusterd
