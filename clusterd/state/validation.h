// Every check on what a client sends to change or query the state, in one
// place. A write is validated once: at the edge, on the caller's thread,
// which hands the writer a Validated<T> (only these functions make one), so
// the writer never checks it again; a plain message handed to ClusterState
// is validated there, once, instead. Each function changes nothing and
// returns a Status naming the field.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/map.h>

#include "clusterd/state/mutation.h"
#include "clusterd/v1/admin.pb.h"
#include "clusterd/v1/agent.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"
#include "common/status.h"

namespace clusterd {

inline constexpr uint32_t kMaxDeviceId = 65535;
// A job's ranks on one node, and on one device of a node (Job.ranks_per_device
// may raise the latter from 1 up to this): what one node-level or device fault
// can hit of a job, so that mapping a fault to ranks stays cheap however large
// the job.
inline constexpr uint32_t kMaxJobRanksPerNode = 1024;
inline constexpr uint32_t kMaxRanksPerDevice = 64;

Status ValidateHello(const v1::Hello& hello);
// A software chain's links (a hello's inventory, a ChainUpdate): at most 16,
// one-line bounded texts, known states; `field` names them in the error.
Status ValidateChainLinks(const std::string& field, const google::protobuf::RepeatedPtrField<v1::ChainLink>& links);
// The pods holding devices on a node (a hello's inventory, a
// PodDevicesUpdate): at most kMaxPodDevicesPods pods, sorted by namespace then
// name with each once, names as Kubernetes allows them, device ids sorted,
// each once, at most kMaxDeviceId, and at most kMaxPodDevicesIds in all.
inline constexpr size_t kMaxPodDevicesPods = 512;
inline constexpr size_t kMaxPodDevicesIds = 4096;
Status ValidatePodDevices(const std::string& field, const google::protobuf::RepeatedPtrField<v1::PodDevices>& pods);
// A node an integration registers (ClusterState::ApplyRegisterNode): its name,
// the integration's name, and the devices of `inventory` as a hello's.
Status ValidateRegisterNode(const std::string& node, const v1::Inventory& inventory, const std::string& source);
Status ValidateTransition(const v1::FaultTransition& t);
Status ValidateReport(const v1::ReportRequest& req);
Status ValidateMetrics(const v1::MetricSnapshot& snapshot);
// max_ranks: StateLimits::max_job_ranks. A job must also serialize to at most
// kMaxJobBytes (response_limits.h).
Status ValidateJob(const v1::Job& job, size_t max_ranks = StateLimits().max_job_ranks);
// AdminService's arguments (who and why are recorded in the event).
Status ValidateCordon(const std::string& node, bool cordon, const std::string& actor, const std::string& reason);
Status ValidateReleaseDevice(const std::string& node, const std::string& actor, const std::string& reason);
Status ValidateClearFault(const std::string& fault_id, const std::string& actor, const std::string& reason);
Status ValidateSetRecoveryMode(const v1::SetRecoveryModeRequest& req);

// A message that passed its Validate* function: immutable, cheap to copy
// (shared), and made only by Validate below.
template <typename T>
class Validated {
 public:
  const T& operator*() const { return *msg_; }
  const T* operator->() const { return msg_.get(); }

 private:
  template <typename U>
  friend StatusOr<Validated<U>> Validate(U msg);
  explicit Validated(std::shared_ptr<const T> msg) : msg_(std::move(msg)) {}
  std::shared_ptr<const T> msg_;
};

namespace internal {
inline Status Check(const v1::Hello& m) { return ValidateHello(m); }
inline Status Check(const v1::FaultTransition& m) { return ValidateTransition(m); }
inline Status Check(const v1::ReportRequest& m) { return ValidateReport(m); }
inline Status Check(const v1::MetricSnapshot& m) { return ValidateMetrics(m); }
inline Status Check(const v1::ChainUpdate& m) { return ValidateChainLinks("chain.links", m.links()); }
inline Status Check(const v1::PodDevicesUpdate& m) { return ValidatePodDevices("pod_devices.pods", m.pods()); }
}  // namespace internal

// Checks msg with its Validate* function and keeps it.
template <typename T>
StatusOr<Validated<T>> Validate(T msg) {
  CLUSTERD_RETURN_IF_ERROR(internal::Check(msg));
  return Validated<T>(std::make_shared<const T>(std::move(msg)));
}

// ---- query parameters ----

// A List request's page: its size (0 asks for the default 100; at most
// 1000) and the key to resume after (empty: from the start).
struct PageQuery {
  int32_t size = 0;
  std::string start;
};
StatusOr<PageQuery> ParsePage(int32_t page_size, const std::string& page_token);

// The equality-based subset of Kubernetes label selectors: comma-separated
// key=value, key==value or key!=value terms, all of which must hold. A node
// without the key matches key!=value.
class LabelSelector {
 public:
  bool Matches(const google::protobuf::Map<std::string, std::string>& labels) const;

 private:
  friend StatusOr<LabelSelector> ParseLabelSelector(const std::string& selector);
  struct Term {
    std::string key;
    std::string value;
    bool equal = true;
  };
  std::vector<Term> terms_;
};
StatusOr<LabelSelector> ParseLabelSelector(const std::string& selector);

}  // namespace clusterd
