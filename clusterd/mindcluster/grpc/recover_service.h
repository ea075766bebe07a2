// MindCluster's Recover service for TaskD (docs/mindcluster.md, "TaskD's
// Recover service"): the adapter between TaskD's calls and ClusterD's
// recovery coordinator. TaskD inits and registers for its job (the job's UID,
// MINDX_TASK_ID: the id discovery gives an AscendJob's job) and subscribes;
// from then on it is the job's recovery agent, like a JobService.Attach
// stream (JobAgentHub): the coordinator's commands become TaskD's signals
// and TaskD's reports become the commands' acks (mindcluster/taskd.h holds
// that protocol; this file only carries it). An operator's NIC switch and
// stress test (SwitchNicTrack, StressTest) run through the same TaskD as
// stored exchanges of their own (mindcluster/om.h): TaskD's pause and
// continue reports go to them while one is in flight, its notify streams
// and Reply* calls carry the rest, the operator follows them on its result
// streams.
//
// Threads: gRPC's callbacks, the writer thread (JobAgentHub::Sink::Send),
// and the service's executor (RecoverServiceOptions::executor: a thread of
// its own by default), which reads the job (never on the writer thread,
// which holds the state), writes keep-alives and runs the timed waits. One
// mutex guards every job's protocol state.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "clusterd/engine/engine.h"
#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/recovery/coordinator/job_agent_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/storage/store.h"
#include "common/executor.h"
#include "common/metrics.h"
#include "mindcluster/recover.grpc.pb.h"

namespace clusterd {

struct RecoverServiceOptions {
  // Jobs initialized at most (the reference's 10,000); more get code 500.
  uint32_t max_jobs = 10000;
  // The keep-alive signal on every subscription stream (the reference: 5 s).
  std::chrono::milliseconds keepalive_interval{5000};
  // Unary calls per second: HealthCheck, and all the others together (the
  // reference's 10,000 and 1,000); beyond, RESOURCE_EXHAUSTED.
  double health_check_rate = 10000;
  double call_rate = 1000;
  // The same per job (the jobId a call names), taken before the shared
  // ones: one job's TaskD cannot use up another's share.
  double per_job_health_check_rate = 100;
  double per_job_call_rate = 100;
  // A job's entry (its machine, registration) goes when ClusterD no longer
  // knows the job, or after this long without a subscription and with no
  // command in flight (TaskD's Init and Register make it again).
  std::chrono::seconds idle_job_ttl{600};
  // Streams of the NIC-switch and stress-test flows (TaskD's notify streams,
  // the operators' result streams) open at most; beyond, RESOURCE_EXHAUSTED.
  uint32_t max_om_streams = 4096;
  // How long each of TaskD's answers in those flows is waited for (the
  // reference's 15 minutes): past it the operation fails (mindcluster/om.h).
  std::chrono::milliseconds om_wait{mindcluster::kOmWaitS * 1000};
  // Where the operations are kept (the meta column family, written through
  // the engine); loaded at construction. nullptr: nothing loaded.
  const storage::Store* store = nullptr;
  // MindIO's wait for ClusterD's next signal (its MINDIO_WAIT_MINDX_TIME,
  // the reference's 30 s): a signal sent again and unanswered this long
  // fails its command, and the changeStrategy after a PAUSE goes out at the
  // latest 10 s before it runs out (mindcluster::TaskdWaits).
  std::chrono::seconds mindio_wait{mindcluster::kMindioWaitS};
  // The job's Kubernetes objects (PodGroup label and annotation,
  // reset-config-<job>); nullptr: none written (no Kubernetes).
  mindcluster::TaskdObjects* objects = nullptr;
  // Where the service's own work runs (common/executor.h): reading a job
  // off the writer thread, the keep-alives and sweeps, the waits MindIO
  // bounds and the NIC-switch and stress-test expiries, all on its clock.
  // nullptr: a thread of its own on the monotonic clock. A test's
  // ManualExecutor on a FakeClock steps those waits without waiting them out;
  // it must outlive the service.
  Executor* executor = nullptr;
};

class RecoverServiceImpl final : public ::Recover::CallbackService {
 public:
  // Everything passed must outlive this and every stream. Metrics:
  // clusterd_mindcluster_recover_jobs (initialized), ..._subscribers,
  // ..._signals_total, ..._reports_total, ..._refused_total (rate limits,
  // per job and shared, and limits), ..._jobs_dropped_total (deleted or
  // idle jobs forgotten), ..._om_streams (NIC-switch and stress-test
  // streams open), ..._om_operations_total{kind,result} (started, succeeded,
  // failed, refused).
  RecoverServiceImpl(const ClusterState* state, Engine* engine, Coordinator* coordinator, JobAgentHub* agents,
                     const Authenticator* auth, RecoverServiceOptions options, MetricsRegistry* metrics);
  ~RecoverServiceImpl() override;

  grpc::ServerUnaryReactor* Init(grpc::CallbackServerContext* ctx, const ::ClientInfo* req, ::Status* resp) override;
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx, const ::ClientInfo* req,
                                     ::Status* resp) override;
  grpc::ServerUnaryReactor* HealthCheck(grpc::CallbackServerContext* ctx, const ::ClientInfo* req,
                                        ::Status* resp) override;
  grpc::ServerWriteReactor<::ProcessManageSignal>* SubscribeProcessManageSignal(grpc::CallbackServerContext* ctx,
                                                                                const ::ClientInfo* req) override;
  grpc::ServerUnaryReactor* ReportStopComplete(grpc::CallbackServerContext* ctx, const ::StopCompleteRequest* req,
                                               ::Status* resp) override;
  grpc::ServerUnaryReactor* ReportRecoverStrategy(grpc::CallbackServerContext* ctx, const ::RecoverStrategyRequest* req,
                                                  ::Status* resp) override;
  grpc::ServerUnaryReactor* ReportRecoverStatus(grpc::CallbackServerContext* ctx, const ::RecoverStatusRequest* req,
                                                ::Status* resp) override;
  grpc::ServerUnaryReactor* ReportProcessFault(grpc::CallbackServerContext* ctx, const ::ProcessFaultRequest* req,
                                               ::Status* resp) override;
  grpc::ServerUnaryReactor* SwitchNicTrack(grpc::CallbackServerContext* ctx, const ::SwitchNics* req,
                                           ::Status* resp) override;
  grpc::ServerWriteReactor<::SwitchNicResponse>* SubscribeSwitchNicSignal(grpc::CallbackServerContext* ctx,
                                                                          const ::SwitchNicRequest* req) override;
  grpc::ServerWriteReactor<::SwitchRankList>* SubscribeNotifySwitch(grpc::CallbackServerContext* ctx,
                                                                    const ::ClientInfo* req) override;
  grpc::ServerUnaryReactor* ReplySwitchNicResult(grpc::CallbackServerContext* ctx, const ::SwitchResult* req,
                                                 ::Status* resp) override;
  grpc::ServerUnaryReactor* StressTest(grpc::CallbackServerContext* ctx, const ::StressTestParam* req,
                                       ::Status* resp) override;
  grpc::ServerWriteReactor<::StressTestResponse>* SubscribeStressTestResponse(grpc::CallbackServerContext* ctx,
                                                                              const ::StressTestRequest* req) override;
  grpc::ServerWriteReactor<::StressTestRankParams>* SubscribeNotifyExecStressTest(grpc::CallbackServerContext* ctx,
                                                                                  const ::ClientInfo* req) override;
  grpc::ServerUnaryReactor* ReplyStressTestResult(grpc::CallbackServerContext* ctx, const ::StressTestResult* req,
                                                  ::Status* resp) override;

  size_t job_count() const;
  size_t subscriber_count() const;
  // The job's NIC switches and stress tests as kept (the one in flight and
  // the last finished); nullopt for a job with none (MindClusterViewService).
  std::optional<storage::v1::OmJobRecord> OmRecord(const std::string& job_id) const;
  // Forgets jobs ClusterD no longer knows and those idle past idle_job_ttl
  // (the worker does it every keep-alive interval); how many it dropped.
  size_t SweepJobs();

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace clusterd
