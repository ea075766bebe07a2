// MindCluster's TrainingDataTrace service (docs/mindcluster.md,
// "TrainingDataTrace"): the adapter between its clients and the per-job
// profiling switches (mindcluster/data_trace.h). faultdiag-online sets a
// job's switches (Modify, by "namespace/name"), TaskD's manager follows them
// (Subscribe, by the job's UID), anyone allowed reads them (Get).
//
// The switches are stored in ClusterD's store (the meta column family, one
// record per job, written through the engine: durable before Modify
// answers, replicated with the rest under HA) and loaded from it at start.
//
// Threads: gRPC's callbacks and the engine's writer (a Modify's completion);
// the switches have their own mutex, each stream its own.
#pragma once

#include <memory>

#include "clusterd/engine/engine.h"
#include "clusterd/mindcluster/data_trace.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/storage/store.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "mindcluster/profiling.grpc.pb.h"

namespace clusterd {

struct TrainingDataTraceOptions {
  mindcluster::DataTraceOptions limits;
  // Calls per second, all three methods together (the reference's 1,000 of
  // its other services); beyond, RESOURCE_EXHAUSTED.
  double call_rate = 1000;
};

class TrainingDataTraceService final : public ::TrainingDataTrace::CallbackService {
 public:
  // Loads the switches kept in `store`: an error when a record does not
  // parse. Everything passed must outlive the service and every stream.
  // Metrics: those of DataTraceSwitches, and
  // clusterd_mindcluster_datatrace_refused_total{limit="rate"}.
  static StatusOr<std::unique_ptr<TrainingDataTraceService>> Make(const ClusterState* state, Engine* engine,
                                                                  const storage::Store* store,
                                                                  const Authenticator* auth, const Clock* clock,
                                                                  TrainingDataTraceOptions options,
                                                                  MetricsRegistry* metrics);
  ~TrainingDataTraceService() override;

  grpc::ServerUnaryReactor* ModifyTrainingDataTraceSwitch(grpc::CallbackServerContext* ctx, const ::DataTypeReq* req,
                                                          ::DataTypeRes* resp) override;
  grpc::ServerUnaryReactor* GetTrainingDataTraceSwitch(grpc::CallbackServerContext* ctx, const ::DataStatusReq* req,
                                                       ::DataStatusRes* resp) override;
  grpc::ServerWriteReactor<::DataStatusRes>* SubscribeDataTraceSwitch(grpc::CallbackServerContext* ctx,
                                                                      const ::ProfilingClientInfo* req) override;

  size_t subscriber_count() const;

  struct Core;

 private:
  explicit TrainingDataTraceService(std::shared_ptr<Core> core);
  std::shared_ptr<Core> core_;
};

}  // namespace clusterd
