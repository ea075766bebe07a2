#include "validation.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <google/protobuf/util/time_util.h>

#include "agents.h"
#include "clusterd/v1/admin.grpc.pb.h"

namespace clusterd::bench {
namespace {

constexpr char kValPrefix[] = "bench-val-";
constexpr int kChipsPerNode = 16;
constexpr int kMaxInFlight = 64;  // validation_max_in_flight's default

// The series `name{outcome="passed"}` of clusterd's /metrics; -1 when absent.
double PassedValidations(const ClusterdProcess& cd) {
  std::istringstream text(cd.MetricsText());
  const std::string want = "clusterd_validations_finished_total{outcome=\"passed\"}";
  for (std::string line; std::getline(text, line);) {
    if (line.rfind(want, 0) == 0) return std::atof(line.c_str() + want.size());
  }
  return -1;
}

// The agents' side: each request answered (passed) `duration` after it came;
// counts the validations running at once as the agents see them.
class Validators {
 public:
  Validators(AgentPool* pool, int64_t duration_ns) : pool_(pool), duration_ns_(duration_ns) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Validators() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Validators(const Validators&) = delete;
  Validators& operator=(const Validators&) = delete;

  // A gRPC thread: a request arrived.
  void Asked(const v1::ValidationRequest& req) {
    {
      std::lock_guard lock(mu_);
      if (!asked_ids_.insert(req.validation_id()).second) return;  // asked again: answered once
      due_.push_back({NowNs() + duration_ns_, req.node(), req.validation_id()});
      ++running_;
      max_running_ = std::max(max_running_, running_);
    }
    cv_.notify_all();
  }
  size_t max_running() {
    std::lock_guard lock(mu_);
    return max_running_;
  }

 private:
  struct Due {
    int64_t at;
    std::string node, id;
  };
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      if (stop_) return;
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const int64_t wait = due_.front().at - NowNs();
      if (wait > 0) {
        cv_.wait_for(lock, std::chrono::nanoseconds(wait));
        continue;
      }
      Due d = std::move(due_.front());  // in arrival order, each the same duration: the earliest first
      due_.pop_front();
      --running_;
      lock.unlock();
      v1::ValidationResult r;
      r.set_validation_id(d.id);
      r.set_passed(true);
      auto* c = r.add_checks();
      c->set_name("health-stable");
      c->set_passed(true);
      c->set_exit_code(-1);
      *c->mutable_duration() = google::protobuf::util::TimeUtil::NanosecondsToDuration(duration_ns_);
      const int i = pool_->IndexOf(d.node);
      if (i >= 0) {
        v1::ConnectRequest answer;
        *answer.mutable_validation_result() = std::move(r);
        pool_->SendMessage(static_cast<size_t>(i), std::move(answer));
      }
      lock.lock();
    }
  }

  AgentPool* pool_;
  const int64_t duration_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<Due> due_;
  std::set<std::string> asked_ids_;
  size_t running_ = 0, max_running_ = 0;
  std::thread thread_;
};

}  // namespace

std::string RunReturnToService(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows) {
  const int nodes = o.validation_nodes;
  const int chips = std::min(o.validation_chips, nodes * kChipsPerNode);
  const double duration_s = o.validation_ms / 1000.0;
  std::cerr << "[bench] scenario 17: return to service, " << nodes << " nodes x " << kChipsPerNode << " chips, "
            << chips << " chips validated at once, each " << duration_s << " s\n";
  ClusterdProcess cd(o.clusterd, tmp.Sub("clusterd-validation"),
                     {"--validation-enabled", "true", "--node-grace", "1h"});
  if (std::string err = cd.Start(); !err.empty()) return "scenario 17: clusterd: " + err;
  const int devices_before = DevicesPerNode();
  SetDevicesPerNode(kChipsPerNode);
  std::string err;
  json result;
  {
    std::vector<std::string> names = NodeNames(kValPrefix, nodes);
    AgentPool pool(cd.target(), names, o.short_mode ? 4 : o.agent_channels);
    Validators validators(&pool, static_cast<int64_t>(duration_s * 1e9));
    pool.set_on_message([&validators](size_t, const v1::ConnectResponse& m) {
      if (m.has_validation()) validators.Asked(m.validation());
    });
    err = pool.Connect(600);
    auto admin = v1::AdminService::NewStub(grpc::CreateChannel(cd.target(), grpc::InsecureChannelCredentials()));
    const int64_t start = NowNs();
    // The chips clear at once: one per node, across the nodes first.
    for (int k = 0; err.empty() && k < chips; ++k) {
      v1::StartValidationRequest req;
      req.set_node(names[static_cast<size_t>(k % nodes)]);
      req.set_device_id(static_cast<uint32_t>(k / nodes));
      req.set_actor("bench");
      req.set_reason("scenario 17");
      v1::StartValidationResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      if (auto st = admin->StartValidation(&ctx, req, &resp); !st.ok()) {
        err = "StartValidation " + req.node() + "/" + std::to_string(req.device_id()) + ": " + st.error_message();
      }
    }
    const int64_t started = NowNs();
    // Back in service: every chip's validation passed in clusterd.
    const double waves = std::ceil(static_cast<double>(chips) / kMaxInFlight);
    const int64_t end = NowNs() + static_cast<int64_t>((waves * duration_s * 4 + 120) * 1e9);
    while (err.empty() && PassedValidations(cd) < chips) {
      if (NowNs() > end) err = "scenario 17: not every validation passed in time";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int64_t drained = NowNs();
    if (err.empty()) {
      const double drain_s = static_cast<double>(drained - start) / 1e9;
      const double ratio = drain_s / duration_s;
      const size_t max_running = validators.max_running();
      result = {{"nodes", nodes},
                {"chips", chips},
                {"validation_s", duration_s},
                {"start_calls_s", static_cast<double>(started - start) / 1e9},
                {"drain_s", drain_s},
                {"drain_per_validation", ratio},
                {"waves", waves},
                {"max_running", max_running},
                {"bound", kMaxInFlight}};
      rows->push_back(
          {"17 return",
           std::to_string(chips) + " chips validating at once: most running (" + std::to_string(nodes) + " nodes x 16)",
           std::to_string(max_running), std::to_string(kMaxInFlight) + " (bound)", "", "<= bound",
           Met(max_running <= static_cast<size_t>(kMaxInFlight))});
      rows->push_back({"17 return", "fault clear -> all back in service (drain)", Fmt(drain_s, " s"),
                       Fmt(duration_s, " s (one validation)"), Fmt(ratio, "x"),
                       "~" + Fmt(waves) + "x (ceil(chips/64) waves)", Met(ratio <= waves * 1.5 + 1)});
    }
    (void)pool.Close(60);
  }
  SetDevicesPerNode(devices_before);
  cd.Stop();
  if (!err.empty()) return err;
  (*out)["return_to_service"] = result;
  return "";
}

}  // namespace clusterd::bench
