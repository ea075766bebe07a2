#include "clusterd/server/job_service.h"

#include "clusterd/server/grpc_status.h"

namespace clusterd {
namespace {

// Runs `apply` on the writer; finishes the call once its change is durable.
template <typename Apply>
grpc::ServerUnaryReactor* SubmitWrite(grpc::CallbackServerContext* ctx, Engine* engine, Apply apply) {
  auto* reactor = ctx->DefaultReactor();
  bool submitted = engine->Submit([reactor, apply](ClusterState& state, Mutation* m) -> Engine::Done {
    Status st = apply(state, m);
    return [reactor, st] { reactor->Finish(ToGrpc(st)); };
  });
  if (!submitted) reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "clusterd is shutting down"));
  return reactor;
}

}  // namespace

grpc::ServerUnaryReactor* JobServiceImpl::CreateJob(grpc::CallbackServerContext* ctx, const v1::CreateJobRequest* req,
                                                    v1::CreateJobResponse* resp) {
  return SubmitWrite(ctx, engine_, [req, resp](ClusterState& state, Mutation* m) {
    auto job = state.ApplyCreateJob(req->job(), m);
    if (!job.ok()) return job.status();
    *resp->mutable_job() = std::move(*job);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::UpdateJob(grpc::CallbackServerContext* ctx, const v1::UpdateJobRequest* req,
                                                    v1::UpdateJobResponse* resp) {
  return SubmitWrite(ctx, engine_, [req, resp](ClusterState& state, Mutation* m) {
    auto job = state.ApplyUpdateJob(req->job(), m);
    if (!job.ok()) return job.status();
    *resp->mutable_job() = std::move(*job);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* req,
                                                    v1::DeleteJobResponse* resp) {
  return SubmitWrite(ctx, engine_, [req, resp](ClusterState& state, Mutation* m) {
    auto rev = state.ApplyDeleteJob(req->id(), m);
    if (!rev.ok()) return rev.status();
    resp->set_revision(*rev);
    return Status::Ok();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                 v1::GetJobResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  std::shared_lock lock(state_->mutex());
  auto job = state_->GetJob(req->id());
  if (job.ok()) *resp->mutable_job() = std::move(*job);
  reactor->Finish(ToGrpc(job.ok() ? Status::Ok() : job.status()));
  return reactor;
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                                   v1::ListJobsResponse* resp) {
  auto* reactor = ctx->DefaultReactor();
  std::shared_lock lock(state_->mutex());
  auto jobs = state_->ListJobs(*req);
  if (jobs.ok()) *resp = std::move(*jobs);
  reactor->Finish(ToGrpc(jobs.ok() ? Status::Ok() : jobs.status()));
  return reactor;
}

}  // namespace clusterd
