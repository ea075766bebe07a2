// A small etcd v3 client over gRPC (etcd's own API: KV, Watch, Lease; protos
// in proto/etcd/, written from etcd's documented wire API). Synchronous
// calls, each with a deadline (Options::timeout): a lost etcd leader or a
// dead member never hangs a caller for longer. Several endpoints: a call
// that fails for the transport (UNAVAILABLE, DEADLINE_EXCEEDED) moves the
// client to the next member for the calls after it; callers retry, since
// only they know whether a request may be repeated.
//
// A member whose calls keep failing for the transport gets a new channel
// (at most once per timeout): gRPC 1.51 can keep a channel to a member that
// was stopped (SIGSTOP, a frozen VM) failing for good after the member is
// back, each new connection's handshake waiting out its keepalive watchdog
// (docs/ha.md, "An etcd stall").
//
// It is the election's LeaseKv (lease_kv.h): leases, and the leader key
// created only while free.
//
// Thread contract: every method may be called from any thread concurrently.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/ha/lease_kv.h"
#include "common/status.h"
#include "etcd/etcdserverpb/rpc.grpc.pb.h"

namespace clusterd::ha {

namespace epb = etcdserverpb;

// The first key after every key that starts with `prefix` (a range end).
std::string PrefixEnd(std::string prefix);

// Adds to `txn` the comparison: `key` was created at `revision` (0: the key
// does not exist). The leader key's create revision is a leader's fencing
// token (docs/ha.md).
void CompareCreateRevision(epb::TxnRequest* txn, const std::string& key, int64_t revision);

class EtcdClient final : public LeaseKv {
 public:
  struct Options {
    // "http://host:port" or "host:port" (plaintext), or "https://host:port"
    // (TLS; every endpoint then).
    std::vector<std::string> endpoints;
    std::chrono::nanoseconds timeout = std::chrono::seconds(2);
    // A member's channel is replaced after this many transport failures in a
    // row, at most once per reconnect_interval.
    int reconnect_after_failures = 3;
    std::chrono::nanoseconds reconnect_interval = std::chrono::seconds(2);
    // TLS (https endpoints): the CA the members' certificates chain to (PEM;
    // empty: the system's roots) and this client's certificate and key (PEM;
    // empty: none, for an etcd without --client-cert-auth).
    std::string ca_pem;
    std::string cert_pem;
    std::string key_pem;
  };
  explicit EtcdClient(Options options);

  StatusOr<epb::RangeResponse> Range(const epb::RangeRequest& request);
  StatusOr<epb::TxnResponse> Txn(const epb::TxnRequest& request);
  StatusOr<epb::PutResponse> Put(const epb::PutRequest& request);
  StatusOr<epb::DeleteRangeResponse> DeleteRange(const epb::DeleteRangeRequest& request);
  // Discards etcd's history before `revision` (keys and their newest values
  // stay): what lets etcd reuse the space of deleted log entries.
  Status Compact(int64_t revision);

  // LeaseKv. LeaseKeepAlive is one round trip on a stream opened for it,
  // within the deadline. CreateIfAbsent is a transaction: create revision 0
  // compared, the put on success, a read of the key otherwise.
  StatusOr<Lease> LeaseGrant(int64_t ttl_seconds) override;
  StatusOr<int64_t> LeaseKeepAlive(int64_t id) override;
  Status LeaseRevoke(int64_t id) override;
  StatusOr<Claim> CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease) override;
  // A serializable range read of the key.
  StatusOr<std::optional<KeyValue>> Get(const std::string& key) override;

  // The endpoint the next call goes to.
  std::string current_endpoint() const;
  // Channels replaced after failing calls (clusterd_ha_etcd_reconnects_total).
  uint64_t reconnects() const { return reconnects_.load(std::memory_order_relaxed); }
  std::chrono::nanoseconds timeout() const { return options_.timeout; }

 private:
  // One channel to a member and its stubs; a call holds the one it started on.
  struct Connection {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<epb::KV::Stub> kv;
    std::unique_ptr<epb::Lease::Stub> lease;
  };
  struct Member {
    std::string target;
    std::shared_ptr<const Connection> connection;    // mu_
    int failures = 0;                                // transport failures in a row (mu_)
    std::chrono::steady_clock::time_point replaced;  // when connection was made (mu_)
  };
  std::shared_ptr<const Connection> Connect(const std::string& target) const;
  // The member the next call goes to, and its connection.
  std::shared_ptr<const Connection> Pick(size_t* index);
  // Maps a gRPC status; after a transport error moves on to the next member,
  // and replaces a member's channel that keeps failing.
  Status Check(const grpc::Status& st, size_t index, const Connection* used, const char* what);
  void SetDeadline(grpc::ClientContext* ctx) const;
  // One unary call to the current member, within the deadline.
  template <typename Response, typename Call>
  StatusOr<Response> Unary(const char* what, Call call);

  Options options_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::mutex mu_;
  std::vector<Member> members_;
  std::atomic<size_t> current_{0};
  std::atomic<uint64_t> reconnects_{0};
};

}  // namespace clusterd::ha
