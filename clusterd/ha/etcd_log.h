// The replicated log kept in etcd (high availability, docs/ha.md): entry
// number i is the key <prefix>log/<i as 16 hex digits>, so keys sort by
// index and a range read returns entries in order.
//
// The leader appends each entry in one transaction fenced by its election:
// it commits only while the leader key's create revision is still the one
// this replica created when it won, and only if the entry does not exist
// yet. A replica that lost its lease cannot append, however late its
// request arrives.
//
// Thread contract: any thread (EtcdClient's); Append on the leader's writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "clusterd/ha/election.h"
#include "clusterd/ha/etcd_client.h"
#include "clusterd/ha/replication/log.h"

namespace clusterd::ha {

class EtcdLog final : public replication::LogReader, public replication::LogWriter {
 public:
  // `etcd` and `election` are borrowed and must outlive this.
  EtcdLog(EtcdClient* etcd, std::string prefix, const Election* election);

  // Serializable unless `linearizable` (a quorum read).
  StatusOr<replication::LogRead> ReadAfter(uint64_t after, size_t limit, bool linearizable) override;
  // Refused at once (UNAVAILABLE) while the election's lease is not known
  // to be held; FAILED_PRECONDITION once fenced (fenced() from then on).
  Status Append(uint64_t index, const std::string& entry) override;
  // Deletes every entry up to `through`, then compacts etcd's history up to
  // that delete so that etcd can reuse their space.
  Status Trim(uint64_t through);

  // An append found that another replica leads.
  bool fenced() const { return fenced_.load(); }
  // The key of entry `index`.
  std::string Key(uint64_t index) const;

 private:
  EtcdClient* const etcd_;
  const std::string prefix_;  // "<prefix>log/"
  const Election* const election_;
  std::atomic<bool> fenced_{false};
};

}  // namespace clusterd::ha
