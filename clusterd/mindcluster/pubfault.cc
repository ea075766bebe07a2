#include "clusterd/mindcluster/pubfault.h"

#include <algorithm>
#include <set>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/config_util.h"
#include "common/validation.h"

namespace clusterd {
namespace {

using Assertion = PlannedPubFault::Assertion;

// ^[a-zA-Z0-9-_.]{8,128}$
bool ValidId(std::string_view id) {
  if (id.size() < 8 || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

// DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', alphanumeric at
// both ends, at most 253 characters.
bool ValidDns1123(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(name.front()) || !alnum(name.back())) return false;
  return std::all_of(name.begin(), name.end(), [&](char c) { return alnum(c) || c == '-' || c == '.'; });
}

bool Printable(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u != 0x7f;  // UTF-8 continuation bytes pass
  });
}

// Why one fault is invalid ("" when it is valid); fills out the planned
// faults it becomes.
std::string CheckFault(const ::Fault& f, const PubFaultCodeTable& table, std::vector<PlannedPubFault>* out) {
  if (!ValidId(f.faultid())) return "faultId must match ^[a-zA-Z0-9-_.]{8,128}$";
  static const std::set<std::string, std::less<>> kTypes = {"NPU", "Node", "Network", "Storage"};
  if (!kTypes.count(f.faulttype())) return "faultType \"" + f.faulttype() + "\" is not NPU, Node, Network or Storage";
  if (f.faultcode().size() != 9) return "faultCode \"" + f.faultcode() + "\" is not 9 characters";
  auto level = table.Find(f.faultcode());
  if (!level) return "faultCode " + f.faultcode() + " is not in the public-fault code table";
  Assertion assertion;
  if (f.assertion() == "occur") {
    assertion = Assertion::kOccur;
  } else if (f.assertion() == "recover") {
    assertion = Assertion::kRecover;
  } else if (f.assertion() == "once") {
    assertion = Assertion::kOnce;
  } else {
    return "assertion \"" + f.assertion() + "\" is not occur, recover or once";
  }
  if (f.faultlocation_size() > 10) return "faultLocation has more than 10 entries";
  for (const auto& [k, v] : f.faultlocation()) {
    if (k.size() > 16) return "faultLocation key \"" + k.substr(0, 32) + "\" is longer than 16 characters";
    if (v.size() > 128) return "faultLocation value of \"" + k + "\" is longer than 128 characters";
  }
  if (f.description().size() > 512 || !Printable(f.description())) {
    return "description must be at most 512 printable characters";
  }
  if (f.influence_size() < 1 || f.influence_size() > 1000) return "influence must list 1 to 1000 nodes";
  std::vector<PlannedPubFault> planned;
  std::set<std::string> nodes;
  for (const auto& in : f.influence()) {
    std::string node = in.nodename(), sn = in.nodesn();
    if (node.empty() && sn.empty()) return "influence: each entry needs nodeName or nodeSN";
    if (!node.empty() && (!ValidDns1123(node) || !ValidateNodeName("nodeName", node).ok())) {
      return "influence nodeName \"" + node.substr(0, 64) + "\" is not a DNS-1123 name";
    }
    if (node.empty() && (sn.size() > 128 || !Printable(sn))) return "influence nodeSN is not a printable serial";
    if (!nodes.insert(node.empty() ? "sn:" + sn : node).second) {
      return "influence lists node " + (node.empty() ? sn : node) + " twice";
    }
    if (in.deviceids_size() < 1 || in.deviceids_size() > 32) {
      return "influence of " + (node.empty() ? sn : node) + ": deviceIds must list 1 to 32 devices";
    }
    std::set<int32_t> devices;
    for (int32_t d : in.deviceids()) {
      if (d < 0 || d > 31) return "deviceId " + std::to_string(d) + " is not in 0..31";
      if (!devices.insert(d).second) return "deviceId " + std::to_string(d) + " is listed twice";
    }
    for (int32_t d : devices) {
      PlannedPubFault p;
      p.node = node;
      p.node_sn = node.empty() ? sn : "";
      p.device = static_cast<uint32_t>(d);
      p.fault_id = f.faultid();
      p.code = f.faultcode();
      p.level = *level;
      p.assertion = assertion;
      p.message = f.faulttype() + (f.description().empty() ? "" : ": " + f.description());
      planned.push_back(std::move(p));
    }
  }
  for (auto& p : planned) out->push_back(std::move(p));
  return "";
}

}  // namespace

std::optional<v1::FaultLevel> ParseMindClusterLevel(std::string_view name) {
  static const std::map<std::string, v1::FaultLevel, std::less<>> kNames = {
      {"NotHandleFault", v1::FAULT_LEVEL_NOT_HANDLE},
      {"SubHealthFault", v1::FAULT_LEVEL_SUB_HEALTH},
      {"PreSeparateNPU", v1::FAULT_LEVEL_PRE_SEPARATE},
      {"PreSeparateFault", v1::FAULT_LEVEL_PRE_SEPARATE},
      {"RestartRequest", v1::FAULT_LEVEL_RESTART_REQUEST},
      {"RestartBusiness", v1::FAULT_LEVEL_RESTART_BUSINESS},
      {"FreeRestartNPU", v1::FAULT_LEVEL_FREE_RESTART_NPU},
      {"RestartNPU", v1::FAULT_LEVEL_RESTART_NPU},
      {"SeparateNPU", v1::FAULT_LEVEL_SEPARATE},
      {"ManuallySeparateNPU", v1::FAULT_LEVEL_SEPARATE},
      {"SeparateFault", v1::FAULT_LEVEL_SEPARATE},
  };
  auto it = kNames.find(name);
  if (it == kNames.end()) return std::nullopt;
  return it->second;
}

PubFaultCodeTable PubFaultCodeTable::Default() {
  // MindCluster's default public-fault code table (docs/mindcluster.md).
  static const char* kDefault = R"({
    "NotHandleFault": ["200001006", "200001010", "200001011", "200001012", "100001011"],
    "SubHealthFault": ["010001001", "010001004", "310001005", "210001007", "210001008", "210001009",
                       "110001010", "110001020", "110001021", "010001002"],
    "SeparateNPU": ["220001001", "220001002", "220001003", "220001004", "220001005", "220001006",
                    "220001007", "120001001", "020001001", "020001004", "020001003", "120001002", "120001003"],
    "PreSeparateNPU": ["110001022", "110001023"]
  })";
  PubFaultCodeTable t;
  Status st = t.MergeJson(kDefault, "built-in public-fault table");
  (void)st;  // the built-in table is valid (tested)
  return t;
}

Status PubFaultCodeTable::MergeFile(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return InvalidArgument("pubfault_code_table: " + text.status().message());
  return MergeJson(*text, path);
}

Status PubFaultCodeTable::MergeJson(std::string_view text, std::string_view origin) {
  const std::string where(origin);
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument(where + ": not a JSON object of level name -> list of codes");
  std::map<std::string, v1::FaultLevel, std::less<>> merged = levels_;
  for (const auto& [name, codes] : doc.items()) {
    auto level = ParseMindClusterLevel(name);
    if (!level) return InvalidArgument(where + ": \"" + name + "\" is not a MindCluster fault level name");
    if (!codes.is_array()) return InvalidArgument(where + ": " + name + " is not a list of codes");
    for (const auto& c : codes) {
      if (!c.is_string() || c.get<std::string>().size() != 9) {
        return InvalidArgument(where + ": " + name + " holds a code that is not a 9-character string");
      }
      merged[c.get<std::string>()] = *level;
    }
  }
  levels_ = std::move(merged);
  return Status::Ok();
}

std::optional<v1::FaultLevel> PubFaultCodeTable::Find(std::string_view code) const {
  auto it = levels_.find(code);
  if (it == levels_.end()) return std::nullopt;
  return it->second;
}

PubFaultVerdict CheckPubFaultResource(const ::PublicFaultRequest& req, const PubFaultOptions& options) {
  if (std::find(options.resources.begin(), options.resources.end(), req.resource()) == options.resources.end()) {
    return {kPubFaultRefused, "resource \"" + req.resource().substr(0, 64) + "\" is not allowed"};
  }
  return {kPubFaultOk, ""};
}

PubFaultVerdict CheckPubFaultRequest(const ::PublicFaultRequest& req, const PubFaultOptions& options) {
  if (req.version() != "1.0") return {kPubFaultInvalid, "version must be \"1.0\""};
  if (!ValidId(req.id())) return {kPubFaultInvalid, "id must match ^[a-zA-Z0-9-_.]{8,128}$"};
  if (req.timestamp() < 1'000'000'000'000 || req.timestamp() > 9'999'999'999'999) {
    return {kPubFaultInvalid, "timestamp must be milliseconds since the epoch (13 digits)"};
  }
  if (req.faults_size() < 1 || req.faults_size() > 100) {
    return {kPubFaultInvalid, "faults must hold 1 to 100 faults, not " + std::to_string(req.faults_size())};
  }
  // Sizes only: an entry's validity is PlanPublicFaults' business, so this
  // costs one step per influence entry however many devices each lists.
  uint64_t entries = 0;
  for (const auto& f : req.faults()) {
    for (const auto& in : f.influence()) entries += static_cast<uint64_t>(in.deviceids_size());
  }
  if (entries > options.max_faults) {
    return {kPubFaultInvalid, "the request names " + std::to_string(entries) +
                                  " (fault, node, device) entries, more than the " +
                                  std::to_string(options.max_faults) +
                                  " public faults ClusterD keeps (pubfault_max_faults); send fewer per request"};
  }
  return {kPubFaultOk, ""};
}

StatusOr<::PublicFaultRequest> ParsePublicFaultCm(std::string_view json, size_t max_bytes) {
  if (json.size() > max_bytes) {
    return InvalidArgument("PublicFault is " + std::to_string(json.size()) + " bytes, more than " +
                           std::to_string(max_bytes));
  }
  ::PublicFaultRequest req;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto st = google::protobuf::util::JsonStringToMessage(google::protobuf::StringPiece(json.data(), json.size()),
                                                              &req, options);
  if (!st.ok()) return InvalidArgument("PublicFault is not a public-fault request: " + st.ToString().substr(0, 256));
  return req;
}

PubFaultVerdict PlanPublicFaults(const ::PublicFaultRequest& req, const PubFaultCodeTable& table,
                                 const PubFaultOptions& options, PubFaultPlan* plan) {
  plan->faults.clear();
  plan->dropped.clear();
  if (auto v = CheckPubFaultResource(req, options); v.code != kPubFaultOk) return v;
  plan->reporter = std::string(kPubFaultReporterPrefix) + req.resource();
  if (auto v = CheckPubFaultRequest(req, options); v.code != kPubFaultOk) return v;
  for (const auto& f : req.faults()) {
    std::string why = CheckFault(f, table, &plan->faults);
    if (!why.empty()) plan->dropped.push_back("faultId " + f.faultid().substr(0, 128) + ": " + why);
  }
  if (plan->faults.empty()) return {kPubFaultInvalid, "no valid fault: " + plan->dropped.front()};
  return {kPubFaultOk, ""};
}

PubFaultRateLimiter::PubFaultRateLimiter(const Clock* clock, double rate_per_second, uint32_t burst,
                                         const std::vector<std::string>& resources)
    : clock_(clock) {
  const TimePoint now = clock_->Now();
  for (const auto& r : resources) buckets_.try_emplace(r, rate_per_second, static_cast<double>(burst), now);
}

bool PubFaultRateLimiter::Allow(std::string_view resource) {
  auto it = buckets_.find(resource);  // the keys never change
  if (it == buckets_.end()) return false;
  const TimePoint now = clock_->Now();
  std::lock_guard lock(mu_);
  return it->second.Take(now);
}

}  // namespace clusterd
