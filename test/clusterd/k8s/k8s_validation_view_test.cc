// What Kubernetes is told of a return to service (clusterd/k8s/validation_view.h):
// the AcceleratorValidation Node condition, and each validation's Events,
// named so that posting one twice is refused rather than shown twice.
#include <gtest/gtest.h>

#include "clusterd/k8s/requests.h"
#include "clusterd/k8s/validation_view.h"

namespace clusterd {
namespace {

using nlohmann::json;

google::protobuf::Timestamp At(int64_t s) {
  google::protobuf::Timestamp t;
  t.set_seconds(s);
  return t;
}

v1::Validation Validation(const std::string& id, uint32_t device, v1::ValidationState state) {
  v1::Validation v;
  v.set_id(id);
  v.set_node("worker01");
  v.add_device_ids(device);
  v.set_state(state);
  v.set_trigger("fault-cleared");
  v.add_requested_checks("health-stable");
  v.add_requested_checks("commands");
  *v.mutable_create_time() = At(1000);
  if (state != v1::VALIDATION_STATE_QUEUED) *v.mutable_start_time() = At(1001);
  if (state >= v1::VALIDATION_STATE_PASSED) *v.mutable_finish_time() = At(1070);
  return v;
}

v1::GetNodeResponse Detail() {
  v1::GetNodeResponse d;
  d.mutable_node()->set_name("worker01");
  for (uint32_t id : {0u, 1u, 2u, 3u}) d.add_devices()->set_id(id);
  return d;
}

TEST(K8sValidationView, TheConditionSaysValidatingHeldFailedOrValidated) {
  v1::GetNodeResponse detail = Detail();
  EXPECT_TRUE(k8s::ValidationCondition(detail, {}).is_null()) << "a node never validated gets no condition";

  v1::Validation running = Validation("val-2", 3, v1::VALIDATION_STATE_RUNNING);
  v1::Validation passed = Validation("val-1", 3, v1::VALIDATION_STATE_PASSED);
  json c = k8s::ValidationCondition(detail, {&running, &passed});
  EXPECT_EQ(c["type"], "AcceleratorValidation");
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], "Validating");
  EXPECT_NE(c["message"].get<std::string>().find("device 3 (val-2, running)"), std::string::npos) << c["message"];

  // The newest of a target decides: passed after an older failure.
  v1::Validation failed = Validation("val-0", 3, v1::VALIDATION_STATE_FAILED);
  c = k8s::ValidationCondition(detail, {&passed, &failed});
  EXPECT_EQ(c["status"], "True");
  EXPECT_EQ(c["reason"], "Validated");

  // A failure whose device is still out names the failed check.
  failed.set_message("a check failed");
  auto* check = failed.add_checks();
  check->set_name("loopback");
  check->set_message("exited with status 3");
  detail.mutable_devices(3)->set_isolated(true);
  c = k8s::ValidationCondition(detail, {&failed});
  EXPECT_EQ(c["reason"], "ValidationFailed");
  EXPECT_NE(c["message"].get<std::string>().find("loopback: exited with status 3"), std::string::npos) << c["message"];
  // ... and once it is back (released by hand), nothing waits.
  detail.mutable_devices(3)->set_isolated(false);
  EXPECT_EQ(k8s::ValidationCondition(detail, {&failed})["status"], "True");

  // Held wins over the rest.
  detail.mutable_devices(1)->set_service_phase(v1::SERVICE_PHASE_HELD);
  detail.mutable_devices(1)->set_hold_reason("3 flaps within 24h");
  c = k8s::ValidationCondition(detail, {&running});
  EXPECT_EQ(c["reason"], "Held");
  EXPECT_NE(c["message"].get<std::string>().find("device 1 (3 flaps within 24h)"), std::string::npos);
  EXPECT_NE(c["message"].get<std::string>().find("validating: device 3"), std::string::npos);
}

TEST(K8sValidationView, EventsFollowTheValidationAndAreNamedByIt) {
  v1::Validation v = Validation("val-7", 2, v1::VALIDATION_STATE_QUEUED);
  EXPECT_TRUE(k8s::ValidationEvents(v, 0).empty()) << "queued: not asked yet";
  v = Validation("val-7", 2, v1::VALIDATION_STATE_RUNNING);
  auto events = k8s::ValidationEvents(v, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].action, "ValidationStarted");
  EXPECT_EQ(events[0].type, "Normal");
  EXPECT_EQ(events[0].reason, "ClusterdValidation");
  EXPECT_EQ(events[0].regarding_kind, "Node");
  EXPECT_EQ(events[0].regarding_name, "worker01");
  EXPECT_NE(events[0].note.find("health-stable, commands"), std::string::npos) << events[0].note;
  const std::string started = events[0].name;

  v = Validation("val-7", 2, v1::VALIDATION_STATE_FAILED);
  v.add_checks()->set_name("health-stable");
  v.mutable_checks(0)->set_message("device 2 ecc_double_bit rose from 1 to 2");
  events = k8s::ValidationEvents(v, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].name, started) << "the same name each time: a repeat is refused as existing";
  EXPECT_EQ(events[1].action, "ValidationFailed");
  EXPECT_EQ(events[1].type, "Warning");
  EXPECT_NE(events[1].note.find("ecc_double_bit rose from 1 to 2"), std::string::npos) << events[1].note;
  json body = k8s::EventBody(events[1]);
  EXPECT_EQ(body["reason"], "ClusterdValidation");
  EXPECT_EQ(body["type"], "Warning");

  // What happened before `since` was told already.
  EXPECT_EQ(k8s::ValidationEvents(v, 1002).size(), 1u);
  EXPECT_TRUE(k8s::ValidationEvents(v, 1071).empty());
  v = Validation("val-8", 2, v1::VALIDATION_STATE_PASSED);
  EXPECT_EQ(k8s::ValidationEvents(v, 0).back().action, "ValidationPassed");
  EXPECT_NE(k8s::ValidationEvents(v, 0).back().name, k8s::ValidationEvents(v, 0).front().name);
}

TEST(K8sValidationView, AHoldIsOneEventPerHold) {
  v1::GetNodeResponse detail = Detail();
  EXPECT_TRUE(k8s::HeldEvents(detail, 0).empty());
  auto* d = detail.mutable_devices(1);
  d->set_service_phase(v1::SERVICE_PHASE_HELD);
  d->set_hold_reason("3 flaps within 24h, the last: validation val-9 failed");
  *d->add_flap_times() = At(2000);
  auto events = k8s::HeldEvents(detail, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].action, "ValidationHeld");
  EXPECT_EQ(events[0].type, "Warning");
  EXPECT_NE(events[0].note.find("device 1 held"), std::string::npos) << events[0].note;
  EXPECT_EQ(k8s::HeldEvents(detail, 0)[0].name, events[0].name);
  *d->add_flap_times() = At(3000);
  EXPECT_NE(k8s::HeldEvents(detail, 0)[0].name, events[0].name) << "held again later: another Event";
  EXPECT_TRUE(k8s::HeldEvents(detail, 3001).empty());
}

}  // namespace
}  // namespace clusterd
