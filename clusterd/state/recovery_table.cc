#include "clusterd/state/recovery_table.h"

#include <algorithm>
#include <tuple>

#include "clusterd/state/response_limits.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "common/time_proto.h"
#include "common/validation.h"

namespace clusterd {

using storage::Cf;

namespace {

// n of "<job>.<n>", 0 if the id does not end that way.
uint64_t RecoverySeqOf(const std::string& id) {
  const size_t dot = id.rfind('.');
  if (dot == std::string::npos || dot + 1 >= id.size()) return 0;
  uint64_t n = 0;
  for (size_t i = dot + 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return 0;
    n = n * 10 + static_cast<uint64_t>(id[i] - '0');
  }
  return n;
}

}  // namespace

Status RecoveryTable::Load(const storage::Store& store) {
  Status parse_error;
  CLUSTERD_RETURN_IF_ERROR(store.ForEach(Cf::kRecoveries, [&](std::string_view key, std::string_view value) {
    v1::Recovery r;
    if (!r.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      if (parse_error.ok()) parse_error = DataLoss("recovery record " + storage::HexEncode(key) + " does not parse");
      return;
    }
    uint64_t& seq = seq_[r.job_id()];
    seq = std::max(seq, RecoverySeqOf(r.id()));
    Add(std::move(r));
  }));
  return parse_error;
}

void RecoveryTable::Add(v1::Recovery r) {
  by_job_[r.job_id()].insert(r.id());
  std::string id = r.id();
  recoveries_[std::move(id)] = std::move(r);
}

std::vector<const v1::Recovery*> RecoveryTable::OfJob(const std::string& job_id) const {
  std::vector<const v1::Recovery*> out;
  auto it = by_job_.find(job_id);
  if (it == by_job_.end()) return out;
  for (const auto& id : it->second) out.push_back(&recoveries_.at(id));
  std::sort(out.begin(), out.end(),
            [](const v1::Recovery* a, const v1::Recovery* b) { return a->create_revision() < b->create_revision(); });
  return out;
}

std::string RecoveryTable::NextId(const std::string& job_id) { return job_id + "." + std::to_string(++seq_[job_id]); }

const v1::Recovery& RecoveryTable::Put(v1::Recovery r, v1::EventType type, Mutation* m) {
  v1::Event ev;
  ev.set_type(type);
  ev.set_revision(journal_->Next());
  r.set_revision(ev.revision());
  if (r.create_revision() == 0) r.set_create_revision(ev.revision());
  *r.mutable_update_time() = ToTimestamp(journal_->Now());
  if (!r.has_create_time()) *r.mutable_create_time() = r.update_time();
  ev.add_job_ids(r.job_id());
  *ev.mutable_recovery() = r;
  m->changes.Put(Cf::kRecoveries, storage::RecoveryKey(r.id()), r);
  journal_->Emit(m, std::move(ev));
  const std::string id = r.id();
  Add(std::move(r));
  return recoveries_.at(id);
}

size_t RecoveryTable::ApplyRetention(const Retention& retention, TimePoint now,
                                     const std::function<bool(const std::string&)>& job_exists, Mutation* m) {
  struct Candidate {
    TimePoint ended;
    std::string id;
  };
  std::vector<Candidate> candidates;
  for (const auto& [job_id, ids] : by_job_) {
    const v1::Recovery* newest = nullptr;
    if (job_exists(job_id)) {
      for (const auto& id : ids) {
        const v1::Recovery& r = recoveries_.at(id);
        if (!newest || r.create_revision() > newest->create_revision()) newest = &r;
      }
    }
    for (const auto& id : ids) {
      const v1::Recovery& r = recoveries_.at(id);
      const auto s = r.state();
      if (&r == newest || s == v1::RECOVERY_STATE_WAITING || s == v1::RECOVERY_STATE_RUNNING ||
          s == v1::RECOVERY_STATE_UNSPECIFIED) {
        continue;
      }
      const TimePoint created = FromTimestamp(r.create_time());
      const TimePoint ended = FromTimestamp(r.has_end_time() ? r.end_time() : r.update_time());
      if (now - created <= retention.protect || now - ended <= retention.protect) continue;
      candidates.push_back({ended, id});
    }
  }
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return std::tie(a.ended, a.id) < std::tie(b.ended, b.id); });
  const size_t excess = recoveries_.size() > retention.max_count ? recoveries_.size() - retention.max_count : 0;
  size_t removed = 0;
  for (const Candidate& c : candidates) {
    if (removed >= excess && now - c.ended <= retention.max_age) break;  // oldest first: the rest stay too
    auto it = recoveries_.find(c.id);
    m->changes.Delete(Cf::kRecoveries, storage::RecoveryKey(c.id));
    auto by_job = by_job_.find(it->second.job_id());
    by_job->second.erase(c.id);
    // seq_ keeps the job's counter, so an id is never given twice while
    // this process runs; after a restart it is rebuilt from what is stored,
    // which always includes the newest recovery of a job that exists.
    if (by_job->second.empty()) by_job_.erase(by_job);
    recoveries_.erase(it);
    ++removed;
  }
  return removed;
}

StatusOr<v1::ListRecoveriesResponse> RecoveryTable::List(const v1::ListRecoveriesRequest& req) const {
  // Newest first: the token is the create_revision of the last one returned.
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  uint64_t below = UINT64_MAX;
  if (!req.page_token().empty()) {
    auto rev = storage::DecodeU64(page->start);
    if (!rev) return InvalidArgument("page_token: not a token this server issued");
    below = *rev;
  }
  if (!req.job().empty()) CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job", req.job()));
  if (!v1::RecoveryState_IsValid(req.state())) return InvalidArgument("state: unknown value");
  std::vector<const v1::Recovery*> match;
  for (const auto& [id, r] : recoveries_) {
    if (!req.job().empty() && r.job_id() != req.job()) continue;
    if (req.state() != v1::RECOVERY_STATE_UNSPECIFIED && r.state() != req.state()) continue;
    match.push_back(&r);
  }
  std::sort(match.begin(), match.end(),
            [](const v1::Recovery* a, const v1::Recovery* b) { return a->create_revision() > b->create_revision(); });
  v1::ListRecoveriesResponse out;
  out.set_total_size(static_cast<int32_t>(match.size()));
  PageBudget budget(page->size);  // by count and by bytes (response_limits.h)
  for (const v1::Recovery* r : match) {
    if (r->create_revision() >= below) continue;
    if (!budget.Take(r->ByteSizeLong())) {
      std::string token;
      storage::AppendU64(&token, out.recoveries(out.recoveries_size() - 1).create_revision());
      out.set_next_page_token(storage::HexEncode(token));
      break;
    }
    *out.add_recoveries() = *r;
  }
  return out;
}

StatusOr<v1::Recovery> RecoveryTable::Get(const std::string& id) const {
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("id", id, 512));
  if (id.empty()) return InvalidArgument("id: required");
  auto it = recoveries_.find(id);
  if (it == recoveries_.end()) return NotFound("recovery " + id + " does not exist");
  return it->second;
}

}  // namespace clusterd
