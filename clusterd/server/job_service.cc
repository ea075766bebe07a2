#include "clusterd/server/job_service.h"

#include "clusterd/server/submit.h"

namespace clusterd {

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
  return AnswerQuery(ctx, state_, resp->mutable_job(), [req](const ClusterState& state) { return state.GetJob(req->id()); });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                                   v1::ListJobsResponse* resp) {
  return AnswerQuery(ctx, state_, resp, [req](const ClusterState& state) { return state.ListJobs(*req); });
}

}  // namespace clusterd
