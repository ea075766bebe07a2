// What a leader election needs of etcd (docs/ha.md): leases that end unless
// renewed, and a key created only while nobody holds it, attached to a
// lease so that it goes when the lease does. EtcdClient (etcd_client.h)
// implements it over etcd's Lease and KV services; the election's tests use
// a fake in memory.
//
// Thread contract: every method may be called from any thread concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace clusterd::ha {

class LeaseKv {
 public:
  struct Lease {
    int64_t id = 0;
    int64_t ttl_seconds = 0;  // what the store granted (etcd may grant more than asked)
  };
  // A key as the store holds it.
  struct KeyValue {
    std::string value;
    int64_t lease = 0;            // the lease it is attached to (0: none)
    int64_t create_revision = 0;  // the store's revision when it was created
  };
  // What CreateIfAbsent found: `won` when it created the key; `holder` is
  // the key as it is now (this caller's when won), absent if it is not there.
  struct Claim {
    bool won = false;
    std::optional<KeyValue> holder;
  };

  virtual ~LeaseKv() = default;

  // A new lease of at least ttl_seconds.
  virtual StatusOr<Lease> LeaseGrant(int64_t ttl_seconds) = 0;
  // One renewal: the lease's TTL from now, in seconds; 0 when it has expired
  // (or never existed).
  virtual StatusOr<int64_t> LeaseKeepAlive(int64_t id) = 0;
  // Ends the lease now, and every key attached to it.
  virtual Status LeaseRevoke(int64_t id) = 0;
  // Creates key = value attached to `lease` only if the key does not exist:
  // one atomic step (an etcd transaction), so two callers never both win.
  virtual StatusOr<Claim> CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease) = 0;
  // The key now (nullopt: absent), read from any member: it may be a moment
  // old.
  virtual StatusOr<std::optional<KeyValue>> Get(const std::string& key) = 0;
};

}  // namespace clusterd::ha
