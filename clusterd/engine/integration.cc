#include "clusterd/engine/integration.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "clusterd/engine/engine.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/state/incidents.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation_rule.h"

namespace clusterd {
namespace {

// NodeView::held_fault_ids, by node: for each job whose agent is TaskD, the
// trigger faults of its newest recovery while that recovery is RUNNING or
// SUCCEEDED at STEP_RETRY or PROCESS_RESTART and the fault is still in the
// activation it answered (a fault that comes back is a new incident).
std::map<std::string, std::set<std::string>> HeldFaults(const StateView& s) {
  std::map<std::string, std::set<std::string>> held;
  for (const auto& [job_id, job] : s.jobs()) {
    auto label = job.labels().find("mindcluster/process-recover-enable");
    if (label == job.labels().end() || (label->second != "on" && label->second != "pause")) continue;
    const auto recoveries = s.RecoveriesOfJob(job_id);
    if (recoveries.empty()) continue;
    const v1::Recovery& r = *recoveries.back();
    if (r.state() != v1::RECOVERY_STATE_RUNNING && r.state() != v1::RECOVERY_STATE_SUCCEEDED) continue;
    if (r.strategy() != v1::RECOVERY_STRATEGY_STEP_RETRY && r.strategy() != v1::RECOVERY_STRATEGY_PROCESS_RESTART) {
      continue;
    }
    for (const std::string& fid : r.trigger_fault_ids()) {
      const v1::Fault* f = s.FindFault(fid);
      if (f == nullptr || f->state() != v1::FAULT_STATE_ACTIVE) continue;
      const auto activated = f->activated_time().seconds() * 1'000'000'000LL + f->activated_time().nanos();
      const auto created = r.create_time().seconds() * 1'000'000'000LL + r.create_time().nanos();
      if (activated > created) continue;
      held[f->node()].insert(fid);
    }
  }
  return held;
}

class EngineCommands final : public ClusterCommands {
 public:
  EngineCommands(Engine* engine, const ClusterState* state, Principal principal)
      : engine_(engine), state_(state), principal_(std::move(principal)) {}

  void ReportFault(v1::ReportRequest report, Reply<v1::ReportResponse> reply) override {
    // Checked before it is queued, once, as FaultService.Report does.
    auto valid = Validate(std::move(report));
    if (!valid.ok()) {
      reply(valid.status());
      return;
    }
    Write<v1::ReportResponse>(
        std::move(reply), [report = *valid](ClusterState& state, Mutation* m) { return state.ApplyReport(report, m); });
  }

  void CreateJob(v1::Job job, Reply<v1::Job> reply) override {
    Write<v1::Job>(std::move(reply),
                   [job = std::move(job), source = principal_.actor()](ClusterState& state, Mutation* m) {
                     return state.ApplyCreateJob(job, m, source);
                   });
  }

  void UpdateJob(v1::Job job, Reply<v1::Job> reply) override {
    Write<v1::Job>(std::move(reply),
                   [job = std::move(job), source = principal_.actor()](ClusterState& state, Mutation* m) {
                     return state.ApplyUpdateJob(job, m, source);
                   });
  }

  void DeleteJob(std::string id, Reply<uint64_t> reply) override {
    Write<uint64_t>(std::move(reply),
                    [id = std::move(id), source = principal_.actor()](ClusterState& state, Mutation* m) {
                      return state.ApplyDeleteJob(id, m, source);
                    });
  }

  void ApplyPublicFaults(PubFaultPlan plan, PubFaultOptions options, Reply<PublicFaultsApplied> reply) override {
    Write<PublicFaultsApplied>(std::move(reply),
                               [plan = std::move(plan), options = std::move(options)](
                                   ClusterState& state, Mutation* m) -> StatusOr<PublicFaultsApplied> {
                                 auto applied = state.ApplyPublicFaults(plan, options, m);
                                 if (!applied.ok()) return applied.status();
                                 return PublicFaultsApplied{applied->applied, std::move(applied->dropped)};
                               });
  }

  void SetCordon(std::string node, bool cordon, std::string reason, Reply<v1::Node> reply) override {
    Write<v1::Node>(std::move(reply), [node = std::move(node), cordon, reason = std::move(reason),
                                       actor = principal_.actor()](ClusterState& state, Mutation* m) {
      return state.ApplyCordon(node, cordon, actor, reason, m);
    });
  }

  void SetSchedulingFindings(std::vector<v1::SchedulingFinding> findings) override {
    engine_->Submit([findings = std::move(findings)](ClusterState& state, Mutation*) mutable -> Engine::Done {
      state.set_scheduling_findings(std::move(findings));
      return {};
    });
  }

  void ReleaseDevice(std::string node, uint32_t device, std::string on_behalf_of, std::string reason,
                     Reply<v1::Device> reply) override {
    const std::string actor = on_behalf_of.empty() ? principal_.actor() : principal_.actor() + "/" + on_behalf_of;
    Write<v1::Device>(std::move(reply), [node = std::move(node), device, actor, reason = std::move(reason)](
                                            ClusterState& state, Mutation* m) {
      return ReleaseSeparatedDevice(state, node, device, actor, reason, m);
    });
  }

  void SetSeparationPolicy(SeparationPolicy policy, Reply<bool> reply) override {
    auto shared_reply = std::make_shared<Reply<bool>>(std::move(reply));
    const bool submitted = engine_->Submit([policy, shared_reply](ClusterState& state, Mutation*) -> Engine::Done {
      SeparationRule* rule = state.Attached<SeparationRule>();
      auto st =
          std::make_shared<Status>(rule != nullptr ? rule->ChangePolicy(policy)
                                                   : FailedPrecondition("no separation policy runs in this ClusterD"));
      return [shared_reply, st] {
        if (st->ok()) {
          (*shared_reply)(true);
        } else {
          (*shared_reply)(*st);
        }
      };
    });
    if (!submitted) (*shared_reply)(Unavailable("clusterd is shutting down"));
  }

  void RegisterNode(std::string node, v1::Inventory inventory, Reply<v1::Node> reply) override {
    Write<v1::Node>(std::move(reply), [node = std::move(node), inventory = std::move(inventory),
                                       source = principal_.actor()](ClusterState& state, Mutation* m) {
      return state.ApplyRegisterNode(node, inventory, source, m);
    });
  }

  void OnCommit(std::function<void()> notify) override { engine_->AddCommitListener(std::move(notify)); }

  StatusOr<v1::Job> GetJob(const std::string& id) const override {
    return state_->Read([&](const StateView& s) { return s.GetJob(id); });
  }
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& req) const override {
    return state_->Read([&](const StateView& s) { return s.ListJobs(req); });
  }
  StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const override {
    return state_->Read([&](const StateView& s) { return s.GetNode(req); });
  }
  StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& req) const override {
    return state_->Read([&](const StateView& s) { return s.ListNodes(req); });
  }
  StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest& req) const override {
    return state_->Read([&](const StateView& s) { return s.ListFaults(req); });
  }
  StatusOr<v1::ListValidationsResponse> ListValidations(const v1::ListValidationsRequest& req) const override {
    return state_->Read([&](const StateView&) -> StatusOr<v1::ListValidationsResponse> {
      const ValidationRule* rule = state_->Attached<ValidationRule>();
      if (rule == nullptr) return v1::ListValidationsResponse{};
      return rule->List(req);
    });
  }
  std::map<std::string, std::string> AvoidedNodes() const override {
    return state_->Read([&](const StateView& s) {
      const IncidentRule* rule = state_->Attached<IncidentRule>();
      return rule == nullptr ? std::map<std::string, std::string>() : rule->AvoidedNodes(s);
    });
  }
  std::vector<v1::SchedulingFinding> SchedulingFindings() const override {
    return state_->Read([](const StateView& s) { return s.scheduling_findings(); });
  }
  NodeChanges NodesChangedSince(uint64_t since) const override {
    return state_->Read([&](const StateView& s) {
      NodeChanges out;
      out.revision = s.revision();
      if (since != 0 && since >= out.revision) return out;
      std::set<std::string> changed = s.NodesChangedAfter(since);
      // The nodes of every recovery that changed: what it holds may have.
      for (const auto& [id, r] : s.recoveries()) {
        if (r.revision() <= since) continue;
        for (const std::string& fid : r.trigger_fault_ids()) {
          if (const v1::Fault* f = s.FindFault(fid)) changed.insert(f->node());
        }
      }
      const std::map<std::string, std::set<std::string>> held = HeldFaults(s);
      for (const std::string& name : changed) {
        NodeView view;
        if (!s.DescribeNode(name, &view.node, &view.devices)) continue;
        std::vector<const v1::Fault*> faults;
        s.AppendFaultsOnNode(name, &faults);
        for (const v1::Fault* f : faults) {
          if (f->state() == v1::FAULT_STATE_ACTIVE) view.active_faults.push_back(*f);
        }
        const std::set<uint32_t> in_use = s.DevicesInUse(name);
        view.devices_in_use.assign(in_use.begin(), in_use.end());
        if (auto h = held.find(name); h != held.end()) view.held_fault_ids.assign(h->second.begin(), h->second.end());
        out.nodes.push_back(std::move(view));
      }
      return out;
    });
  }

 private:
  // Submits `apply` (StatusOr<T>(ClusterState&, Mutation*), on the writer
  // thread) as a client's write and replies once its change is durable, or
  // at once when the write is refused.
  template <typename T, typename Apply>
  void Write(Reply<T> reply, Apply apply) {
    auto shared_reply = std::make_shared<Reply<T>>(std::move(reply));
    Status submitted = engine_->SubmitWrite(
        [shared_reply, apply = std::move(apply)](ClusterState& state, Mutation* m) -> Engine::Done {
          auto result = std::make_shared<StatusOr<T>>(apply(state, m));
          return [shared_reply, result] { (*shared_reply)(std::move(*result)); };
        });
    if (!submitted.ok()) (*shared_reply)(std::move(submitted));
  }

  Engine* const engine_;
  const ClusterState* const state_;
  const Principal principal_;
};

}  // namespace

Status IntegrationRegistry::Register(std::string name, Factory factory) {
  if (name.empty()) return InvalidArgument("integration registry: empty name");
  if (!factory) return InvalidArgument("integration registry: " + name + " has no factory");
  if (Has(name)) return InvalidArgument("integration registry: " + name + " is already registered");
  names_.push_back(std::move(name));
  factories_.push_back(std::move(factory));
  return Status::Ok();
}

bool IntegrationRegistry::Has(std::string_view name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

StatusOr<std::unique_ptr<Integration>> IntegrationRegistry::Create(std::string_view name,
                                                                   const ClusterdConfig& config) const {
  auto it = std::find(names_.begin(), names_.end(), name);
  if (it == names_.end()) {
    std::string known;
    for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
    return InvalidArgument("integrations: \"" + std::string(name) + "\" is not one of the known integrations (" +
                           (known.empty() ? "none yet" : known) + ")");
  }
  return factories_[static_cast<size_t>(it - names_.begin())](config);
}

std::unique_ptr<ClusterCommands> MakeEngineCommands(Engine* engine, const ClusterState* state, Principal principal) {
  return std::make_unique<EngineCommands>(engine, state, std::move(principal));
}

}  // namespace clusterd
