#include "progress.h"

#include <cmath>
#include <future>
#include <iostream>
#include <thread>

#include <google/protobuf/util/time_util.h>

#include "clusterd/v1/job.grpc.pb.h"

namespace clusterd::bench {
namespace {

using google::protobuf::util::TimeUtil;

constexpr char kProgressPrefix[] = "bench-prog-";
constexpr int kProgressShards = 8;         // reporting threads, each with its share of the streams
constexpr uint32_t kProgressSlowRank = 7;  // of job 0
// Job 1's policy: 5 s, at least 3 report intervals (a shorter one counts
// as 2 intervals: the tracker's floor).
constexpr int kProgressWindow = 5;  // the default slow-rank window (reports)

std::string ProgressJobId(int j) { return std::string(kProgressPrefix) + std::to_string(j); }

using ProgressRw = grpc::ClientReaderWriter<v1::AttachRequest, v1::AttachResponse>;

struct ProgressStream {
  std::unique_ptr<grpc::ClientContext> ctx;
  std::unique_ptr<ProgressRw> stream;
  int job = 0;
};

// One report of every rank of job j at `step`; rank kProgressSlowRank of job 0 takes
// `slow` times as long.
v1::AttachRequest ProgressRound(int j, int ranks, uint64_t step, double slow) {
  v1::AttachRequest req;
  auto* p = req.mutable_progress();
  p->mutable_ranks()->Reserve(ranks);
  for (int r = 0; r < ranks; ++r) {
    auto* rp = p->add_ranks();
    rp->set_rank(static_cast<uint32_t>(r));
    rp->set_step(step);
    const double t = (j == 0 && static_cast<uint32_t>(r) == kProgressSlowRank) ? slow : 1.0;
    *rp->mutable_step_time() = TimeUtil::NanosecondsToDuration(static_cast<int64_t>(t * 1e9));
  }
  return req;
}

// Writes the report and reads its ack (commands in between are skipped).
bool SendProgress(ProgressStream& a, const v1::AttachRequest& req) {
  if (!a.stream->Write(req)) return false;
  v1::AttachResponse resp;
  while (a.stream->Read(&resp)) {
    if (resp.has_progress_ack()) return resp.progress_ack().accepted();
  }
  return false;
}

}  // namespace

std::string RunProgress(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const int jobs = o.progress_jobs, ranks = o.progress_ranks;
  const double interval = o.progress_interval_s;
  const int kProgressHangTimeoutS = std::max(5, static_cast<int>(std::ceil(3 * interval)));
  std::cerr << "[bench] scenario 16: job progress, " << jobs << " jobs x " << ranks << " ranks every " << interval
            << " s\n";
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-progress"));
  if (std::string err = cd.Start(); !err.empty()) return "scenario 16: clusterd: " + err;
  auto channel = grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials());
  auto stub = v1::JobService::NewStub(channel);

  // The jobs: 8 ranks a node, no chips named.
  std::string err;
  {
    std::vector<std::future<std::string>> made;
    for (int s = 0; s < kProgressShards; ++s) {
      made.push_back(std::async(std::launch::async, [&, s] {
        for (int j = s; j < jobs; j += kProgressShards) {
          v1::CreateJobRequest req;
          v1::Job* job = req.mutable_job();
          job->set_id(ProgressJobId(j));
          job->set_kind(v1::JOB_KIND_TRAINING);
          for (int r = 0; r < ranks; ++r) {
            auto* p = job->add_placement();
            p->set_rank(static_cast<uint32_t>(r));
            p->set_node("pnode-" + std::to_string(r / 8));
          }
          if (j == 1)
            job->mutable_policy()->mutable_progress()->mutable_hang_timeout()->set_seconds(kProgressHangTimeoutS);
          grpc::ClientContext ctx;
          v1::CreateJobResponse resp;
          if (grpc::Status st = stub->CreateJob(&ctx, req, &resp); !st.ok()) return "CreateJob: " + st.error_message();
        }
        return std::string();
      }));
    }
    for (auto& f : made) {
      if (std::string e = f.get(); !e.empty() && err.empty()) err = e;
    }
  }
  if (!err.empty()) return "scenario 16: " + err;
  // Every job's agent attached.
  std::vector<std::vector<ProgressStream>> shards(kProgressShards);
  for (int j = 0; j < jobs && err.empty(); ++j) {
    ProgressStream a;
    a.job = j;
    a.ctx = std::make_unique<grpc::ClientContext>();
    a.stream = stub->Attach(a.ctx.get());
    v1::AttachRequest hello;
    hello.mutable_hello()->set_job_id(ProgressJobId(j));
    v1::AttachResponse resp;
    if (!a.stream->Write(hello) || !a.stream->Read(&resp) || !resp.has_attached()) err = "attach " + ProgressJobId(j);
    shards[j % kProgressShards].push_back(std::move(a));
  }
  if (!err.empty()) return "scenario 16: " + err;
  const double rss_before = ProcessRssKiB(cd.pid());

  // One round: every job's report (job 1 leaves out once stopped), sent by
  // the shards in parallel; then a wait for the next interval.
  std::atomic<bool> hang_stopped{false};
  std::atomic<int64_t> hang_last_ns{0};
  uint64_t step = 0;
  int64_t next = NowNs();
  auto round = [&](double slow) -> std::string {
    ++step;
    std::vector<std::future<std::string>> sent;
    for (auto& shard : shards) {
      sent.push_back(std::async(std::launch::async, [&, slow, s = step] {
        for (ProgressStream& a : shard) {
          if (a.job == 1 && hang_stopped) continue;
          if (!SendProgress(a, ProgressRound(a.job, ranks, s, slow)))
            return "a report of " + ProgressJobId(a.job) + " was refused";
          if (a.job == 1) hang_last_ns = NowNs();
        }
        return std::string();
      }));
    }
    std::string e;
    for (auto& f : sent) {
      if (std::string got = f.get(); !got.empty() && e.empty()) e = got;
    }
    next += static_cast<int64_t>(interval * 1e9);
    std::this_thread::sleep_until(std::chrono::steady_clock::now() +
                                  std::chrono::nanoseconds(std::max<int64_t>(0, next - NowNs())));
    return e;
  };
  auto get_job = [&](int j) {
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_id(ProgressJobId(j));
    v1::GetJobResponse resp;
    stub->GetJob(&ctx, req, &resp);
    return resp.job();
  };

  // Warm-up: the windows fill (2 warm-up reports + a window of 5).
  const int warm = 2 + kProgressWindow;
  double cpu0 = 0;
  int64_t t0 = 0;
  for (int i = 0; i < warm && err.empty(); ++i) {
    if (i == 2) {  // CPU from the third round on: every tracker exists
      cpu0 = cd.CpuSeconds();
      t0 = NowNs();
    }
    err = round(1.0);
  }
  const double cores = (cd.CpuSeconds() - cpu0) / (static_cast<double>(NowNs() - t0) / 1e9);
  const double rss_after = ProcessRssKiB(cd.pid());
  // A slow rank: reports until GetJob names it.
  int reports_to_named = 0;
  int64_t slow_from = NowNs(), named_ns = 0;
  while (err.empty() && reports_to_named < 10 * kProgressWindow) {
    err = round(1.4);
    ++reports_to_named;
    const v1::Job j0 = get_job(0);
    if (j0.progress().slow_ranks_size() > 0 && j0.progress().slow_ranks(0).rank() == kProgressSlowRank) {
      named_ns = NowNs();
      break;
    }
  }
  if (err.empty() && named_ns == 0) err = "the slow rank was never named";
  // A hang: job 1 stops; the rest goes on.
  double hang_over_s = NAN;
  if (err.empty()) {
    hang_stopped = true;
    const int64_t deadline = NowNs() + static_cast<int64_t>((kProgressHangTimeoutS + 30) * 1e9);
    std::atomic<bool> done{false};
    std::thread reporting([&] {
      while (!done && err.empty()) {
        std::string e = round(1.0);
        if (!e.empty()) err = e;
      }
    });
    while (NowNs() < deadline) {
      if (get_job(1).progress().state() == v1::PROGRESS_STATE_HUNG) {
        hang_over_s = static_cast<double>(NowNs() - hang_last_ns) / 1e9 - kProgressHangTimeoutS;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    done = true;
    reporting.join();
    if (std::isnan(hang_over_s)) err = "the hang was never detected";
  }
  for (auto& shard : shards) {
    for (ProgressStream& a : shard) a.ctx->TryCancel();
  }
  shards.clear();
  cd.Stop();
  if (!err.empty()) return "scenario 16: " + err;
  const double tracked = static_cast<double>(jobs) * ranks;
  json result = {{"jobs", jobs},
                 {"ranks_per_job", ranks},
                 {"interval_s", interval},
                 {"rank_updates_per_s", tracked / interval},
                 {"clusterd_cores", cores},
                 {"rss_growth_mib", (rss_after - rss_before) / 1024},
                 {"bytes_per_tracked_rank", (rss_after - rss_before) * 1024 / tracked},
                 {"slow_reports_to_named", reports_to_named},
                 {"slow_windows_to_named", static_cast<double>(reports_to_named) / kProgressWindow},
                 {"slow_named_after_s", static_cast<double>(named_ns - slow_from) / 1e9},
                 {"hang_timeout_s", kProgressHangTimeoutS},
                 {"hang_detected_after_timeout_s", hang_over_s}};
  (*out)["scenario16_progress"] = result;
  const std::string size =
      std::to_string(jobs) + " jobs x " + std::to_string(ranks) + " ranks every " + Fmt(interval, " s");
  rows->push_back({"16 progress", "clusterd CPU while " + size + " report", Fmt(cores, " cores"), "", "", "", ""});
  rows->push_back({"16 progress", "clusterd memory per tracked rank (RSS growth)",
                   Fmt(result["bytes_per_tracked_rank"].get<double>(), " B"), "", "", "", ""});
  rows->push_back({"16 progress", "a 40 % slow rank named after (reports of a window of 5)",
                   std::to_string(reports_to_named) + " reports (" +
                       Fmt(result["slow_windows_to_named"].get<double>()) + " windows)",
                   "", "", "<= 3 windows", reports_to_named <= 3 * kProgressWindow ? "yes" : "no"});
  rows->push_back({"16 progress",
                   "a hang detected after its timeout (" + std::to_string(kProgressHangTimeoutS) + " s) +",
                   Fmt(hang_over_s, " s"), "", "", "<= 1 s", hang_over_s <= 1.0 ? "yes" : "no"});
  return "";
}

}  // namespace clusterd::bench
