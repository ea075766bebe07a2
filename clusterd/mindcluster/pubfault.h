// MindCluster public faults (PubFault.SendPublicFault; docs/mindcluster.md):
// the code table, the reference server's validation, and the plan of
// external faults a request becomes (state/public_faults.h). Pure: no gRPC,
// no state; the writer applies the plan (ClusterState::ApplyPublicFaults)
// and the adapter
// (mindcluster/grpc/pubfault_service.h) answers with a RespStatus.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clusterd/state/public_faults.h"
#include "clusterd/v1/types.pb.h"
#include "common/clock.h"
#include "common/rate_limit.h"
#include "common/status.h"
#include "mindcluster/pubfault.pb.h"

namespace clusterd {

// RespStatus codes of the reference server.
inline constexpr int32_t kPubFaultOk = 0;
inline constexpr int32_t kPubFaultInvalid = 409;
inline constexpr int32_t kPubFaultRefused = 410;  // unknown resource or rate-limited

// Public-fault code (9 characters) -> level. The default is MindCluster's
// table; a JSON file {"SubHealthFault": ["010001001", ...], ...} with
// MindCluster's level names is merged over it.
class PubFaultCodeTable {
 public:
  static PubFaultCodeTable Default();
  Status MergeFile(const std::string& path);
  Status MergeJson(std::string_view text, std::string_view origin);
  std::optional<v1::FaultLevel> Find(std::string_view code) const;
  size_t size() const { return levels_.size(); }

 private:
  std::map<std::string, v1::FaultLevel, std::less<>> levels_;
};

// MindCluster's level names ("SubHealthFault", "SeparateNPU", ...).
std::optional<v1::FaultLevel> ParseMindClusterLevel(std::string_view name);

// A verdict: kPubFaultOk, or a refusal and why.
struct PubFaultVerdict {
  int32_t code = kPubFaultOk;
  std::string info;
};

// The checks, cheapest first, so that what a request costs before it is
// refused is bounded by its size, never by what it expands to:
//
// 1. CheckPubFaultResource: the resource is allowed ({410, why} otherwise).
//    O(allowed resources).
PubFaultVerdict CheckPubFaultResource(const ::PublicFaultRequest& req, const PubFaultOptions& options);
// 2. CheckPubFaultRequest: the request-level rules (version, id, timestamp,
//    1 to 100 faults) and its size: the (fault, node, device) entries it
//    names, counted from the sizes of its repeated fields without looking
//    inside any element, at most options.max_faults (more could never be
//    applied). {409, why naming the limit and the count} otherwise.
//    O(faults + influence entries).
PubFaultVerdict CheckPubFaultRequest(const ::PublicFaultRequest& req, const PubFaultOptions& options);
// 3. PlanPublicFaults: 1 and 2, then every fault, the way the reference
//    server does. An invalid fault is dropped (listed in plan->dropped) and
//    the request fails with 409 only when none is left. O(entries), at most
//    max_faults once 2 passed.
PubFaultVerdict PlanPublicFaults(const ::PublicFaultRequest& req, const PubFaultCodeTable& table,
                                 const PubFaultOptions& options, PubFaultPlan* plan);

// Public faults from a ConfigMap (any namespace, label
// mc-consumer-publicfault=true, key PublicFault: the JSON of the same
// request SendPublicFault takes; docs/mindcluster.md). The request for
// CheckPubFaultResource, CheckPubFaultRequest and PlanPublicFaults, as a gRPC
// one; fields it does not know are ignored (as Go's encoding/json does).
// InvalidArgument for anything that is not that JSON, or past max_bytes.
inline constexpr std::string_view kPubFaultCmLabel = "mc-consumer-publicfault";
inline constexpr std::string_view kPubFaultCmKey = "PublicFault";
StatusOr<::PublicFaultRequest> ParsePublicFaultCm(std::string_view json, size_t max_bytes = 1 << 20);

// Token buckets, one per allowed resource, made at construction: a name
// outside `resources` is refused and adds nothing, so the map stays the
// configured size whatever clients send. Thread-safe.
class PubFaultRateLimiter {
 public:
  PubFaultRateLimiter(const Clock* clock, double rate_per_second, uint32_t burst,
                      const std::vector<std::string>& resources);
  // Takes a token of `resource`'s bucket; false when it has none or the
  // resource is not one of those allowed.
  bool Allow(std::string_view resource);
  size_t buckets() const { return buckets_.size(); }

 private:
  const Clock* clock_;
  std::mutex mu_;
  // Keys fixed at construction; the buckets' contents guarded by mu_.
  std::map<std::string, TokenBucket, std::less<>> buckets_;
};

}  // namespace clusterd
