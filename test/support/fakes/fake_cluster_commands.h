// An in-memory ClusterCommands for unit tests of integrations: no engine, no
// disk, no threads. Writes are applied to plain maps and replied to before the
// call returns (a real facade replies on the writer thread; an integration
// must not depend on either). Set `refusal` to refuse every write with it, as
// the real facade does while writes are refused. Not thread-safe.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/engine/integration.h"

namespace clusterd::testing {

class FakeClusterCommands final : public ClusterCommands {
 public:
  explicit FakeClusterCommands(Principal principal = {}) : principal_(std::move(principal)) {}

  struct Cordon {
    bool cordoned = false;
    std::string actor;
    std::string reason;
  };

  // What the writes did.
  std::vector<v1::ReportRequest> reports;
  std::map<std::string, v1::Job> jobs;
  std::map<std::string, Cordon> cordons;  // node -> last SetCordon
  std::map<std::string, v1::Node> nodes;  // for GetNode/ListNodes; filled by the test
  // GetNode's detail of a node (devices, active faults); filled by the test.
  std::map<std::string, std::vector<v1::Device>> devices;
  std::map<std::string, std::vector<v1::Fault>> node_faults;
  std::map<std::string, std::vector<std::string>> held_faults;  // NodeView::held_fault_ids
  std::map<std::string, std::vector<uint32_t>> in_use;          // NodesChangedSince's devices_in_use
  uint64_t revision = 0;
  Status refusal;  // non-OK: every write is refused with it

  void ReportFault(v1::ReportRequest report, Reply<v1::ReportResponse> reply) override {
    if (!refusal.ok()) return reply(refusal);
    v1::ReportResponse resp;
    resp.set_revision(++revision);
    resp.mutable_fault()->set_node(report.node());
    resp.mutable_fault()->set_code(report.code());
    resp.mutable_fault()->set_reporter(report.reporter());
    resp.mutable_fault()->set_external_id(report.id());
    resp.mutable_fault()->set_state(report.action() == v1::TRANSITION_ACTION_RAISE ? v1::FAULT_STATE_ACTIVE
                                                                                   : v1::FAULT_STATE_CLEARED);
    reports.push_back(std::move(report));
    reply(std::move(resp));
  }

  void CreateJob(v1::Job job, Reply<v1::Job> reply) override {
    if (!refusal.ok()) return reply(refusal);
    if (jobs.count(job.id())) return reply(Status(StatusCode::kAlreadyExists, "job " + job.id() + " exists"));
    job.set_revision(++revision);
    jobs[job.id()] = job;
    reply(std::move(job));
  }

  void UpdateJob(v1::Job job, Reply<v1::Job> reply) override {
    if (!refusal.ok()) return reply(refusal);
    if (!jobs.count(job.id())) return reply(NotFound("job " + job.id() + " does not exist"));
    job.set_revision(++revision);
    jobs[job.id()] = job;
    reply(std::move(job));
  }

  void DeleteJob(std::string id, Reply<uint64_t> reply) override {
    if (!refusal.ok()) return reply(refusal);
    if (jobs.erase(id) == 0) return reply(NotFound("job " + id + " does not exist"));
    reply(++revision);
  }

  // Public faults: each planned one becomes a report of the plan's reporter
  // (raise, or clear for a recover), so ListFaults shows them.
  std::vector<PubFaultPlan> public_faults;
  void ApplyPublicFaults(PubFaultPlan plan, PubFaultOptions, Reply<PublicFaultsApplied> reply) override {
    if (!refusal.ok()) return reply(refusal);
    PublicFaultsApplied out;
    for (const auto& f : plan.faults) {
      v1::ReportRequest r;
      r.set_reporter(plan.reporter);
      r.set_id(f.fault_id + "/" + f.node + "/" + std::to_string(f.device));
      r.set_node(f.node);
      r.set_device_id(f.device);
      r.set_code(f.code);
      r.set_level(f.level);
      r.set_action(f.assertion == PlannedPubFault::Assertion::kRecover ? v1::TRANSITION_ACTION_CLEAR
                                                                       : v1::TRANSITION_ACTION_RAISE);
      reports.push_back(std::move(r));
      ++out.applied;
    }
    ++revision;
    public_faults.push_back(std::move(plan));
    reply(std::move(out));
  }

  void SetCordon(std::string node, bool cordon, std::string reason, Reply<v1::Node> reply) override {
    if (!refusal.ok()) return reply(refusal);
    cordons[node] = Cordon{cordon, principal_.actor(), reason};
    v1::Node n = nodes.count(node) ? nodes[node] : v1::Node();
    n.set_name(node);
    n.set_cordoned(cordon);
    n.set_revision(++revision);
    nodes[node] = n;
    reply(std::move(n));
  }

  // RegisterNode: a node of this name that an agent registered (in `nodes`
  // without registered_by) is answered unchanged.
  std::vector<std::string> registered;
  void RegisterNode(std::string node, v1::Inventory inventory, Reply<v1::Node> reply) override {
    if (!refusal.ok()) return reply(refusal);
    if (auto it = nodes.find(node); it != nodes.end() && it->second.registered_by().empty()) return reply(it->second);
    v1::Node n;
    n.set_name(node);
    n.set_registered_by(principal_.actor());
    *n.mutable_inventory() = std::move(inventory);
    n.set_revision(++revision);
    nodes[node] = n;
    registered.push_back(node);
    reply(std::move(n));
  }

  // ReleaseDevice: the device in `devices` is no longer separated.
  struct Release {
    std::string node;
    uint32_t device = 0;
    std::string actor;
    std::string reason;
  };
  std::vector<Release> releases;
  void ReleaseDevice(std::string node, uint32_t device, std::string on_behalf_of, std::string reason,
                     Reply<v1::Device> reply) override {
    if (!refusal.ok()) return reply(refusal);
    for (v1::Device& d : devices[node]) {
      if (d.id() != device) continue;
      const bool was = d.separated();
      d.set_separated(false);
      d.clear_separated_time();
      if (was) {
        ++revision;
        releases.push_back(Release{
            node, device, on_behalf_of.empty() ? principal_.actor() : principal_.actor() + "/" + on_behalf_of, reason});
      }
      return reply(d);
    }
    reply(NotFound("node " + node + " has no device " + std::to_string(device)));
  }
  // SetSeparationPolicy: each policy set, in order.
  std::vector<SeparationPolicy> policies;
  void SetSeparationPolicy(SeparationPolicy policy, Reply<bool> reply) override {
    if (Status st = ValidateSeparationPolicy(policy); !st.ok()) return reply(st);
    policies.push_back(policy);
    reply(true);
  }

  std::vector<v1::SchedulingFinding> findings;  // SchedulingFindings; filled by the test
  std::vector<v1::SchedulingFinding> SchedulingFindings() const override { return findings; }
  std::map<std::string, std::string> avoided;  // AvoidedNodes (node -> incident); filled by the test
  std::map<std::string, std::string> AvoidedNodes() const override { return avoided; }

  StatusOr<v1::Job> GetJob(const std::string& id) const override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return NotFound("job " + id + " does not exist");
    return it->second;
  }
  StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest&) const override {
    v1::ListJobsResponse resp;
    for (const auto& [id, job] : jobs) *resp.add_jobs() = job;
    return resp;
  }
  StatusOr<v1::GetNodeResponse> GetNode(const v1::GetNodeRequest& req) const override {
    auto it = nodes.find(req.name());
    if (it == nodes.end()) return NotFound("node " + req.name() + " is not registered");
    v1::GetNodeResponse resp;
    *resp.mutable_node() = it->second;
    if (auto d = devices.find(req.name()); d != devices.end()) {
      for (const auto& device : d->second) *resp.add_devices() = device;
    }
    if (auto f = node_faults.find(req.name()); f != node_faults.end()) {
      for (const auto& fault : f->second) *resp.add_active_faults() = fault;
    }
    return resp;
  }
  StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest&) const override {
    v1::ListNodesResponse resp;
    for (const auto& [name, node] : nodes) *resp.add_nodes() = node;
    return resp;
  }
  // The faults the reports raised and have not cleared.
  StatusOr<v1::ListFaultsResponse> ListFaults(const v1::ListFaultsRequest&) const override {
    std::map<std::string, v1::Fault> active;
    for (const auto& r : reports) {
      const std::string key = r.reporter() + "/" + r.id();
      if (r.action() != v1::TRANSITION_ACTION_RAISE) {
        active.erase(key);
        continue;
      }
      v1::Fault f;
      f.set_node(r.node());
      f.set_code(r.code());
      f.set_reporter(r.reporter());
      f.set_external_id(r.id());
      if (r.has_device_id()) f.set_device_id(r.device_id());
      f.set_level(r.level());
      f.set_message(r.message());
      f.set_state(v1::FAULT_STATE_ACTIVE);
      active[key] = f;
    }
    v1::ListFaultsResponse resp;
    for (const auto& [key, f] : active) *resp.add_faults() = f;
    return resp;
  }
  // Every node (with its devices, node_faults and the faults the reports
  // raised on it) while `since` is below `revision`: a test that changes
  // `nodes`, `devices` or `node_faults` bumps `revision`.
  NodeChanges NodesChangedSince(uint64_t since) const override {
    NodeChanges out;
    out.revision = revision;
    if (since >= revision) return out;
    auto reported = ListFaults({});
    for (const auto& [name, node] : nodes) {
      NodeView view;
      view.node = node;
      if (auto d = devices.find(name); d != devices.end()) view.devices = d->second;
      if (auto f = node_faults.find(name); f != node_faults.end()) view.active_faults = f->second;
      if (auto u = in_use.find(name); u != in_use.end()) view.devices_in_use = u->second;
      if (auto h = held_faults.find(name); h != held_faults.end()) view.held_fault_ids = h->second;
      for (const auto& f : reported->faults()) {
        if (f.node() == name) view.active_faults.push_back(f);
      }
      out.nodes.push_back(std::move(view));
    }
    return out;
  }

 private:
  Principal principal_;
};

}  // namespace clusterd::testing
