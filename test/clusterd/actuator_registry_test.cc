// The actuator registry: the shipped kinds, their config checks, and adding
// a kind by registering it.
#include <gtest/gtest.h>

#include "clusterd/actuator_registry.h"

namespace clusterd {
namespace {

TEST(ActuatorRegistryTest, BuiltinKindsInOrder) {
  const ActuatorRegistry& r = BuiltinActuators();
  EXPECT_EQ(r.Names(), (std::vector<std::string>{"none", "exec", "webhook"}));
  EXPECT_EQ(JoinNames(r.Names()), "none, exec, webhook");
  EXPECT_EQ(JoinNames(r.Names(), " or "), "none, exec or webhook");
  EXPECT_TRUE(r.Has("exec"));
  EXPECT_FALSE(r.Has("kubernetes"));
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

  cfg.actuator = "kubernetes";
  EXPECT_EQ(r.Validate(cfg).message(), "actuator: \"kubernetes\" is not one of none, exec, webhook");
  EXPECT_FALSE(r.Create(cfg).ok());
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
