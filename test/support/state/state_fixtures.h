// Builders of agent messages shared by the state, engine, coordinator and
// progress tests.
#pragma once

#include <optional>
#include <string>

#include <vector>

#include <gtest/gtest.h>

#include "clusterd/storage/store.h"
#include "clusterd/v1/agent.pb.h"

namespace clusterd::testing {

// A Hello with only the node's name and epoch 1 (no inventory, no labels).
inline v1::Hello MakeHello(const std::string& node) {
  v1::Hello h;
  h.set_node_name(node);
  h.set_epoch(1);
  return h;
}

inline v1::Hello MakeHello(const std::string& node, uint64_t epoch, int devices = 8) {
  v1::Hello h;
  h.set_node_name(node);
  h.set_boot_id("boot-1");
  h.set_agent_version("test");
  h.set_epoch(epoch);
  (*h.mutable_labels())["rack"] = "r1";
  for (int i = 0; i < devices; ++i) {
    auto* d = h.mutable_inventory()->add_devices();
    d->set_id(i);
    d->set_vendor("huawei");
    d->set_model("910B3");
  }
  return h;
}

inline v1::FaultTransition MakeTransition(uint64_t epoch, uint64_t seq, bool raise, std::optional<uint32_t> device,
                                          const std::string& code,
                                          v1::FaultSource source = v1::FAULT_SOURCE_ACCELERATOR) {
  v1::FaultTransition t;
  t.mutable_id()->set_epoch(epoch);
  t.mutable_id()->set_seq(seq);
  t.set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
  if (device) t.mutable_fault()->set_device_id(*device);
  t.mutable_fault()->set_source(source);
  t.mutable_fault()->set_code(code);
  return t;
}

// Every stored event of `type`, in revision order.
inline std::vector<v1::Event> StoredEventsOfType(const storage::Store& store, v1::EventType type) {
  std::vector<v1::Event> out;
  auto all = store.ReadEvents(0, 1'000'000);
  EXPECT_TRUE(all.ok());
  if (!all.ok()) return out;
  for (const auto& e : *all) {
    if (e.type() == type) out.push_back(e);
  }
  return out;
}

}  // namespace clusterd::testing
