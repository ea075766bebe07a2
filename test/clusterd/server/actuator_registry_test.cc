// The actuator registry: the shipped kinds, their config checks, and adding
// a kind by registering it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "clusterd/recovery/actuators/registry.h"
#include "clusterd/server/registries.h"

namespace clusterd {
namespace {

TEST(ActuatorRegistryTest, BuiltinKindsInOrder) {
  const ActuatorRegistry& r = BuiltinActuators();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"none", "exec", "webhook", "kubernetes"}));
  EXPECT_EQ(JoinNames(r.Names()), "none, exec, webhook, kubernetes");
  EXPECT_EQ(JoinNames(r.Names(), " or "), "none, exec, webhook or kubernetes");
  EXPECT_TRUE(r.Has("exec"));
  EXPECT_TRUE(r.Has("kubernetes"));
  EXPECT_FALSE(r.Has("ssh"));
}

TEST(ActuatorRegistryTest, BuiltinChecksAndFactories) {
  const ActuatorRegistry& r = BuiltinActuators();
  ClusterdConfig cfg;
  EXPECT_TRUE(r.Validate(cfg).ok());
  auto none = r.Create(cfg);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->kind(), "none");

  cfg.actuator = "exec";
  Status st = r.Validate(cfg);
  EXPECT_EQ(st.message(), "--actuator-command: required with --actuator exec");
  cfg.actuator_command = "/bin/true";
  EXPECT_TRUE(r.Validate(cfg).ok());
  auto exec = r.Create(cfg);
  ASSERT_TRUE(exec.ok());
  EXPECT_EQ((*exec)->kind(), "exec");
  (*exec)->Stop();

  cfg.actuator = "webhook";
  EXPECT_EQ(r.Validate(cfg).message(), "--actuator-url: required with --actuator webhook");
  cfg.actuator_url = "ftp://nope";
  EXPECT_TRUE(r.Validate(cfg).ok());
  EXPECT_FALSE(r.Create(cfg).ok());  // the factory's own checks still apply
  cfg.actuator_url = "http://127.0.0.1:1/hook";
  auto webhook = r.Create(cfg);
  ASSERT_TRUE(webhook.ok());
  EXPECT_EQ((*webhook)->kind(), "webhook");
  (*webhook)->Stop();

  cfg.actuator = "ssh";
  EXPECT_EQ(r.Validate(cfg).message(), "actuator: \"ssh\" is not one of none, exec, webhook, kubernetes");
  EXPECT_FALSE(r.Create(cfg).ok());

  // Outside a pod and without --kubeconfig there is no API server to reach:
  // the start fails with a message that says what to give.
  cfg.actuator = "kubernetes";
  EXPECT_TRUE(r.Validate(cfg).ok());
  cfg.k8s.kubeconfig = "";
  if (std::getenv("KUBERNETES_SERVICE_HOST") == nullptr) {
    auto k8s = r.Create(cfg);
    ASSERT_FALSE(k8s.ok());
    EXPECT_NE(k8s.status().message().find("--kubeconfig"), std::string::npos) << k8s.status().message();
  }
  cfg.k8s.kubeconfig = "/nonexistent/kubeconfig";
  auto missing = r.Create(cfg);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/kubeconfig"), std::string::npos);
}

TEST(ActuatorRegistryTest, ANewKindIsOneRegistration) {
  ActuatorRegistry r;
  ASSERT_TRUE(r.Register(
                   "fake",
                   [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Actuator>> { return MakeNoneActuator(); },
                   [](const ClusterdConfig& c) {
                     return c.actuator_url.empty() ? InvalidArgument("--actuator-url: required with --actuator fake")
                                                   : Status::Ok();
                   })
                  .ok());
  EXPECT_FALSE(r.Register("fake", [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Actuator>> {
                  return MakeNoneActuator();
                }).ok());
  EXPECT_FALSE(r.Register("", [](const ClusterdConfig&) -> StatusOr<std::unique_ptr<Actuator>> {
                  return MakeNoneActuator();
                }).ok());
  EXPECT_FALSE(r.Register("nofactory", nullptr).ok());
  ClusterdConfig cfg;
  cfg.actuator = "fake";
  EXPECT_FALSE(r.Validate(cfg).ok());
  cfg.actuator_url = "x";
  EXPECT_TRUE(r.Validate(cfg).ok());
  auto made = r.Create(cfg);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ((*made)->kind(), "none");
}

}  // namespace
}  // namespace clusterd
