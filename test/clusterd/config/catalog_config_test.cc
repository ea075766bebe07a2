#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "clusterd/config/config.h"
#include "clusterd/server/registries.h"
#include "clusterd/state/catalog.h"
#include "clusterd/state/chain_drift.h"
#include "common/duration.h"
#include "test/support/config_docs.h"
#include "test/support/temp_dir.h"

namespace clusterd {
namespace {

TEST(Catalog, DefaultHasThePublicAscendCodes) {
  Catalog c = Catalog::Default();
  EXPECT_EQ(c.size(), 973u);  // 802 Ascend codes, 170 NVIDIA codes, HEARTBEAT_LOST
  EXPECT_EQ(c.Resolve("80E01801", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(c.Resolve("80e01801", v1::FAULT_LEVEL_NOT_HANDLE), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(c.Resolve("020001002", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(c.Resolve("HEARTBEAT_LOST", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SEPARATE);
}

// NVIDIA's Xids at the level of their documented action, and the NVML
// backend's named codes.
TEST(Catalog, DefaultHasTheNvidiaXidsAndNvmlCodes) {
  Catalog c = Catalog::Default();
  EXPECT_EQ(c.Resolve("XID_79", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SEPARATE);     // fallen off the bus
  EXPECT_EQ(c.Resolve("XID_48", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_RESTART_NPU);  // DBE: reset
  EXPECT_EQ(c.Resolve("XID_13", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_EQ(c.Resolve("xid_94", v1::FAULT_LEVEL_UNSPECIFIED), c.Resolve("XID_94", v1::FAULT_LEVEL_UNSPECIFIED));
  for (const char* code :
       {"GPU_LOST", "GPU_RESET_REQUIRED", "GPU_ECC_DBE_VOLATILE", "GPU_ECC_DBE_AGGREGATE_HIGH",
        "GPU_RETIRED_PAGES_PENDING", "GPU_ROW_REMAP_PENDING", "GPU_ROW_REMAP_FAILURE", "GPU_THERMAL_SLOWDOWN",
        "GPU_POWER_BRAKE_SLOWDOWN", "GPU_HW_SLOWDOWN", "GPU_PCIE_REPLAY_HIGH", "GPU_NVLINK_DOWN", "GPU_NVLINK_ERRORS",
        "NVML_UNRESPONSIVE", "NVML_DRIVER_NOT_LOADED"}) {
    EXPECT_TRUE(c.Contains(code)) << code;
  }
  EXPECT_EQ(c.Resolve("GPU_ROW_REMAP_FAILURE", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(c.Resolve("GPU_THERMAL_SLOWDOWN", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SUB_HEALTH);
  // An override changes an Xid like any code.
  ASSERT_TRUE(c.MergeJson(R"({"codes": [{"code": "XID_79", "level": "RESTART_NPU"}]})", "o").ok());
  EXPECT_EQ(c.Resolve("XID_79", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_RESTART_NPU);
}

TEST(Catalog, UnknownCodesUseReportedThenDefaultLevel) {
  Catalog c = Catalog::Default(v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(c.Resolve("NODE_DISK_FULL", v1::FAULT_LEVEL_RESTART_REQUEST), v1::FAULT_LEVEL_RESTART_REQUEST);
  EXPECT_EQ(c.Resolve("DEADBEEF", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_PRE_SEPARATE);
}

TEST(Catalog, OverrideReplacesAndAdds) {
  Catalog c = Catalog::Default();
  ASSERT_TRUE(c.MergeJson(R"({"default_level": "NOT_HANDLE",
      "codes": [{"code": "80E01801", "level": "SEPARATE"}, {"code": "MY_CODE", "level": "FAULT_LEVEL_SUB_HEALTH"}]})",
                          "test")
                  .ok());
  EXPECT_EQ(c.Resolve("80E01801", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(c.Resolve("MY_CODE", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_SUB_HEALTH);
  EXPECT_EQ(c.default_level(), v1::FAULT_LEVEL_NOT_HANDLE);
}

// MindCluster's device plugin decides its faults' levels itself (its
// operator-customised faultCode.json, its escalations): for such a reporter
// its level wins over the built-in catalog's, but the operator's own
// catalog file wins over every reporter.
TEST(Catalog, AReporterThatDecidesLevelsWinsOverTheBuiltInCatalogNotOverTheOperators) {
  Catalog c = Catalog::Default();
  auto r = c.ResolveFor("81078603", v1::FAULT_LEVEL_SEPARATE, true);  // built in: NOT_HANDLE
  EXPECT_EQ(r.level, v1::FAULT_LEVEL_SEPARATE);
  EXPECT_EQ(r.catalog, v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(r.source, "reporter");
  r = c.ResolveFor("81078603", v1::FAULT_LEVEL_SEPARATE, false);  // any other reporter: the catalog
  EXPECT_EQ(r.level, v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(r.source, "catalog");
  r = c.ResolveFor("81078603", v1::FAULT_LEVEL_UNSPECIFIED, true);  // it gave none
  EXPECT_EQ(r.level, v1::FAULT_LEVEL_NOT_HANDLE);
  EXPECT_EQ(r.source, "catalog");
  r = c.ResolveFor("DEADBEEF", v1::FAULT_LEVEL_UNSPECIFIED, true);
  EXPECT_EQ(r.level, c.default_level());
  EXPECT_EQ(r.catalog, v1::FAULT_LEVEL_UNSPECIFIED);
  EXPECT_EQ(r.source, "default");
  EXPECT_FALSE(c.Overridden("81078603"));

  ASSERT_TRUE(c.MergeJson(R"({"codes": [{"code": "81078603", "level": "PRE_SEPARATE"}]})", "operator").ok());
  EXPECT_TRUE(c.Overridden("81078603"));
  EXPECT_FALSE(c.Overridden("80E01801"));
  r = c.ResolveFor("81078603", v1::FAULT_LEVEL_SEPARATE, true);
  EXPECT_EQ(r.level, v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(r.catalog, v1::FAULT_LEVEL_PRE_SEPARATE);
  EXPECT_EQ(r.source, "catalog override");
  // A refused merge marks nothing.
  EXPECT_FALSE(c.MergeJson(R"({"codes": [{"code": "80E01801", "level": "SEPARATE"}, {"code": 1}]})", "bad").ok());
  EXPECT_FALSE(c.Overridden("80E01801"));
}

TEST(Catalog, BadOverrideIsRefusedAndChangesNothing) {
  Catalog c = Catalog::Default();
  Status st = c.MergeJson(R"({"codes": [{"code": "80E01801", "level": "SEPARATE"},
                                       {"code": "X", "level": "VERY_BAD"}]})",
                          "override.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("codes[1].level"), std::string::npos) << st.message();
  EXPECT_EQ(c.Resolve("80E01801", v1::FAULT_LEVEL_UNSPECIFIED), v1::FAULT_LEVEL_RESTART_BUSINESS);
  EXPECT_FALSE(c.MergeJson("{not json", "x").ok());
  EXPECT_FALSE(c.MergeFile("/nonexistent/catalog.json").ok());
}

// The driver/firmware pair table: empty built in; an override lists the
// firmware of a driver (compared without case), replaces a driver's list,
// and an empty list takes the driver out; a bad entry changes nothing.
TEST(Catalog, FirmwareDriverPairs) {
  Catalog c = Catalog::Default();
  EXPECT_EQ(c.firmware_pairs(), 0u);
  EXPECT_EQ(c.FirmwareFor("24.1.rc3"), nullptr);
  ASSERT_TRUE(c.MergeJson(R"({"firmware_driver_pairs": [
      {"driver": "24.1.RC3", "firmware": ["7.5.0.3.220", "7.5.0.5.220"]},
      {"driver": "24.1.rc2", "firmware": ["7.3.0.1.231"]}]})",
                          "pairs")
                  .ok());
  ASSERT_NE(c.FirmwareFor("24.1.rc3"), nullptr);
  EXPECT_EQ(*c.FirmwareFor("24.1.rc3"), (std::vector<std::string>{"7.5.0.3.220", "7.5.0.5.220"}));
  EXPECT_EQ(FirmwareMismatch(c, "24.1.rc3", "7.5.0.5.220"), std::nullopt);
  EXPECT_EQ(FirmwareMismatch(c, "25.0.rc1", "7.3.0.1.231"), std::nullopt) << "a driver the table does not know";
  auto message = FirmwareMismatch(c, "24.1.rc3", "7.3.0.1.231");
  ASSERT_TRUE(message.has_value());
  EXPECT_EQ(*message,
            "firmware 7.3.0.1.231 is not a known pair of driver 24.1.rc3 (the catalog pairs it with 7.5.0.3.220, "
            "7.5.0.5.220)");
  // A later override replaces one driver's list and removes another's.
  ASSERT_TRUE(c.MergeJson(R"({"firmware_driver_pairs": [{"driver": "24.1.rc3", "firmware": ["7.3.0.1.231"]},
                                                        {"driver": "24.1.rc2", "firmware": []}]})",
                          "second")
                  .ok());
  EXPECT_EQ(FirmwareMismatch(c, "24.1.rc3", "7.3.0.1.231"), std::nullopt);
  EXPECT_EQ(c.FirmwareFor("24.1.rc2"), nullptr);
  EXPECT_EQ(c.firmware_pairs(), 1u);
  // Bad entries: named, nothing changed.
  for (const char* bad : {R"({"firmware_driver_pairs": {}})", R"({"firmware_driver_pairs": [{"driver": "x"}]})",
                          R"({"firmware_driver_pairs": [{"driver": "", "firmware": ["1"]}]})",
                          R"({"firmware_driver_pairs": [{"driver": "x", "firmware": [1]}]})",
                          R"({"firmware_driver_pairs": [{"driver": "x\n", "firmware": ["1"]}]})"}) {
    Status st = c.MergeJson(bad, "bad.json");
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("firmware_driver_pairs"), std::string::npos) << st.message();
  }
  std::string many = R"({"firmware_driver_pairs": [{"driver": "x", "firmware": [)";
  for (int i = 0; i < 65; ++i) many += (i ? ",\"" : "\"") + std::to_string(i) + "\"";
  EXPECT_FALSE(c.MergeJson(many + "]}]}", "many").ok());
  EXPECT_EQ(c.firmware_pairs(), 1u);
}

TEST(Config, ChainDriftLevels) {
  bool help = false;
  auto cfg =
      ParseClusterdFlags({"--insecure", "--chain-drift-levels", "a3-train=PRE_SEPARATE,910B3=NOT_HANDLE"}, &help);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->chain_drift_levels, (std::vector<std::string>{"a3-train=PRE_SEPARATE", "910B3=NOT_HANDLE"}));
  auto entry = ParseChainDriftLevel("a3-train=PRE_SEPARATE");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->first, "a3-train");
  EXPECT_EQ(entry->second, v1::FAULT_LEVEL_PRE_SEPARATE);
  for (const char* bad : {"a3", "=SEPARATE", "a3=", "a3=BAD", "a3=UNSPECIFIED"}) {
    auto r = ParseClusterdFlags({"--insecure", "--chain-drift-levels", bad}, &help);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("chain-drift-levels"), std::string::npos) << r.status().message();
  }
}

TEST(Duration, ParsesUnitsAndRefusesBareNumbers) {
  EXPECT_EQ(ParseDuration("10s").value(), std::chrono::seconds(10));
  EXPECT_EQ(ParseDuration("1500ms").value(), std::chrono::milliseconds(1500));
  EXPECT_EQ(ParseDuration("7d").value(), std::chrono::hours(168));
  EXPECT_FALSE(ParseDuration("10").ok());
  EXPECT_FALSE(ParseDuration("s").ok());
  EXPECT_FALSE(ParseDuration("10 s").ok());
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(1500)), "1500ms");
  EXPECT_EQ(FormatDuration(std::chrono::seconds(120)), "2m");
}

TEST(Config, DefaultsFlagsAndFile) {
  testing::TempDir dir;
  std::ofstream(dir.Sub("c.json")) << R"({"node_grace": "30s", "listen": "127.0.0.1:9000", "retention_events": 5000})";
  bool help = false;
  auto cfg = ParseClusterdFlags(
      {"--insecure", "--config", dir.Sub("c.json"), "--node-grace=3s", "--data-dir", "/tmp/x"}, &help);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->node_grace, std::chrono::seconds(3));  // the flag wins over the file
  EXPECT_EQ(cfg->listen, "127.0.0.1:9000");
  EXPECT_EQ(cfg->retention_events, 5000u);
  EXPECT_EQ(cfg->data_dir, "/tmp/x");
  EXPECT_EQ(cfg->http_listen, "0.0.0.0:11253");
}

TEST(Config, ErrorsNameTheKey) {
  bool help = false;
  auto bad_flag = ParseClusterdFlags({"--insecure", "--node-grace", "ten"}, &help);
  ASSERT_FALSE(bad_flag.ok());
  EXPECT_NE(bad_flag.status().message().find("--node-grace"), std::string::npos) << bad_flag.status().message();
  auto unknown = ParseClusterdFlags({"--insecure", "--bogus", "1"}, &help);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("--bogus"), std::string::npos);
  ClusterdConfig cfg;
  Status st = ApplyClusterdConfigJson(R"({"listen": "nohostport"})", "file.json", &cfg);
  EXPECT_NE(st.message().find("listen"), std::string::npos) << st.message();
  st = ApplyClusterdConfigJson(R"({"default_level": "LOUD"})", "file.json", &cfg);
  EXPECT_NE(st.message().find("default_level"), std::string::npos);
  st = ApplyClusterdConfigJson(R"({"whatever": 1})", "file.json", &cfg);
  EXPECT_NE(st.message().find("whatever"), std::string::npos);
  st = ApplyClusterdConfigJson(R"({"max_streams": -1})", "file.json", &cfg);
  EXPECT_NE(st.message().find("max_streams"), std::string::npos);
  EXPECT_EQ(cfg.listen, "0.0.0.0:8899");  // nothing applied on error
  ASSERT_TRUE(ParseClusterdFlags({"--insecure", "--help"}, &help).ok());
  EXPECT_TRUE(help);
}

TEST(Config, CommitDelay) {
  bool help = false;
  auto dflt = ParseClusterdFlags({"--insecure"}, &help);
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->commit_delay, std::chrono::milliseconds(2));
  auto off = ParseClusterdFlags({"--insecure", "--commit-delay", "0s"}, &help);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->commit_delay, std::chrono::nanoseconds(0));
  auto too_long = ParseClusterdFlags({"--insecure", "--commit-delay", "1s"}, &help);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("commit_delay"), std::string::npos) << too_long.status().message();
  ClusterdConfig cfg;
  EXPECT_TRUE(ApplyClusterdConfigJson(R"({"commit_delay": "250us"})", "file.json", &cfg).ok());
}

// One client may hold only part of the HTTP port (issue 36): the per-peer
// limit is a key and a flag, 0 turns it off, and one that is not below the
// total is refused, whichever way it was set.
TEST(Config, HttpConnectionsPerPeer) {
  bool help = false;
  auto dflt = ParseClusterdFlags({"--insecure"}, &help);
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->max_http_connections_per_peer, 64u);

  auto flag = ParseClusterdFlags({"--insecure", "--max-http-connections-per-peer", "10"}, &help);
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->max_http_connections_per_peer, 10u);
  auto off = ParseClusterdFlags({"--insecure", "--max-http-connections-per-peer=0"}, &help);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(off->max_http_connections_per_peer, 0u);

  testing::TempDir dir;
  std::ofstream(dir.Sub("c.json")) << R"({"max_http_connections": 1000, "max_http_connections_per_peer": 500})";
  auto file = ParseClusterdFlags({"--insecure", "--config", dir.Sub("c.json")}, &help);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->max_http_connections_per_peer, 500u);

  const auto refused = [&](std::vector<std::string> args) {
    auto r = ParseClusterdFlags(args, &help);
    if (r.ok()) return std::string("accepted");
    return r.status().message();
  };
  // A total at or below the per-peer setting is not refused (the server
  // applies at most half of the total per peer: MakeHttpServerOptions).
  EXPECT_TRUE(ParseClusterdFlags({"--insecure", "--max-http-connections", "64"}, &help).ok());
  const std::string negative = refused({"--insecure", "--max-http-connections-per-peer", "-1"});
  EXPECT_NE(negative.find("--max-http-connections-per-peer"), std::string::npos) << negative;
  EXPECT_NE(ClusterdHelp().find("--max-http-connections-per-peer N"), std::string::npos);
}

TEST(Config, RecoverySettings) {
  bool help = false;
  auto cfg = ParseClusterdFlags(
      {"--insecure", "--actuator", "exec", "--actuator-command", "/bin/true", "--max-concurrent-recoveries", "8",
       "--max-isolated-node-percent", "0", "--recovery-budget-window", "1h"},
      &help);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->actuator, "exec");
  EXPECT_EQ(cfg->max_concurrent_recoveries, 8u);
  EXPECT_EQ(cfg->max_isolated_node_percent, 0u);
  EXPECT_EQ(cfg->recovery_budget_window, std::chrono::hours(1));
  auto no_command = ParseClusterdFlags({"--insecure", "--actuator", "exec"}, &help);
  ASSERT_FALSE(no_command.ok());
  EXPECT_NE(no_command.status().message().find("--actuator-command"), std::string::npos);
  auto no_url = ParseClusterdFlags({"--insecure", "--actuator", "webhook"}, &help);
  ASSERT_FALSE(no_url.ok());
  EXPECT_NE(no_url.status().message().find("--actuator-url"), std::string::npos);
  auto kind = ParseClusterdFlags({"--insecure", "--actuator", "ssh"}, &help);
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("none, exec, webhook, kubernetes"), std::string::npos);
}

TEST(Config, KubernetesSettings) {
  bool help = false;
  auto cfg = ParseClusterdFlags(
      {"--insecure", "--integrations", "kubernetes", "--actuator", "kubernetes", "--kubeconfig", "/k",
       "--k8s-namespace", "train", "--k8s-taint-effect", "NoExecute", "--k8s-node-not-ready-level", "SEPARATE",
       "--k8s-delete-fallback", "true", "--k8s-eviction-timeout", "90s"},
      &help);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  EXPECT_EQ(cfg->integrations, std::vector<std::string>{"kubernetes"});
  EXPECT_EQ(cfg->actuator, "kubernetes");
  EXPECT_EQ(cfg->k8s.kubeconfig, "/k");
  EXPECT_EQ(cfg->k8s.namespace_, "train");
  EXPECT_EQ(cfg->k8s.taint_effect, "NoExecute");
  EXPECT_EQ(cfg->k8s.node_not_ready_level, v1::FAULT_LEVEL_SEPARATE);
  EXPECT_TRUE(cfg->k8s.delete_fallback);
  EXPECT_EQ(cfg->k8s.eviction_timeout, std::chrono::seconds(90));
  EXPECT_EQ(cfg->k8s.rank_annotation, "hccl/rankIndex");  // defaults stay

  // The chart's config file: a list and a boolean.
  ClusterdConfig file;
  ASSERT_TRUE(ApplyClusterdConfigJson(R"({"integrations": ["kubernetes"], "k8s_delete_fallback": false,
                                          "k8s_podgroups": true})",
                                      "test", &file)
                  .ok());
  EXPECT_EQ(file.integrations, std::vector<std::string>{"kubernetes"});
  EXPECT_FALSE(file.k8s.delete_fallback);

  auto bad_name = ParseClusterdFlags({"--insecure", "--integrations", "kubernetes,volcano"}, &help);
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.status().message().find("\"volcano\" is not one of kubernetes, mindcluster"), std::string::npos)
      << bad_name.status().message();
  EXPECT_FALSE(ParseClusterdFlags({"--insecure", "--k8s-taint-effect", "PreferNoSchedule"}, &help).ok());
  EXPECT_FALSE(ParseClusterdFlags({"--insecure", "--k8s-node-not-ready-level", "BAD"}, &help).ok());
  EXPECT_FALSE(ParseClusterdFlags({"--insecure", "--k8s-delete-fallback", "maybe"}, &help).ok());
  EXPECT_FALSE(ApplyClusterdConfigJson(R"({"integrations": ["a,b"]})", "test", &file).ok());
  EXPECT_FALSE(ApplyClusterdConfigJson(R"({"integrations": [1]})", "test", &file).ok());
  EXPECT_FALSE(ParseClusterdFlags({"--insecure", "--max-isolated-node-percent", "101"}, &help).ok());
  EXPECT_FALSE(ParseClusterdFlags({"--insecure", "--max-concurrent-recoveries", "0"}, &help).ok());
}

TEST(Config, HighAvailability) {
  bool help = false;
  auto dflt = ParseClusterdFlags({"--insecure"}, &help);
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_TRUE(dflt->ha.etcd_endpoints.empty());  // one process, no etcd
  EXPECT_EQ(dflt->ha.key_prefix, "/clusterd/");

  auto cfg =
      ParseClusterdFlags({"--insecure", "--etcd-endpoints=http://127.0.0.1:2379,127.0.0.1:2380", "--ha-replica-id",
                          "clusterd-0", "--ha-key-prefix", "/team-a/", "--ha-lease-ttl", "2s"},
                         &help);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->ha.etcd_endpoints, (std::vector<std::string>{"http://127.0.0.1:2379", "127.0.0.1:2380"}));
  EXPECT_EQ(cfg->ha.replica_id, "clusterd-0");
  EXPECT_EQ(cfg->ha.key_prefix, "/team-a/");
  EXPECT_EQ(cfg->ha.lease_ttl, std::chrono::seconds(2));

  auto tls = ParseClusterdFlags({"--insecure", "--etcd-endpoints", "https://a:2379,https://b:2379", "--etcd-ca-file",
                                 "/ca.pem", "--etcd-cert-file", "/c.pem", "--etcd-key-file", "/k.pem"},
                                &help);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  EXPECT_EQ(tls->ha.etcd_ca_file, "/ca.pem");
  EXPECT_EQ(tls->ha.etcd_cert_file, "/c.pem");
  EXPECT_EQ(tls->ha.etcd_key_file, "/k.pem");
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--insecure", "--etcd-endpoints", "https://a:2379,http://b:2379"},
        std::vector<std::string>{"--insecure", "--etcd-endpoints", "http://a:2379", "--etcd-ca-file", "/ca.pem"},
        std::vector<std::string>{"--insecure", "--etcd-endpoints", "https://a:2379", "--etcd-cert-file", "/c.pem"},
        std::vector<std::string>{"--insecure", "--etcd-endpoints", "https://a:2379", "--etcd-key-file", "/k.pem"}}) {
    auto r = ParseClusterdFlags(bad, &help);
    ASSERT_FALSE(r.ok()) << bad[2];
    EXPECT_NE(r.status().message().find("etcd_"), std::string::npos) << r.status().message();
  }
  auto pod = ParseClusterdFlags(
      {"--insecure", "--ha-pod", "fault-mgmt/clusterd-1", "--ha-advertise-address", "10.0.0.5:11253"}, &help);
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(pod->ha.pod_namespace, "fault-mgmt");
  EXPECT_EQ(pod->ha.pod_name, "clusterd-1");
  EXPECT_EQ(pod->ha.advertise_address, "10.0.0.5:11253");
  for (const char* bad_pod : {"clusterd-1", "/x", "ns/", "NS/x", "ns/a b"}) {
    auto r = ParseClusterdFlags({"--insecure", "--ha-pod", bad_pod}, &help);
    ASSERT_FALSE(r.ok()) << bad_pod;
    EXPECT_NE(r.status().message().find("ha_pod"), std::string::npos) << r.status().message();
  }
  for (const char* bad_addr : {"10.0.0.5", ":80", "host:", "host:http", "a/b:80"}) {
    auto r = ParseClusterdFlags({"--insecure", "--ha-advertise-address", bad_addr}, &help);
    ASSERT_FALSE(r.ok()) << bad_addr;
    EXPECT_NE(r.status().message().find("ha_advertise_address"), std::string::npos) << r.status().message();
  }
  auto no_port = ParseClusterdFlags({"--insecure", "--etcd-endpoints", "nohostport"}, &help);
  ASSERT_FALSE(no_port.ok());
  EXPECT_NE(no_port.status().message().find("etcd_endpoints"), std::string::npos) << no_port.status().message();
  auto prefix = ParseClusterdFlags({"--insecure", "--ha-key-prefix=/x"}, &help);
  ASSERT_FALSE(prefix.ok());
  EXPECT_NE(prefix.status().message().find("ha_key_prefix"), std::string::npos) << prefix.status().message();
  auto short_ttl = ParseClusterdFlags({"--insecure", "--ha-lease-ttl=500ms"}, &help);
  ASSERT_FALSE(short_ttl.ok());
  EXPECT_NE(short_ttl.status().message().find("ha_lease_ttl"), std::string::npos) << short_ttl.status().message();
  auto slash = ParseClusterdFlags({"--insecure", "--ha-replica-id", "pod/0"}, &help);
  ASSERT_FALSE(slash.ok());
  EXPECT_NE(slash.status().message().find("ha_replica_id"), std::string::npos) << slash.status().message();
}

// fault.Fault's registration limits: one client's share is a key and a flag.
TEST(Config, MindClusterRegistrationLimits) {
  bool help = false;
  auto dflt = ParseClusterdFlags({"--insecure"}, &help);
  ASSERT_TRUE(dflt.ok()) << dflt.status().ToString();
  EXPECT_EQ(dflt->mindcluster_max_subscribers, 1000u);
  EXPECT_EQ(dflt->mindcluster_max_registrations_per_principal, 100u);
  auto flag = ParseClusterdFlags({"--insecure", "--mindcluster-max-registrations-per-principal", "7"}, &help);
  ASSERT_TRUE(flag.ok()) << flag.status().ToString();
  EXPECT_EQ(flag->mindcluster_max_registrations_per_principal, 7u);
  testing::TempDir dir;
  std::ofstream(dir.Sub("c.json"))
      << R"({"mindcluster_max_subscribers": 50, "mindcluster_max_registrations_per_principal": 50})";
  auto file = ParseClusterdFlags({"--insecure", "--config", dir.Sub("c.json")}, &help);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->mindcluster_max_subscribers, 50u);
  EXPECT_EQ(file->mindcluster_max_registrations_per_principal, 50u);
  // A lower total alone, with the default share above it, is a valid config
  // (the server applies the smaller of the two).
  auto over = ParseClusterdFlags({"--insecure", "--mindcluster-max-subscribers", "50"}, &help);
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  auto zero = ParseClusterdFlags({"--insecure", "--mindcluster-max-registrations-per-principal", "0"}, &help);
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("--mindcluster-max-registrations-per-principal"), std::string::npos)
      << zero.status().message();
  EXPECT_NE(ClusterdHelp().find("--mindcluster-max-registrations-per-principal N"), std::string::npos);
}

// Every row of the table of keys is complete, and the default it documents
// is a value its own parser takes back unchanged.
TEST(ConfigTable, EveryKeyIsDescribedAndItsDefaultParses) {
  testing::ExpectEveryRowDescribed(ClusterdConfigKeys());
  // Each key parses as a flag and as a JSON key, and a bad value is refused
  // naming it (the same setter serves both).
  bool help = false;
  auto parsed = ParseClusterdFlags({"--insecure", "--max-streams", "7", "--k8s-taint-effect", "NoExecute"}, &help);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->max_streams, 7u);
  ClusterdConfig file;
  EXPECT_TRUE(ApplyClusterdConfigJson(R"({"max_streams": 7, "ha_lease_ttl": "5s"})", "f", &file).ok());
  EXPECT_EQ(file.ha.lease_ttl, std::chrono::seconds(5));
  Status too_long = ApplyClusterdConfigJson(R"({"ha_lease_ttl": "2m"})", "f", &file);
  EXPECT_NE(too_long.message().find("ha_lease_ttl: 2m is longer than the maximum 1m"), std::string::npos)
      << too_long.message();
}

// --help lists every key with its default, from the same table.
TEST(ConfigTable, HelpListsEveryKeyWithItsDefault) {
  const std::string help = ClusterdHelp();
  for (const ConfigKey& k : ClusterdConfigKeys()) {
    std::string flag = k.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_NE(help.find("--" + flag + (k.value_name.empty() ? "" : " " + k.value_name)), std::string::npos) << k.name;
  }
  EXPECT_NE(help.find("--node-grace DUR"), std::string::npos);
  EXPECT_NE(help.find("(default 10s; at least 100ms)"), std::string::npos);
  // The actuator kinds are the registry's (the help wraps lines: compare the words).
  std::string words;
  std::istringstream all(help);
  for (std::string w; all >> w;) words += (words.empty() ? "" : " ") + w;
  EXPECT_NE(words.find("(default none; none, exec, webhook or kubernetes)"), std::string::npos);
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

// The chart's clusterd.config map (charts/clusterd/values.yaml) repeats the
// binary's defaults for the operator to see and change: each value it sets
// must be the same setting as the default (parsed by the key's own row, so
// "60s" and "1m" agree), and each key it names must exist.
TEST(ConfigTable, ChartValuesAreTheDefaults) {
  const auto values = testing::ChartConfigValues(std::string(CLUSTERD_CHART_DIR) + "/values.yaml", "clusterd");
  const int checked = testing::ExpectChartValuesAreDefaults(ClusterdConfigKeys(), values, "clusterd.config.");
  EXPECT_GT(checked, 20);
}

// The chart's values.schema.json refuses any clusterd.config key it does not
// list: it lists exactly the keys whose chart value is clusterd.config.<key>.
TEST(ConfigTable, ChartSchemaListsTheChartKeys) {
  bool closed = false;
  const std::set<std::string> listed =
      testing::ChartSchemaConfigKeys(std::string(CLUSTERD_CHART_DIR) + "/values.schema.json", "clusterd", &closed);
  EXPECT_TRUE(closed);
  std::set<std::string> chart;
  for (const ConfigKey& k : ClusterdConfigKeys()) {
    if (k.chart_value == "clusterd.config." + k.name) chart.insert(k.name);
  }
  for (const std::string& key : chart)
    EXPECT_TRUE(listed.count(key)) << key << " is settable but the schema refuses it";
  for (const std::string& key : listed) {
    const auto& keys = ClusterdConfigKeys();
    EXPECT_TRUE(std::any_of(keys.begin(), keys.end(), [&](const ConfigKey& k) { return k.name == key; }))
        << key << " in the schema is not a key";
  }
}

// docs/configuration.md's reference tables are the table's, to the byte.
// CLUSTERD_UPDATE_DOCS=1 writes them into the document instead.
TEST(ConfigTable, ReferenceInDocsIsCurrent) {
  testing::ExpectGeneratedSection(std::string(CLUSTERD_DOCS_DIR) + "/configuration.md",
                                  "<!-- BEGIN GENERATED: the table of keys (clusterd/config/config.cc) -->\n",
                                  ClusterdConfigReference(BuiltinConfigChecks()));
}

}  // namespace
}  // namespace clusterd
