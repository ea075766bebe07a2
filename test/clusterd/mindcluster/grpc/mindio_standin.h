// A stand-in for TaskD and MindIO TFT (the library in the training
// processes that decides every answer of TaskD's Recover exchange), on a
// real SubscribeProcessManageSignal stream and real report calls. It
// answers as MindIO's controller does, by the rules its source states
// (component/mindio/tft/src/csrc/framework/controller/controller.cpp and
// mindx_engine.h in Ascend/mind-cluster; TaskD's manager in
// component/taskd/taskd/go/framework_backend/manager/):
//
//  - preExitProcess: TaskD stops the named ranks' workers and reports them
//    (ReportProcessFault).
//  - stopTrain: the training pauses (ReportStopComplete 0); MindIO then
//    waits for globalFault.
//  - globalFault (on_global_rank), accepted only after a stop or after a
//    retry's 405: MindIO offers "exit", "dump" (its DP groups complete), and
//    for a retry-type fault (all ranks UCE "0" or HCCL "2") "retry" (+
//    "recover" with its ARF switch), else "recover" (+ "downgrade",
//    "upgrade" with its ZIT switch), or only "downgrade", "upgrade" (ZIT
//    without ARF). A "fault_nodes_restart" here is a violation: workers
//    would restart before any strategy was chosen.
//  - changeStrategy with a name it did not offer (or, after 406/499, one
//    that is not dump or exit): MindIO's MINDX_EVENT_INVALID, status 499
//    "invalid strategy", and it stops serving (a violation). The offer is
//    what it checks against (MindXEngine::ChangeStrategy in
//    mindx_engine.cpp: repairStrategies_), the status its
//    Controller::HandleRecoverStrategy (controller.cpp).
//  - retry: the scripted result (default 0); 405 -> it waits for a new
//    globalFault; 406/499 -> only dump or exit.
//  - recover: 0 (or the scripted code; a failure leaves only dump/exit).
//    With extraParams "recover-in-place" TaskD restarts the pods' workers
//    in place (that needs the action fault_nodes_restart).
//  - downgrade: 406 when pod rank 0 is among its node ranks; else 201 with
//    the ranks to isolate, then, after faultNodesExit, 0; it then trains
//    without them and waits for upgrade (extraParams
//    {"scale-out-strategy": "DP"}), which brings them back (0).
//  - dump: 0, then only exit; exit: the processes end.
//  - TaskD drops a signal whose uuid it has seen (drop_resent).
// Everything it got and every rule a signal broke are kept for the test.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "mindcluster/recover.grpc.pb.h"

namespace clusterd::testing {

class MindioStandIn {
 public:
  struct Options {
    bool arf = true;   // MindIO's ARF switch: "recover"
    bool zit = false;  // its ZIT switch: "downgrade", "upgrade"
    bool dump = true;  // its DP groups have a complete replica: "dump"
    bool drop_resent = true;
    // Status codes to answer per strategy, in turn (then 0).
    std::map<std::string, std::vector<int32_t>> results;
  };

  MindioStandIn(::Recover::Stub* stub, std::string job, Options options)
      : stub_(stub), job_(std::move(job)), options_(std::move(options)) {
    ::ClientInfo who;
    who.set_jobid(job_);
    who.set_role("taskd");
    reader_ = stub_->SubscribeProcessManageSignal(&ctx_, who);
    thread_ = std::thread([this] { Loop(); });
  }
  ~MindioStandIn() {
    ctx_.TryCancel();
    thread_.join();
  }
  MindioStandIn(const MindioStandIn&) = delete;
  MindioStandIn& operator=(const MindioStandIn&) = delete;

  std::vector<::ProcessManageSignal> Signals() {
    std::lock_guard lock(mu_);
    return signals_;
  }
  std::vector<std::string> Violations() {
    std::lock_guard lock(mu_);
    return violations_;
  }
  // The changeStrategy names in order, "recover/recover-in-place" with its extraParams.
  std::vector<std::string> Strategies() {
    std::vector<std::string> out;
    for (const auto& s : Signals()) {
      if (s.signaltype() != "changeStrategy") continue;
      out.push_back(s.changestrategy() + (s.extraparams().empty() ? "" : "/" + s.extraparams()));
    }
    return out;
  }
  size_t Count(const std::string& type) {
    auto all = Signals();
    return static_cast<size_t>(
        std::count_if(all.begin(), all.end(), [&](const auto& s) { return s.signaltype() == type; }));
  }
  // Waits (with a deadline) until `done` holds over the signals so far.
  bool WaitFor(const std::function<bool(const std::vector<::ProcessManageSignal>&)>& done,
               std::chrono::seconds deadline = std::chrono::seconds(30)) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, deadline, [&] { return done(signals_); });
  }

 private:
  enum class State {
    kRunning,
    kStopped,
    kWaitGlobal,
    kOffered,
    kOnlyDumpExit,
    kOnlyExit,
    kIsolating,
    kScaledIn,  // training without the isolated ranks: waits for upgrade
    kDead
  };

  void Loop() {
    ::ProcessManageSignal s;
    while (reader_->Read(&s)) {
      if (s.signaltype() == "keep-alive") continue;
      {
        std::lock_guard lock(mu_);
        signals_.push_back(s);
        cv_.notify_all();
        if (!seen_.insert(s.uuid()).second && options_.drop_resent) continue;  // TaskD drops it
      }
      Answer(s);
    }
    reader_->Finish();
  }

  void Violation(std::string what) {
    std::lock_guard lock(mu_);
    violations_.push_back(std::move(what));
  }

  int32_t NextResult(const std::string& strategy) {
    auto& codes = options_.results[strategy];
    if (codes.empty()) return 0;
    const int32_t code = codes.front();
    codes.erase(codes.begin());
    return code;
  }

  void Status(const std::string& strategy, int32_t code, const std::vector<std::string>& isolate = {}) {
    ::RecoverStatusRequest req;
    req.set_jobid(job_);
    req.set_strategy(strategy);
    req.mutable_status()->set_code(code);
    for (const auto& r : isolate) req.add_isolaterankids(r);
    Call(&::Recover::Stub::ReportRecoverStatus, req);
  }

  template <typename Request>
  void Call(grpc::Status (::Recover::Stub::*method)(grpc::ClientContext*, const Request&, ::Status*),
            const Request& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    ::Status resp;
    grpc::Status st = (stub_->*method)(&ctx, req, &resp);
    if (!st.ok() || resp.code() != 0) {
      Violation("a report was refused: " + st.error_message() + " code " + std::to_string(resp.code()) + " " +
                resp.info());
    }
  }

  bool Offered(const std::string& s) const { return std::find(offer_.begin(), offer_.end(), s) != offer_.end(); }

  void Answer(const ::ProcessManageSignal& s) {
    const std::string& type = s.signaltype();
    const std::vector<std::string> actions(s.actions().begin(), s.actions().end());
    auto has = [&](const std::string& a) { return std::find(actions.begin(), actions.end(), a) != actions.end(); };
    if (state_ == State::kDead) {
      Violation(type + " after MindIO stopped serving");
      return;
    }
    if (type == "preExitProcess") {
      ::ProcessFaultRequest req;
      req.set_jobid(job_);
      *req.mutable_faultranks() = s.faultranks();
      Call(&::Recover::Stub::ReportProcessFault, req);
      return;
    }
    if (type == "stopTrain") {
      retry_type_ = std::all_of(s.faultranks().begin(), s.faultranks().end(),
                                [](const auto& f) { return f.faulttype() == "0" || f.faulttype() == "2"; });
      state_ = State::kStopped;
      ::StopCompleteRequest req;
      req.set_jobid(job_);
      Call(&::Recover::Stub::ReportStopComplete, req);
      return;
    }
    if (type == "globalFault") {
      if (state_ != State::kStopped && state_ != State::kWaitGlobal) {
        Violation("globalFault while MindIO does not wait for one");
        return;
      }
      if (has("fault_nodes_restart")) Violation("globalFault restarts workers before a strategy was chosen");
      offer_ = {"exit"};
      if (options_.dump) offer_.push_back("dump");
      if (retry_type_) {
        offer_.push_back("retry");
        if (options_.arf) offer_.push_back("recover");
      } else if (options_.arf) {
        offer_.push_back("recover");
        if (options_.zit) offer_.insert(offer_.end(), {"downgrade", "upgrade"});
      } else if (options_.zit) {
        offer_.insert(offer_.end(), {"downgrade", "upgrade"});
      }
      state_ = State::kOffered;
      ::RecoverStrategyRequest req;
      req.set_jobid(job_);
      for (const auto& o : offer_) req.add_strategies(o);
      Call(&::Recover::Stub::ReportRecoverStrategy, req);
      return;
    }
    if (type == "faultNodesExit") {
      if (state_ != State::kIsolating) {
        Violation("faultNodesExit outside a downgrade");
        return;
      }
      const int32_t code = NextResult("downgrade");
      state_ = code == 0 ? State::kScaledIn : State::kOnlyDumpExit;
      Status("downgrade", code);
      return;
    }
    if (type != "changeStrategy") {
      Violation("unexpected signal " + type);
      return;
    }
    const std::string& strategy = s.changestrategy();
    const bool accepted = state_ == State::kOffered        ? Offered(strategy)
                          : state_ == State::kOnlyDumpExit ? (strategy == "dump" && options_.dump) || strategy == "exit"
                          : state_ == State::kOnlyExit     ? strategy == "exit"
                          : state_ == State::kScaledIn     ? strategy == "upgrade"
                                                           : false;
    if (!accepted) {
      Violation("changeStrategy " + strategy + " refused (MindIO's invalid strategy)");
      Status(strategy, 499);
      state_ = State::kDead;
      return;
    }
    if (strategy == "exit") {
      state_ = State::kDead;  // the processes end; the job restarts
      return;
    }
    if (strategy == "dump") {
      state_ = State::kOnlyExit;
      Status("dump", NextResult("dump"));
      return;
    }
    if (strategy == "downgrade") {
      const std::vector<std::string> pods(s.noderankids().begin(), s.noderankids().end());
      if (std::find(pods.begin(), pods.end(), "0") != pods.end()) {
        state_ = State::kOnlyDumpExit;
        Status("downgrade", 406);
        return;
      }
      std::vector<std::string> isolate;
      for (const auto& f : s.faultranks()) isolate.push_back(f.rankid());
      state_ = State::kIsolating;
      Status("downgrade", 201, isolate);
      return;
    }
    if (strategy == "upgrade") {
      if (s.extraparams() != R"({"scale-out-strategy": "DP"})") Violation("upgrade without its extraParams");
      const int32_t code = NextResult("upgrade");
      state_ = code == 0 ? State::kRunning : State::kOnlyDumpExit;
      Status("upgrade", code);
      return;
    }
    if (strategy == "recover" && s.extraparams() == "recover-in-place" && !has("fault_nodes_restart")) {
      Violation("recover in place without fault_nodes_restart: TaskD would not restart the workers");
    }
    const int32_t code = NextResult(strategy);
    if (code == 0) {
      state_ = State::kRunning;
    } else if (strategy == "retry" && code == 405) {
      state_ = State::kWaitGlobal;
    } else if (code == 499) {
      state_ = State::kOnlyExit;  // REPAIR_COMMON_ERROR: only exit
    } else {
      state_ = State::kOnlyDumpExit;
    }
    Status(strategy, code);
  }

  ::Recover::Stub* stub_;
  const std::string job_;
  Options options_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<::ProcessManageSignal>> reader_;
  std::thread thread_;
  // The reader thread's alone.
  State state_ = State::kRunning;
  bool retry_type_ = false;
  std::vector<std::string> offer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<::ProcessManageSignal> signals_;
  std::set<std::string> seen_;
  std::vector<std::string> violations_;
};

}  // namespace clusterd::testing
