// An Actuator for unit tests of the recovery Coordinator and the writer: it
// carries nothing out and never answers; it records each request, and the
// test answers through the request's Done when it wants to.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "clusterd/recovery/actuators/actuator.h"

namespace clusterd::testing {

class FakeActuator final : public Actuator {
 public:
  void Execute(ActionRequest req, Done) override { requests.push_back(std::move(req)); }
  void Stop() override {}
  std::string_view kind() const override { return "fake"; }

  // Every request, in the order Execute got them.
  std::vector<ActionRequest> requests;
};

}  // namespace clusterd::testing
