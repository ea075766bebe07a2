#include "clusterd/mindcluster/grpc/recover_service.h"

#include <charconv>
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>

#include "clusterd/mindcluster/om.h"
#include "clusterd/mindcluster/taskd.h"
#include "clusterd/recovery/types.h"
#include "clusterd/edge/stream_writer.h"
#include "clusterd/storage/schema.h"
#include "common/config_util.h"
#include "common/executor.h"
#include "common/rate_limit.h"
#include "common/logging.h"
#include "common/monotonic_clock.h"
#include "common/validation.h"

namespace clusterd {
namespace {

namespace mc = mindcluster;

constexpr size_t kMaxJobIdLength = 253;
constexpr int kMaxFaultRanks = 131072;  // max_job_ranks
constexpr int kMaxStrategies = 32;
constexpr size_t kMaxInfoLength = 4096;

std::string MethodPath(std::string_view name) { return "/Recover/" + std::string(name); }

Status ValidJobId(const std::string& job) {
  if (job.empty()) return InvalidArgument("jobId: required");
  if (job.size() > kMaxJobIdLength) return InvalidArgument("jobId: longer than 253 characters");
  return ValidateToken("jobId", job);
}

// One TaskD subscription: signals queued by the Core (under its mutex) and
// written in order.
class SignalStream final : public grpc::ServerWriteReactor<::ProcessManageSignal> {
 public:
  SignalStream(std::shared_ptr<RecoverServiceImpl::Core> core, std::string job)
      : core_(std::move(core)), job_(std::move(job)) {}

  void Begin(std::shared_ptr<SignalStream> self) { self_ = std::move(self); }
  void Push(::ProcessManageSignal msg) {
    std::lock_guard lock(mu_);
    out_.Push(std::move(msg));
  }
  void End(grpc::Status status) {
    std::lock_guard lock(mu_);
    out_.Finish(std::move(status));
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      out_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to TaskD failed"));
      return;
    }
    out_.Next();
  }
  void OnCancel() override { End(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")); }
  void OnDone() override;

  const std::string& job() const { return job_; }

 private:
  std::shared_ptr<RecoverServiceImpl::Core> core_;
  const std::string job_;
  std::shared_ptr<SignalStream> self_;  // owned by gRPC until OnDone
  std::mutex mu_;
  StreamWriter<SignalStream, ::ProcessManageSignal> out_{this};
};

// A stream of the NIC-switch and stress-test flows (TaskD's notify streams,
// the operator's result streams): messages queued by the Core and written in
// order; a client that does not read while kMaxQueued wait is ended, so a
// stream never holds more than that.
template <typename Message>
class OmStream final : public grpc::ServerWriteReactor<Message> {
 public:
  static constexpr size_t kMaxQueued = 64;
  explicit OmStream(std::function<void()> done) : done_(std::move(done)) {}

  void Begin(std::shared_ptr<OmStream> self) { self_ = std::move(self); }
  void Push(Message msg) {
    std::lock_guard lock(mu_);
    if (out_.queue().size() >= kMaxQueued) {
      out_.Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "the client does not read: " + std::to_string(kMaxQueued) + " messages wait"));
      return;
    }
    out_.Push(std::move(msg));
  }
  void End(grpc::Status status) {
    std::lock_guard lock(mu_);
    out_.Finish(std::move(status));
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (out_.WriteDone()) return;
    if (!ok) {
      out_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    out_.Next();
  }
  void OnCancel() override { End(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled")); }
  void OnDone() override {
    // Moved out: what it holds (the Core) is let go even while the Core
    // still holds this stream (a job's notify slot), so the two never keep
    // each other alive.
    std::function<void()> done = std::move(done_);
    done_ = nullptr;
    if (done) done();
    self_.reset();  // may delete this
  }

 private:
  std::function<void()> done_;
  std::shared_ptr<OmStream> self_;  // owned by gRPC until OnDone
  std::mutex mu_;
  StreamWriter<OmStream, Message> out_{this};
};

using NicNotifyStream = OmStream<::SwitchRankList>;
using StressNotifyStream = OmStream<::StressTestRankParams>;
using NicResultStream = OmStream<::SwitchNicResponse>;
using StressResultStream = OmStream<::StressTestResponse>;

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string OmKey(const std::string& job) { return std::string(storage::kMetaOmPrefix) + job; }

}  // namespace

struct RecoverServiceImpl::Core : std::enable_shared_from_this<Core> {
  // What the coordinator sends for a job while TaskD is subscribed.
  class Sink final : public JobAgentHub::Sink {
   public:
    Sink(std::weak_ptr<Core> core, std::string job, std::weak_ptr<SignalStream> stream)
        : core_(std::move(core)), job_(std::move(job)), stream_(std::move(stream)) {}
    // The writer thread: never reads the state here (the writer holds it).
    void Send(v1::AttachResponse msg) override {
      if (!msg.has_command()) return;
      if (auto core = core_.lock()) {
        core->Post([core, job = job_, command = std::move(*msg.mutable_command())] { core->OnCommand(job, command); });
      }
    }
    void Replaced() override {
      if (auto stream = stream_.lock()) {
        stream->End(
            grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "a newer recovery agent attached for job " + job_));
      }
    }

   private:
    std::weak_ptr<Core> core_;
    std::string job_;
    std::weak_ptr<SignalStream> stream_;
  };

  struct Job {
    std::unique_ptr<mc::TaskdJob> machine;
    bool registered = false;
    std::shared_ptr<SignalStream> stream;
    // OnSubscribed ran for `stream`: until then a NIC switch's or stress
    // test's signal waits for it (it sends what the operation waits on), or
    // TaskD would get the same signal twice.
    bool resumed = false;
    uint64_t session = 0;  // in the JobAgentHub while subscribed
    std::string process_recover_status;
    mc::TaskdJobRef ref;    // its Kubernetes objects, as of Init
    std::string last_note;  // the stage last stored for the command in flight
    // Since when it has had no subscription (Init, or its stream's end), on
    // the executor's clock.
    TimePoint idle_since{};
  };

  const ClusterState* state;
  Engine* engine;
  Coordinator* coordinator;
  JobAgentHub* agents;
  const Authenticator* auth;
  RecoverServiceOptions options;
  Gauge* jobs_gauge = nullptr;
  Gauge* subscribers_gauge = nullptr;
  Gauge* om_streams_gauge = nullptr;
  Counter* om_started = nullptr;
  Counter* om_succeeded = nullptr;
  Counter* om_failed = nullptr;
  Counter* om_refused = nullptr;
  Counter* signals = nullptr;
  Counter* reports = nullptr;
  Counter* refused = nullptr;
  Counter* dropped = nullptr;
  RateLimit health_limit, call_limit;
  // Per job (the jobId named), in front of the shared buckets. Bounded:
  // emptied of jobs not in `jobs` when it holds kMaxJobLimits.
  static constexpr size_t kMaxJobLimits = 20000;
  std::mutex limits_mu;
  std::map<std::string, std::pair<std::unique_ptr<RateLimit>, std::unique_ptr<RateLimit>>> job_limits;

  mutable std::mutex mu;
  std::map<std::string, Job> jobs;
  size_t subscribers = 0;
  // The NIC switches and stress tests, by job (mindcluster/om.h): loaded
  // from the store at start, kept while ClusterD knows the job.
  struct OmJob {
    std::unique_ptr<mc::OmFlow> flow;
    std::shared_ptr<NicNotifyStream> nic_notify;              // TaskD's, one per job
    std::shared_ptr<StressNotifyStream> stress_notify;        // TaskD's, one per job
    std::vector<std::weak_ptr<NicResultStream>> nic_results;  // operators'
    std::vector<std::weak_ptr<StressResultStream>> stress_results;
  };
  std::map<std::string, OmJob> om;
  size_t om_streams = 0;
  uint64_t keepalives = 0;

  // Where the work runs (common/executor.h): options.executor, or a thread
  // of the Core's own on the monotonic clock. Posts after Stop are dropped,
  // and so are those still waiting on a caller's executor (its tasks check
  // `live`, which Stop clears).
  std::unique_ptr<ThreadExecutor> own_executor;
  Executor* executor = nullptr;
  std::atomic<bool> stopping{false};
  std::shared_ptr<std::atomic<bool>> live = std::make_shared<std::atomic<bool>>(true);
  TaskHandle keepalive_task;

  Core(const ClusterState* s, Engine* e, Coordinator* c, JobAgentHub* a, const Authenticator* au,
       RecoverServiceOptions o)
      : state(s),
        engine(e),
        coordinator(c),
        agents(a),
        auth(au),
        options(o),
        health_limit(o.health_check_rate),
        call_limit(o.call_rate) {}

  void Start() {
    executor = options.executor;
    if (executor == nullptr) {
      own_executor = std::make_unique<ThreadExecutor>(&MonotonicClock::Instance(), "taskd");
      executor = own_executor.get();
    }
    LoadOm();  // schedules the waits of the operations in flight
    // Every keep-alive interval: the idle and deleted jobs go, returned
    // scale-out ranks are checked, the subscribers get a keep-alive.
    keepalive_task = executor->Every(options.keepalive_interval, [this] {
      if (stopping.load()) return;
      Sweep();
      ScaleOutReturned();
      KeepAlive();
    });
  }
  void Stop() {
    stopping = true;
    live->store(false);
    keepalive_task.Cancel();
    if (own_executor) own_executor->Stop();
  }

  TimePoint Now() const { return executor->clock().Now(); }

  // `task` on the executor once `delay` has passed (an HCCL retry's route
  // wait, a wait MindIO bounds).
  void PostAfter(std::chrono::milliseconds delay, std::function<void()> task) {
    if (stopping.load()) return;
    executor->PostAfter(delay, [live = live, task = std::move(task)] {
      if (live->load()) task();
    });
  }

  void Post(std::function<void()> task) {
    if (stopping.load()) return;
    executor->Post([live = live, task = std::move(task)] {
      if (live->load()) task();
    });
  }

  void KeepAlive() {
    std::lock_guard lock(mu);
    ++keepalives;
    for (auto& [id, job] : jobs) {
      if (!job.stream) continue;
      ::ProcessManageSignal s;
      s.set_uuid(id + "/keep-alive/" + std::to_string(keepalives));
      s.set_jobid(id);
      s.set_signaltype("keep-alive");
      job.stream->Push(std::move(s));
    }
  }

  // The job as stored, read on the worker (never on the writer thread).
  std::optional<v1::Job> ReadJob(const std::string& id) const {
    return state->Read([&](const StateView& s) -> std::optional<v1::Job> {
      auto it = s.jobs().find(id);
      if (it == s.jobs().end()) return std::nullopt;
      return it->second;
    });
  }

  // Under mu: signals to the job's stream (none open: dropped, and the
  // command is sent again when TaskD subscribes), the ack to the writer.
  //
  // Stored before acting: where the command in flight stands (TaskdJob::Stage)
  // goes into its step (Coordinator::NoteProgress) and the signals go out
  // once that is durable, in order; a restart or a new subscription then
  // goes on from there (Resume) and never sends an answered signal again.
  void DeliverLocked(const std::string& id, Job& job, mc::TaskdOutput out) {
    std::string key, note;
    if (job.machine && job.machine->current()) {
      key = job.machine->current()->id();
      note = job.machine->Stage();
    }
    if (!out.signals.empty() || (!key.empty() && note != job.last_note)) {
      Coordinator* c = coordinator;
      std::weak_ptr<Core> weak = weak_from_this();
      engine->Submit(
          [c, key, note, id, weak, stream = job.stream, signals = std::move(out.signals),
           delay = std::chrono::milliseconds(out.delay_ms)](ClusterState& s, Mutation* m) mutable -> Engine::Done {
            if (!key.empty()) c->NoteProgress(s, key, note, m, id);
            if (signals.empty()) return {};
            return [weak, stream, id, delay, signals = std::move(signals)]() mutable {
              auto core = weak.lock();
              if (!core || !stream) return;  // no subscriber: sent again when TaskD subscribes
              auto send = [weak, stream, id, signals = std::move(signals)]() mutable {
                auto core = weak.lock();
                if (!core) return;
                for (auto& sig : signals) {
                  GetLogger("taskd")->info("job {}: signal {} ({}{}) to TaskD", id, sig.signaltype(), sig.uuid(),
                                           sig.changestrategy().empty() ? "" : ", " + sig.changestrategy());
                  stream->Push(std::move(sig));
                  if (core->signals != nullptr) core->signals->Inc();
                }
              };
              if (delay.count() > 0) {
                core->PostAfter(delay, std::move(send));
              } else {
                send();
              }
            };
          });
    }
    job.last_note = note;
    if (!out.process_recover_status.empty()) {
      job.process_recover_status = out.process_recover_status;
      GetLogger("taskd")->info("job {}: ProcessRecoverStatus {}", id, out.process_recover_status);
      if (options.objects != nullptr) options.objects->RecoverStatus(job.ref, out.process_recover_status);
    }
    if (out.reset != mc::ResetOp::kNone && options.objects != nullptr) {
      options.objects->ResetConfig(job.ref, out.reset, std::move(out.reset_ranks));
    }
    if (!out.recover_enable.empty()) {
      GetLogger("taskd")->info("job {}: process-recover-enable {}", id, out.recover_enable);
      if (options.objects != nullptr) options.objects->RecoverEnable(job.ref, out.recover_enable);
    }
    if (out.expire_after_ms > 0) {
      // A wait MindIO bounds, or the answer to a signal sent again.
      std::weak_ptr<Core> weak = weak_from_this();
      PostAfter(std::chrono::milliseconds(out.expire_after_ms), [weak, id, token = out.expire_token] {
        if (auto core = weak.lock()) core->OnExpire(id, token);
      });
    }
    if (out.ack) {
      GetLogger("taskd")->info("job {}: command {} {} ({})", id, out.ack->command_id,
                               out.ack->success ? "succeeded" : "failed", out.ack->message);
      Coordinator* c = coordinator;
      const bool clear = out.reset == mc::ResetOp::kClear || out.clear_process_faults;
      // One write: the recovery's end and the clearing of what TaskD reported
      // are seen together, so the coordinator never decides a new recovery
      // for a process fault the ended one handled.
      engine->Submit([c, ack = *out.ack, id, clear](ClusterState& s, Mutation* m) -> Engine::Done {
        c->ApplyResult(s, ack.command_id, ack.success, ack.message, m, id);
        if (clear) ClearProcessFaults(s, id, m);
        return {};
      });
    }
  }

  // The job recovered through TaskD (or TaskD exits): the process faults it
  // reported for the job are cleared (read on the writer, so a restart
  // forgets none).
  static void ClearProcessFaults(ClusterState& s, const std::string& id, Mutation* m) {
    std::vector<v1::ReportRequest> clears;
    {
      auto job = s.jobs().find(id);
      if (job == s.jobs().end()) return;
      std::set<std::string> nodes;
      for (const auto& p : job->second.placement()) nodes.insert(p.node());
      const std::string prefix = id + "/rank/";
      for (const std::string& node : nodes) {
        std::vector<const v1::Fault*> faults;
        s.AppendFaultsOnNode(node, &faults);
        for (const v1::Fault* f : faults) {
          if (f->reporter() != mc::kTaskdReporter || f->state() != v1::FAULT_STATE_ACTIVE ||
              f->external_id().rfind(prefix, 0) != 0) {
            continue;
          }
          v1::ReportRequest r;
          r.set_reporter(std::string(mc::kTaskdReporter));
          r.set_id(f->external_id());
          r.set_node(f->node());
          if (f->has_device_id()) r.set_device_id(f->device_id());
          r.set_code(f->code());
          r.set_level(f->level());
          r.set_action(v1::TRANSITION_ACTION_CLEAR);
          r.set_message("the job recovered through TaskD, or TaskD exits");
          clears.push_back(std::move(r));
        }
      }
    }
    for (const auto& r : clears) {
      if (auto st = s.ApplyReport(r, m); !st.ok()) {
        GetLogger("taskd")->warn("clearing {} of reporter taskd: {}", r.id(), st.status().ToString());
      }
    }
  }

  // The stage a command's step resumes from (mindcluster::ResumeStage).
  std::string StoredStage(const v1::Command& command) const {
    const size_t slash = command.id().rfind('/');
    if (slash == std::string::npos) return "";
    uint32_t index = 0;
    const std::string digits = command.id().substr(slash + 1);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec != std::errc() || end != digits.data() + digits.size()) return "";
    return state->Read([&](const StateView& s) -> std::string {
      auto r = s.recoveries().find(command.recovery_id());
      return r == s.recoveries().end() ? std::string() : mc::ResumeStage(r->second, index);
    });
  }

  // The faults behind a command (its recovery's triggers) by rank: their
  // codes and levels go into reset-config, an HCCL one makes a retry's.
  mc::RankFaults CommandFaults(const v1::Command& command, const v1::Job& job) const {
    std::vector<v1::Fault> faults = state->Read([&](const StateView& s) {
      std::vector<v1::Fault> out;
      auto r = s.recoveries().find(command.recovery_id());
      if (r == s.recoveries().end()) return out;
      for (const std::string& id : r->second.trigger_fault_ids()) {
        if (const v1::Fault* f = s.FindFault(id)) out.push_back(*f);
      }
      return out;
    });
    return mc::RankFaultsOf(job, faults);
  }

  // The worker: a command of the coordinator for a subscribed job. One the
  // machine does not hold (ClusterD restarted and sends the step in flight
  // again) goes on from its stored stage.
  void OnCommand(const std::string& id, const v1::Command& command) {
    auto stored = ReadJob(id);
    if (!stored) return;
    const std::string stage = StoredStage(command);
    const mc::RankFaults faults = CommandFaults(command, *stored);
    std::lock_guard lock(mu);
    auto it = jobs.find(id);
    if (it == jobs.end() || !it->second.machine) return;
    mc::TaskdJob& machine = *it->second.machine;
    // A fresh machine (ClusterD restarted, TaskD subscribed again) resumes;
    // one that is busy, or that TaskD left stopped or choosing a strategy
    // (after a PAUSE, after a failed strategy), takes it as the next command
    // (TaskdJob::OnCommand).
    const bool fresh = !machine.current() && machine.phase() == mc::TaskdJob::Phase::kIdle;
    // A NIC switch or stress test in flight gives way to the recovery.
    AbandonOmLocked(id, "a recovery of the job took over (" + command.id() + ")");
    DeliverLocked(
        id, it->second,
        fresh ? machine.Resume(command, *stored, stage, faults) : machine.OnCommand(command, *stored, faults));
  }

  // The worker: a wait an output asked for ran out (TaskdJob::Expire).
  void OnExpire(const std::string& id, const std::string& token) {
    std::lock_guard lock(mu);
    auto it = jobs.find(id);
    if (it == jobs.end() || !it->second.machine) return;
    mc::TaskdOutput out = it->second.machine->Expire(token);
    if (!out.info.empty()) GetLogger("taskd")->info("job {}: {} ({})", id, out.info, token);
    DeliverLocked(id, it->second, std::move(out));
  }

  // The worker, after a subscription attached: what the job owes an answer
  // to, from the stage stored for it (never an answered signal again).
  void OnSubscribed(const std::string& id, const SignalStream* stream, const std::vector<v1::Command>& pending) {
    auto stored = ReadJob(id);
    std::vector<std::string> stages;
    std::vector<mc::RankFaults> faults;
    stages.reserve(pending.size());
    for (const auto& c : pending) {
      stages.push_back(StoredStage(c));
      faults.push_back(stored ? CommandFaults(c, *stored) : mc::RankFaults());
    }
    std::lock_guard lock(mu);
    auto it = jobs.find(id);
    if (it == jobs.end() || it->second.stream.get() != stream) return;
    it->second.resumed = true;
    if (!stored) return;
    it->second.machine->Reset();
    if (!pending.empty()) AbandonOmLocked(id, "a recovery of the job took over (" + pending.front().id() + ")");
    for (size_t i = 0; i < pending.size(); ++i) {
      DeliverLocked(id, it->second, it->second.machine->Resume(pending[i], *stored, stages[i], faults[i]));
    }
    // A NIC switch or stress test in flight: the signal it waits on again.
    auto o = om.find(id);
    if (o != om.end() && o->second.flow && o->second.flow->busy()) {
      (void)DeliverOmLocked(id, o->second, o->second.flow->Resend(NowUnixMs()));
    }
  }

  void StreamDone(const SignalStream* stream) {
    std::lock_guard lock(mu);
    auto it = jobs.find(stream->job());
    if (it == jobs.end() || it->second.stream.get() != stream) return;
    Job& job = it->second;
    job.stream.reset();
    job.resumed = false;
    job.idle_since = Now();
    if (job.session != 0) agents->Detach(it->first, job.session);
    job.session = 0;
    // As the reference: a stream's end resets TaskD's state machine (the
    // stage stored with the step says where a new subscription goes on).
    if (job.machine) job.machine->Reset();
    --subscribers;
    if (subscribers_gauge != nullptr) subscribers_gauge->Set(static_cast<double>(subscribers));
  }

  // The per-job buckets: TaskD's calls under the job's id, an operator's
  // (NIC switch, stress test, their results) under "<id> (operators)", so
  // that neither side's calls use up the other's.
  static constexpr std::string_view kOperatorBucket = " (operators)";
  static std::string BucketJob(const std::string& key) {
    return key.ends_with(kOperatorBucket) ? key.substr(0, key.size() - kOperatorBucket.size()) : key;
  }

  bool TakeForJob(const std::string& job, bool health) {
    {
      std::lock_guard lock(limits_mu);
      auto it = job_limits.find(job);
      if (it == job_limits.end()) {
        if (job_limits.size() >= kMaxJobLimits) {
          std::set<std::string> known;
          {
            std::lock_guard jobs_lock(mu);
            for (const auto& [id, j] : jobs) known.insert(id);
          }
          std::erase_if(job_limits, [&](const auto& e) { return !known.count(BucketJob(e.first)); });
        }
        it = job_limits
                 .emplace(job, std::make_pair(std::make_unique<RateLimit>(options.per_job_health_check_rate),
                                              std::make_unique<RateLimit>(options.per_job_call_rate)))
                 .first;
      }
      // Taken under limits_mu: an entry is never erased while in use.
      return (health ? it->second.first : it->second.second)->Take();
    }
  }

  // Forgets the jobs ClusterD no longer knows, and those without a
  // subscription and a command in flight for idle_job_ttl.
  size_t Sweep() {
    std::vector<std::string> ids;
    {
      std::lock_guard lock(mu);
      ids.reserve(jobs.size() + om.size());
      for (const auto& [id, j] : jobs) ids.push_back(id);
      for (const auto& [id, o] : om) {
        if (!jobs.count(id)) ids.push_back(id);
      }
    }
    std::set<std::string> gone = state->Read([&](const StateView& s) {
      std::set<std::string> out;
      for (const auto& id : ids) {
        if (!s.jobs().count(id)) out.insert(id);
      }
      return out;
    });
    const auto now = Now();
    size_t n = 0;
    {
      std::lock_guard lock(mu);
      for (auto it = jobs.begin(); it != jobs.end();) {
        Job& j = it->second;
        const bool deleted = gone.count(it->first) > 0;
        const bool idle =
            !j.stream && !(j.machine && j.machine->current()) && now - j.idle_since >= options.idle_job_ttl;
        if (!deleted && !idle) {
          ++it;
          continue;
        }
        GetLogger("taskd")->info("job {}: forgotten by the Recover service ({})", it->first,
                                 deleted ? "ClusterD no longer knows the job" : "no subscription for the idle TTL");
        if (j.stream) {
          if (j.session != 0) agents->Detach(it->first, j.session);
          j.stream->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                     "job " + it->first + " no longer exists in ClusterD"));
          --subscribers;
        }
        it = jobs.erase(it);
        ++n;
      }
      if (jobs_gauge != nullptr) jobs_gauge->Set(static_cast<double>(jobs.size()));
      if (subscribers_gauge != nullptr) subscribers_gauge->Set(static_cast<double>(subscribers));
      // A deleted job's NIC switches and stress tests go with it.
      for (const std::string& id : gone) {
        auto o = om.find(id);
        if (o == om.end()) continue;
        const grpc::Status ended(grpc::StatusCode::FAILED_PRECONDITION, "job " + id + " no longer exists in ClusterD");
        if (o->second.nic_notify) o->second.nic_notify->End(ended);
        if (o->second.stress_notify) o->second.stress_notify->End(ended);
        for (auto& w : o->second.nic_results) {
          if (auto r = w.lock()) r->End(ended);
        }
        for (auto& w : o->second.stress_results) {
          if (auto r = w.lock()) r->End(ended);
        }
        om.erase(o);
        engine->Submit([key = OmKey(id)](ClusterState&, Mutation* m) -> Engine::Done {
          m->changes.Delete(storage::Cf::kMeta, key);
          return {};
        });
      }
    }
    if (n > 0 && dropped != nullptr) dropped->Inc(n);
    {
      std::lock_guard lock(limits_mu);
      std::lock_guard jobs_lock(mu);
      std::erase_if(job_limits, [&](const auto& e) { return !jobs.count(BucketJob(e.first)); });
    }
    return n;
  }

  // Jobs a downgrade scaled in whose isolated ranks' chips are back (no
  // active fault above PRE_SEPARATE hits them, none isolated, their nodes
  // neither isolated nor cordoned) get MindIO's upgrade.
  void ScaleOutReturned() {
    std::map<std::string, std::vector<uint32_t>> scaled;
    {
      std::lock_guard lock(mu);
      for (const auto& [id, j] : jobs) {
        if (j.stream && j.machine && j.machine->scaled_in() && !j.machine->current()) {
          scaled.emplace(id, *j.machine->scaled_in());
        }
      }
    }
    if (scaled.empty()) return;
    std::vector<std::string> back = state->Read([&](const StateView& s) {
      std::vector<std::string> out;
      const std::set<std::string> isolated = s.IsolatedNodes(), cordoned = s.CordonedNodes();
      for (const auto& [id, ranks] : scaled) {
        auto job = s.jobs().find(id);
        if (job == s.jobs().end()) continue;
        const std::set<uint32_t> wanted(ranks.begin(), ranks.end());
        bool ok = true;
        size_t found = 0;
        for (const auto& p : job->second.placement()) {
          if (!ok) break;
          if (!wanted.count(p.rank())) continue;
          ++found;
          if (isolated.count(p.node()) || cordoned.count(p.node())) ok = false;
          v1::Node node;
          std::vector<v1::Device> devices;
          if (!ok || !s.DescribeNode(p.node(), &node, &devices)) {
            ok = false;
            break;
          }
          for (const auto& d : devices) {
            if (p.has_device_id() && d.id() == p.device_id() && d.isolated()) ok = false;
          }
          std::vector<const v1::Fault*> faults;
          s.AppendFaultsOnNode(p.node(), &faults);
          for (const v1::Fault* f : faults) {
            if (f->state() != v1::FAULT_STATE_ACTIVE || f->level() <= v1::FAULT_LEVEL_PRE_SEPARATE) continue;
            if (recovery::FaultHitsRank(f->has_device_id() ? std::optional<uint32_t>(f->device_id()) : std::nullopt,
                                        p.has_device_id() ? std::optional<uint32_t>(p.device_id()) : std::nullopt,
                                        p.any_device())) {
              ok = false;
            }
          }
        }
        // Every isolated rank is still placed and back (the job was not changed meanwhile).
        if (ok && found == wanted.size()) out.push_back(id);
      }
      return out;
    });
    std::lock_guard lock(mu);
    for (const auto& id : back) {
      auto it = jobs.find(id);
      if (it == jobs.end() || !it->second.machine || !it->second.stream) continue;
      mc::TaskdOutput out = it->second.machine->ScaleOut();
      if (out.signals.empty()) continue;
      GetLogger("taskd")->info("job {}: {}", id, out.info);
      DeliverLocked(id, it->second, std::move(out));
    }
  }

  // --- NIC switch and stress test (mindcluster/om.h) ---

  // The operations kept in the store, at start; one in flight waits until
  // its stored deadline (its signal goes again when TaskD subscribes).
  void LoadOm() {
    if (options.store == nullptr) return;
    const int64_t now = NowUnixMs();
    Status st = options.store->ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
      if (!key.starts_with(storage::kMetaOmPrefix)) return;
      storage::v1::OmJobRecord r;
      if (!r.ParseFromArray(value.data(), static_cast<int>(value.size())) || r.job_id().empty()) {
        GetLogger("taskd")->error("NIC-switch / stress-test record {} does not parse: left alone", key);
        return;
      }
      const std::string id = r.job_id();
      auto flow = std::make_unique<mc::OmFlow>(std::move(r), options.om_wait.count());
      if (flow->busy()) {
        const mc::OmOutput out = flow->Resend(now);
        std::weak_ptr<Core> weak = weak_from_this();
        PostAfter(std::chrono::milliseconds(out.expire_after_ms), [weak, id, token = out.expire_token] {
          if (auto core = weak.lock()) core->OnOmExpire(id, token);
        });
        GetLogger("taskd")->info("job {}: {} resumes at {}", id, flow->record().current().id(),
                                 flow->record().current().stage());
      }
      om[id].flow = std::move(flow);
    });
    if (!st.ok()) GetLogger("taskd")->error("reading the NIC-switch / stress-test records: {}", st.ToString());
  }

  // Under mu: the job's entry, made with an empty record.
  OmJob& OmOf(const std::string& id) {
    OmJob& oj = om[id];
    if (!oj.flow) oj.flow = std::make_unique<mc::OmFlow>(storage::v1::OmJobRecord(), options.om_wait.count());
    return oj;
  }

  // Under mu: what an operation's step produced. Stored first when its
  // record changed (with the faults it raises, in the same write), then the
  // signals go to TaskD's streams and the messages to the operators'
  // (`after` runs then too). `client`: an operator's write (refused while
  // writes are refused: the Status says why and nothing was sent).
  Status DeliverOmLocked(const std::string& id, OmJob& oj, mc::OmOutput out, bool client = false,
                         Engine::Done after = {}) {
    auto it = jobs.find(id);
    std::shared_ptr<SignalStream> stream = it != jobs.end() && it->second.resumed ? it->second.stream : nullptr;
    std::vector<std::shared_ptr<NicResultStream>> nic_results;
    std::vector<std::shared_ptr<StressResultStream>> stress_results;
    for (auto& w : oj.nic_results) {
      if (auto r = w.lock()) nic_results.push_back(std::move(r));
    }
    for (auto& w : oj.stress_results) {
      if (auto r = w.lock()) stress_results.push_back(std::move(r));
    }
    if (out.finished) {
      oj.nic_results.clear();
      oj.stress_results.clear();
    }
    // reset-config-<job> while the chips are under test (the reference's
    // FaultFlushing, cleared with the result).
    if (out.reset != mc::ResetOp::kNone && options.objects != nullptr && it != jobs.end()) {
      options.objects->ResetConfig(it->second.ref, out.reset, {});
    }
    std::weak_ptr<Core> weak = weak_from_this();
    auto send = [weak, id, stream, nic = oj.nic_notify, stress = oj.stress_notify, nic_results, stress_results,
                 signals = std::move(out.signals), switch_ranks = std::move(out.switch_ranks),
                 stress_ranks = std::move(out.stress_ranks), messages = std::move(out.messages),
                 finished = out.finished]() mutable {
      auto core = weak.lock();
      if (!core) return;
      for (auto& sig : signals) {
        if (!stream) break;  // sent again when TaskD subscribes
        GetLogger("taskd")->info("job {}: signal {} ({}{}) to TaskD", id, sig.signaltype(), sig.uuid(),
                                 sig.changestrategy().empty() ? "" : ", " + sig.changestrategy());
        stream->Push(std::move(sig));
        if (core->signals != nullptr) core->signals->Inc();
      }
      if (switch_ranks && nic) nic->Push(std::move(*switch_ranks));
      if (stress_ranks && stress) stress->Push(std::move(*stress_ranks));
      for (const auto& msg : messages) {
        GetLogger("taskd")->info("job {}: to the operator: {}", id, msg);
        for (auto& r : nic_results) {
          ::SwitchNicResponse m;
          m.set_jobid(id);
          m.set_msg(msg);
          r->Push(std::move(m));
        }
        for (auto& r : stress_results) {
          ::StressTestResponse m;
          m.set_jobid(id);
          m.set_msg(msg);
          r->Push(std::move(m));
        }
      }
      if (finished) {
        for (auto& r : nic_results) r->End(grpc::Status::OK);
        for (auto& r : stress_results) r->End(grpc::Status::OK);
      }
    };
    if (out.finished) {
      const bool ok = oj.flow->record().history_size() > 0 &&
                      oj.flow->record().history(oj.flow->record().history_size() - 1).stage() == mc::kOmSucceeded;
      Counter* c = ok ? om_succeeded : om_failed;
      if (c != nullptr) c->Inc();
    }
    auto expire = [&] {
      if (out.expire_after_ms <= 0) return;
      PostAfter(std::chrono::milliseconds(out.expire_after_ms), [weak, id, token = out.expire_token] {
        if (auto core = weak.lock()) core->OnOmExpire(id, token);
      });
    };
    if (!out.changed && out.faults.empty()) {
      expire();
      send();
      if (after) after();
      return Status::Ok();
    }
    Engine::Apply apply = [key = OmKey(id), record = oj.flow->record(), faults = std::move(out.faults),
                           send = std::move(send),
                           after = std::move(after)](ClusterState& s, Mutation* m) mutable -> Engine::Done {
      m->changes.Put(storage::Cf::kMeta, key, record);
      for (const auto& f : faults) {
        if (auto st = s.ApplyReport(f, m); !st.ok()) {
          GetLogger("taskd")->warn("fault {} of reporter {}: {}", f.id(), f.reporter(), st.status().ToString());
        }
      }
      return [send = std::move(send), after = std::move(after)]() mutable {
        send();
        if (after) after();
      };
    };
    if (client) {
      CLUSTERD_RETURN_IF_ERROR(engine->SubmitWrite(std::move(apply)));
    } else if (!engine->Submit(std::move(apply))) {
      return Unavailable("clusterd is shutting down");
    }
    expire();  // only for a step that will be stored
    return Status::Ok();
  }

  // The worker: a stage's wait ran out.
  void OnOmExpire(const std::string& id, const std::string& token) {
    auto stored = ReadJob(id);
    std::lock_guard lock(mu);
    auto it = om.find(id);
    if (it == om.end() || !it->second.flow || it->second.flow->Token() != token) return;
    mc::OmOutput out = stored ? it->second.flow->Expire(token, *stored, NowUnixMs())
                              : it->second.flow->Abandon("the job no longer exists in ClusterD", NowUnixMs());
    GetLogger("taskd")->warn("job {}: {} waited for TaskD too long", id, token);
    (void)DeliverOmLocked(id, it->second, std::move(out));
  }

  // Under mu: a recovery of the job takes over from an operation in flight.
  void AbandonOmLocked(const std::string& id, const std::string& why) {
    auto it = om.find(id);
    if (it == om.end() || !it->second.flow || !it->second.flow->busy()) return;
    GetLogger("taskd")->warn("job {}: {} ends: {}", id, it->second.flow->record().current().id(), why);
    (void)DeliverOmLocked(id, it->second, it->second.flow->Abandon(why, NowUnixMs()));
  }

  // Under mu: counts a new stream of the flows if max_om_streams allows
  // (else the refusal); UncountOmStream when it ends.
  Status CountOmStreamLocked() {
    if (om_streams >= options.max_om_streams) {
      if (refused != nullptr) refused->Inc();
      return ResourceExhausted("at most " + std::to_string(options.max_om_streams) +
                               " NIC-switch and stress-test streams are open");
    }
    ++om_streams;
    if (om_streams_gauge != nullptr) om_streams_gauge->Set(static_cast<double>(om_streams));
    return Status::Ok();
  }
  void UncountOmStream() {
    std::lock_guard lock(mu);
    --om_streams;
    if (om_streams_gauge != nullptr) om_streams_gauge->Set(static_cast<double>(om_streams));
  }

  // Authorization, scope and rate: an error status, or OK. `scoped`: a
  // job's TaskD call (an authenticated caller acts for its own job only);
  // otherwise an operator's, for any job. `actor`: who, for the record.
  Status Admit(grpc::CallbackServerContext* ctx, std::string_view method, const std::string& job, bool health,
               bool scoped = true, std::string* actor = nullptr) {
    auto who = auth->Authorize(*ctx, MethodPath(method));
    if (!who.ok()) return who.status();
    if (actor != nullptr) *actor = who->actor().empty() ? std::string(PrincipalKindName(who->kind)) : who->actor();
    // An authenticated TaskD acts for its own job only; without
    // authentication a caller is confined to the job it names.
    // (A jobId that is not valid is refused with code 499 right after.)
    if (scoped && who->kind == Principal::Kind::kAuthenticated && ValidJobId(job).ok() && !MayAttachJob(*who, job)) {
      return auth->Deny(*who, MethodPath(method), "may act only for job \"" + who->job + "\", not \"" + job + "\"");
    }
    if (ValidJobId(job).ok() && !TakeForJob(scoped ? job : job + std::string(kOperatorBucket), health)) {
      if (refused != nullptr) refused->Inc();
      return ResourceExhausted(
          std::string(scoped ? "Recover calls" : "NIC-switch and stress-test calls of operators") + " for job " + job +
          " are limited to " +
          std::to_string(static_cast<long>(health ? options.per_job_health_check_rate : options.per_job_call_rate)) +
          " per second" + (health ? " (HealthCheck)" : "") +
          (scoped ? ", so that one job's TaskD leaves the others their share" : ""));
    }
    if (!(health ? health_limit : call_limit).Take()) {
      if (refused != nullptr) refused->Inc();
      return ResourceExhausted(
          "Recover calls are limited to " +
          std::to_string(static_cast<long>(health ? options.health_check_rate : options.call_rate)) + " per second" +
          (health ? " (HealthCheck)" : ""));
    }
    return Status::Ok();
  }
};

void SignalStream::OnDone() {
  core_->StreamDone(this);
  self_.reset();
}

namespace {

grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, ::Status* resp, int32_t code, std::string info) {
  resp->set_code(code);
  resp->set_info(std::move(info));
  return FinishUnary(ctx, Status::Ok());
}

Status ValidFaultRanks(const google::protobuf::RepeatedPtrField<::FaultRank>& ranks) {
  if (ranks.size() > kMaxFaultRanks) return InvalidArgument("faultRanks: more than 131072");
  for (const auto& r : ranks) {
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("faultRanks.rankId", r.rankid(), 16));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("faultRanks.faultType", r.faulttype(), 16));
  }
  return Status::Ok();
}

}  // namespace

RecoverServiceImpl::RecoverServiceImpl(const ClusterState* state, Engine* engine, Coordinator* coordinator,
                                       JobAgentHub* agents, const Authenticator* auth, RecoverServiceOptions options,
                                       MetricsRegistry* metrics)
    : core_(std::make_shared<Core>(state, engine, coordinator, agents, auth, options)) {
  if (metrics != nullptr) {
    core_->jobs_gauge = &metrics->AddGauge("clusterd_mindcluster_recover_jobs",
                                           "Jobs initialized through the Recover service (TaskD).");
    core_->subscribers_gauge = &metrics->AddGauge("clusterd_mindcluster_recover_subscribers",
                                                  "TaskD signal streams open (one per job at most).");
    core_->om_streams_gauge =
        &metrics->AddGauge("clusterd_mindcluster_recover_om_streams",
                           "NIC-switch and stress-test streams open (TaskD's notify streams, operators' results).");
    constexpr char kOmHelp[] =
        "NIC switches and stress tests: started, succeeded, failed, refused (a check or a limit).";
    core_->om_started =
        &metrics->AddCounter("clusterd_mindcluster_recover_om_operations_total", kOmHelp, {{"result", "started"}});
    core_->om_succeeded =
        &metrics->AddCounter("clusterd_mindcluster_recover_om_operations_total", kOmHelp, {{"result", "succeeded"}});
    core_->om_failed =
        &metrics->AddCounter("clusterd_mindcluster_recover_om_operations_total", kOmHelp, {{"result", "failed"}});
    core_->om_refused =
        &metrics->AddCounter("clusterd_mindcluster_recover_om_operations_total", kOmHelp, {{"result", "refused"}});
    core_->signals = &metrics->AddCounter("clusterd_mindcluster_recover_signals_total",
                                          "Recovery signals written to TaskD (keep-alives not counted).");
    core_->reports = &metrics->AddCounter("clusterd_mindcluster_recover_reports_total",
                                          "TaskD's reports (stop complete, strategies, status, process faults).");
    core_->dropped = &metrics->AddCounter(
        "clusterd_mindcluster_recover_jobs_dropped_total",
        "TaskD jobs the Recover service forgot: deleted from ClusterD, or idle (no subscription) past its TTL.");
    core_->refused = &metrics->AddCounter("clusterd_mindcluster_recover_refused_total",
                                          "Recover calls refused at a rate or size limit.");
  }
  core_->Start();
}

RecoverServiceImpl::~RecoverServiceImpl() { core_->Stop(); }

size_t RecoverServiceImpl::job_count() const {
  std::lock_guard lock(core_->mu);
  return core_->jobs.size();
}

size_t RecoverServiceImpl::SweepJobs() { return core_->Sweep(); }

std::optional<storage::v1::OmJobRecord> RecoverServiceImpl::OmRecord(const std::string& job_id) const {
  std::lock_guard lock(core_->mu);
  auto it = core_->om.find(job_id);
  if (it == core_->om.end() || !it->second.flow) return std::nullopt;
  const storage::v1::OmJobRecord& r = it->second.flow->record();
  if (!r.has_current() && r.history_size() == 0) return std::nullopt;
  return r;
}

size_t RecoverServiceImpl::subscriber_count() const {
  std::lock_guard lock(core_->mu);
  return core_->subscribers;
}

grpc::ServerUnaryReactor* RecoverServiceImpl::Init(grpc::CallbackServerContext* ctx, const ::ClientInfo* req,
                                                   ::Status* resp) {
  if (Status st = core_->Admit(ctx, "Init", req->jobid(), false); !st.ok()) return FinishUnary(ctx, st);
  if (Status st = ValidJobId(req->jobid()); !st.ok()) return Reply(ctx, resp, mc::kRecoverClientError, st.message());
  auto stored = core_->ReadJob(req->jobid());
  if (!stored) return Reply(ctx, resp, mc::kRecoverUnknownJob, "job " + req->jobid() + " is not known to ClusterD");
  mc::RecoverOptIn opt = mc::JobRecoverStrategies(*stored);
  if (opt.code != mc::kRecoverOk) return Reply(ctx, resp, opt.code, opt.info);
  bool full = false;
  {
    std::lock_guard lock(core_->mu);
    full = !core_->jobs.count(req->jobid()) && core_->jobs.size() >= core_->options.max_jobs;
  }
  if (full) core_->Sweep();  // deleted and idle jobs make room
  std::lock_guard lock(core_->mu);
  auto it = core_->jobs.find(req->jobid());
  if (it == core_->jobs.end()) {
    if (core_->jobs.size() >= core_->options.max_jobs) {
      if (core_->refused != nullptr) core_->refused->Inc();
      return Reply(ctx, resp, mc::kRecoverTooManyJobs,
                   "ClusterD serves " + std::to_string(core_->options.max_jobs) + " TaskD jobs at most");
    }
    it = core_->jobs.emplace(req->jobid(), Core::Job{}).first;
    if (core_->jobs_gauge != nullptr) core_->jobs_gauge->Set(static_cast<double>(core_->jobs.size()));
  }
  it->second.ref = mc::TaskdJobRefOf(*stored);
  if (!it->second.stream) it->second.idle_since = core_->Now();
  // Idempotent; a job whose strategies changed (an idle one) takes the new.
  auto& machine = it->second.machine;
  if (!machine || (machine->strategies() != opt.strategies && !machine->current())) {
    machine = std::make_unique<mc::TaskdJob>(req->jobid(), opt.strategies,
                                             mc::TaskdWaits::For(core_->options.mindio_wait.count()));
  }
  return Reply(ctx, resp, mc::kRecoverOk, "strategies: " + JoinCommaList(opt.strategies));
}

grpc::ServerUnaryReactor* RecoverServiceImpl::Register(grpc::CallbackServerContext* ctx, const ::ClientInfo* req,
                                                       ::Status* resp) {
  if (Status st = core_->Admit(ctx, "Register", req->jobid(), false); !st.ok()) return FinishUnary(ctx, st);
  if (Status st = ValidJobId(req->jobid()); !st.ok()) return Reply(ctx, resp, mc::kRecoverClientError, st.message());
  std::lock_guard lock(core_->mu);
  auto it = core_->jobs.find(req->jobid());
  if (it == core_->jobs.end()) return Reply(ctx, resp, mc::kRecoverInitFirst, "Init job " + req->jobid() + " first");
  it->second.registered = true;
  // As the reference: the PodGroup says process recovery is on.
  if (core_->options.objects != nullptr) core_->options.objects->RecoverEnable(it->second.ref, "on");
  return Reply(ctx, resp, mc::kRecoverOk, "registered");
}

grpc::ServerUnaryReactor* RecoverServiceImpl::HealthCheck(grpc::CallbackServerContext* ctx, const ::ClientInfo* req,
                                                          ::Status* resp) {
  if (Status st = core_->Admit(ctx, "HealthCheck", req->jobid(), true); !st.ok()) return FinishUnary(ctx, st);
  if (Status st = ValidJobId(req->jobid()); !st.ok()) return Reply(ctx, resp, mc::kRecoverClientError, st.message());
  const bool known = core_->ReadJob(req->jobid()).has_value();
  std::lock_guard lock(core_->mu);
  auto it = core_->jobs.find(req->jobid());
  if (it == core_->jobs.end() || !it->second.registered) {
    return Reply(ctx, resp, mc::kRecoverNotRegistered, "job " + req->jobid() + " is not registered");
  }
  if (!known) {
    // Deleted: the sweep forgets it; until then it is not healthy.
    return Reply(ctx, resp, mc::kRecoverNotRegistered, "job " + req->jobid() + " no longer exists in ClusterD");
  }
  return Reply(ctx, resp, mc::kRecoverOk, "ok");
}

grpc::ServerWriteReactor<::ProcessManageSignal>* RecoverServiceImpl::SubscribeProcessManageSignal(
    grpc::CallbackServerContext* ctx, const ::ClientInfo* req) {
  auto stream = std::make_shared<SignalStream>(core_, req->jobid());
  stream->Begin(stream);
  auto fail = [&](const Status& st) {
    stream->End(ToGrpc(st));
    return stream.get();
  };
  if (Status st = core_->Admit(ctx, "SubscribeProcessManageSignal", req->jobid(), false); !st.ok()) return fail(st);
  if (Status st = ValidJobId(req->jobid()); !st.ok()) return fail(st);
  const std::string& job = req->jobid();
  {
    std::lock_guard lock(core_->mu);
    auto it = core_->jobs.find(job);
    if (it == core_->jobs.end() || !it->second.registered) {
      return fail(FailedPrecondition("job " + job + " is not registered: Init and Register first (code 400)"));
    }
    if (auto older = std::move(it->second.stream)) {
      // The newer subscription wins, as in the reference (its machine starts over).
      if (it->second.session != 0) core_->agents->Detach(job, it->second.session);
      it->second.session = 0;
      older->End(grpc::Status(grpc::StatusCode::ABORTED, "TaskD subscribed again for job " + job));
      --core_->subscribers;
    }
    it->second.stream = stream;
    it->second.resumed = false;
    ++core_->subscribers;
    if (core_->subscribers_gauge != nullptr) core_->subscribers_gauge->Set(static_cast<double>(core_->subscribers));
  }
  // On the writer thread: the commands the job owes an answer to, and the
  // hub's registration before any later dispatch.
  std::weak_ptr<Core> weak = core_;
  std::weak_ptr<SignalStream> weak_stream = stream;
  const bool submitted =
      core_->engine->Submit([weak, weak_stream, job](ClusterState& state, Mutation*) -> Engine::Done {
        auto core = weak.lock();
        if (!core) return {};
        auto pending = core->coordinator->PendingCommands(state, job);
        return [weak, weak_stream, job, pending = std::move(pending)] {
          auto core = weak.lock();
          auto stream = weak_stream.lock();
          if (!core || !stream) return;
          {
            std::lock_guard lock(core->mu);
            auto it = core->jobs.find(job);
            if (it == core->jobs.end() || it->second.stream != stream) return;
            it->second.session = core->agents->Attach(job, std::make_shared<Core::Sink>(weak, job, weak_stream));
          }
          GetLogger("taskd")->info("TaskD subscribed for job {}", job);
          core->Post([core, job, raw = stream.get(), pending] { core->OnSubscribed(job, raw, pending); });
        };
      });
  if (!submitted) stream->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "clusterd is shutting down"));
  return stream.get();
}

namespace {

// The common part of TaskD's reports: admission, then validation (`valid`:
// the request's own fields), then the job's machine. `handle` runs under the
// Core's mutex.
// A report a NIC switch or stress test in flight may take instead of the
// recovery protocol (ReportStopComplete, ReportRecoverStatus): its output,
// or nullopt when it is the protocol's.
using OmHandle = std::function<std::optional<mc::OmOutput>(mc::OmFlow&, const v1::Job&)>;

template <typename Request, typename Handle>
grpc::ServerUnaryReactor* Report(RecoverServiceImpl::Core& core, grpc::CallbackServerContext* ctx,
                                 std::string_view method, const Request& req, const Status& valid, ::Status* resp,
                                 Handle handle, const OmHandle& om_handle = nullptr) {
  if (Status st = core.Admit(ctx, method, req.jobid(), false); !st.ok()) return FinishUnary(ctx, st);
  if (Status st = ValidJobId(req.jobid()); !st.ok()) return Reply(ctx, resp, mc::kRecoverClientError, st.message());
  if (!valid.ok()) return Reply(ctx, resp, mc::kRecoverClientError, valid.message());
  if (core.reports != nullptr) core.reports->Inc();
  const std::optional<v1::Job> stored = om_handle ? core.ReadJob(req.jobid()) : std::nullopt;
  std::lock_guard lock(core.mu);
  auto it = core.jobs.find(req.jobid());
  if (it == core.jobs.end() || !it->second.registered || !it->second.machine) {
    return Reply(ctx, resp, mc::kRecoverNotRegistered, "job " + req.jobid() + " is not registered");
  }
  if (auto o = core.om.find(req.jobid()); stored && o != core.om.end() && o->second.flow && o->second.flow->busy()) {
    if (auto out = om_handle(*o->second.flow, *stored)) {
      const int32_t code = out->code;
      std::string info = out->info.empty() ? "ok" : out->info;
      (void)core.DeliverOmLocked(o->first, o->second, std::move(*out));
      return Reply(ctx, resp, code, std::move(info));
    }
  }
  mc::TaskdOutput out = handle(*it->second.machine);
  const int32_t code = out.code;
  std::string info = out.info.empty() ? "ok" : out.info;
  core.DeliverLocked(it->first, it->second, std::move(out));
  return Reply(ctx, resp, code, std::move(info));
}

Status ValidStrategies(const google::protobuf::RepeatedPtrField<std::string>& strategies) {
  if (strategies.size() > kMaxStrategies) return InvalidArgument("strategies: more than 32");
  for (const auto& s : strategies) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("strategies", s));
    if (s.size() > 64) return InvalidArgument("strategies: an entry is longer than 64 characters");
  }
  return Status::Ok();
}

}  // namespace

grpc::ServerUnaryReactor* RecoverServiceImpl::ReportStopComplete(grpc::CallbackServerContext* ctx,
                                                                 const ::StopCompleteRequest* req, ::Status* resp) {
  Status valid = ValidFaultRanks(req->faultranks());
  if (valid.ok()) valid = ValidateText("status.info", req->status().info(), kMaxInfoLength);
  return Report(
      *core_, ctx, "ReportStopComplete", *req, valid, resp, [&](mc::TaskdJob& m) { return m.OnStopComplete(*req); },
      [&](mc::OmFlow& f, const v1::Job& job) -> std::optional<mc::OmOutput> {
        if (!f.TakesStopComplete()) return std::nullopt;
        return f.OnStopComplete(*req, job, NowUnixMs());
      });
}

grpc::ServerUnaryReactor* RecoverServiceImpl::ReportRecoverStrategy(grpc::CallbackServerContext* ctx,
                                                                    const ::RecoverStrategyRequest* req,
                                                                    ::Status* resp) {
  Status valid = ValidFaultRanks(req->faultranks());
  if (valid.ok()) valid = ValidStrategies(req->strategies());
  return Report(*core_, ctx, "ReportRecoverStrategy", *req, valid, resp,
                [&](mc::TaskdJob& m) { return m.OnRecoverStrategy(*req); });
}

grpc::ServerUnaryReactor* RecoverServiceImpl::ReportRecoverStatus(grpc::CallbackServerContext* ctx,
                                                                  const ::RecoverStatusRequest* req, ::Status* resp) {
  Status valid = ValidateText("status.info", req->status().info(), kMaxInfoLength);
  if (valid.ok() && req->isolaterankids_size() > kMaxFaultRanks) {
    valid = InvalidArgument("isolateRankIds: more than 131072");
  }
  if (valid.ok()) valid = ValidateLine("strategy", req->strategy(), 64);
  return Report(
      *core_, ctx, "ReportRecoverStatus", *req, valid, resp, [&](mc::TaskdJob& m) { return m.OnRecoverStatus(*req); },
      [&](mc::OmFlow& f, const v1::Job& job) -> std::optional<mc::OmOutput> {
        if (!f.TakesRecoverStatus()) return std::nullopt;
        return f.OnRecoverStatus(*req, job, NowUnixMs());
      });
}

grpc::ServerUnaryReactor* RecoverServiceImpl::ReportProcessFault(grpc::CallbackServerContext* ctx,
                                                                 const ::ProcessFaultRequest* req, ::Status* resp) {
  // The ranks become faults of the reporter "taskd" (mindcluster/taskd.h),
  // which the coordinator decides on like any other; they clear when the
  // job's recovery through TaskD succeeds. The answer comes once they are
  // durable: nothing TaskD was told is taken is lost.
  if (Status st = core_->Admit(ctx, "ReportProcessFault", req->jobid(), false); !st.ok()) return FinishUnary(ctx, st);
  Status valid = ValidJobId(req->jobid());
  if (valid.ok()) valid = ValidFaultRanks(req->faultranks());
  if (!valid.ok()) return Reply(ctx, resp, mc::kRecoverClientError, valid.message());
  if (core_->reports != nullptr) core_->reports->Inc();
  {
    std::lock_guard lock(core_->mu);
    auto it = core_->jobs.find(req->jobid());
    if (it == core_->jobs.end() || !it->second.registered) {
      return Reply(ctx, resp, mc::kRecoverNotRegistered, "job " + req->jobid() + " is not registered");
    }
  }
  auto stored = core_->ReadJob(req->jobid());
  if (!stored) return Reply(ctx, resp, mc::kRecoverUnknownJob, "job " + req->jobid() + " is not known to ClusterD");
  std::string info;
  auto reports = mc::ProcessFaultReports(*stored, req->faultranks(), &info);
  // As the reference: the pods are labelled with the kind of fault.
  if (core_->options.objects != nullptr) {
    core_->options.objects->PodFaultTypes(mc::TaskdJobRefOf(*stored), mc::PodFaultTypes(*stored, req->faultranks()));
  }
  GetLogger("taskd")->info("job {}: TaskD reports a process fault: {}", req->jobid(), info);
  resp->set_code(mc::kRecoverOk);
  resp->set_info(std::move(info));
  const ::ProcessFaultRequest request = *req;  // the call may end before it is used below
  auto* reactor = ctx->DefaultReactor();
  const bool submitted =
      core_->engine->Submit([reports = std::move(reports), reactor](ClusterState& s, Mutation* m) -> Engine::Done {
        for (const auto& r : reports) {
          if (auto st = s.ApplyReport(r, m); !st.ok()) {
            GetLogger("taskd")->warn("fault {} of reporter taskd: {}", r.id(), st.status().ToString());
          }
        }
        return [reactor] { reactor->Finish(grpc::Status::OK); };
      });
  if (!submitted) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "clusterd is shutting down"));
    return reactor;
  }
  // The answer a preExitProcess waits for: the job's recovery goes on
  // (after the faults above, in the writer's order).
  std::lock_guard lock(core_->mu);
  auto it = core_->jobs.find(request.jobid());
  if (it != core_->jobs.end() && it->second.machine) {
    core_->DeliverLocked(it->first, it->second, it->second.machine->OnProcessFault(request));
  }
  return reactor;
}

namespace {

// An operator's NIC switch or stress test: checked against the job (the
// reference's codes), refused while another operation or a recovery of the
// job is under way (411), else stored and the pause sent; the answer (code
// 0) comes once it is durable. A refusal changes nothing.
grpc::ServerUnaryReactor* StartOm(RecoverServiceImpl::Core& core, grpc::CallbackServerContext* ctx, ::Status* resp,
                                  const std::string& id, const std::string& actor,
                                  const std::function<mc::OmCheck(const v1::Job*, bool)>& check) {
  auto refuse = [&](int32_t code, std::string info) {
    if (core.om_refused != nullptr) core.om_refused->Inc();
    GetLogger("taskd")->info("job {}: NIC switch / stress test refused ({}): {}", id.substr(0, 253), code, info);
    return Reply(ctx, resp, code, std::move(info));
  };
  if (Status st = ValidJobId(id); !st.ok()) return refuse(mc::kOmParamInvalid, st.message());
  const std::optional<v1::Job> stored = core.ReadJob(id);
  bool registered = false;
  {
    std::lock_guard lock(core.mu);
    auto it = core.jobs.find(id);
    registered = it != core.jobs.end() && it->second.registered;
  }
  mc::OmCheck checked = check(stored ? &*stored : nullptr, registered);
  if (checked.code != mc::kRecoverOk) return refuse(checked.code, std::move(checked.info));
  std::lock_guard lock(core.mu);
  auto it = core.jobs.find(id);
  if (it != core.jobs.end() && it->second.machine &&
      (it->second.machine->current() || it->second.machine->phase() != mc::TaskdJob::Phase::kIdle)) {
    return refuse(mc::kOmIsRunning, "jobId=" + id + " om is running, or job recovering");
  }
  RecoverServiceImpl::Core::OmJob& oj = core.OmOf(id);
  if (oj.flow->busy()) {
    return refuse(mc::kOmIsRunning, "jobId=" + id + " om is running (" + oj.flow->record().current().id() + ")");
  }
  const storage::v1::OmJobRecord before = oj.flow->record();
  mc::OmOutput out = oj.flow->Start(std::move(checked.op), actor, NowUnixMs());
  resp->set_code(mc::kRecoverOk);
  resp->set_info(out.info);
  const std::string op_id = oj.flow->record().current().id();
  auto* reactor = ctx->DefaultReactor();
  Status st = core.DeliverOmLocked(id, oj, std::move(out), true, [reactor] { reactor->Finish(grpc::Status::OK); });
  if (!st.ok()) {
    // Not stored: as if never asked.
    oj.flow = std::make_unique<mc::OmFlow>(before, core.options.om_wait.count());
    reactor->Finish(ToGrpc(st));
    return reactor;
  }
  if (core.om_started != nullptr) core.om_started->Inc();
  GetLogger("taskd")->info("job {}: {} asked by {}", id, op_id, actor);
  return reactor;
}

// The operator's result stream: every message of the operation of `kind` in
// flight, ending (OK) with its outcome; with none in flight, the messages
// of the last one finished; FAILED_PRECONDITION when there has been none.
template <typename Message>
grpc::ServerWriteReactor<Message>* WatchOm(
    RecoverServiceImpl::Core& core, grpc::CallbackServerContext* ctx, std::string_view method, const std::string& id,
    std::string_view kind, std::vector<std::weak_ptr<OmStream<Message>>> RecoverServiceImpl::Core::OmJob::*watchers) {
  std::shared_ptr<RecoverServiceImpl::Core> keep = core.shared_from_this();
  Status st = core.Admit(ctx, method, id, false, /*scoped=*/false);
  if (st.ok()) st = ValidJobId(id);
  bool counted = false;
  std::unique_lock lock(core.mu);
  if (st.ok()) {
    st = core.CountOmStreamLocked();
    counted = st.ok();
  }
  auto stream = std::make_shared<OmStream<Message>>([keep, counted] {
    if (counted) keep->UncountOmStream();
  });
  stream->Begin(stream);
  if (!st.ok()) {
    stream->End(ToGrpc(st));
    return stream.get();
  }
  auto it = core.om.find(id);
  const storage::v1::OmOperation* op = nullptr;
  if (it != core.om.end() && it->second.flow) {
    const auto& r = it->second.flow->record();
    if (r.has_current() && r.current().kind() == kind) {
      op = &r.current();
    } else {
      for (int i = r.history_size() - 1; i >= 0 && op == nullptr; --i) {
        if (r.history(i).kind() == kind) op = &r.history(i);
      }
    }
  }
  if (op == nullptr) {
    stream->End(
        grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                     "jobId=" + id + (kind == mc::kOmNicSwitch ? " is not switching nic" : " is not stress test")));
    return stream.get();
  }
  for (const auto& msg : op->messages()) {
    Message m;
    m.set_jobid(id);
    m.set_msg(msg);
    stream->Push(std::move(m));
  }
  if (op != &it->second.flow->record().current()) {
    stream->End(grpc::Status::OK);  // finished: its outcome is the last message
  } else {
    (it->second.*watchers).push_back(stream);
  }
  return stream.get();
}

// TaskD's notify stream of `kind`: one per job (a newer one ends the older
// with ABORTED); the operation's notice again when it awaits TaskD's result.
template <typename Message>
grpc::ServerWriteReactor<Message>* NotifyOm(RecoverServiceImpl::Core& core, grpc::CallbackServerContext* ctx,
                                            std::string_view method, const std::string& id,
                                            std::shared_ptr<OmStream<Message>> RecoverServiceImpl::Core::OmJob::*slot) {
  std::shared_ptr<RecoverServiceImpl::Core> keep = core.shared_from_this();
  Status st = core.Admit(ctx, method, id, false);
  if (st.ok()) st = ValidJobId(id);
  std::lock_guard lock(core.mu);
  if (st.ok()) {
    auto j = core.jobs.find(id);
    if (j == core.jobs.end() || !j->second.registered) {
      st = FailedPrecondition("jobId=" + id + " not registed, please wait agent register (code 400)");
    }
  }
  bool counted = false;
  if (st.ok()) {
    st = core.CountOmStreamLocked();
    counted = st.ok();
  }
  auto stream = std::make_shared<OmStream<Message>>([keep, counted] {
    if (counted) keep->UncountOmStream();
  });
  stream->Begin(stream);
  if (!st.ok()) {
    stream->End(ToGrpc(st));
    return stream.get();
  }
  RecoverServiceImpl::Core::OmJob& oj = core.OmOf(id);
  if (auto older = std::move(oj.*slot)) {
    older->End(grpc::Status(grpc::StatusCode::ABORTED, "TaskD subscribed again for job " + id));
  }
  oj.*slot = stream;
  mc::OmOutput again = oj.flow->ResendNotify();
  if constexpr (std::is_same_v<Message, ::SwitchRankList>) {
    if (again.switch_ranks) stream->Push(std::move(*again.switch_ranks));
  } else {
    if (again.stress_ranks) stream->Push(std::move(*again.stress_ranks));
  }
  return stream.get();
}

// TaskD's result of the operation in flight (the reference's 400 for a job
// not registered).
template <typename Request>
grpc::ServerUnaryReactor* ReplyOm(RecoverServiceImpl::Core& core, grpc::CallbackServerContext* ctx,
                                  std::string_view method, const Request& req, const Status& valid, ::Status* resp,
                                  const std::function<mc::OmOutput(mc::OmFlow&, const v1::Job&)>& handle) {
  if (Status st = core.Admit(ctx, method, req.jobid(), false); !st.ok()) return FinishUnary(ctx, st);
  if (Status st = ValidJobId(req.jobid()); !st.ok()) return Reply(ctx, resp, mc::kRecoverClientError, st.message());
  if (!valid.ok()) return Reply(ctx, resp, mc::kRecoverClientError, valid.message());
  if (core.reports != nullptr) core.reports->Inc();
  const std::optional<v1::Job> stored = core.ReadJob(req.jobid());
  std::lock_guard lock(core.mu);
  auto it = core.jobs.find(req.jobid());
  // A result for an operation in flight is taken even before TaskD
  // registered again with a restarted ClusterD: TaskD does not send it twice.
  auto o = core.om.find(req.jobid());
  const bool in_flight = o != core.om.end() && o->second.flow && o->second.flow->busy();
  if (!stored || (!in_flight && (it == core.jobs.end() || !it->second.registered))) {
    return Reply(ctx, resp, mc::kRecoverNotRegistered, "jobId=" + req.jobid() + " not registed");
  }
  RecoverServiceImpl::Core::OmJob& oj = core.OmOf(req.jobid());
  mc::OmOutput out = handle(*oj.flow, *stored);
  const int32_t code = out.code;
  std::string info = out.info.empty() ? "ok" : out.info;
  (void)core.DeliverOmLocked(req.jobid(), oj, std::move(out));
  return Reply(ctx, resp, code, std::move(info));
}

}  // namespace

grpc::ServerUnaryReactor* RecoverServiceImpl::SwitchNicTrack(grpc::CallbackServerContext* ctx, const ::SwitchNics* req,
                                                             ::Status* resp) {
  std::string actor;
  if (Status st = core_->Admit(ctx, "SwitchNicTrack", req->jobid(), false, /*scoped=*/false, &actor); !st.ok()) {
    return FinishUnary(ctx, st);
  }
  return StartOm(*core_, ctx, resp, req->jobid(), actor,
                 [&](const v1::Job* job, bool registered) { return mc::CheckSwitchNics(*req, job, registered); });
}

grpc::ServerWriteReactor<::SwitchNicResponse>* RecoverServiceImpl::SubscribeSwitchNicSignal(
    grpc::CallbackServerContext* ctx, const ::SwitchNicRequest* req) {
  return WatchOm<::SwitchNicResponse>(*core_, ctx, "SubscribeSwitchNicSignal", req->jobid(), mc::kOmNicSwitch,
                                      &Core::OmJob::nic_results);
}

grpc::ServerWriteReactor<::SwitchRankList>* RecoverServiceImpl::SubscribeNotifySwitch(grpc::CallbackServerContext* ctx,
                                                                                      const ::ClientInfo* req) {
  return NotifyOm<::SwitchRankList>(*core_, ctx, "SubscribeNotifySwitch", req->jobid(), &Core::OmJob::nic_notify);
}

grpc::ServerUnaryReactor* RecoverServiceImpl::ReplySwitchNicResult(grpc::CallbackServerContext* ctx,
                                                                   const ::SwitchResult* req, ::Status* resp) {
  return ReplyOm(*core_, ctx, "ReplySwitchNicResult", *req, Status::Ok(), resp,
                 [&](mc::OmFlow& f, const v1::Job& job) { return f.OnSwitchResult(*req, job, NowUnixMs()); });
}

grpc::ServerUnaryReactor* RecoverServiceImpl::StressTest(grpc::CallbackServerContext* ctx, const ::StressTestParam* req,
                                                         ::Status* resp) {
  std::string actor;
  if (Status st = core_->Admit(ctx, "StressTest", req->jobid(), false, /*scoped=*/false, &actor); !st.ok()) {
    return FinishUnary(ctx, st);
  }
  return StartOm(*core_, ctx, resp, req->jobid(), actor,
                 [&](const v1::Job* job, bool registered) { return mc::CheckStressTest(*req, job, registered); });
}

grpc::ServerWriteReactor<::StressTestResponse>* RecoverServiceImpl::SubscribeStressTestResponse(
    grpc::CallbackServerContext* ctx, const ::StressTestRequest* req) {
  return WatchOm<::StressTestResponse>(*core_, ctx, "SubscribeStressTestResponse", req->jobid(), mc::kOmStressTest,
                                       &Core::OmJob::stress_results);
}

grpc::ServerWriteReactor<::StressTestRankParams>* RecoverServiceImpl::SubscribeNotifyExecStressTest(
    grpc::CallbackServerContext* ctx, const ::ClientInfo* req) {
  return NotifyOm<::StressTestRankParams>(*core_, ctx, "SubscribeNotifyExecStressTest", req->jobid(),
                                          &Core::OmJob::stress_notify);
}

grpc::ServerUnaryReactor* RecoverServiceImpl::ReplyStressTestResult(grpc::CallbackServerContext* ctx,
                                                                    const ::StressTestResult* req, ::Status* resp) {
  Status valid = Status::Ok();
  if (static_cast<size_t>(req->stressresult_size()) > mc::kOmMaxEntries) {
    valid = InvalidArgument("stressResult: more than 131072 ranks");
  }
  for (const auto& [rank, res] : req->stressresult()) {
    if (!valid.ok()) break;
    if (rank.size() > 16) valid = InvalidArgument("stressResult: a rank id is longer than 16 characters");
    if (res.rankresult_size() > 16) valid = InvalidArgument("stressResult.rankResult: more than 16 operations");
    for (const auto& [op, r] : res.rankresult()) {
      if (!valid.ok()) break;
      if (op.size() > 16) valid = InvalidArgument("stressResult.rankResult: an operation is longer than 16 characters");
      if (valid.ok()) valid = ValidateLine("stressResult.rankResult.code", r.code(), 16);
      if (valid.ok()) valid = ValidateText("stressResult.rankResult.result", r.result(), kMaxInfoLength);
    }
  }
  return ReplyOm(*core_, ctx, "ReplyStressTestResult", *req, valid, resp,
                 [&](mc::OmFlow& f, const v1::Job& job) { return f.OnStressResult(*req, job, NowUnixMs()); });
}

}  // namespace clusterd
