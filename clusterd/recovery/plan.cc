#include "clusterd/recovery/plan.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "clusterd/recovery/convert.h"

namespace clusterd::recovery {

namespace {

std::vector<uint32_t> AllRanks(const v1::Job& job) {
  std::vector<uint32_t> out;
  for (const auto& p : job.placement()) out.push_back(p.rank());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void PlanSteps(const v1::Job& job, Strategy strategy, v1::Recovery* r) {
  const v1::RecoveryStrategy proto = ToProto(strategy);
  std::vector<uint32_t> hit(r->hit_ranks().begin(), r->hit_ranks().end());
  auto add = [&](v1::JobCommand command, v1::ClusterAction action, const std::vector<uint32_t>& ranks) {
    v1::RecoveryStep* s = r->add_steps();
    s->set_index(static_cast<uint32_t>(r->steps_size() - 1));
    s->set_strategy(proto);
    s->set_command(command);
    s->set_action(action);
    for (uint32_t rank : ranks) s->add_ranks(rank);
    s->set_state(v1::STEP_STATE_PENDING);
    s->set_idempotency_key(r->id() + "/" + std::to_string(s->index()));
    return s;
  };
  auto agent = [&](v1::JobCommand c, const std::vector<uint32_t>& ranks) {
    return add(c, v1::CLUSTER_ACTION_UNSPECIFIED, ranks);
  };
  auto act = [&](v1::ClusterAction a, const std::vector<uint32_t>& ranks) {
    return add(v1::JOB_COMMAND_UNSPECIFIED, a, ranks);
  };
  auto isolate = [&]() {
    for (const auto& node : r->isolate_nodes()) act(v1::CLUSTER_ACTION_ISOLATE_NODE, {})->set_node(node);
    for (const auto& d : r->isolate_devices()) {
      auto* s = act(v1::CLUSTER_ACTION_ISOLATE_DEVICE, {});
      s->set_node(d.node());
      s->set_device_id(d.device_id());
    }
  };
  const std::vector<uint32_t> all = AllRanks(job);
  switch (strategy) {
    case Strategy::kStepRetry: agent(v1::JOB_COMMAND_RETRY_STEP, hit); break;
    case Strategy::kProcessRestart:
      if (r->reset_devices_size() > 0) {
        agent(v1::JOB_COMMAND_STOP, hit);
        for (const auto& d : r->reset_devices()) {
          auto* s = act(v1::CLUSTER_ACTION_RESET_DEVICE, {});
          s->set_node(d.node());
          s->set_device_id(d.device_id());
        }
      }
      agent(v1::JOB_COMMAND_RESTART_PROCESSES, hit);
      break;
    case Strategy::kPodReschedule:
      if (r->graceful()) agent(v1::JOB_COMMAND_CHECKPOINT, all);
      agent(v1::JOB_COMMAND_PAUSE, all);
      isolate();
      act(v1::CLUSTER_ACTION_RESCHEDULE_PODS, hit);
      agent(v1::JOB_COMMAND_RESUME, hit);  // the ranks that moved; every rank resumes
      break;
    case Strategy::kJobReschedule:
      agent(v1::JOB_COMMAND_STOP, all);
      isolate();
      act(v1::CLUSTER_ACTION_RESTART_JOB, all);
      break;
    case Strategy::kScaleIn: {
      // The ranks of every hit replica leave.
      const uint32_t per = std::max<uint32_t>(1, job.policy().ranks_per_replica());
      std::set<uint32_t> replicas;
      for (uint32_t rank : hit) replicas.insert(rank / per);
      std::vector<uint32_t> drop;
      for (uint32_t rank : all) {
        if (replicas.contains(rank / per)) drop.push_back(rank);
      }
      isolate();
      agent(v1::JOB_COMMAND_SCALE_IN, drop);
      break;
    }
    case Strategy::kFail: break;
  }
}

void SetActions(const Decision& d, v1::Recovery* r) {
  r->clear_isolate_nodes();
  r->clear_isolate_devices();
  r->clear_reset_devices();
  for (const auto& n : d.isolate_nodes) r->add_isolate_nodes(n);
  for (const auto& dev : d.isolate_devices) {
    auto* x = r->add_isolate_devices();
    x->set_node(dev.node);
    x->set_device_id(dev.device);
  }
  for (const auto& dev : d.reset_devices) {
    auto* x = r->add_reset_devices();
    x->set_node(dev.node);
    x->set_device_id(dev.device);
  }
}

}  // namespace clusterd::recovery
