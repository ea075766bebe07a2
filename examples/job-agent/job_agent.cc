// job-agent: an example recovery agent for a training or inference job.
//
// It registers the job with ClusterD (JobService.CreateJob), attaches
// (JobService.Attach), simulates training steps, and obeys the commands a
// recovery sends: pause, checkpoint, stop, retry the step, restart processes,
// resume, scale in. Each command is applied once per command id (a command
// resent after a reconnect is acknowledged again without being redone) and
// logged, one line per command, to stdout and to --log. When a recovery moved
// ranks (RESUME after a POD_RESCHEDULE) or dropped them (SCALE_IN), the agent
// reports the job's new placement with UpdateJob, as a real launcher would.
// Every --progress-ms (default 1000; 0: never) it reports each rank's step on
// the same stream (ProgressReport), so ClusterD can tell a hang or a slow
// rank (docs/recovery.md, "Progress").
//
// Flags for tests: --fail KIND answers KIND commands with failure; --ignore
// KIND never answers them (the deadline passes and the recovery escalates).
// Transport security as every client (common/grpc/credentials.h): --ca,
// --cert, --key, --token, --token-file, --server-name or CLUSTERD_CA ...; a
// job's agent authenticates as user "job:<job-id>" (docs/security.md).
//
//   job-agent --server 127.0.0.1:8899 --job train-1
//       --placement 0=worker01:0,1=worker01:1,2=worker02:0,3=worker02:1 --spares worker03:0,worker03:1
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <google/protobuf/util/time_util.h>
#include <grpcpp/grpcpp.h>

#include "clusterd/v1/job.grpc.pb.h"
#include "common/grpc/credentials.h"

namespace {

namespace v1 = clusterd::v1;
using google::protobuf::util::TimeUtil;

// Never set today; the loops check it so that a signal handler can be added.
std::atomic<bool> g_stop{false};

struct Options {
  std::string server = "127.0.0.1:8899";
  std::string job;
  v1::JobKind kind = v1::JOB_KIND_TRAINING;
  std::string placement;  // rank=node[:device],...
  std::string spares;     // node[:device],...
  std::string log_path;
  std::string hold_down = "10s";
  std::string step_timeout;  // applies to every strategy when set
  uint32_t max_retries_per_job = 0;
  std::set<std::string> fail, ignore;
  int step_ms = 500;
  int progress_ms = 1000;
  bool register_job = true;
  clusterd::ClientSecurity security;  // --ca, --cert, --key, --token, --token-file, --server-name
};

struct Slot {
  std::string node;
  std::optional<uint32_t> device;
};

bool ParseSlot(const std::string& text, Slot* out) {
  const size_t colon = text.find(':');
  out->node = text.substr(0, colon);
  if (out->node.empty()) return false;
  if (colon != std::string::npos) {
    try {
      out->device = static_cast<uint32_t>(std::stoul(text.substr(colon + 1)));
    } catch (...) {
      return false;
    }
  }
  return true;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

bool ParseDuration(const std::string& text, google::protobuf::Duration* out) {
  // Accepts "500ms", "10s", "2m".
  try {
    size_t used = 0;
    const long long n = std::stoll(text, &used);
    const std::string unit = text.substr(used);
    if (unit == "ms")
      *out = TimeUtil::MillisecondsToDuration(n);
    else if (unit == "s")
      *out = TimeUtil::SecondsToDuration(n);
    else if (unit == "m")
      *out = TimeUtil::SecondsToDuration(n * 60);
    else
      return false;
    return n >= 0;
  } catch (...) {
    return false;
  }
}

class Agent {
 public:
  Agent(Options options, std::shared_ptr<grpc::Channel> channel)
      : options_(std::move(options)), channel_(std::move(channel)), jobs_(v1::JobService::NewStub(channel_)) {
    if (!options_.log_path.empty()) log_.open(options_.log_path, std::ios::app);
    for (const auto& s : Split(options_.spares, ',')) {
      Slot slot;
      if (ParseSlot(s, &slot)) spares_.push_back(slot);
    }
  }

  int Run() {
    if (options_.register_job && !Register()) return 1;
    std::thread trainer([this] { Train(); });
    int backoff_ms = 200;
    while (!g_stop) {
      const bool attached = AttachOnce();
      if (g_stop) break;
      // A standby's refusal: the next attempt goes to the next replica
      // (round robin), at once.
      if (attached || refused_by_standby_) backoff_ms = 200;
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      if (!refused_by_standby_) backoff_ms = std::min(backoff_ms * 2, 5000);
    }
    trainer.join();
    return 0;
  }

 private:
  bool Register() {
    v1::CreateJobRequest req;
    v1::Job* job = req.mutable_job();
    job->set_id(options_.job);
    job->set_kind(options_.kind);
    for (const auto& item : Split(options_.placement, ',')) {
      const size_t eq = item.find('=');
      Slot slot;
      if (eq == std::string::npos || !ParseSlot(item.substr(eq + 1), &slot)) {
        std::cerr << "job-agent: --placement: bad entry '" << item << "' (want rank=node[:device])\n";
        return false;
      }
      auto* p = job->add_placement();
      p->set_rank(static_cast<uint32_t>(std::stoul(item.substr(0, eq))));
      p->set_node(slot.node);
      if (slot.device) p->set_device_id(*slot.device);
    }
    if (!ParseDuration(options_.hold_down, job->mutable_policy()->mutable_hold_down())) {
      std::cerr << "job-agent: --hold-down: bad duration\n";
      return false;
    }
    if (!options_.step_timeout.empty()) {
      for (int s = v1::RECOVERY_STRATEGY_STEP_RETRY; s < v1::RECOVERY_STRATEGY_FAIL; ++s) {
        auto* t = job->mutable_policy()->add_step_timeouts();
        t->set_strategy(static_cast<v1::RecoveryStrategy>(s));
        if (!ParseDuration(options_.step_timeout, t->mutable_timeout())) {
          std::cerr << "job-agent: --step-timeout: bad duration\n";
          return false;
        }
      }
    }
    if (options_.max_retries_per_job > 0) job->mutable_policy()->set_max_retries_per_job(options_.max_retries_per_job);
    for (int attempt = 0; !g_stop; ++attempt) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      v1::CreateJobResponse resp;
      grpc::Status st = jobs_->CreateJob(&ctx, req, &resp);
      if (st.ok() || st.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
        Log("registered job " + options_.job + (st.ok() ? "" : " (already registered)"));
        return true;
      }
      if (st.error_code() != grpc::StatusCode::UNAVAILABLE || attempt > 50) {
        std::cerr << "job-agent: CreateJob: " << st.error_message() << "\n";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return false;
  }

  void Train() {
    while (!g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_ms));
      std::lock_guard lock(mu_);
      if (state_ == "running") {
        ++step_;
        if (step_ % 20 == 0) Log("training: step " + std::to_string(step_));
      }
    }
  }

  // One Attach stream until it ends. True if it got as far as Attached.
  bool AttachOnce() {
    grpc::ClientContext ctx;
    auto stream = jobs_->Attach(&ctx);
    v1::AttachRequest hello;
    hello.mutable_hello()->set_job_id(options_.job);
    hello.mutable_hello()->set_agent("job-agent");
    bool attached = false;
    // Acks (this thread) and progress reports (the reporter) share the
    // stream's write side: one write at a time.
    std::mutex write_mu;
    std::atomic<bool> done{false};
    std::thread reporter;
    if (stream->Write(hello)) {
      v1::AttachResponse msg;
      while (stream->Read(&msg)) {
        if (msg.has_attached()) {
          attached = true;
          std::lock_guard lock(mu_);
          job_ = msg.attached().job();
          Log("attached: job " + job_.id() + " state " + v1::JobState_Name(job_.state()));
          if (options_.progress_ms > 0 && !reporter.joinable()) {
            reporter = std::thread([&] { ReportProgress(stream.get(), &write_mu, &done); });
          }
          continue;
        }
        if (msg.has_progress_ack() && !msg.progress_ack().accepted()) {
          Log("progress refused: " + msg.progress_ack().error());
        }
        if (!msg.has_command()) continue;
        v1::AttachRequest ack;
        if (Handle(msg.command(), ack.mutable_ack())) {
          std::lock_guard lock(write_mu);
          if (!stream->Write(ack)) break;
        }
      }
    }
    done = true;
    if (reporter.joinable()) reporter.join();
    stream->WritesDone();
    grpc::Status st = stream->Finish();
    if (!g_stop) Log("attach stream ended: " + (st.ok() ? std::string("OK") : st.error_message()));
    refused_by_standby_ =
        st.error_code() == grpc::StatusCode::UNAVAILABLE && st.error_message().rfind("standby ", 0) == 0;
    return attached;
  }

  // Every --progress-ms until `done`: each placed rank at the job's step;
  // the simulated steps take --step-ms, none of it in collectives.
  void ReportProgress(grpc::ClientReaderWriter<v1::AttachRequest, v1::AttachResponse>* stream, std::mutex* write_mu,
                      const std::atomic<bool>* done) {
    while (!*done && !g_stop) {
      v1::AttachRequest req;
      {
        std::lock_guard lock(mu_);
        for (const auto& p : job_.placement()) {
          auto* r = req.mutable_progress()->add_ranks();
          r->set_rank(p.rank());
          r->set_step(step_);
          *r->mutable_step_time() = TimeUtil::MillisecondsToDuration(options_.step_ms);
          r->set_checkpointing(state_ == "paused");
        }
      }
      if (req.progress().ranks_size() > 0) {
        std::lock_guard lock(*write_mu);
        if (!stream->Write(req)) return;
      }
      for (int waited = 0; waited < options_.progress_ms && !*done; waited += 50) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, options_.progress_ms - waited)));
      }
    }
  }

  // Applies the command once per id; fills the ack. False: send no ack.
  bool Handle(const v1::Command& cmd, v1::CommandAck* ack) {
    std::string kind = v1::JobCommand_Name(cmd.kind()).substr(std::string_view("JOB_COMMAND_").size());
    ack->set_command_id(cmd.id());
    if (options_.ignore.contains(kind)) {
      Log("command " + cmd.id() + " " + kind + " ignored (--ignore)");
      return false;
    }
    std::lock_guard lock(mu_);
    if (auto it = done_.find(cmd.id()); it != done_.end()) {
      ack->set_success(it->second.first);
      ack->set_message(it->second.second + " (already done)");
      return true;
    }
    std::string ranks;
    for (uint32_t r : cmd.ranks()) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    Log("command " + cmd.id() + " " + kind + " ranks=[" + ranks + "] strategy=" +
        v1::RecoveryStrategy_Name(cmd.strategy()).substr(std::string_view("RECOVERY_STRATEGY_").size()));
    bool ok = true;
    std::string message;
    if (options_.fail.contains(kind)) {
      ok = false;
      message = kind + " failed (--fail)";
    } else {
      switch (cmd.kind()) {
        case v1::JOB_COMMAND_PAUSE:
          state_ = "paused";
          message = "paused at step " + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_CHECKPOINT:
          checkpoint_ = step_;
          message = "checkpoint at step " + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_STOP:
          state_ = "stopped";
          message = "stopped at step " + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_RETRY_STEP:
          state_ = "running";
          message = "retrying step " + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_RESTART_PROCESSES:
          step_ = checkpoint_;
          state_ = "running";
          message = "processes of ranks [" + ranks + "] restarted from step " + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_RESUME:
          if (cmd.strategy() == v1::RECOVERY_STRATEGY_POD_RESCHEDULE) message = MoveRanks(cmd.ranks());
          state_ = "running";
          message += (message.empty() ? "" : "; ") + std::string("resumed at step ") + std::to_string(step_);
          break;
        case v1::JOB_COMMAND_SCALE_IN:
          message = DropRanks(cmd.ranks());
          state_ = "running";
          break;
        default: ok = false; message = "unknown command";
      }
    }
    done_[cmd.id()] = {ok, message};
    Log("  -> " + std::string(ok ? "ok: " : "failed: ") + message);
    ack->set_success(ok);
    ack->set_message(message);
    return true;
  }

  // The replaced pods landed on spare slots: report the new placement.
  std::string MoveRanks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
    v1::Job job = job_;
    std::string moved;
    for (auto& p : *job.mutable_placement()) {
      if (std::find(ranks.begin(), ranks.end(), p.rank()) == ranks.end() || spares_.empty()) continue;
      const Slot slot = spares_.front();
      spares_.erase(spares_.begin());
      moved += (moved.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p.rank()) + " -> " + slot.node +
               (slot.device ? ":" + std::to_string(*slot.device) : "");
      p.set_node(slot.node);
      if (slot.device)
        p.set_device_id(*slot.device);
      else
        p.clear_device_id();
    }
    if (moved.empty()) return "ranks rescheduled in place (no spare slots given)";
    return UpdatePlacement(std::move(job)) ? "moved " + moved : "moved " + moved + " (placement update failed)";
  }

  std::string DropRanks(const google::protobuf::RepeatedField<uint32_t>& ranks) {
    v1::Job job = job_;
    auto* placement = job.mutable_placement();
    for (int i = placement->size() - 1; i >= 0; --i) {
      if (std::find(ranks.begin(), ranks.end(), placement->Get(i).rank()) != ranks.end()) {
        placement->DeleteSubrange(i, 1);
      }
    }
    const std::string n = std::to_string(job.placement_size());
    return UpdatePlacement(std::move(job)) ? "continuing on " + n + " ranks" : "scale-in placement update failed";
  }

  bool UpdatePlacement(v1::Job job) {
    job.clear_impacts();
    job.clear_state();
    v1::UpdateJobRequest req;
    *req.mutable_job() = job;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::UpdateJobResponse resp;
    grpc::Status st = jobs_->UpdateJob(&ctx, req, &resp);
    if (!st.ok()) {
      Log("UpdateJob failed: " + st.error_message());
      return false;
    }
    job_ = resp.job();
    return true;
  }

  void Log(const std::string& line) {
    std::cout << "job-agent[" << options_.job << "] " << line << std::endl;
    if (log_.is_open()) log_ << line << std::endl;
  }

  Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  bool refused_by_standby_ = false;  // the last attach
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::ofstream log_;
  std::mutex mu_;
  v1::Job job_;
  std::vector<Slot> spares_;
  std::string state_ = "running";
  uint64_t step_ = 0, checkpoint_ = 0;
  std::map<std::string, std::pair<bool, std::string>> done_;
};

int Usage() {
  std::cerr
      << "usage: job-agent --job ID --placement RANK=NODE[:DEV],... [--server ADDR] [--kind training|inference]\n"
         "                 [--spares NODE[:DEV],...] [--hold-down DUR] [--step-timeout DUR]\n"
         "                 [--max-retries-per-job N] [--log FILE] [--step-ms N] [--progress-ms N] [--no-register]\n"
         "                 [--fail KIND] [--ignore KIND]   (KIND: PAUSE, STOP, RESTART_PROCESSES, ...)\n"
         "                 [--ca FILE] [--cert FILE --key FILE] [--token T | --token-file FILE] [--server-name N]\n"
      << clusterd::ClientSecurityUsage();
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const char* addr = std::getenv("CLUSTERD_ADDR")) o.server = addr;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "job-agent: " << flag << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (flag == "--server")
      o.server = value();
    else if (flag == "--job")
      o.job = value();
    else if (flag == "--kind") {
      const std::string k = value();
      if (k != "training" && k != "inference") return Usage();
      o.kind = k == "training" ? v1::JOB_KIND_TRAINING : v1::JOB_KIND_INFERENCE;
    } else if (flag == "--placement")
      o.placement = value();
    else if (flag == "--spares")
      o.spares = value();
    else if (flag == "--log")
      o.log_path = value();
    else if (flag == "--hold-down")
      o.hold_down = value();
    else if (flag == "--step-timeout")
      o.step_timeout = value();
    else if (flag == "--max-retries-per-job")
      o.max_retries_per_job = static_cast<uint32_t>(std::stoul(value()));
    else if (flag == "--step-ms")
      o.step_ms = std::max(1, std::stoi(value()));
    else if (flag == "--progress-ms")
      o.progress_ms = std::max(0, std::stoi(value()));
    else if (flag == "--fail")
      o.fail.insert(value());
    else if (flag == "--ignore")
      o.ignore.insert(value());
    else if (flag == "--no-register")
      o.register_job = false;
    else if (flag == "--ca" || flag == "--cert" || flag == "--key" || flag == "--token" || flag == "--token-file" ||
             flag == "--server-name")
      clusterd::SetClientSecurityFlag(flag.substr(2), value(), &o.security);
    else
      return Usage();
  }
  if (o.job.empty() || (o.register_job && o.placement.empty())) return Usage();
  clusterd::ApplyClientSecurityEnv(&o.security);  // CLUSTERD_CA ... for what the flags left unset
  // Given every replica of a highly available ClusterD, each attempt goes
  // to the next one: standbys refuse, the leader answers.
  grpc::ChannelArguments args;
  clusterd::SpreadCallsOverAddresses(o.server, &args);
  auto channel = clusterd::CreateClientChannel(o.server, o.security, args);
  if (!channel.ok()) {
    std::cerr << "job-agent: " << channel.status().message() << "\n";
    return 2;
  }
  // SIGTERM/SIGINT end the process (the default): ClusterD resends any
  // command not acknowledged to the next agent that attaches.
  Agent agent(o, std::move(*channel));
  return agent.Run();
}
