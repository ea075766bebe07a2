#include "clusterd/state/validation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "clusterd/state/response_limits.h"
#include "clusterd/storage/key_codec.h"
#include "common/validation.h"

namespace clusterd {

namespace {

constexpr size_t kMaxDevices = 1024;
constexpr size_t kMaxDisks = 256;
constexpr size_t kMaxActiveFaults = 4096;
constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;

Status ValidateFaultReport(const std::string& at, const v1::FaultReport& r) {
  if (r.has_device_id() && r.device_id() > kMaxDeviceId) return InvalidArgument(at + ".device_id: above 65535");
  switch (r.source()) {
    case v1::FAULT_SOURCE_UNSPECIFIED: return InvalidArgument(at + ".source: must be set");
    case v1::FAULT_SOURCE_HEARTBEAT:
    case v1::FAULT_SOURCE_EXTERNAL:
      return InvalidArgument(at + ".source: " + v1::FaultSource_Name(r.source()) + " is reserved to ClusterD");
    default:
      if (!v1::FaultSource_IsValid(r.source())) return InvalidArgument(at + ".source: unknown value");
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateCode(at + ".code", r.code()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".subject", r.subject(), 1024));
  if (!v1::FaultLevel_IsValid(r.level())) return InvalidArgument(at + ".level: unknown value");
  return ValidateText(at + ".message", r.message());
}

Status ValidateLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) return InvalidArgument("hello.labels: more than 64 labels");
  for (const auto& [k, v] : labels) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.labels key", k));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.labels[" + k + "]", v, /*allow_empty=*/true));
  }
  return Status::Ok();
}

Status ValidateStrategy(const std::string& at, int s) {
  if (!v1::RecoveryStrategy_IsValid(s) || s == v1::RECOVERY_STRATEGY_UNSPECIFIED) {
    return InvalidArgument(at + ": unknown recovery strategy " + std::to_string(s));
  }
  return Status::Ok();
}

// A job's ProgressPolicy (progress/tracker.h keeps windows this long).
constexpr uint32_t kMaxProgressWindow = 16;
Status ValidateProgressPolicy(const v1::ProgressPolicy& p) {
  if (p.has_hang_timeout()) {
    const auto& t = p.hang_timeout();
    if (t.seconds() < 1 || t.seconds() > int64_t{7} * 86'400 || t.nanos() < 0 || t.nanos() >= 1'000'000'000) {
      return InvalidArgument("policy.progress.hang_timeout: must be between 1s and 7 days");
    }
  }
  if (!v1::HangAction_IsValid(p.hang_action())) return InvalidArgument("policy.progress.hang_action: unknown value");
  if (p.slow_threshold_percent() > 1000) {
    return InvalidArgument("policy.progress.slow_threshold_percent: at most 1000");
  }
  if (p.slow_window() > kMaxProgressWindow) {
    return InvalidArgument("policy.progress.slow_window: at most " + std::to_string(kMaxProgressWindow));
  }
  if (p.warmup_reports() > 1000) return InvalidArgument("policy.progress.warmup_reports: at most 1000");
  return Status::Ok();
}

Status ValidatePolicy(const v1::RecoveryPolicy& p) {
  CLUSTERD_RETURN_IF_ERROR(ValidateProgressPolicy(p.progress()));
  for (int s : p.allowed_strategies()) CLUSTERD_RETURN_IF_ERROR(ValidateStrategy("policy.allowed_strategies", s));
  for (const auto& t : p.step_timeouts()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateStrategy("policy.step_timeouts.strategy", t.strategy()));
    if (t.timeout().seconds() < 0 || t.timeout().nanos() < 0 ||
        (t.timeout().seconds() == 0 && t.timeout().nanos() == 0)) {
      return InvalidArgument("policy.step_timeouts.timeout: must be positive");
    }
  }
  for (const auto& w : p.silences()) {
    std::string code = w.code();
    if (!code.empty() && code.back() == '*') code.pop_back();
    CLUSTERD_RETURN_IF_ERROR(ValidateCode("policy.silences.code", code));
  }
  if (p.hold_down().seconds() < 0 || p.hold_down().nanos() < 0) {
    return InvalidArgument("policy.hold_down: must not be negative");
  }
  return Status::Ok();
}

// An inventory's devices: at most kMaxDevices, ids unique and at most
// kMaxDeviceId, one-line texts.
Status ValidateDeviceInfos(const std::string& field,
                           const google::protobuf::RepeatedPtrField<v1::DeviceInfo>& devices) {
  if (devices.size() > static_cast<int>(kMaxDevices)) return InvalidArgument(field + ": more than 1024");
  std::set<uint32_t> ids;
  for (const auto& d : devices) {
    const std::string at = field + "[" + std::to_string(d.id()) + "]";
    if (d.id() > kMaxDeviceId) return InvalidArgument(at + ".id: above 65535");
    if (!ids.insert(d.id()).second) return InvalidArgument(at + ".id: duplicate device id");
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".vendor", d.vendor(), 256));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".model", d.model(), 256));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(at + ".serial", d.serial(), 256));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateRegisterNode(const std::string& node, const v1::Inventory& inventory, const std::string& source) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", node));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("source", source));
  return ValidateDeviceInfos("inventory.devices", inventory.devices());
}

Status ValidateChainLinks(const std::string& field, const google::protobuf::RepeatedPtrField<v1::ChainLink>& links) {
  // NodeD sends seven links; the rest leaves room for other accelerators.
  if (links.size() > 16) return InvalidArgument(field + ": more than 16 links");
  for (const auto& l : links) {
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(field + ".name", l.name(), 64));
    if (l.name().empty()) return InvalidArgument(field + ".name: required");
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(field + ".version", l.version(), 256));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(field + ".evidence", l.evidence(), 512));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine(field + ".code", l.code(), 128));
    if (!v1::ChainLinkState_IsValid(l.state())) return InvalidArgument(field + ".state: unknown value");
  }
  return Status::Ok();
}

Status ValidatePodDevices(const std::string& field, const google::protobuf::RepeatedPtrField<v1::PodDevices>& pods) {
  if (pods.size() > static_cast<int>(kMaxPodDevicesPods)) {
    return InvalidArgument(field + ": more than " + std::to_string(kMaxPodDevicesPods) + " pods");
  }
  size_t ids = 0;
  const v1::PodDevices* prev = nullptr;
  for (const auto& p : pods) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(field + ".namespace", p.namespace_()));
    if (p.namespace_().size() > 63) return InvalidArgument(field + ".namespace: longer than 63 characters");
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(field + ".name", p.name()));
    const std::string at = field + "[" + p.namespace_() + "/" + p.name() + "]";
    if (prev != nullptr && std::tie(prev->namespace_(), prev->name()) >= std::tie(p.namespace_(), p.name())) {
      return InvalidArgument(at + ": pods must be sorted by namespace and name, each once");
    }
    prev = &p;
    ids += p.device_ids_size();
    if (ids > kMaxPodDevicesIds) {
      return InvalidArgument(field + ": more than " + std::to_string(kMaxPodDevicesIds) + " device ids in all");
    }
    for (int i = 0; i < p.device_ids_size(); ++i) {
      if (p.device_ids(i) > kMaxDeviceId) return InvalidArgument(at + ".device_ids: above 65535");
      if (i > 0 && p.device_ids(i - 1) >= p.device_ids(i)) {
        return InvalidArgument(at + ".device_ids: must be sorted, each once");
      }
    }
  }
  return Status::Ok();
}

Status ValidateHello(const v1::Hello& hello) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("hello.node_name", hello.node_name()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.boot_id", hello.boot_id(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.agent_version", hello.agent_version(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLabels(hello.labels()));
  if (hello.epoch() == 0) return InvalidArgument("hello.epoch: must be positive");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("hello.instance_id", hello.instance_id(), /*allow_empty=*/true));
  if (hello.instance_id().size() > 64) return InvalidArgument("hello.instance_id: longer than 64 characters");
  if (!hello.probe_address().empty() && !IsProbeAddressText(hello.probe_address())) {
    return InvalidArgument("hello.probe_address: must be ip:port (an IPv4 or [IPv6] literal) or :port");
  }
  // The pingmesh's device plane (docs/pingmesh.md): at most 64 ports, ids
  // unique, each an IPv4 literal.
  if (hello.device_addresses_size() > 64) return InvalidArgument("hello.device_addresses: more than 64");
  {
    std::set<uint32_t> ids;
    for (const auto& d : hello.device_addresses()) {
      if (d.device_id() > kMaxDeviceId) return InvalidArgument("hello.device_addresses.device_id: above 65535");
      if (!ids.insert(d.device_id()).second) {
        return InvalidArgument("hello.device_addresses: device " + std::to_string(d.device_id()) + " twice");
      }
      if (d.address().find(':') != std::string::npos || !IsProbeAddressText(d.address() + ":1")) {
        return InvalidArgument("hello.device_addresses.address: device " + std::to_string(d.device_id()) +
                               " is no IPv4 literal");
      }
    }
  }
  const auto& inv = hello.inventory();
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.cpu_model", inv.cpu_model(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.kernel_version", inv.kernel_version(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.os_image", inv.os_image(), 256));
  CLUSTERD_RETURN_IF_ERROR(ValidateDeviceInfos("hello.inventory.devices", inv.devices()));
  if (inv.disks_size() > static_cast<int>(kMaxDisks)) return InvalidArgument("hello.inventory.disks: more than 256");
  for (const auto& d : inv.disks()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.mount_point", d.mount_point(), 1024));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.device", d.device(), 1024));
    CLUSTERD_RETURN_IF_ERROR(ValidateLine("hello.inventory.disks.fs_type", d.fs_type(), 64));
  }
  CLUSTERD_RETURN_IF_ERROR(ValidateChainLinks("hello.inventory.chain", inv.chain()));
  CLUSTERD_RETURN_IF_ERROR(ValidatePodDevices("hello.inventory.pod_devices", inv.pod_devices()));
  if (hello.active_faults_size() > static_cast<int>(kMaxActiveFaults)) {
    return InvalidArgument("hello.active_faults: more than 4096");
  }
  for (int i = 0; i < hello.active_faults_size(); ++i) {
    CLUSTERD_RETURN_IF_ERROR(
        ValidateFaultReport("hello.active_faults[" + std::to_string(i) + "]", hello.active_faults(i)));
  }
  return Status::Ok();
}

Status ValidateTransition(const v1::FaultTransition& t) {
  if (t.id().epoch() == 0 || t.id().seq() == 0) return InvalidArgument("transition.id: epoch and seq must be positive");
  if (t.action() != v1::TRANSITION_ACTION_RAISE && t.action() != v1::TRANSITION_ACTION_CLEAR) {
    return InvalidArgument("transition.action: must be RAISE or CLEAR");
  }
  return ValidateFaultReport("transition.fault", t.fault());
}

Status ValidateReport(const v1::ReportRequest& req) {
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("reporter", req.reporter()));
  if (req.reporter().find('/') != std::string::npos) return InvalidArgument("reporter: must not contain '/'");
  // MindCluster public faults are stored as "pubfault/<resource>"; the bare
  // name would let a reporter reach their keys.
  if (req.reporter() == "pubfault")
    return InvalidArgument("reporter: \"pubfault\" is reserved for MindCluster public faults");
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("id", req.id()));
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", req.node()));
  if (req.has_device_id() && req.device_id() > kMaxDeviceId) return InvalidArgument("device_id: above 65535");
  CLUSTERD_RETURN_IF_ERROR(ValidateCode("code", req.code()));
  if (!v1::FaultLevel_IsValid(req.level())) return InvalidArgument("level: unknown value");
  if (req.action() != v1::TRANSITION_ACTION_RAISE && req.action() != v1::TRANSITION_ACTION_CLEAR) {
    return InvalidArgument("action: must be TRANSITION_ACTION_RAISE or TRANSITION_ACTION_CLEAR");
  }
  return ValidateText("message", req.message());
}

Status ValidateMetrics(const v1::MetricSnapshot& snapshot) {
  if (snapshot.gauges_size() > 512) return InvalidArgument("metrics.gauges: more than 512");
  for (const auto& [name, value] : snapshot.gauges()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("metrics.gauges key", name));
    if (!std::isfinite(value)) return InvalidArgument("metrics.gauges[" + name + "]: not a finite number");
  }
  return Status::Ok();
}

Status ValidateJob(const v1::Job& job, size_t max_ranks) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("job.id", job.id()));
  if (job.kind() != v1::JOB_KIND_TRAINING && job.kind() != v1::JOB_KIND_INFERENCE) {
    return InvalidArgument("job.kind: must be JOB_KIND_TRAINING or JOB_KIND_INFERENCE");
  }
  if (!v1::JobState_IsValid(job.state())) return InvalidArgument("job.state: unknown value");
  if (job.placement_size() == 0) return InvalidArgument("job.placement: at least one rank");
  if (static_cast<size_t>(job.placement_size()) > max_ranks) {
    return InvalidArgument("job.placement: " + std::to_string(job.placement_size()) + " ranks, more than the " +
                           std::to_string(max_ranks) + " a job may have (max_job_ranks)");
  }
  if (job.ranks_per_device() > kMaxRanksPerDevice) {
    return InvalidArgument("job.ranks_per_device: " + std::to_string(job.ranks_per_device()) + ", more than " +
                           std::to_string(kMaxRanksPerDevice));
  }
  const uint32_t per_device = std::max<uint32_t>(job.ranks_per_device(), 1);
  std::set<uint32_t> ranks;
  // Ranks per node, and per (node, device): a fault on a node or a device
  // hits at most these, whatever the job's size.
  std::map<std::string_view, uint32_t> on_node;
  std::map<std::pair<std::string_view, uint32_t>, uint32_t> on_device;
  for (const auto& p : job.placement()) {
    const std::string at = "job.placement[rank " + std::to_string(p.rank()) + "]";
    if (!ranks.insert(p.rank()).second) return InvalidArgument(at + ": duplicate rank");
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName(at + ".node", p.node()));
    if (p.has_device_id() && p.device_id() > kMaxDeviceId) return InvalidArgument(at + ".device_id: above 65535");
    if (!p.device_ip().empty()) {
      if (!IsAddressText(p.device_ip())) return InvalidArgument(at + ".device_ip: not an IPv4 or IPv6 address");
      if (!p.has_device_id()) return InvalidArgument(at + ".device_ip: set without a device_id");
    }
    if (++on_node[p.node()] > kMaxJobRanksPerNode) {
      return InvalidArgument(at + ": more than " + std::to_string(kMaxJobRanksPerNode) + " ranks of the job on node " +
                             p.node());
    }
    if (p.has_device_id() && ++on_device[{p.node(), p.device_id()}] > per_device) {
      return InvalidArgument(at + ": device " + std::to_string(p.device_id()) + " of node " + p.node() +
                             (per_device == 1 ? std::string(" already runs another rank")
                                              : " already runs " + std::to_string(per_device) + " ranks") +
                             " (job.ranks_per_device " + std::to_string(job.ranks_per_device()) + " allows " +
                             std::to_string(per_device) + ")");
    }
  }
  if (job.labels_size() > static_cast<int>(kMaxLabels)) return InvalidArgument("job.labels: more than 64 labels");
  for (const auto& [k, v] : job.labels()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("job.labels key", k));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("job.labels[" + k + "]", v, true));
  }
  CLUSTERD_RETURN_IF_ERROR(ValidatePolicy(job.policy()));
  // Checked last (it walks the whole message): a job travels whole in every
  // answer and Watch event, which must fit a client's 4 MiB.
  if (const size_t bytes = job.ByteSizeLong(); bytes > kMaxJobBytes) {
    return InvalidArgument("job: " + std::to_string(bytes) + " bytes, more than the " + std::to_string(kMaxJobBytes) +
                           " a job record may take (placement, policy and labels together)");
  }
  return Status::Ok();
}

Status ValidateCordon(const std::string& node, bool cordon, const std::string& actor, const std::string& reason) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", node));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", actor));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", reason, 1024));
  if (cordon && reason.empty()) return InvalidArgument("reason: say why the node is cordoned");
  return Status::Ok();
}

Status ValidateReleaseDevice(const std::string& node, const std::string& actor, const std::string& reason) {
  CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("node", node));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", actor));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", reason, 1024));
  if (reason.empty()) return InvalidArgument("reason: say why the device returns to service");
  return Status::Ok();
}

Status ValidateClearFault(const std::string& fault_id, const std::string& actor, const std::string& reason) {
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("fault_id", fault_id, 2048));
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", actor));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", reason, 1024));
  if (reason.empty()) return InvalidArgument("reason: say why the fault is cleared by hand");
  return ValidateNodeName("fault_id (node part)", fault_id.substr(0, fault_id.find('/')));
}

Status ValidateSetRecoveryMode(const v1::SetRecoveryModeRequest& req) {
  CLUSTERD_RETURN_IF_ERROR(ValidateToken("actor", req.actor()));
  CLUSTERD_RETURN_IF_ERROR(ValidateLine("reason", req.reason(), 1024));
  if (!req.has_recovery_paused() && !req.has_dry_run()) {
    return InvalidArgument("set recovery_paused and/or dry_run");
  }
  // Stopping automation needs a reason, like cordoning a node or clearing a
  // fault by hand; turning it back on may go without one.
  if (req.reason().empty() && (req.recovery_paused() || req.dry_run())) {
    return InvalidArgument("reason: say why recovery is paused or put in dry-run");
  }
  return Status::Ok();
}

StatusOr<PageQuery> ParsePage(int32_t page_size, const std::string& page_token) {
  if (page_size < 0) return InvalidArgument("page_size: must not be negative");
  PageQuery page;
  page.size = page_size == 0 ? kDefaultPageSize : std::min(page_size, kMaxPageSize);
  if (!page_token.empty()) {
    auto decoded = storage::HexDecode(page_token);
    if (!decoded || decoded->empty()) return InvalidArgument("page_token: not a token this server issued");
    page.start = std::move(*decoded);
  }
  return page;
}

bool LabelSelector::Matches(const google::protobuf::Map<std::string, std::string>& labels) const {
  for (const Term& t : terms_) {
    auto it = labels.find(t.key);
    const bool has = it != labels.end() && it->second == t.value;
    if (has != t.equal) return false;
  }
  return true;
}

StatusOr<LabelSelector> ParseLabelSelector(const std::string& selector) {
  LabelSelector out;
  if (selector.size() > 4096) return InvalidArgument("label_selector: longer than 4096 bytes");
  size_t pos = 0;
  while (pos < selector.size()) {
    size_t comma = selector.find(',', pos);
    if (comma == std::string::npos) comma = selector.size();
    const std::string term = selector.substr(pos, comma - pos);
    LabelSelector::Term t;
    size_t op = term.find_first_of("!=");
    size_t value_at = std::string::npos;
    if (op != std::string::npos && term.compare(op, 2, "!=") == 0) {
      t.equal = false;
      value_at = op + 2;
    } else if (op != std::string::npos && term[op] == '=') {
      value_at = op + (term.compare(op, 2, "==") == 0 ? 2 : 1);
    }
    if (value_at == std::string::npos || op == 0) {
      return InvalidArgument("label_selector: \"" + term + "\" is not key=value, key==value or key!=value");
    }
    t.key = term.substr(0, op);
    t.value = term.substr(value_at);
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("label_selector key", t.key));
    CLUSTERD_RETURN_IF_ERROR(ValidateToken("label_selector value of " + t.key, t.value, /*allow_empty=*/true));
    out.terms_.push_back(std::move(t));
    pos = comma + 1;
  }
  return out;
}

}  // namespace clusterd
