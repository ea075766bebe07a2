// get validations [--node N] [--device D]; the validation history and
// evidence that describe node prints (docs/validation.md).
#include <string>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

using ValidationResource = Resource<v1::Validation, NoGet, v1::ListValidationsRequest, v1::ListValidationsResponse>;

std::string ShortValidationState(v1::ValidationState s) {
  std::string name = v1::ValidationState_Name(s);
  const std::string prefix = "VALIDATION_STATE_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return s == v1::VALIDATION_STATE_UNSPECIFIED ? "-" : name;
}

std::string TargetOf(const v1::Validation& v) {
  if (v.whole_node() || v.device_ids().empty()) return v.node();
  std::string out = v.node() + " dev";
  for (uint32_t d : v.device_ids()) out += " " + std::to_string(d);
  return out;
}

std::optional<int> ReadValidationFilters(Context& c, v1::ListValidationsRequest* req) {
  req->set_node(c.args.Get("node"));
  if (c.args.Has("device")) {
    if (req->node().empty()) return Usage(c, "--device: needs --node");
    try {
      const unsigned long id = std::stoul(c.args.Get("device"));
      if (id > 65535) throw std::out_of_range("device");
      req->set_device_id(static_cast<uint32_t>(id));
    } catch (const std::exception&) {
      return Usage(c, "--device: '" + c.args.Get("device") + "' is not a device id (0 to 65535)");
    }
  }
  return std::nullopt;
}

}  // namespace

const Columns<v1::Validation>& ValidationColumns() {
  static const Columns<v1::Validation> columns = {
      {"ID", false, [](const v1::Validation& v, bool) { return v.id(); }},
      {"TARGET", false, [](const v1::Validation& v, bool) { return TargetOf(v); }},
      {"STATE", false, [](const v1::Validation& v, bool) { return ShortValidationState(v.state()); }},
      {"TRIGGER", false, [](const v1::Validation& v, bool) { return v.trigger().empty() ? "-" : v.trigger(); }},
      {"CREATED", false, [](const v1::Validation& v, bool) { return FormatTime(v.create_time()); }},
      {"FINISHED", false, [](const v1::Validation& v, bool) { return FormatTime(v.finish_time()); }},
      {"ACTOR", true, [](const v1::Validation& v, bool) { return v.actor().empty() ? "-" : v.actor(); }},
      {"DEADLINE", true, [](const v1::Validation& v, bool) { return FormatTime(v.deadline()); }},
      {"MESSAGE", false,
       [](const v1::Validation& v, bool wide) {
         const std::string m = v.message().empty() ? "-" : v.message();
         return wide ? m : Truncate(m, 60);
       }},
  };
  return columns;
}

void PrintValidationHistory(Context& c, const std::string& node) {
  v1::ListValidationsRequest req;
  req.set_node(node);
  req.set_page_size(10);
  v1::ListValidationsResponse resp;
  // An older ClusterD (UNIMPLEMENTED) or none kept: no section.
  if (!c.Client().ListValidations(req, &resp).ok() || resp.validations().empty()) return;
  c.out << "\nValidations (newest first; clusterctl get validations --node " << Sanitize(node) << "):\n";
  c.out << Indent(TableText(MakeTable(ValidationColumns(), c.wide(), resp.validations())));
  for (const auto& v : resp.validations()) {
    for (const auto& check : v.checks()) {
      if (check.passed() && !c.wide()) continue;
      c.out << "  " << v.id() << " " << Sanitize(check.name()) << ": " << (check.passed() ? "passed" : "FAILED")
            << " (exit " << check.exit_code() << ") " << Sanitize(check.message()) << "\n";
      if (check.evidence().empty()) continue;
      const std::string evidence = c.wide() ? check.evidence() : Truncate(check.evidence(), 400);
      c.out << Indent(Indent(Sanitize(evidence) + "\n"));
    }
  }
}

std::vector<Command> ValidationCommands() {
  auto validations = std::make_shared<const ValidationResource>(ValidationResource{
      .singular = "validation",
      .plural = "validations",
      .operand = "",
      .columns = ValidationColumns(),
      .list_rpc = "ListValidations",
      .list = &ClusterClient::ListAllValidations,
      .items = [](const v1::ListValidationsResponse& r) -> const auto& { return r.validations();
}
, .filters = {"node", "device"}, .read_filters = ReadValidationFilters,
}  // namespace clusterctl
);
return {
    GetCommand(validations, {"validations", "validation"}, {{"node", 0, true, false}, {"device", 0, true, false}},
               "  get validations [--node N [--device D]]\n"
               "                                      validations before a return to service (all pages), newest\n"
               "                                      first: target, state (QUEUED, RUNNING, PASSED, FAILED,\n"
               "                                      SKIPPED, CANCELLED), trigger, times, outcome; -o json for\n"
               "                                      each check's evidence\n"),
};
}

}  // namespace clusterctl
