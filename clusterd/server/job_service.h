// gRPC adapter for JobService: writes go through the Engine (answered once
// durable), reads take ClusterState's shared lock.
#pragma once

#include <atomic>

#include "clusterd/engine/engine.h"
#include "clusterd/progress/monitor.h"
#include "clusterd/recovery/coordinator/coordinator.h"
#include "clusterd/recovery/coordinator/job_agent_hub.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/v1/job.grpc.pb.h"

namespace clusterd {

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  // `auth` derives each write's principal; it must outlive this.
  // `progress` (may be null: progress reports are refused) takes the
  // agents' ProgressReports and answers GetJob's live Job.progress.
  JobServiceImpl(const ClusterState* state, Engine* engine, Coordinator* coordinator, JobAgentHub* agents,
                 const Authenticator* auth, ProgressMonitor* progress = nullptr)
      : state_(state), engine_(engine), coordinator_(coordinator), agents_(agents), auth_(auth), progress_(progress) {}

  grpc::ServerUnaryReactor* CreateJob(grpc::CallbackServerContext* ctx, const v1::CreateJobRequest* req,
                                      v1::CreateJobResponse* resp) override;
  grpc::ServerUnaryReactor* UpdateJob(grpc::CallbackServerContext* ctx, const v1::UpdateJobRequest* req,
                                      v1::UpdateJobResponse* resp) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* req,
                                      v1::DeleteJobResponse* resp) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                   v1::GetJobResponse* resp) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override;
  grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachResponse>* Attach(grpc::CallbackServerContext* ctx) override;

  Engine* engine() { return engine_; }
  Coordinator* coordinator() { return coordinator_; }
  JobAgentHub* agents() { return agents_; }
  const Authenticator* auth() const { return auth_; }
  // An attached agent's report for `job`: the ProgressAck to answer.
  v1::AttachResponse TakeProgress(const std::string& job, const v1::ProgressReport& report);

 private:
  const ClusterState* state_;
  Engine* engine_;
  Coordinator* coordinator_;
  JobAgentHub* agents_;
  const Authenticator* auth_;
  ProgressMonitor* progress_;
};

}  // namespace clusterd
