#include "clusterd/ha/etcd_log.h"

#include <cinttypes>
#include <cstdio>

#include "common/logging.h"

namespace clusterd::ha {

EtcdLog::EtcdLog(EtcdClient* etcd, std::string prefix, const Election* election)
    : etcd_(etcd), prefix_(std::move(prefix) + "log/"), election_(election) {}

std::string EtcdLog::Key(uint64_t index) const {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%016" PRIx64, index);
  return prefix_ + digits;
}

StatusOr<replication::LogRead> EtcdLog::ReadAfter(uint64_t after, size_t limit, bool linearizable) {
  epb::RangeRequest range;
  range.set_key(Key(after + 1));
  range.set_range_end(PrefixEnd(prefix_));
  range.set_limit(static_cast<int64_t>(limit));
  range.set_serializable(!linearizable);
  auto answer = etcd_->Range(range);
  if (!answer.ok()) return answer.status();
  replication::LogRead read;
  read.entries.reserve(answer->kvs_size());
  for (const auto& kv : answer->kvs()) read.entries.push_back(kv.value());
  read.more = answer->more();
  return read;
}

Status EtcdLog::Append(uint64_t index, const std::string& entry) {
  if (!election_->LeaseHeld()) {
    return Unavailable("the leader's etcd lease may have expired: not writing");
  }
  const int64_t fence_revision = election_->fence_revision();
  const std::string& leader_key = election_->key();
  const std::string key = Key(index);
  epb::TxnRequest txn;
  CompareCreateRevision(&txn, leader_key, fence_revision);
  auto* fresh = txn.add_compare();
  fresh->set_key(key);
  fresh->set_target(epb::Compare::VERSION);
  fresh->set_result(epb::Compare::EQUAL);
  fresh->set_version(0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(entry);
  txn.add_failure()->mutable_request_range()->set_key(leader_key);
  txn.add_failure()->mutable_request_range()->set_key(key);
  auto answer = etcd_->Txn(txn);
  if (!answer.ok()) return answer.status();
  if (answer->succeeded()) return Status::Ok();
  // Not written now: an earlier attempt wrote it, or another replica leads.
  if (answer->responses_size() == 2) {
    const auto& existing = answer->responses(1).response_range();
    if (existing.kvs_size() > 0 && existing.kvs(0).value() == entry) return Status::Ok();
    const auto& leader = answer->responses(0).response_range();
    if (leader.kvs_size() == 0 || leader.kvs(0).create_revision() != fence_revision) {
      fenced_ = true;
      return FailedPrecondition("fenced: the leader key is " +
                                (leader.kvs_size() == 0 ? std::string("free") : "held by " + leader.kvs(0).value()));
    }
  }
  fenced_ = true;
  return FailedPrecondition("log entry " + std::to_string(index) + " already holds another leader's change set");
}

Status EtcdLog::Trim(uint64_t through) {
  epb::DeleteRangeRequest del;
  del.set_key(prefix_);
  del.set_range_end(Key(through + 1));
  auto deleted = etcd_->DeleteRange(del);
  if (!deleted.ok()) return deleted.status();
  // etcd keeps every revision of the deleted entries until its history is
  // compacted; compacting up to the delete lets it reuse their space (an
  // etcd that compacts itself as well does no harm: ClusterD never reads an
  // old revision).
  if (Status st = etcd_->Compact(deleted->header().revision()); !st.ok()) {
    GetLogger("ha")->debug("compaction of etcd's history: {}", st.ToString());
  }
  return Status::Ok();
}

}  // namespace clusterd::ha
