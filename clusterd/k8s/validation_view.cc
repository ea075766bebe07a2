#include "clusterd/k8s/validation_view.h"

#include <functional>
#include <set>

namespace clusterd::k8s {
namespace {

using nlohmann::json;

constexpr size_t kMaxConditionMessage = 1024;

// A validation's target as text: "device 3", "devices 0,3", "the node".
std::string ValidationTargetText(const v1::Validation& v) {
  if (v.whole_node() || v.device_ids().empty()) return "the node";
  std::vector<uint32_t> ids(v.device_ids().begin(), v.device_ids().end());
  return (ids.size() == 1 ? "device " : "devices ") + DeviceList(ids);
}

// One line of operator-supplied or agent-supplied text: printable ASCII, bounded.
std::string OneLine(std::string_view s, size_t max) {
  std::string out;
  for (char c : s.substr(0, max)) out.push_back(c >= ' ' && c <= '~' ? c : ' ');
  return out;
}

int64_t Seconds(const google::protobuf::Timestamp& t) { return t.seconds(); }

// Why a validation failed, in a line: its message and its failed checks'.
std::string FailureText(const v1::Validation& v) {
  std::string out = v.message();
  for (const auto& c : v.checks()) {
    if (c.passed()) continue;
    out += (out.empty() ? "" : "; ") + c.name() + ": " + c.message();
  }
  return OneLine(out, 600);
}

// Whether the target of `v` is still out of service (isolated, separated or
// held) in `detail`.
bool TargetOut(const v1::GetNodeResponse& detail, const v1::Validation& v) {
  if (v.whole_node() || v.device_ids().empty()) {
    return detail.node().isolated() || detail.node().service_phase() != v1::SERVICE_PHASE_UNSPECIFIED;
  }
  for (const auto& d : detail.devices()) {
    for (uint32_t id : v.device_ids()) {
      if (d.id() == id && (d.isolated() || d.separated() || d.service_phase() != v1::SERVICE_PHASE_UNSPECIFIED)) {
        return true;
      }
    }
  }
  return false;
}

EventSpec NodeEvent(const std::string& node, const std::string& key, const std::string& action, bool warning,
                    const std::string& note) {
  EventSpec e;
  e.name = RecordName(key);
  e.regarding_kind = "Node";
  e.regarding_name = node;
  e.action = action;
  e.reason = "ClusterdValidation";
  e.type = warning ? "Warning" : "Normal";
  e.note = note;
  return e;
}

}  // namespace

json ValidationCondition(const v1::GetNodeResponse& detail, const std::vector<const v1::Validation*>& newest_first) {
  if (newest_first.empty()) return json();
  std::vector<std::string> validating, held, failed;
  // Held: the node's phase, then its devices'.
  if (detail.node().service_phase() == v1::SERVICE_PHASE_HELD) {
    held.push_back("the node (" + OneLine(detail.node().hold_reason(), 200) + ")");
  }
  for (const auto& d : detail.devices()) {
    if (d.service_phase() == v1::SERVICE_PHASE_HELD) {
      held.push_back("device " + std::to_string(d.id()) + " (" + OneLine(d.hold_reason(), 200) + ")");
    }
  }
  // The newest validation of each target decides it.
  std::set<std::string> seen;
  for (const v1::Validation* v : newest_first) {
    const std::string target = ValidationTargetText(*v);
    if (!seen.insert(target).second) continue;
    switch (v->state()) {
      case v1::VALIDATION_STATE_QUEUED:
      case v1::VALIDATION_STATE_RUNNING:
        validating.push_back(target + " (" + v->id() +
                             (v->state() == v1::VALIDATION_STATE_QUEUED ? ", queued)" : ", running)"));
        break;
      case v1::VALIDATION_STATE_FAILED:
        if (TargetOut(detail, *v)) failed.push_back(target + " (" + v->id() + ": " + FailureText(*v) + ")");
        break;
      default: break;
    }
  }
  auto join = [](const std::vector<std::string>& parts) {
    std::string out;
    for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
    return out;
  };
  std::string status = "True", reason = "Validated", message;
  if (!held.empty()) {
    status = "False", reason = "Held";
    message = "held out until an operator releases it: " + join(held);
  } else if (!validating.empty()) {
    status = "False", reason = "Validating";
    message = "validating before it returns to service: " + join(validating);
  } else if (!failed.empty()) {
    status = "False", reason = "ValidationFailed";
    message = "out after a failed validation: " + join(failed);
  } else {
    message =
        "the last validation of each device ended; nothing waits for one (newest: " + newest_first.front()->id() + ")";
  }
  if (!held.empty() && !validating.empty()) message += "; validating: " + join(validating);
  if (message.size() > kMaxConditionMessage) message = message.substr(0, kMaxConditionMessage - 3) + "...";
  json c = json::object();
  c["type"] = std::string(kValidationConditionType);
  c["status"] = status;
  c["reason"] = reason;
  c["message"] = message;
  return c;
}

std::vector<EventSpec> ValidationEvents(const v1::Validation& v, int64_t since_s) {
  std::vector<EventSpec> out;
  const std::string target = ValidationTargetText(v);
  if (v.has_start_time() && Seconds(v.start_time()) >= since_s) {
    std::string checks;
    for (const auto& c : v.requested_checks()) checks += (checks.empty() ? "" : ", ") + c;
    out.push_back(NodeEvent(v.node(), "validation/" + v.id() + "/started", "ValidationStarted", false,
                            "validation " + v.id() + " of " + target + " started (" + v.trigger() + "): checks " +
                                OneLine(checks, 200) + "; out of service until it passes"));
  }
  if (!v.has_finish_time() || Seconds(v.finish_time()) < since_s) return out;
  switch (v.state()) {
    case v1::VALIDATION_STATE_PASSED:
      out.push_back(NodeEvent(v.node(), "validation/" + v.id() + "/passed", "ValidationPassed", false,
                              "validation " + v.id() + " of " + target + " passed: back in service"));
      break;
    case v1::VALIDATION_STATE_FAILED:
      out.push_back(NodeEvent(v.node(), "validation/" + v.id() + "/failed", "ValidationFailed", true,
                              "validation " + v.id() + " of " + target + " failed, kept out: " + FailureText(v)));
      break;
    case v1::VALIDATION_STATE_SKIPPED:
      out.push_back(NodeEvent(v.node(), "validation/" + v.id() + "/skipped", "ValidationSkipped", true,
                              "validation of " + target + " skipped by " + OneLine(v.actor(), 100) + " (" +
                                  OneLine(v.reason(), 200) + "): back in service without it"));
      break;
    case v1::VALIDATION_STATE_CANCELLED:
      out.push_back(NodeEvent(v.node(), "validation/" + v.id() + "/cancelled", "ValidationCancelled", false,
                              "validation " + v.id() + " of " + target + " cancelled: " + OneLine(v.message(), 300)));
      break;
    default: break;
  }
  return out;
}

std::vector<EventSpec> HeldEvents(const v1::GetNodeResponse& detail, int64_t since_s) {
  std::vector<EventSpec> out;
  const std::string& node = detail.node().name();
  auto held = [&](const std::string& target, const std::string& key_target, const auto& flaps,
                  const std::string& reason) {
    // Held at its last flap (or by hand: no flap; then once per reason).
    const std::string when =
        flaps.empty() ? std::to_string(std::hash<std::string>{}(reason)) : std::to_string(Seconds(*flaps.rbegin()));
    if (!flaps.empty() && Seconds(*flaps.rbegin()) < since_s) return;
    out.push_back(NodeEvent(node, "validation-held/" + node + "/" + key_target + "/" + when, "ValidationHeld", true,
                            target + " held out of service until an operator releases it: " + OneLine(reason, 600)));
  };
  if (detail.node().service_phase() == v1::SERVICE_PHASE_HELD) {
    held("the node", "node", detail.node().flap_times(), detail.node().hold_reason());
  }
  for (const auto& d : detail.devices()) {
    if (d.service_phase() != v1::SERVICE_PHASE_HELD) continue;
    held("device " + std::to_string(d.id()), std::to_string(d.id()), d.flap_times(), d.hold_reason());
  }
  return out;
}

}  // namespace clusterd::k8s
