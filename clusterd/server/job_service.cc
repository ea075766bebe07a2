#include "clusterd/server/job_service.h"

#include <memory>
#include <mutex>

#include "clusterd/edge/auth.h"
#include "clusterd/edge/stream_writer.h"
#include "clusterd/server/submit.h"
#include "common/logging.h"
#include "common/validation.h"

namespace clusterd {
namespace {

constexpr std::string_view kAttachMethod = "/clusterd.v1.JobService/Attach";

// One job recovery agent's stream. The first message names the job; ClusterD
// answers with the job (and any command the agent owes an answer to), then
// writes commands as the Coordinator dispatches them. Acks go to the writer
// thread. mu_ is recursive for the same reason as in AgentReactor (reactions
// may run inline).
class AttachReactor final : public grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachResponse>,
                            public JobAgentHub::Sink,
                            public std::enable_shared_from_this<AttachReactor> {
 public:
  explicit AttachReactor(JobServiceImpl* service) : service_(service) {}

  // `who` is the caller (or why it may not attach at all).
  void Begin(std::shared_ptr<AttachReactor> self, StatusOr<Principal> who) {
    self_ = std::move(self);
    std::lock_guard lock(mu_);
    if (!who.ok()) {
      out_.Finish(ToGrpc(who.status()));
      return;
    }
    principal_ = std::move(*who);
    StartReadLocked();
  }

  // JobAgentHub::Sink (the writer thread).
  void Send(v1::AttachResponse msg) override {
    std::lock_guard lock(mu_);
    out_.Push(std::move(msg));
  }
  void Replaced() override {
    std::lock_guard lock(mu_);
    out_.Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a newer recovery agent attached for job " + job_));
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mu_);
    reading_ = false;
    if (!ok) {
      read_closed_ = true;  // the agent closed its side: finish once answered
      MaybeCloseLocked();
      return;
    }
    if (!job_.empty() && req_.has_progress()) {
      // Taken without this stream's lock: it reads the state (whose writer
      // sends to this stream), and no read is outstanding meanwhile.
      const v1::ProgressReport report = std::move(*req_.mutable_progress());
      const std::string job = job_;
      lock.unlock();
      v1::AttachResponse answer = service_->TakeProgress(job, report);
      lock.lock();
      out_.Push(std::move(answer));
      StartReadLocked();
      return;
    }
    Status st = HandleLocked();
    if (!st.ok()) {
      GetLogger("job-agent")->warn("attach stream for job {} rejected: {}", job_.empty() ? "?" : job_, st.ToString());
      out_.Finish(ToGrpc(st));
      return;
    }
    StartReadLocked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      out_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the recovery agent failed"));
      return;
    }
    out_.Next();
    MaybeCloseLocked();
  }

  void OnCancel() override {
    std::lock_guard lock(mu_);
    out_.Finish(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
  }

  void OnDone() override {
    uint64_t session;
    {
      std::lock_guard lock(mu_);
      session = session_;
    }
    // A session set after this point is detached by SetSession (finishing).
    if (session != 0) service_->agents()->Detach(job_, session);
    self_.reset();  // the hub may still hold a reference until Detach
  }

 private:
  Status HandleLocked() {
    auto self = shared_from_this();
    if (job_.empty()) {
      if (!req_.has_hello()) return InvalidArgument("the first message of an Attach stream must be a hello");
      CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("hello.job_id", req_.hello().job_id()));
      CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.agent", req_.hello().agent(), 256));
      // A job's recovery agent attaches for its own job only.
      if (!MayAttachJob(principal_, req_.hello().job_id())) {
        return service_->auth()->Deny(
            principal_, kAttachMethod,
            "may attach only for job \"" + principal_.job + "\", not \"" + req_.hello().job_id() + "\"");
      }
      job_ = req_.hello().job_id();
      const std::string job = job_, agent = req_.hello().agent();
      JobServiceImpl* service = service_;
      ++inflight_;
      bool ok = service_->engine()->Submit([self, service, job, agent](ClusterState& state, Mutation*) -> Engine::Done {
        auto found = state.GetJob(job);
        if (!found.ok()) return [self, st = found.status()] { self->OnAttachFailed(st); };
        auto commands = service->coordinator()->PendingCommands(state, job);
        return [self, service, job, agent, found = std::move(*found), commands = std::move(commands)] {
          // On the writer thread, before any later dispatch: the hub sees
          // this agent from now on, and it first gets what it owes.
          GetLogger("job-agent")->info("recovery agent {} attached for job {}", agent.empty() ? "?" : agent, job);
          v1::AttachResponse hello;
          *hello.mutable_attached()->mutable_job() = found;
          self->Send(std::move(hello));
          for (const auto& c : commands) {
            v1::AttachResponse msg;
            *msg.mutable_command() = c;
            self->Send(std::move(msg));
          }
          self->SetSession(service->agents()->Attach(job, self));
          self->Applied();
        };
      });
      if (!ok) {
        --inflight_;
        return Unavailable("clusterd is shutting down");
      }
      return Status::Ok();
    }
    if (!req_.has_ack()) return InvalidArgument("after the hello, an Attach stream carries only acks and progress");
    const v1::CommandAck& ack = req_.ack();
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("ack.command_id", ack.command_id(), 512));
    if (ack.command_id().empty()) return InvalidArgument("ack.command_id: required");
    CLUSTERD_RETURN_IF_ERROR(ValidateText("ack.message", ack.message(), 4096));
    // Only this job's commands can be answered on this stream (checked on
    // the writer thread against the recovery the id names).
    Coordinator* coordinator = service_->coordinator();
    const std::string job = job_;
    ++inflight_;
    bool ok =
        service_->engine()->Submit([self, coordinator, ack, job](ClusterState& state, Mutation* m) -> Engine::Done {
          coordinator->ApplyResult(state, ack.command_id(), ack.success(), ack.message(), m, job);
          return [self] { self->Applied(); };
        });
    if (!ok) {
      --inflight_;
      return Unavailable("clusterd is shutting down");
    }
    return Status::Ok();
  }

  void SetSession(uint64_t session) {
    std::lock_guard lock(mu_);
    session_ = session;
    if (out_.finishing()) service_->agents()->Detach(job_, session_);
  }

  void Applied() {
    std::lock_guard lock(mu_);
    --inflight_;
    MaybeCloseLocked();
  }

  // After the agent's half-close: finish once its messages are applied and
  // everything queued for it is written.
  void MaybeCloseLocked() {
    if (read_closed_ && inflight_ == 0 && out_.idle()) out_.Finish(grpc::Status::OK);
  }

  void OnAttachFailed(const Status& st) {
    std::lock_guard lock(mu_);
    out_.Finish(ToGrpc(st));
  }

  void StartReadLocked() {
    if (out_.finishing() || reading_) return;
    reading_ = true;
    StartRead(&req_);
  }

  JobServiceImpl* service_;
  std::shared_ptr<AttachReactor> self_;
  std::recursive_mutex mu_;
  v1::AttachRequest req_;
  Principal principal_;
  StreamWriter<AttachReactor, v1::AttachResponse> out_{this};
  std::string job_;
  uint64_t session_ = 0;
  int inflight_ = 0;  // messages submitted to the engine, not yet applied
  bool read_closed_ = false;
  bool reading_ = false;
};

}  // namespace

grpc::ServerBidiReactor<v1::AttachRequest, v1::AttachResponse>* JobServiceImpl::Attach(
    grpc::CallbackServerContext* ctx) {
  auto reactor = std::make_shared<AttachReactor>(this);
  AttachReactor* raw = reactor.get();
  raw->Begin(std::move(reactor), auth_->Authorize(*ctx, kAttachMethod));
  return raw;
}

v1::AttachResponse JobServiceImpl::TakeProgress(const std::string& job, const v1::ProgressReport& report) {
  const Status st = progress_ == nullptr ? Unavailable("progress: not tracked by this server")
                                         : progress_->ReportFromJobAgent(job, report);
  v1::AttachResponse out;
  out.mutable_progress_ack()->set_accepted(st.ok());
  if (!st.ok()) out.mutable_progress_ack()->set_error(st.ToString());
  return out;
}

grpc::ServerUnaryReactor* JobServiceImpl::CreateJob(grpc::CallbackServerContext* ctx, const v1::CreateJobRequest* req,
                                                    v1::CreateJobResponse* resp) {
  // Jobs record no actor (the audit log names who changed one).
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.JobService/CreateJob", "",
                                  [req, resp](const Principal&, ClusterState& state, Mutation* m) {
                                    auto job = state.ApplyCreateJob(req->job(), m);
                                    if (!job.ok()) return job.status();
                                    *resp->mutable_job() = std::move(*job);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* JobServiceImpl::UpdateJob(grpc::CallbackServerContext* ctx, const v1::UpdateJobRequest* req,
                                                    v1::UpdateJobResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.JobService/UpdateJob", "",
                                  [req, resp](const Principal&, ClusterState& state, Mutation* m) {
                                    auto job = state.ApplyUpdateJob(req->job(), m);
                                    if (!job.ok()) return job.status();
                                    *resp->mutable_job() = std::move(*job);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* ctx, const v1::DeleteJobRequest* req,
                                                    v1::DeleteJobResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.JobService/DeleteJob", "",
                                  [req, resp](const Principal&, ClusterState& state, Mutation* m) {
                                    auto rev = state.ApplyDeleteJob(req->id(), m);
                                    if (!rev.ok()) return rev.status();
                                    resp->set_revision(*rev);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* ctx, const v1::GetJobRequest* req,
                                                 v1::GetJobResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.JobService/GetJob")) return refused;
  return AnswerQuery(ctx, state_, resp->mutable_job(), [this, req](const StateView& state) {
    auto job = state.GetJob(req->id());
    // The live progress, not the last stored snapshot.
    if (job.ok() && progress_ != nullptr) {
      if (auto live = progress_->Live(req->id())) *job->mutable_progress() = std::move(*live);
    }
    return job;
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* ctx, const v1::ListJobsRequest* req,
                                                   v1::ListJobsResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.JobService/ListJobs")) return refused;
  return AnswerQuery(ctx, state_, resp, [req](const StateView& state) { return state.ListJobs(*req); });
}

}  // namespace clusterd
