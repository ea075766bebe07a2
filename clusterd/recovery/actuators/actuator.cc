// Action names and JSON, the "none" actuator, and the worker pool that the
// exec and webhook actuators run their actions on.
#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/actuators/pooled.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

namespace clusterd {
namespace {

using actuator_internal::RunAction;

// RFC 3339, UTC, milliseconds: "2026-11-30T01:02:03.000Z".
std::string FormatDeadline(TimePoint t) {
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(t.time_since_epoch());
  const auto secs = std::chrono::floor<std::chrono::seconds>(ms);
  const std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  if (!gmtime_r(&tt, &tm)) return "";
  char date[40];
  if (std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm) == 0) return "";
  char out[56];
  std::snprintf(out, sizeof out, "%s.%03dZ", date, static_cast<int>((ms - secs).count()));
  return out;
}

// "POD_RESCHEDULE"; the number for a value this build does not know.
std::string StrategyName(v1::RecoveryStrategy strategy) {
  constexpr std::string_view kPrefix = "RECOVERY_STRATEGY_";
  const std::string& name = v1::RecoveryStrategy_Name(strategy);
  if (name.empty()) return std::to_string(static_cast<int>(strategy));
  if (std::string_view(name).starts_with(kPrefix)) return name.substr(kPrefix.size());
  return name;
}

class PooledActuator final : public Actuator {
 public:
  PooledActuator(std::string kind, int workers, RunAction run) : kind_(std::move(kind)), run_(std::move(run)) {
    if (workers < 1) workers = 1;
    workers_.reserve(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { Work(); });
  }

  ~PooledActuator() override {
    Stop();
    {
      std::lock_guard lock(mu_);
      destroying_ = true;
    }
    cv_.notify_all();
    if (refuser_.joinable()) refuser_.join();
  }

  void Execute(ActionRequest req, Done done) override {
    {
      std::lock_guard lock(mu_);
      if (!stopping_) {
        queue_.push_back({std::move(req), std::move(done)});
      } else {
        // `done` must not run inside Execute; the workers are gone, so one
        // thread (started on first need) fails what arrives after Stop().
        refused_.push_back(std::move(done));
        if (!refuser_.joinable()) refuser_ = std::thread([this] { Refuse(); });
      }
    }
    cv_.notify_all();
  }

  void Stop() override {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    std::lock_guard lock(join_mu_);
    for (auto& t : workers_) {
      if (t.joinable()) t.join();
    }
  }

  std::string_view kind() const override { return kind_; }

 private:
  struct Item {
    ActionRequest req;
    Done done;
  };

  void Work() {
    for (;;) {
      Item item;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      ActionResult result;
      try {
        result = run_(item.req);
      } catch (const std::exception& e) {
        result = {false, actuator_internal::OneLine(kind_ + " actuator: " + e.what(), 512)};
      }
      item.done(std::move(result));
    }
  }

  void Refuse() {
    for (;;) {
      Done done;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return destroying_ || !refused_.empty(); });
        if (refused_.empty()) return;
        done = std::move(refused_.front());
        refused_.pop_front();
      }
      done(ActionResult{false, kind_ + " actuator is stopped"});
    }
  }

  const std::string kind_;
  const RunAction run_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  std::deque<Done> refused_;
  bool stopping_ = false;
  bool destroying_ = false;
  std::thread refuser_;  // guarded by mu_ until destruction

  std::mutex join_mu_;  // one Stop() joins at a time
  std::vector<std::thread> workers_;
};

// Length of the UTF-8 sequence at the start of `s`, 0 when it is invalid
// (overlong forms, surrogates and code points above U+10FFFF included).
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < len) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < len; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return len;
}

}  // namespace

std::string_view ActionName(v1::ClusterAction action) {
  switch (action) {
    case v1::CLUSTER_ACTION_ISOLATE_DEVICE: return "isolate_device";
    case v1::CLUSTER_ACTION_ISOLATE_NODE: return "isolate_node";
    case v1::CLUSTER_ACTION_RESET_DEVICE: return "reset_device";
    case v1::CLUSTER_ACTION_RESCHEDULE_PODS: return "reschedule_pods";
    case v1::CLUSTER_ACTION_RESTART_JOB: return "restart_job";
    default: return "unspecified";
  }
}

std::string ActionJson(const ActionRequest& req) {
  nlohmann::ordered_json j;
  j["idempotency_key"] = req.idempotency_key;
  j["recovery_id"] = req.recovery_id;
  j["job_id"] = req.job_id;
  j["action"] = std::string(ActionName(req.action));
  j["strategy"] = StrategyName(req.strategy);
  j["node"] = req.node;
  if (req.device) j["device_id"] = *req.device;
  j["ranks"] = req.ranks;
  j["deadline"] = FormatDeadline(req.deadline);
  if (!req.avoid.empty()) j["avoid"] = req.avoid;
  // Invalid UTF-8 in a string becomes U+FFFD rather than an exception.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::unique_ptr<Actuator> MakeNoneActuator() {
  return actuator_internal::MakePooledActuator("none", 1, [](const ActionRequest&) {
    return ActionResult{false, "no actuator configured"};
  });
}

namespace actuator_internal {

std::unique_ptr<Actuator> MakePooledActuator(std::string kind, int workers, RunAction run) {
  return std::make_unique<PooledActuator>(std::move(kind), workers, std::move(run));
}

std::string OneLine(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(text.size(), max_bytes));
  size_t i = 0;
  // Leading whitespace and control characters are dropped.
  while (i < text.size() && static_cast<unsigned char>(text[i]) <= 0x20) ++i;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    std::string_view piece;
    size_t advance = 1;
    if (c < 0x20 || c == 0x7F) {
      piece = " ";
    } else if (const size_t len = Utf8SequenceLength(text.substr(i)); len > 0) {
      piece = text.substr(i, len);
      advance = len;
    } else {
      piece = "?";
    }
    if (out.size() + piece.size() > max_bytes) break;
    out += piece;
    i += advance;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace actuator_internal
}  // namespace clusterd
