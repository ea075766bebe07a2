// The agent's domain logic: one polling round reads every collector and the
// accelerator backend, turns readings into fault transitions (rules engine for
// node readings, a diff of active codes for accelerators) and records each in
// the durable Outbox before anything is sent. No gRPC here: the StreamClient
// adapter ships what the Outbox holds.
//
// Thread contract: PollOnce, MakeHello and LatestMetrics are called from the
// agent's polling thread only, except MakeHello/LatestMetrics which take the
// agent's mutex and may be called from the stream thread.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/v1/agent.pb.h"
#include "common/clock.h"
#include "noded/accel/backend.h"
#include "noded/collectors/chain.h"
#include "noded/collectors/cpu.h"
#include "noded/collectors/disk.h"
#include "noded/collectors/kmsg.h"
#include "noded/collectors/memory.h"
#include "noded/collectors/network.h"
#include "noded/collectors/pod_devices.h"
#include "noded/outbox.h"
#include "noded/rules/engine.h"
#include "noded/rules/rules_config.h"

namespace clusterd::noded {

struct AgentOptions {
  std::string node_name;
  std::string agent_version = "0.1.0";
  std::map<std::string, std::string> labels;
  std::string root = "/";               // collectors read root + /proc, /sys ...
  std::string kmsg_path = "/dev/kmsg";  // empty disables the kernel-log collector
  // Mount table, relative to root. Empty: /proc/mounts when root is "/", else
  // /proc/1/mounts -- inside a container /host/proc/mounts would list the
  // container's own mounts, PID 1's table is the host's.
  std::string mounts_file;
  RulesConfig rules = DefaultRulesConfig();
  // The accelerator software chain (collectors/chain.h): its paths (under
  // root), read at start for the inventory and every chain_interval for its
  // NODE_CHAIN_* faults (0: never after the start, and no faults).
  ChainOptions chain;
  std::chrono::nanoseconds chain_interval = std::chrono::seconds(30);
};

class Agent {
 public:
  // backend and outbox must outlive the agent.
  Agent(AgentOptions options, Outbox* outbox, AcceleratorBackend* backend, const Clock* clock);

  // Builds the collectors; fails on a bad kernel pattern.
  Status Init();

  // One round. Returns the number of transitions recorded.
  int PollOnce();

  // Identity and inventory, without the active faults (the stream adds them
  // from the Outbox snapshot).
  v1::Hello MakeHello() const;
  v1::MetricSnapshot LatestMetrics() const;
  // The software chain as last read, and its version: it goes up each time
  // a probe finds the chain changed, so that a connected stream sends it
  // (ChainUpdate) instead of waiting for the next hello.
  uint64_t ChainVersion() const;
  v1::ChainUpdate Chain(uint64_t* version) const;
  // The pods the kubelet lists (the pod-resources adapter, any thread),
  // mapped onto this node's devices (collectors/pod_devices.h) and kept for
  // the next hello; the version goes up when the mapping changed, so that a
  // connected stream sends it (PodDevicesUpdate).
  PodDevicesResult SetKubeletPods(std::span<const KubeletPod> pods, const PodDevicesOptions& options = {});
  uint64_t PodDevicesVersion() const;
  v1::PodDevicesUpdate PodDevicesNow(uint64_t* version) const;
  // The accelerator device's last reading (nullopt before the first poll or
  // for a device the backend did not return). Any thread.
  std::optional<DeviceStatus> DeviceReading(int32_t id) const;
  // What an incident's evidence bundle holds of this agent's own view
  // (noded/evidence.h): "accelerator" (every device and its last full
  // reading), "chain" (the software chain), "metrics" (the last metric
  // snapshot: the link counters among them). Any thread.
  std::vector<std::pair<std::string, std::string>> EvidenceReadout() const;

 private:
  void Record(v1::FaultTransition t);
  void Emit(v1::TransitionAction action, const v1::FaultReport& r, TimePoint now);
  void DiffAccelerators();
  void ReconcileRuleFaults();
  // Reads the chain, raises and clears its faults, and keeps it for the
  // next hello.
  // The chain's links as the files say, completed by the backend's versions.
  ChainReading CollectChain() const;
  void DiffChain();

  AgentOptions options_;
  Outbox* outbox_;
  AcceleratorBackend* backend_;
  const Clock* clock_;
  TimePoint started_;
  bool rule_faults_reconciled_ = false;
  std::chrono::nanoseconds warmup_{0};
  // Codes the rules engine owns; other node-level faults belong to the simulator.
  std::set<std::string> rule_codes_;

  std::unique_ptr<CpuCollector> cpu_;
  std::unique_ptr<MemoryCollector> memory_;
  std::unique_ptr<RealStatFs> statfs_;
  std::unique_ptr<DiskCollector> disk_;
  std::unique_ptr<NetworkCollector> network_;
  std::unique_ptr<KernelLogCollector> kernel_;
  std::unique_ptr<RuleEngine> engine_;
  std::unique_ptr<ChainCollector> chain_;
  uint32_t backend_chips_ = 0;
  TimePoint next_chain_{};
  // Transitions the Outbox refused (full): retried first next round, never dropped.
  std::deque<v1::FaultTransition> retry_;

  mutable std::mutex mu_;  // guards the fields below
  v1::MetricSnapshot metrics_;
  v1::Inventory inventory_;
  uint64_t chain_version_ = 0;
  uint64_t pod_devices_version_ = 0;
  std::vector<DeviceInfo> device_infos_;     // the backend's devices, read at Init
  std::map<int32_t, DeviceStatus> devices_;  // the last poll's readings
};

// The chain's links as the API has them.
void ToProto(const ChainReading& reading, google::protobuf::RepeatedPtrField<v1::ChainLink>* out);

// Mapping of the rules engine's enums onto the API's.
v1::FaultLevel ToProtoLevel(Level level);
v1::FaultSource ToProtoSource(Source source);
// Source of a node-level fault injected in the simulator, by code prefix
// (NODE_DISK_* -> disk, NODE_MEMORY_* -> memory, ...; else accelerator).
v1::FaultSource SourceForNodeCode(std::string_view code);

}  // namespace clusterd::noded
