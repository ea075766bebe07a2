#include "clusterd/mindcluster/grpc/trace_service.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <utility>

#include "clusterd/k8s/discovery.h"
#include "clusterd/edge/stream_writer.h"
#include "clusterd/storage/schema.h"
#include "common/logging.h"
#include "common/rate_limit.h"
#include "common/validation.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

std::string MethodPath(std::string_view name) { return "/TrainingDataTrace/" + std::string(name); }

// The switches' records in the meta column family, written through the
// engine (durable, in submission order, replicated with the rest).
class EngineDataTraceStore final : public mc::DataTraceStore {
 public:
  EngineDataTraceStore(Engine* engine, const storage::Store* store) : engine_(engine), store_(store) {}

  StatusOr<std::vector<storage::v1::DataTraceRecord>> LoadAll() const override {
    std::vector<storage::v1::DataTraceRecord> out;
    Status bad;
    CLUSTERD_RETURN_IF_ERROR(store_->ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
      if (!key.starts_with(storage::kMetaDataTracePrefix)) return;
      storage::v1::DataTraceRecord r;
      if (!r.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        bad = DataLoss("profiling switch record " + std::string(key) + " does not parse");
        return;
      }
      out.push_back(std::move(r));
    }));
    if (!bad.ok()) return bad;
    return out;
  }

  void Write(storage::v1::DataTraceRecord put, std::vector<std::string> erase,
             std::function<void(Status)> done) override {
    Status submitted = engine_->SubmitWrite(
        [put = std::move(put), erase = std::move(erase), done](ClusterState&, Mutation* m) -> Engine::Done {
          for (const auto& k : erase) m->changes.Delete(storage::Cf::kMeta, Key(k));
          m->changes.Put(storage::Cf::kMeta, Key(put.job_ns_name()), put);
          return [done] { done(Status::Ok()); };
        });
    if (!submitted.ok()) done(submitted);
  }

 private:
  static std::string Key(const std::string& job_ns_name) {
    return std::string(storage::kMetaDataTracePrefix) + job_ns_name;
  }
  Engine* const engine_;
  const storage::Store* const store_;
};

// The jobs by their Kubernetes namespace and name (the labels discovery sets).
class StateDataTraceJobs final : public mc::DataTraceJobs {
 public:
  explicit StateDataTraceJobs(const ClusterState* state) : state_(state) {}

  std::optional<std::string> IdOf(const mc::JobNsName& job) const override {
    return state_->Read([&](const StateView& s) -> std::optional<std::string> {
      for (const auto& [id, j] : s.jobs()) {
        if (Label(j, k8s::kLabelNamespace) == job.ns && Label(j, k8s::kLabelName) == job.name) return id;
      }
      return std::nullopt;
    });
  }
  std::optional<std::string> NsNameOf(const std::string& id) const override {
    return state_->Read([&](const StateView& s) -> std::optional<std::string> {
      auto it = s.jobs().find(id);
      if (it == s.jobs().end()) return std::nullopt;
      return NsName(it->second);
    });
  }
  std::map<std::string, std::string> Index() const override {
    return state_->Read([&](const StateView& s) {
      std::map<std::string, std::string> out;
      for (const auto& [id, j] : s.jobs()) {
        std::string key = NsName(j);
        if (!key.empty()) out.emplace(std::move(key), id);  // the least id wins, as IdOf
      }
      return out;
    });
  }

 private:
  static std::string Label(const v1::Job& j, std::string_view key) {
    auto it = j.labels().find(std::string(key));
    return it == j.labels().end() ? std::string() : it->second;
  }
  static std::string NsName(const v1::Job& j) {
    std::string ns = Label(j, k8s::kLabelNamespace), name = Label(j, k8s::kLabelName);
    return ns.empty() || name.empty() ? std::string() : ns + "/" + name;
  }
  const ClusterState* const state_;
};

// A principal that may act only as a job's agent (no viewer, operator or
// admin role): confined to its own job.
bool JobScoped(const Principal& p) {
  constexpr RoleMask kWide = RoleBit(Role::kViewer) | RoleBit(Role::kOperator) | RoleBit(Role::kAdmin);
  return p.kind == Principal::Kind::kAuthenticated && (p.roles & kWide) == 0;
}

::DataStatusRes SwitchMessage(const ::ProfilingSwitch& s) {
  ::DataStatusRes msg;
  msg.set_message("update profiling switch");
  *msg.mutable_profilingswitch() = s;
  msg.set_code(mc::kDataTraceOk);
  return msg;
}

class TraceStream;

}  // namespace

struct TrainingDataTraceService::Core {
  Core(const ClusterState* state, Engine* engine, const storage::Store* store, const Authenticator* a,
       const Clock* clock, TrainingDataTraceOptions o, MetricsRegistry* metrics)
      : auth(a),
        options(o),
        store_impl(engine, store),
        jobs(state),
        switches(&store_impl, &jobs, clock, o.limits, metrics),
        rate(o.call_rate) {
    if (metrics != nullptr) {
      refused_rate = &metrics->AddCounter("clusterd_mindcluster_datatrace_refused_total",
                                          "TrainingDataTrace calls refused at a limit.", {{"limit", "rate"}});
    }
  }

  // Authorization and the rate: the principal, or the refusal.
  StatusOr<Principal> Admit(grpc::CallbackServerContext* ctx, std::string_view method) {
    auto who = auth->Authorize(*ctx, MethodPath(method));
    if (!who.ok()) return who.status();
    if (!rate.Take()) {
      if (refused_rate != nullptr) refused_rate->Inc();
      return ResourceExhausted("TrainingDataTrace calls are limited to " +
                               std::to_string(static_cast<long>(options.call_rate)) + " per second (limit rate)");
    }
    return who;
  }

  const Authenticator* auth;
  TrainingDataTraceOptions options;
  EngineDataTraceStore store_impl;
  StateDataTraceJobs jobs;
  mc::DataTraceSwitches switches;
  RateLimit rate;
  Counter* refused_rate = nullptr;
};

namespace {

// One subscription: the newest switch not yet written replaces an older
// one still queued (only the newest matters), one write in flight.
class TraceStream final : public grpc::ServerWriteReactor<::DataStatusRes> {
 public:
  explicit TraceStream(std::shared_ptr<TrainingDataTraceService::Core> core) : core_(std::move(core)) {}

  void Begin(std::shared_ptr<TraceStream> self) { self_ = std::move(self); }
  void Push(::DataStatusRes msg) {
    std::lock_guard lock(mu_);
    out_.queue().clear();
    out_.Push(std::move(msg));
  }
  void End(grpc::Status status) {
    std::lock_guard lock(mu_);
    out_.Finish(std::move(status));
  }
  // The subscription to end with the stream (at once if it already ended).
  void SetHandle(uint64_t handle) {
    {
      std::lock_guard lock(mu_);
      if (!done_) {
        handle_ = handle;
        return;
      }
    }
    core_->switches.Unsubscribe(handle);
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      out_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the subscriber failed"));
      return;
    }
    out_.Next();
  }
  void OnCancel() override { End(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")); }
  void OnDone() override {
    uint64_t handle = 0;
    {
      std::lock_guard lock(mu_);
      done_ = true;
      handle = handle_;
    }
    if (handle != 0) core_->switches.Unsubscribe(handle);
    self_.reset();  // may delete this
  }

 private:
  std::shared_ptr<TrainingDataTraceService::Core> core_;
  std::shared_ptr<TraceStream> self_;  // owned by gRPC until OnDone
  std::mutex mu_;
  uint64_t handle_ = 0;
  bool done_ = false;
  StreamWriter<TraceStream, ::DataStatusRes> out_{this};
};

// What the switches give a subscription (under their mutex: only queues).
class StreamSubscriber final : public mc::DataTraceSubscriber {
 public:
  explicit StreamSubscriber(std::weak_ptr<TraceStream> stream) : stream_(std::move(stream)) {}
  void Switch(const ::ProfilingSwitch& s) override {
    if (auto stream = stream_.lock()) stream->Push(SwitchMessage(s));
  }

 private:
  std::weak_ptr<TraceStream> stream_;
};

}  // namespace

StatusOr<std::unique_ptr<TrainingDataTraceService>> TrainingDataTraceService::Make(
    const ClusterState* state, Engine* engine, const storage::Store* store, const Authenticator* auth,
    const Clock* clock, TrainingDataTraceOptions options, MetricsRegistry* metrics) {
  auto core = std::make_shared<Core>(state, engine, store, auth, clock, options, metrics);
  CLUSTERD_RETURN_IF_ERROR(core->switches.Load());
  GetLogger("mindcluster")->info("profiling switches (TrainingDataTrace) kept for {} jobs", core->switches.job_count());
  return std::unique_ptr<TrainingDataTraceService>(new TrainingDataTraceService(std::move(core)));
}

TrainingDataTraceService::TrainingDataTraceService(std::shared_ptr<Core> core) : core_(std::move(core)) {}

TrainingDataTraceService::~TrainingDataTraceService() = default;

size_t TrainingDataTraceService::subscriber_count() const { return core_->switches.subscriber_count(); }

grpc::ServerUnaryReactor* TrainingDataTraceService::ModifyTrainingDataTraceSwitch(grpc::CallbackServerContext* ctx,
                                                                                  const ::DataTypeReq* req,
                                                                                  ::DataTypeRes* resp) {
  auto who = core_->Admit(ctx, "ModifyTrainingDataTraceSwitch");
  if (!who.ok()) return FinishUnary(ctx, who.status());
  const std::string actor = who->name.empty() ? who->peer : who->name;
  auto* reactor = ctx->DefaultReactor();
  const std::string& job = req->jobnsname();
  core_->switches.Modify(job, req->has_profilingswitch() ? &req->profilingswitch() : nullptr, actor,
                         [reactor, resp, job, actor](const Status& st) {
                           if (!st.ok()) {
                             reactor->Finish(ToGrpc(st));
                             return;
                           }
                           GetLogger("mindcluster")->info("profiling switch of job {} set by {}", job, actor);
                           resp->set_code(mc::kDataTraceOk);
                           resp->set_message("successfully changed profiling marker enable status");
                           reactor->Finish(grpc::Status::OK);
                         });
  return reactor;
}

grpc::ServerUnaryReactor* TrainingDataTraceService::GetTrainingDataTraceSwitch(grpc::CallbackServerContext* ctx,
                                                                               const ::DataStatusReq* req,
                                                                               ::DataStatusRes* resp) {
  const std::string method = "GetTrainingDataTraceSwitch";
  auto who = core_->Admit(ctx, method);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  if (JobScoped(*who)) {
    // A job's agent reads its own job's switches only (a malformed name or an
    // unknown job is answered 300 or 404 below, which says nothing of others).
    auto job = mc::ParseJobNsName(req->jobnsname());
    auto id = job.ok() ? core_->jobs.IdOf(*job) : std::nullopt;
    if (id && !MayAttachJob(*who, *id)) {
      return FinishUnary(ctx, core_->auth->Deny(*who, MethodPath(method),
                                                "may read only job \"" + who->job + "\"'s profiling switch"));
    }
  }
  auto got = core_->switches.Get(req->jobnsname());
  if (got.ok()) {
    resp->set_code(mc::kDataTraceOk);
    resp->set_message("the profiling switch of job " + req->jobnsname());
    *resp->mutable_profilingswitch() = *got;
  } else {
    // As the reference: the outcome is the reply's code.
    resp->set_code(got.status().code() == StatusCode::kInvalidArgument ? mc::kDataTraceInvalid
                   : got.status().code() == StatusCode::kNotFound      ? mc::kDataTraceNotFound
                                                                       : mc::kDataTraceServerError);
    resp->set_message(got.status().message());
  }
  return FinishUnary(ctx, Status::Ok());
}

grpc::ServerWriteReactor<::DataStatusRes>* TrainingDataTraceService::SubscribeDataTraceSwitch(
    grpc::CallbackServerContext* ctx, const ::ProfilingClientInfo* req) {
  const std::string method = "SubscribeDataTraceSwitch";
  auto stream = std::make_shared<TraceStream>(core_);
  stream->Begin(stream);
  auto fail = [&](const Status& st) {
    stream->End(ToGrpc(st));
    return stream.get();
  };
  auto who = core_->Admit(ctx, method);
  if (!who.ok()) return fail(who.status());
  const std::string& job = req->jobid();
  // A job's agent follows its own job only (a malformed id is refused as
  // such by Subscribe).
  if (JobScoped(*who) && !job.empty() && ValidateToken("jobId", job).ok() && !MayAttachJob(*who, job)) {
    return fail(core_->auth->Deny(*who, MethodPath(method),
                                  "may follow only job \"" + who->job + "\", not \"" + job.substr(0, 253) + "\""));
  }
  auto handle = core_->switches.Subscribe(job, std::make_shared<StreamSubscriber>(stream));
  if (!handle.ok()) return fail(handle.status());
  stream->SetHandle(*handle);
  GetLogger("mindcluster")->info("a subscriber follows the profiling switch of job {}", job);
  return stream.get();
}

}  // namespace clusterd
