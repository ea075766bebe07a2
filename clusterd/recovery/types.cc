#include "clusterd/recovery/types.h"

#include <algorithm>
#include <cctype>
#include <iterator>

#include "common/validation.h"

namespace clusterd::recovery {
namespace {

using namespace std::chrono_literals;

char Lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

bool ValidPatternChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '*' || c == '?';
}

}  // namespace

std::string_view StrategyName(Strategy s) {
  switch (s) {
    case Strategy::kStepRetry: return "STEP_RETRY";
    case Strategy::kProcessRestart: return "PROCESS_RESTART";
    case Strategy::kPodReschedule: return "POD_RESCHEDULE";
    case Strategy::kJobReschedule: return "JOB_RESCHEDULE";
    case Strategy::kScaleIn: return "SCALE_IN";
    case Strategy::kFail: return "FAIL";
  }
  return "UNKNOWN";
}

std::optional<Strategy> ParseStrategy(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (Strategy s : kLadder) {
    if (StrategyName(s) == upper) return s;
  }
  return std::nullopt;
}

std::string_view JobStatusName(JobStatus s) {
  switch (s) {
    case JobStatus::kPending: return "PENDING";
    case JobStatus::kRunning: return "RUNNING";
    case JobStatus::kRecovering: return "RECOVERING";
    case JobStatus::kSucceeded: return "SUCCEEDED";
    case JobStatus::kFailed: return "FAILED";
  }
  return "UNKNOWN";
}

std::string_view ActionName(Action a) {
  switch (a) {
    case Action::kNone: return "NONE";
    case Action::kWait: return "WAIT";
    case Action::kRecover: return "RECOVER";
  }
  return "UNKNOWN";
}

std::string_view GateName(Gate g) {
  switch (g) {
    case Gate::kNone: return "none";
    case Gate::kJobNotRunning: return "job-not-running";
    case Gate::kHoldDown: return "hold-down";
    case Gate::kRecoveryRunning: return "recovery-running";
    case Gate::kPaused: return "paused";
    case Gate::kJobBudget: return "job-budget";
    case Gate::kNodeBudget: return "node-budget";
    case Gate::kMaxConcurrent: return "max-concurrent-recoveries";
    case Gate::kMaxIsolated: return "max-isolated-nodes";
  }
  return "unknown";
}

bool CodeMatches(std::string_view pattern, std::string_view code) {
  // Iterative glob with single-star backtracking: linear in practice, no recursion.
  size_t p = 0, c = 0, star = std::string_view::npos, mark = 0;
  while (c < code.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || Lower(pattern[p]) == Lower(code[c]))) {
      ++p;
      ++c;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = c;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      c = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Duration DefaultStepTimeout(Strategy s) {
  switch (s) {
    case Strategy::kStepRetry: return 2min;
    case Strategy::kProcessRestart: return 5min;
    case Strategy::kPodReschedule: return 10min;
    case Strategy::kJobReschedule: return 20min;
    case Strategy::kScaleIn: return 10min;
    case Strategy::kFail: return 0s;
  }
  return 0s;
}

Duration JobPolicy::TimeoutFor(Strategy s) const {
  auto it = step_timeouts.find(s);
  return it != step_timeouts.end() ? it->second : DefaultStepTimeout(s);
}

int Job::ReplicaCount() const {
  std::set<int> replicas;
  for (const auto& [rank, where] : placement) replicas.insert(ReplicaOf(rank));
  return static_cast<int>(replicas.size());
}

void Job::Index() {
  by_node.clear();
  for (const auto& [rank, where] : placement) {  // rank order: each list comes out sorted
    NodeRanks& n = by_node[where.node];
    n.all.push_back(rank);
    if (where.device) {
      n.by_device[*where.device].push_back(rank);
    } else if (where.any_device) {
      n.any_device.push_back(rank);
    }
  }
  // A device's ranks include those that may hold it.
  for (auto& [node, n] : by_node) {
    if (n.any_device.empty()) continue;
    for (auto& [device, ranks] : n.by_device) {
      std::vector<int> merged;
      std::merge(ranks.begin(), ranks.end(), n.any_device.begin(), n.any_device.end(), std::back_inserter(merged));
      ranks = std::move(merged);
    }
  }
  indexed_ranks = placement.size();
}

std::span<const int> Job::Hits(const std::string& node, std::optional<uint32_t> device) const {
  auto n = by_node.find(node);
  if (n == by_node.end()) return {};
  if (!device) return n->second.all;
  auto d = n->second.by_device.find(*device);
  return d == n->second.by_device.end() ? std::span<const int>(n->second.any_device) : std::span<const int>(d->second);
}

Status ValidatePolicy(const JobPolicy& policy) {
  for (const auto& [strategy, timeout] : policy.step_timeouts) {
    if (strategy == Strategy::kFail) return InvalidArgument("step_timeouts: FAIL has no timeout");
    if (timeout <= Duration::zero()) {
      return InvalidArgument("step_timeouts[" + std::string(StrategyName(strategy)) + "]: must be positive");
    }
  }
  if (policy.max_retries_per_job && *policy.max_retries_per_job < 0) {
    return InvalidArgument("max_retries_per_job: must be >= 0");
  }
  if (policy.max_retries_per_node && *policy.max_retries_per_node < 0) {
    return InvalidArgument("max_retries_per_node: must be >= 0");
  }
  if (policy.hold_down < Duration::zero()) return InvalidArgument("hold_down: must be >= 0");
  if (policy.escalation_window < Duration::zero()) return InvalidArgument("escalation_window: must be >= 0");
  if (policy.min_replicas < 1) return InvalidArgument("min_replicas: must be >= 1");
  for (size_t i = 0; i < policy.silences.size(); ++i) {
    const std::string& code = policy.silences[i].code;
    if (code.empty() || code.size() > 64 || !std::all_of(code.begin(), code.end(), ValidPatternChar)) {
      return InvalidArgument("silences[" + std::to_string(i) +
                             "].code: 1-64 characters of [A-Za-z0-9_.-] and the wildcards * and ?");
    }
  }
  return Status::Ok();
}

Status ValidateJob(const Job& job) {
  if (Status st = ValidateToken("id", job.id); !st.ok()) return st;
  if (job.placement.empty()) return InvalidArgument("placement: at least one rank");
  if (job.ranks_per_replica < 1) return InvalidArgument("ranks_per_replica: must be >= 1");
  if (job.ranks_per_device < 1) return InvalidArgument("ranks_per_device: must be >= 1");
  std::map<DeviceRef, int> used;
  for (const auto& [rank, where] : job.placement) {
    const std::string field = "placement[" + std::to_string(rank) + "]";
    if (rank < 0) return InvalidArgument(field + ": rank must be >= 0");
    if (Status st = ValidateNodeName(field + ".node", where.node); !st.ok()) return st;
    if (where.device && ++used[DeviceRef{where.node, *where.device}] > job.ranks_per_device) {
      return InvalidArgument(
          field + ": device " + std::to_string(*where.device) + " on " + where.node + " is already used by " +
          (job.ranks_per_device == 1 ? std::string("another rank") : std::to_string(job.ranks_per_device) + " ranks"));
    }
  }
  if (Status st = ValidatePolicy(job.policy); !st.ok()) return InvalidArgument("policy." + st.message());
  if (job.policy.min_replicas > job.ReplicaCount() && job.policy.allowed.contains(Strategy::kScaleIn)) {
    return InvalidArgument("policy.min_replicas: larger than the job's " + std::to_string(job.ReplicaCount()) +
                           " replicas");
  }
  return Status::Ok();
}

Status ValidateLimits(const Limits& limits) {
  if (limits.max_isolated_node_percent < 0 || limits.max_isolated_node_percent > 100) {
    return InvalidArgument("max_isolated_node_percent: 0-100");
  }
  if (limits.max_concurrent_recoveries < 0) return InvalidArgument("max_concurrent_recoveries: must be >= 0");
  return Status::Ok();
}

}  // namespace clusterd::recovery
