#include "noded/agent.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>

#include <google/protobuf/util/time_util.h>

#include "common/levels.h"
#include "common/logging.h"
#include "common/time_proto.h"
#include "common/validation.h"
#include "noded/rules/metrics.h"

namespace clusterd::noded {
namespace {

// Two lists of messages with equal contents, in the same order.
template <typename T>
bool SameMessages(const google::protobuf::RepeatedPtrField<T>& a, const google::protobuf::RepeatedPtrField<T>& b) {
  if (a.size() != b.size()) return false;
  for (int i = 0; i < a.size(); ++i) {
    if (a.Get(i).SerializeAsString() != b.Get(i).SerializeAsString()) return false;
  }
  return true;
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string FindLineValue(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    auto sep = line.find_first_of(":=", key.size());
    if (sep == std::string::npos) continue;
    std::string value = line.substr(sep + 1);
    value.erase(0, value.find_first_not_of(" \t\""));
    while (!value.empty() && (value.back() == '"' || value.back() == ' ')) value.pop_back();
    return value;
  }
  return {};
}

// Identity of an agent fault in the Outbox's active set.
std::string KeyOf(const v1::FaultReport& r) {
  return (r.has_device_id() ? std::to_string(r.device_id()) : "-") + "/" + std::to_string(r.source()) + "/" + r.code() +
         "@" + r.subject();
}

bool IsChainCode(std::string_view code) { return code.rfind("NODE_CHAIN_", 0) == 0; }

// Without the driver or its device files, or with a chip gone, nothing on
// the node can use its NPUs: SEPARATE (ClusterD moves the jobs and isolates
// the node). Without the runtime or the device plugin, running pods keep
// their chips while new ones get none: PRE_SEPARATE (drained at the next
// move; Volcano leaves the node). ClusterD's catalog can override both.
v1::FaultLevel ChainCodeLevel(std::string_view code) {
  if (code == kChainRuntimeNotConfigured || code == kChainDevicePluginNotRegistered) {
    return v1::FAULT_LEVEL_PRE_SEPARATE;
  }
  return v1::FAULT_LEVEL_SEPARATE;
}

bool IsAscendBackend(const AcceleratorBackend& backend) {
  const std::string name = backend.name();
  return name == "ascend" || name == "npu-smi";
}

}  // namespace

void ToProto(const ChainReading& reading, google::protobuf::RepeatedPtrField<v1::ChainLink>* out) {
  out->Clear();
  for (const auto& l : reading.links) {
    auto* p = out->Add();
    p->set_name(l.name);
    p->set_state(l.state == LinkState::kOk       ? v1::CHAIN_LINK_STATE_OK
                 : l.state == LinkState::kBroken ? v1::CHAIN_LINK_STATE_BROKEN
                                                 : v1::CHAIN_LINK_STATE_UNKNOWN);
    p->set_version(l.version);
    p->set_evidence(l.evidence);
    p->set_code(l.code);
  }
}

v1::FaultLevel ToProtoLevel(Level level) {
  return ParseFaultLevel(LevelName(level)).value_or(v1::FAULT_LEVEL_SUB_HEALTH);
}

v1::FaultSource ToProtoSource(Source source) {
  switch (source) {
    case Source::kCpu: return v1::FAULT_SOURCE_CPU;
    case Source::kMemory: return v1::FAULT_SOURCE_MEMORY;
    case Source::kDisk: return v1::FAULT_SOURCE_DISK;
    case Source::kNetwork: return v1::FAULT_SOURCE_NETWORK;
    case Source::kKernel: return v1::FAULT_SOURCE_KERNEL;
  }
  return v1::FAULT_SOURCE_KERNEL;
}

v1::FaultSource SourceForNodeCode(std::string_view code) {
  auto starts = [&](std::string_view p) { return code.substr(0, p.size()) == p; };
  if (starts("NODE_DISK") || starts("NODE_INODES")) return v1::FAULT_SOURCE_DISK;
  if (starts("NODE_MEMORY")) return v1::FAULT_SOURCE_MEMORY;
  if (starts("NODE_CPU")) return v1::FAULT_SOURCE_CPU;
  if (starts("NODE_LINK") || starts("NODE_NIC") || starts("NODE_NET")) return v1::FAULT_SOURCE_NETWORK;
  if (starts("KERNEL_")) return v1::FAULT_SOURCE_KERNEL;
  return v1::FAULT_SOURCE_ACCELERATOR;
}

Agent::Agent(AgentOptions options, Outbox* outbox, AcceleratorBackend* backend, const Clock* clock)
    : options_(std::move(options)), outbox_(outbox), backend_(backend), clock_(clock) {}

Status Agent::Init() {
  started_ = clock_->Now();
  cpu_ = std::make_unique<CpuCollector>(options_.root);
  memory_ = std::make_unique<MemoryCollector>(options_.root);
  statfs_ = std::make_unique<RealStatFs>(options_.root);
  DiskCollectorOptions disk_options;
  disk_options.root = options_.root;
  disk_options.mounts_file = !options_.mounts_file.empty() ? options_.mounts_file
                             : options_.root == "/"        ? "/proc/mounts"
                                                           : "/proc/1/mounts";
  disk_ = std::make_unique<DiskCollector>(disk_options, *statfs_);
  NetworkCollectorOptions net_options;
  net_options.root = options_.root;
  network_ = std::make_unique<NetworkCollector>(net_options);
  if (!options_.kmsg_path.empty()) {
    auto matcher = KmsgMatcher::Create(options_.rules.kernel_patterns);
    if (!matcher.ok()) return matcher.status();
    KmsgReaderOptions kmsg_options;
    kmsg_options.path = options_.kmsg_path;
    kernel_ = std::make_unique<KernelLogCollector>(std::move(*matcher), kmsg_options);
  }
  for (const auto& rule : options_.rules.rules) {
    warmup_ = std::max(warmup_, rule.for_duration);
    rule_codes_.insert(rule.code);
  }
  for (const auto& pattern : options_.rules.kernel_patterns) rule_codes_.insert(pattern.code);
  warmup_ += std::chrono::seconds(5);
  engine_ = std::make_unique<RuleEngine>(options_.rules.rules, *clock_);

  // Inventory: read once.
  v1::Inventory inv;
  inv.set_cpu_count(static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  inv.set_cpu_model(FindLineValue(options_.root + "/proc/cpuinfo", "model name"));
  if (auto mem = memory_->Collect(); mem.ok()) inv.set_memory_bytes(mem->total_kib * 1024);
  utsname uts{};
  if (uname(&uts) == 0) inv.set_kernel_version(uts.release);
  inv.set_os_image(FindLineValue(options_.root + "/etc/os-release", "PRETTY_NAME"));
  if (auto disks = disk_->Collect(); disks.ok()) {
    for (const auto& m : disks->mounts) {
      auto* d = inv.add_disks();
      d->set_mount_point(m.mount_point);
      d->set_device(m.device);
      d->set_fs_type(m.fs_type);
      if (m.stats) d->set_capacity_bytes(m.stats->blocks * m.stats->fragment_size);
    }
  }
  auto devices = backend_->Devices();
  if (!devices.ok()) return devices.status();
  for (const auto& dev : *devices) {
    auto* d = inv.add_devices();
    d->set_id(static_cast<uint32_t>(dev.id));
    d->set_vendor(dev.vendor);
    d->set_model(dev.model);
    d->set_serial(dev.serial);
  }
  ChainOptions chain_options = options_.chain;
  chain_options.root = options_.root;
  chain_ = std::make_unique<ChainCollector>(std::move(chain_options));
  backend_chips_ = static_cast<uint32_t>(devices->size());
  next_chain_ = started_;
  ToProto(CollectChain(), inv.mutable_chain());
  // What the system reports is sent as is, except what ClusterD would refuse
  // (and then refuse the whole hello): invalid UTF-8 and control characters.
  for (std::string* text : {inv.mutable_cpu_model(), inv.mutable_kernel_version(), inv.mutable_os_image()}) {
    SanitizeLine(text);
  }
  for (auto& d : *inv.mutable_disks()) {
    for (std::string* text : {d.mutable_mount_point(), d.mutable_device(), d.mutable_fs_type()}) SanitizeLine(text);
  }
  for (auto& d : *inv.mutable_devices()) {
    for (std::string* text : {d.mutable_vendor(), d.mutable_model(), d.mutable_serial()}) SanitizeLine(text);
  }
  std::lock_guard lock(mu_);
  inventory_ = std::move(inv);
  device_infos_ = *devices;
  return Status::Ok();
}

void Agent::Record(v1::FaultTransition t) {
  auto stored = outbox_->Record(t);
  if (!stored.ok()) {
    // Outbox full (ClusterD away for very long): keep it and retry later.
    GetLogger("agent")->warn("outbox refused a transition, will retry: {}", stored.status().ToString());
    retry_.push_back(std::move(t));
  }
}

void Agent::Emit(v1::TransitionAction action, const v1::FaultReport& r, TimePoint now) {
  v1::FaultTransition t;
  t.set_action(action);
  *t.mutable_fault() = r;
  *t.mutable_time() = ToTimestamp(now);
  Record(std::move(t));
}

int Agent::PollOnce() {
  const size_t pending_before = outbox_->pending_count();
  // Earlier refusals first, in order.
  for (size_t n = retry_.size(); n > 0; --n) {
    v1::FaultTransition t = std::move(retry_.front());
    retry_.pop_front();
    Record(std::move(t));
  }

  Snapshot snap;
  auto log = GetLogger("agent");
  if (auto r = cpu_->Collect(); r.ok())
    AddCpu(*r, &snap);
  else
    log->debug("cpu: {}", r.status().ToString());
  if (auto r = memory_->Collect(); r.ok())
    AddMemory(*r, &snap);
  else
    log->debug("memory: {}", r.status().ToString());
  if (auto r = disk_->Collect(); r.ok())
    AddDisk(*r, &snap);
  else
    log->debug("disk: {}", r.status().ToString());
  if (auto r = network_->Collect(); r.ok())
    AddNetwork(*r, &snap);
  else
    log->debug("network: {}", r.status().ToString());
  if (kernel_) {
    if (auto r = kernel_->Collect(); r.ok()) {
      for (const auto& match : r->matches) {
        if (match.code == kKernelGpuXidCode) backend_->KernelLine(match.record.message);
      }
      AddKernel(*r, &snap);
    } else
      log->debug("kernel log: {}", r.status().ToString());
  }
  const TimePoint now = clock_->Now();
  for (const auto& tr : engine_->Evaluate(snap)) {
    v1::FaultTransition t;
    t.set_action(tr.action == Transition::Action::kRaise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    auto* f = t.mutable_fault();
    f->set_source(ToProtoSource(tr.source));
    f->set_code(tr.code);
    f->set_level(ToProtoLevel(tr.level));
    f->set_subject(tr.subject);
    f->set_message(tr.message.substr(0, 1024));
    *t.mutable_time() = ToTimestamp(now);
    Record(std::move(t));
  }
  DiffAccelerators();
  if (options_.chain_interval.count() > 0 && now >= next_chain_) {
    next_chain_ = now + std::chrono::duration_cast<TimePoint::duration>(options_.chain_interval);
    DiffChain();
  }
  if (!rule_faults_reconciled_ && now - started_ >= warmup_) ReconcileRuleFaults();

  v1::MetricSnapshot metrics;
  *metrics.mutable_time() = ToTimestamp(now);
  for (const auto& s : snap.samples) {
    std::string name = s.subject.empty() ? s.metric : s.metric + ":" + s.subject;
    if (name.size() <= 256 && name.find(' ') == std::string::npos) (*metrics.mutable_gauges())[name] = s.value;
    if (metrics.gauges_size() >= 500) break;
  }
  {
    std::lock_guard lock(mu_);
    metrics_ = std::move(metrics);
  }
  const size_t pending_after = outbox_->pending_count();
  return pending_after > pending_before ? static_cast<int>(pending_after - pending_before) : 0;
}

void Agent::DiffAccelerators() {
  auto statuses = backend_->Poll();
  if (!statuses.ok()) {
    GetLogger("agent")->warn("accelerator poll: {}", statuses.status().ToString());
    return;
  }
  {
    std::lock_guard lock(mu_);
    devices_.clear();
    for (const auto& st : *statuses) devices_[st.id] = st;
  }
  // What the hardware says now, for the devices that could be read.
  std::map<std::string, v1::FaultReport> desired;
  std::set<uint32_t> read_ok;
  for (const auto& st : *statuses) {
    if (!st.read_error.empty()) continue;
    read_ok.insert(static_cast<uint32_t>(st.id));
    for (const auto& code : st.error_codes) {
      v1::FaultReport r;
      r.set_device_id(static_cast<uint32_t>(st.id));
      r.set_source(v1::FAULT_SOURCE_ACCELERATOR);
      r.set_code(code);
      desired[KeyOf(r)] = r;
    }
  }
  const bool node_faults = backend_->reports_node_faults();
  if (node_faults) {
    for (const auto& code : backend_->NodeFaults()) {
      v1::FaultReport r;
      r.set_source(SourceForNodeCode(code));
      r.set_code(code);
      r.set_message("reported by the " + backend_->name() + " backend");
      desired[KeyOf(r)] = r;
    }
  }
  const TimePoint now = clock_->Now();
  std::set<std::string> active;
  for (const auto& r : outbox_->Active()) {
    const std::string key = KeyOf(r);
    const bool accelerator = r.source() == v1::FAULT_SOURCE_ACCELERATOR && r.has_device_id();
    const bool backend_node =
        node_faults && !r.has_device_id() && !rule_codes_.count(r.code()) && !IsChainCode(r.code());
    if (!accelerator && !backend_node) continue;
    active.insert(key);
    if (accelerator && !read_ok.count(r.device_id())) continue;  // unreadable now: keep as is
    if (!desired.count(key)) Emit(v1::TRANSITION_ACTION_CLEAR, r, now);
  }
  for (const auto& [key, r] : desired) {
    if (!active.count(key)) Emit(v1::TRANSITION_ACTION_RAISE, r, now);
  }
}

ChainReading Agent::CollectChain() const {
  ChainReading reading = chain_->Collect(backend_chips_, IsAscendBackend(*backend_));
  // What the backend knows fills the links the files could not decide (a
  // GPU node's driver: no Ascend driver file, NVML's version).
  for (const auto& named : backend_->ChainVersions()) {
    const std::string& name = named.first;
    const std::string& version = named.second;
    ChainLink link;
    link.name = name;
    link.state = LinkState::kOk;
    link.version = version.substr(0, 64);
    link.evidence = backend_->name() + " backend: " + link.version;
    auto it =
        std::find_if(reading.links.begin(), reading.links.end(), [&](const ChainLink& l) { return l.name == name; });
    if (it == reading.links.end()) {
      reading.links.push_back(std::move(link));
    } else if (it->state != LinkState::kOk) {
      *it = std::move(link);
    }
  }
  return reading;
}

void Agent::DiffChain() {
  const ChainReading reading = CollectChain();
  std::map<std::string, v1::FaultReport> desired;  // code -> report
  for (const auto& l : reading.links) {
    if (l.state != LinkState::kBroken || l.code.empty()) continue;
    v1::FaultReport r;
    r.set_source(v1::FAULT_SOURCE_ACCELERATOR);
    r.set_code(l.code);
    r.set_level(ChainCodeLevel(l.code));
    r.set_message(("software chain, " + l.name + ": " + l.evidence).substr(0, 1024));
    desired[l.code] = std::move(r);
  }
  const TimePoint now = clock_->Now();
  std::set<std::string> active;
  for (const auto& r : outbox_->Active()) {
    if (r.has_device_id() || !IsChainCode(r.code())) continue;
    active.insert(r.code());
    if (!desired.count(r.code())) Emit(v1::TRANSITION_ACTION_CLEAR, r, now);
  }
  for (const auto& [code, r] : desired) {
    if (!active.count(code)) Emit(v1::TRANSITION_ACTION_RAISE, r, now);
  }
  v1::Inventory inv;
  ToProto(reading, inv.mutable_chain());
  std::lock_guard lock(mu_);
  if (SameMessages(inv.chain(), inventory_.chain())) return;
  inventory_.mutable_chain()->Swap(inv.mutable_chain());
  ++chain_version_;
}

uint64_t Agent::ChainVersion() const {
  std::lock_guard lock(mu_);
  return chain_version_;
}

v1::ChainUpdate Agent::Chain(uint64_t* version) const {
  v1::ChainUpdate u;
  std::lock_guard lock(mu_);
  *u.mutable_links() = inventory_.chain();
  if (version != nullptr) *version = chain_version_;
  return u;
}

PodDevicesResult Agent::SetKubeletPods(std::span<const KubeletPod> pods, const PodDevicesOptions& options) {
  std::lock_guard lock(mu_);
  PodDevicesResult r = MapPodDevices(pods, device_infos_, options);
  google::protobuf::RepeatedPtrField<v1::PodDevices> now;
  for (const auto& p : r.pods) {
    auto* out = now.Add();
    out->set_namespace_(p.ns);
    out->set_name(p.name);
    out->mutable_device_ids()->Add(p.device_ids.begin(), p.device_ids.end());
  }
  if (!SameMessages(now, inventory_.pod_devices())) {
    inventory_.mutable_pod_devices()->Swap(&now);
    ++pod_devices_version_;
  }
  return r;
}

uint64_t Agent::PodDevicesVersion() const {
  std::lock_guard lock(mu_);
  return pod_devices_version_;
}

v1::PodDevicesUpdate Agent::PodDevicesNow(uint64_t* version) const {
  v1::PodDevicesUpdate u;
  std::lock_guard lock(mu_);
  *u.mutable_pods() = inventory_.pod_devices();
  if (version != nullptr) *version = pod_devices_version_;
  return u;
}

void Agent::ReconcileRuleFaults() {
  // After a restart the rules engine starts empty while the Outbox remembers
  // what was active. Once every rule had time to re-raise, whatever the rules
  // no longer hold is cleared.
  rule_faults_reconciled_ = true;
  std::set<std::string> held;
  for (const auto& f : engine_->Active()) {
    v1::FaultReport r;
    r.set_source(ToProtoSource(f.source));
    r.set_code(f.code);
    r.set_subject(f.subject);
    held.insert(KeyOf(r));
  }
  for (const auto& r : outbox_->Active()) {
    if (r.has_device_id() || !rule_codes_.count(r.code()) || held.count(KeyOf(r))) continue;
    v1::FaultTransition t;
    t.set_action(v1::TRANSITION_ACTION_CLEAR);
    *t.mutable_fault() = r;
    *t.mutable_time() = ToTimestamp(clock_->Now());
    Record(std::move(t));
  }
}

v1::Hello Agent::MakeHello() const {
  v1::Hello h;
  h.set_node_name(options_.node_name);
  h.set_boot_id(ReadFirstLine(options_.root + "/proc/sys/kernel/random/boot_id"));
  SanitizeLine(h.mutable_boot_id());
  h.set_agent_version(options_.agent_version);
  for (const auto& [k, v] : options_.labels) (*h.mutable_labels())[k] = v;
  std::lock_guard lock(mu_);
  *h.mutable_inventory() = inventory_;
  return h;
}

std::optional<DeviceStatus> Agent::DeviceReading(int32_t id) const {
  std::lock_guard lock(mu_);
  auto it = devices_.find(id);
  if (it == devices_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string, std::string>> Agent::EvidenceReadout() const {
  std::lock_guard lock(mu_);
  std::ostringstream acc;
  if (device_infos_.empty()) acc << "no accelerator devices\n";
  for (const DeviceInfo& d : device_infos_) {
    acc << "device " << d.id << "  vendor " << d.vendor << "  model " << d.model << "  serial "
        << (d.serial.empty() ? "-" : d.serial) << "  location " << (d.location.empty() ? "-" : d.location) << "\n";
    auto it = devices_.find(d.id);
    if (it == devices_.end()) {
      acc << "  not read yet\n";
      continue;
    }
    const DeviceStatus& r = it->second;
    acc << "  healthy " << (r.healthy ? "yes" : "no") << "  health_raw " << r.health_raw;
    if (r.temperature_c) acc << "  temperature_c " << *r.temperature_c;
    if (r.power_w) acc << "  power_w " << *r.power_w;
    acc << "\n  codes";
    if (r.error_codes.empty()) acc << " none";
    for (const std::string& c : r.error_codes) acc << " " << c;
    acc << "\n";
    if (!r.read_error.empty()) acc << "  read_error " << r.read_error << "\n";
  }
  std::ostringstream chain;
  if (inventory_.chain().empty()) chain << "no chain links\n";
  for (const auto& link : inventory_.chain()) {
    chain << link.name() << "  " << v1::ChainLinkState_Name(link.state()) << "  " << link.version()
          << (link.evidence().empty() ? "" : "  " + link.evidence()) << "\n";
  }
  std::ostringstream metrics;
  std::map<std::string, double> sorted(metrics_.gauges().begin(), metrics_.gauges().end());
  for (const auto& [name, value] : sorted) metrics << name << " " << value << "\n";
  return {{"accelerator", acc.str()}, {"chain", chain.str()}, {"metrics", metrics.str()}};
}

v1::MetricSnapshot Agent::LatestMetrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

}  // namespace clusterd::noded
