#include "taskd.h"

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "agents.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "mindcluster/recover.grpc.pb.h"

namespace clusterd::bench {
namespace {

constexpr char kTaskdJob[] = "bench-taskd-job";
constexpr char kInPlaceJob[] = "bench-taskd-in-place";
constexpr char kTaskdNode[] = "bench-taskd-node";
constexpr char kRetryCode[] = "80BB8000";         // RESTART_REQUEST in the catalog: a step retry
constexpr double kMindClusterHandlingMs = 30000;  // "fault handling < 30 s" (MindCluster's docs)

// TaskD's subscription: the signals (keep-alives left out) and when each came.
class TaskdStream {
 public:
  TaskdStream(::Recover::Stub* stub, const std::string& job) {
    ::ClientInfo who;
    who.set_jobid(job);
    who.set_role("taskd");
    reader_ = stub->SubscribeProcessManageSignal(&ctx_, who);
    thread_ = std::thread([this] {
      ::ProcessManageSignal msg;
      while (reader_->Read(&msg)) {
        if (msg.signaltype() == "keep-alive") continue;
        std::lock_guard lock(mu_);
        got_.emplace_back(msg.signaltype(), NowNs());
        cv_.notify_all();
      }
      reader_->Finish();
      std::lock_guard lock(mu_);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~TaskdStream() {
    ctx_.TryCancel();
    thread_.join();
  }
  // The n-th signal's time once it is `type`; 0 on timeout or another type.
  int64_t Wait(size_t n, const std::string& type, double timeout_s, std::string* err) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return got_.size() > n || done_; }) ||
        got_.size() <= n) {
      *err = "TaskD got no signal " + std::to_string(n) + " (" + type + ") in time";
      return 0;
    }
    if (got_[n].first != type) {
      *err = "TaskD's signal " + std::to_string(n) + " is " + got_[n].first + ", not " + type;
      return 0;
    }
    return got_[n].second;
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<::ProcessManageSignal>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, int64_t>> got_;
  bool done_ = false;
};

// The job's newest recovery is SUCCEEDED (polled); its time, 0 on timeout.
int64_t WaitSucceeded(v1::ClusterService::Stub* cluster, const std::string& job, size_t recoveries, double timeout_s) {
  const int64_t end = NowNs() + static_cast<int64_t>(timeout_s * 1e9);
  while (NowNs() < end) {
    v1::ListRecoveriesRequest req;
    req.set_job(job);
    req.set_page_size(1);
    v1::ListRecoveriesResponse resp;
    grpc::ClientContext ctx;
    if (cluster->ListRecoveries(&ctx, req, &resp).ok() && static_cast<size_t>(resp.total_size()) >= recoveries &&
        resp.recoveries_size() > 0 && resp.recoveries(0).state() == v1::RECOVERY_STATE_SUCCEEDED) {
      return NowNs();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return 0;
}

}  // namespace

std::string RunTaskd(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  std::cerr << "[bench] scenario 14: TaskD's Recover service, " << o.taskd_samples << " step retries\n";
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-taskd"));
  if (std::string err = cd.Start(); !err.empty()) return "scenario 14: clusterd: " + err;
  AgentPool agents(cd.target(), {kTaskdNode}, 1);
  if (std::string err = agents.Connect(); !err.empty()) return "scenario 14: agent: " + err;
  auto channel = grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials());
  auto jobs = v1::JobService::NewStub(channel);
  auto cluster = v1::ClusterService::NewStub(channel);
  auto recover = ::Recover::NewStub(channel);

  auto create_job = [&](const std::string& id, const std::string& strategies) -> std::string {
    v1::CreateJobRequest create;
    v1::Job* job = create.mutable_job();
    job->set_id(id);
    job->set_kind(v1::JOB_KIND_TRAINING);
    job->mutable_policy()->mutable_hold_down()->set_seconds(0);
    job->mutable_policy()->set_max_retries_per_job(1000000);
    job->mutable_policy()->set_max_retries_per_node(1000000);
    for (int d = 0; d < o.devices; ++d) {
      auto* p = job->add_placement();
      p->set_rank(d);
      p->set_node(kTaskdNode);
      p->set_device_id(d);
    }
    (*job->mutable_labels())["mindcluster/process-recover-enable"] = "on";
    (*job->mutable_labels())["mindcluster/recover-strategy"] = strategies;
    grpc::ClientContext ctx;
    v1::CreateJobResponse resp;
    grpc::Status st = jobs->CreateJob(&ctx, create, &resp);
    return st.ok() ? "" : "scenario 14: CreateJob " + id + ": " + st.error_message();
  };
  if (std::string err = create_job(kTaskdJob, "retry"); !err.empty()) return err;
  auto call = [&](auto method, const auto& req) {
    grpc::ClientContext ctx;
    ::Status resp;
    grpc::Status st = ((*recover).*method)(&ctx, req, &resp);
    if (!st.ok()) std::cerr << "[bench] scenario 14: " << st.error_message() << "\n";
    if (st.ok() && resp.code() != 0)
      std::cerr << "[bench] scenario 14: code " << resp.code() << ": " << resp.info() << "\n";
    return st.ok() ? resp.code() : -1;
  };
  ::ClientInfo who;
  who.set_jobid(kTaskdJob);
  who.set_role("taskd");
  if (call(&::Recover::Stub::Init, who) != 0 || call(&::Recover::Stub::Register, who) != 0) {
    return "scenario 14: TaskD's Init/Register refused";
  }
  TaskdStream stream(recover.get(), kTaskdJob);
  // Subscribed once clusterd counts the job's agent.
  for (int64_t end = NowNs() + 10'000'000'000; cd.Metric("clusterd_job_agents") != 1;) {
    if (NowNs() > end) return "scenario 14: TaskD's subscription never attached";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  std::vector<int64_t> first_signal, share;
  std::string err;
  // ClusterD limits one job's Recover calls (100 a second): a sample makes
  // four, so samples start at most every 50 ms (no TaskD retries 20 times a
  // second).
  const auto pace = std::chrono::milliseconds(50);
  auto next_sample = std::chrono::steady_clock::now();
  for (int i = 0; i < o.taskd_samples && err.empty(); ++i) {
    std::this_thread::sleep_until(next_sample);  // pacing, not synchronisation
    next_sample = std::chrono::steady_clock::now() + pace;
    const uint32_t device = static_cast<uint32_t>(i % o.devices);
    const uint64_t seq =
        agents.Send(0, v1::TRANSITION_ACTION_RAISE, device, kRetryCode, v1::FAULT_LEVEL_RESTART_REQUEST);
    if (!agents.WaitAllAcked(30)) return "scenario 14: the fault was not acknowledged";
    // From NodeD's send: the commit that makes the fault durable is ClusterD's
    // work too (the recovery and its first step are stored in the same one).
    const int64_t sent = agents.SentNs(0, seq);
    const size_t base = static_cast<size_t>(i) * 3;
    const int64_t stop = stream.Wait(base, "stopTrain", 30, &err);
    if (stop == 0) break;
    ::StopCompleteRequest stopped;
    stopped.set_jobid(kTaskdJob);
    const int64_t t_stop = NowNs();
    call(&::Recover::Stub::ReportStopComplete, stopped);
    const int64_t global = stream.Wait(base + 1, "globalFault", 30, &err);
    if (global == 0) break;
    ::RecoverStrategyRequest offer;
    offer.set_jobid(kTaskdJob);
    offer.add_strategies("retry");
    const int64_t t_offer = NowNs();
    call(&::Recover::Stub::ReportRecoverStrategy, offer);
    const int64_t change = stream.Wait(base + 2, "changeStrategy", 30, &err);
    if (change == 0) break;
    ::RecoverStatusRequest status;
    status.set_jobid(kTaskdJob);
    status.set_strategy("retry");
    const int64_t t_status = NowNs();
    call(&::Recover::Stub::ReportRecoverStatus, status);
    const int64_t done = WaitSucceeded(cluster.get(), kTaskdJob, static_cast<size_t>(i) + 1, 30);
    if (done == 0) {
      err = "recovery " + std::to_string(i + 1) + " did not succeed in time";
      break;
    }
    first_signal.push_back(stop - sent);
    share.push_back((stop - sent) + (global - t_stop) + (change - t_offer) + (done - t_status));
    agents.Send(0, v1::TRANSITION_ACTION_CLEAR, device, kRetryCode, v1::FAULT_LEVEL_RESTART_REQUEST);
    if (!agents.WaitAllAcked(30)) return "scenario 14: the clear was not acknowledged";
  }
  // Recover in place: a process fault TaskD reports (RESTART_BUSINESS,
  // PROCESS_RESTART) -> stopTrain -> globalFault -> changeStrategy
  // "recover" (extraParams recover-in-place) -> status, as MindIO takes it.
  std::vector<int64_t> inplace_first, inplace_share;
  if (err.empty()) {
    if (std::string e = create_job(kInPlaceJob, "recover-in-place,recover"); !e.empty()) return e;
    ::ClientInfo in_place;
    in_place.set_jobid(kInPlaceJob);
    in_place.set_role("taskd");
    if (call(&::Recover::Stub::Init, in_place) != 0 || call(&::Recover::Stub::Register, in_place) != 0) {
      return "scenario 14: TaskD's Init/Register refused (in place)";
    }
    TaskdStream ip(recover.get(), kInPlaceJob);
    for (int64_t end = NowNs() + 10'000'000'000; cd.Metric("clusterd_job_agents") != 2;) {
      if (NowNs() > end) return "scenario 14: TaskD's subscription never attached (in place)";
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int i = 0; i < o.taskd_samples && err.empty(); ++i) {
      std::this_thread::sleep_until(next_sample);  // pacing, as above
      next_sample = std::chrono::steady_clock::now() + pace;
      ::ProcessFaultRequest fault;
      fault.set_jobid(kInPlaceJob);
      auto* rank = fault.add_faultranks();
      rank->set_rankid(std::to_string(i % o.devices));
      rank->set_faulttype("1");
      const int64_t sent = NowNs();
      if (call(&::Recover::Stub::ReportProcessFault, fault) != 0) {
        err = "ReportProcessFault refused";
        break;
      }
      const size_t base = static_cast<size_t>(i) * 3;
      const int64_t stop = ip.Wait(base, "stopTrain", 30, &err);
      if (stop == 0) break;
      ::StopCompleteRequest stopped;
      stopped.set_jobid(kInPlaceJob);
      const int64_t t_stop = NowNs();
      call(&::Recover::Stub::ReportStopComplete, stopped);
      const int64_t global = ip.Wait(base + 1, "globalFault", 30, &err);
      if (global == 0) break;
      ::RecoverStrategyRequest offer;
      offer.set_jobid(kInPlaceJob);
      for (const char* s : {"exit", "dump", "recover"}) offer.add_strategies(s);
      const int64_t t_offer = NowNs();
      call(&::Recover::Stub::ReportRecoverStrategy, offer);
      const int64_t change = ip.Wait(base + 2, "changeStrategy", 30, &err);
      if (change == 0) break;
      ::RecoverStatusRequest status;
      status.set_jobid(kInPlaceJob);
      status.set_strategy("recover");
      const int64_t t_status = NowNs();
      call(&::Recover::Stub::ReportRecoverStatus, status);
      const int64_t done = WaitSucceeded(cluster.get(), kInPlaceJob, static_cast<size_t>(i) + 1, 30);
      if (done == 0) {
        err = "in-place recovery " + std::to_string(i + 1) + " did not succeed in time";
        break;
      }
      inplace_first.push_back(stop - sent);
      inplace_share.push_back((stop - sent) + (global - t_stop) + (change - t_offer) + (done - t_status));
    }
  }
  agents.Close();
  cd.Stop();
  if (!err.empty()) return "scenario 14: " + err;

  std::vector<int64_t> share_copy = share;
  const double share_p99 = Percentile(share_copy, 0.99);
  (*out)["scenario14_taskd"] = {{"samples", first_signal.size()},
                                {"fault_to_first_signal", LatencyJson(first_signal)},
                                {"clusterd_share", LatencyJson(share)},
                                {"mindcluster_documented_ms", kMindClusterHandlingMs},
                                {"recover_in_place",
                                 {{"samples", inplace_first.size()},
                                  {"fault_to_first_signal", LatencyJson(inplace_first)},
                                  {"clusterd_share", LatencyJson(inplace_share)}}}};
  const json& s = (*out)["scenario14_taskd"];
  auto ms2 = [](const json& l) {
    return Fmt(l["p50_ms"].get<double>(), " ms") + " / " + Fmt(l["p99_ms"].get<double>(), " ms");
  };
  const std::string n = std::to_string(first_signal.size());
  rows->push_back({"14 taskd", "fault -> first TaskD signal (stopTrain) p50 / p99 (" + n + ")",
                   ms2(s["fault_to_first_signal"]), "", "", "", ""});
  rows->push_back({"14 taskd", "ClusterD's share of a step retry through TaskD p50 / p99 (" + n + ")",
                   ms2(s["clusterd_share"]), "MindCluster: handling < 30 s (documented)",
                   Fmt(kMindClusterHandlingMs / share_p99, "x faster") + " (p99)", "< 30 s",
                   Met(share_p99 < kMindClusterHandlingMs)});
  const json& ip = s["recover_in_place"];
  const std::string m = std::to_string(inplace_first.size());
  std::vector<int64_t> ip_copy = inplace_share;
  const double ip_p99 = Percentile(ip_copy, 0.99);
  rows->push_back({"14 taskd", "process fault -> first TaskD signal, recover in place p50 / p99 (" + m + ")",
                   ms2(ip["fault_to_first_signal"]), "", "", "", ""});
  rows->push_back({"14 taskd", "ClusterD's share of a recover in place through TaskD p50 / p99 (" + m + ")",
                   ms2(ip["clusterd_share"]), "MindCluster: handling < 30 s (documented)",
                   Fmt(kMindClusterHandlingMs / ip_p99, "x faster") + " (p99)", "< 30 s",
                   Met(ip_p99 < kMindClusterHandlingMs)});
  return "";
}

}  // namespace clusterd::bench
