// NodeD's configuration (noded/server/config.h): the transport security keys
// of the stream to ClusterD, from the file, flags and CLUSTERD_* environment,
// and the startup errors that name the key.
#include "noded/server/config.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "noded/server/noded_server.h"
#include "noded/server/stream_client.h"
#include "test/support/config_docs.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using testing::TempDir;

std::map<std::string, std::string> g_env;
const char* FakeEnv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class NodedConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_env.clear();
    dir_.Write("ca.crt", "ca\n");
    dir_.Write("client.crt", "cert\n");
    dir_.Write("client.key", "key\n");
    dir_.Write("token", "tok\n");
    dir_.Write("other-ca.crt", "ca2\n");
  }
  void TearDown() override { g_env.clear(); }

  std::string P(const std::string& name) const { return dir_.path() + "/" + name; }

  // Parses with the fake environment; --node-name keeps the host name out of it.
  StatusOr<NodedConfig> Parse(std::vector<std::string> args) {
    args.insert(args.begin(), {"--node-name", "worker01"});
    bool help = false;
    auto cfg = ParseNodedConfig(args, &help, FakeEnv);
    EXPECT_FALSE(help);
    return cfg;
  }
  // The error message of parsing `args`, "" when it succeeds.
  std::string Error(std::vector<std::string> args) {
    auto cfg = Parse(std::move(args));
    if (cfg.ok()) return "";
    EXPECT_EQ(cfg.status().code(), StatusCode::kInvalidArgument);
    return cfg.status().message();
  }

  TempDir dir_;
};

TEST_F(NodedConfigTest, PlaintextByDefault) {
  auto cfg = Parse({});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, "");
  EXPECT_EQ(cfg->tls_cert_file, "");
  EXPECT_EQ(cfg->tls_key_file, "");
  EXPECT_EQ(cfg->token_file, "");
  EXPECT_EQ(cfg->token, "");
  EXPECT_EQ(cfg->server_name, "");
  EXPECT_EQ(cfg->server, "127.0.0.1:8899");
  EXPECT_EQ(cfg->node_name, "worker01");
}

TEST_F(NodedConfigTest, Flags) {
  auto cfg = Parse({"--tls-ca-file", P("ca.crt"), "--tls-cert-file", P("client.crt"), "--tls-key-file", P("client.key"),
                    "--token-file", P("token"), "--server-name", "clusterd.example"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, P("ca.crt"));
  EXPECT_EQ(cfg->tls_cert_file, P("client.crt"));
  EXPECT_EQ(cfg->tls_key_file, P("client.key"));
  EXPECT_EQ(cfg->token_file, P("token"));
  EXPECT_EQ(cfg->server_name, "clusterd.example");
  EXPECT_EQ(cfg->token, "");
}

TEST_F(NodedConfigTest, ConfigFileKeysAndAFlagOverridesTheFile) {
  dir_.Write("noded.json", R"({"tls_ca_file": ")" + P("ca.crt") + R"(", "tls_cert_file": ")" + P("client.crt") +
                               R"(", "tls_key_file": ")" + P("client.key") + R"(", "token_file": ")" + P("token") +
                               R"(", "server_name": "from-file"})");
  auto cfg = Parse({"--config", P("noded.json")});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, P("ca.crt"));
  EXPECT_EQ(cfg->tls_cert_file, P("client.crt"));
  EXPECT_EQ(cfg->tls_key_file, P("client.key"));
  EXPECT_EQ(cfg->token_file, P("token"));
  EXPECT_EQ(cfg->server_name, "from-file");

  cfg = Parse({"--config", P("noded.json"), "--tls-ca-file", P("other-ca.crt"), "--server-name", "from-flag"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, P("other-ca.crt"));
  EXPECT_EQ(cfg->server_name, "from-flag");
}

TEST_F(NodedConfigTest, TheEnvironmentIsTheFallback) {
  g_env = {{"CLUSTERD_CA", P("ca.crt")},
           {"CLUSTERD_CERT", P("client.crt")},
           {"CLUSTERD_KEY", P("client.key")},
           {"CLUSTERD_TOKEN_FILE", P("token")},
           {"CLUSTERD_SERVER_NAME", "env-name"}};
  auto cfg = Parse({});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, P("ca.crt"));
  EXPECT_EQ(cfg->tls_cert_file, P("client.crt"));
  EXPECT_EQ(cfg->tls_key_file, P("client.key"));
  EXPECT_EQ(cfg->token_file, P("token"));
  EXPECT_EQ(cfg->server_name, "env-name");
}

TEST_F(NodedConfigTest, FlagsAndTheFileWinOverTheEnvironment) {
  g_env = {{"CLUSTERD_CA", P("ca.crt")}, {"CLUSTERD_SERVER_NAME", "env-name"}, {"CLUSTERD_TOKEN_FILE", "/env/token"}};
  auto cfg = Parse({"--tls-ca-file", P("other-ca.crt"), "--token-file", P("token")});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->tls_ca_file, P("other-ca.crt"));
  EXPECT_EQ(cfg->token_file, P("token"));
  EXPECT_EQ(cfg->server_name, "env-name");  // not configured: from the environment

  g_env.erase("CLUSTERD_TOKEN_FILE");  // a missing file: it would be used now
  dir_.Write("noded.json", R"({"server_name": "from-file"})");
  cfg = Parse({"--config", P("noded.json")});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->server_name, "from-file");
}

TEST_F(NodedConfigTest, TokenFromTheEnvironment) {
  g_env = {{"CLUSTERD_CA", P("ca.crt")}, {"CLUSTERD_TOKEN", "env-token"}};
  auto cfg = Parse({});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->token, "env-token");
  EXPECT_EQ(cfg->token_file, "");

  // A configured token file wins over both token variables.
  g_env["CLUSTERD_TOKEN_FILE"] = "/env/token";
  cfg = Parse({"--token-file", P("token")});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->token_file, P("token"));
  EXPECT_EQ(cfg->token, "");

  // Both variables and nothing configured: ambiguous.
  const std::string e = Error({});
  EXPECT_TRUE(Contains(e, "CLUSTERD_TOKEN and CLUSTERD_TOKEN_FILE")) << e;
}

// NodeD's own HTTP port: the TLS pair together, a client CA and a token only
// over TLS, TLS or the insecure switch, readable files; the file and flags
// take the keys.
TEST_F(NodedConfigTest, HttpPortSecurity) {
  auto cfg = Parse({"--http-tls-cert-file", P("client.crt"), "--http-tls-key-file", P("client.key"),
                    "--http-tls-client-ca-file", P("ca.crt"), "--http-token-file", P("token"),
                    "--http-tls-reload-interval", "30s"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_TRUE(cfg->http_tls());
  EXPECT_TRUE(cfg->http_auth());
  EXPECT_EQ(cfg->http_tls_client_ca_file, P("ca.crt"));
  EXPECT_EQ(cfg->http_token_file, P("token"));
  EXPECT_EQ(cfg->http_tls_reload_interval, std::chrono::seconds(30));
  EXPECT_FALSE(cfg->http_insecure);

  dir_.Write("noded.json", R"({"http_insecure": true})");
  cfg = Parse({"--config", P("noded.json")});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_TRUE(cfg->http_insecure);
  EXPECT_TRUE(Parse({"--http-insecure"})->http_insecure);
  EXPECT_FALSE(Parse({})->http_tls());
  EXPECT_FALSE(Parse({})->http_auth());

  EXPECT_EQ(Error({"--http-tls-cert-file", P("client.crt")}), "http_tls_cert_file: needs http_tls_key_file");
  EXPECT_EQ(Error({"--http-tls-key-file", P("client.key")}), "http_tls_key_file: needs http_tls_cert_file");
  std::string e = Error({"--http-tls-client-ca-file", P("ca.crt")});
  EXPECT_TRUE(Contains(e, "http_tls_client_ca_file: client certificates need TLS")) << e;
  e = Error({"--http-token-file", P("token")});
  EXPECT_TRUE(Contains(e, "http_token_file: a bearer token is only accepted over TLS")) << e;
  e = Error({"--http-tls-cert-file", P("client.crt"), "--http-tls-key-file", P("client.key"), "--http-insecure"});
  EXPECT_TRUE(Contains(e, "http_insecure: contradicts http_tls_cert_file")) << e;
  e = Error({"--http-tls-cert-file", P("client.crt"), "--http-tls-key-file", P("client.key"), "--http-token-file",
             P("missing")});
  EXPECT_TRUE(Contains(e, "http_token_file: cannot read")) << e;
  e = Error({"--http-tls-reload-interval", "10ms"});
  EXPECT_TRUE(Contains(e, "http_tls_reload_interval")) << e;

  // Plaintext: on loopback as it is, elsewhere only with the switch.
  NodedConfig plain;
  plain.http_listen = "127.0.0.1:11255";
  EXPECT_TRUE(CheckHttpTransport(plain).ok());
  plain.http_listen = "[::1]:11255";
  EXPECT_TRUE(CheckHttpTransport(plain).ok());
  plain.http_listen = "0.0.0.0:11255";
  Status st = CheckHttpTransport(plain);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Contains(st.message(), "needs http_insecure: true")) << st.ToString();
  plain.http_insecure = true;
  EXPECT_TRUE(CheckHttpTransport(plain).ok());
}

TEST_F(NodedConfigTest, ATokenWithoutTlsIsRefused) {
  std::string e = Error({"--token-file", P("token")});
  EXPECT_EQ(e.rfind("token_file:", 0), 0u) << e;
  EXPECT_TRUE(Contains(e, "only sent over TLS (set tls_ca_file)")) << e;

  g_env = {{"CLUSTERD_TOKEN", "t"}};
  e = Error({});
  EXPECT_TRUE(Contains(e, "CLUSTERD_TOKEN: a bearer token is only sent over TLS")) << e;

  g_env = {{"CLUSTERD_TOKEN_FILE", P("token")}};
  e = Error({});
  EXPECT_TRUE(Contains(e, "token_file (from CLUSTERD_TOKEN_FILE): a bearer token is only sent over TLS")) << e;
}

TEST_F(NodedConfigTest, ACertificateNeedsItsKey) {
  std::string e = Error({"--tls-ca-file", P("ca.crt"), "--tls-cert-file", P("client.crt")});
  EXPECT_EQ(e, "tls_cert_file: needs tls_key_file");
  e = Error({"--tls-ca-file", P("ca.crt"), "--tls-key-file", P("client.key")});
  EXPECT_EQ(e, "tls_key_file: needs tls_cert_file");
  // The variable the value came from is named.
  g_env = {{"CLUSTERD_CERT", P("client.crt")}};
  e = Error({"--tls-ca-file", P("ca.crt")});
  EXPECT_EQ(e, "tls_cert_file (from CLUSTERD_CERT): needs tls_key_file");
  // A client certificate alone is TLS (the system's roots verify the server).
  EXPECT_EQ(Error({"--tls-cert-file", P("client.crt"), "--tls-key-file", P("client.key")}), "");
}

TEST_F(NodedConfigTest, AServerNameNeedsTls) {
  const std::string e = Error({"--server-name", "clusterd"});
  EXPECT_EQ(e.rfind("server_name:", 0), 0u) << e;
}

TEST_F(NodedConfigTest, UnreadableFilesNameTheKey) {
  const std::string missing = P("missing");
  EXPECT_EQ(Error({"--tls-ca-file", missing}), "tls_ca_file: cannot read " + missing);
  EXPECT_EQ(Error({"--tls-ca-file", P("ca.crt"), "--tls-cert-file", missing, "--tls-key-file", P("client.key")}),
            "tls_cert_file: cannot read " + missing);
  EXPECT_EQ(Error({"--tls-ca-file", P("ca.crt"), "--tls-cert-file", P("client.crt"), "--tls-key-file", missing}),
            "tls_key_file: cannot read " + missing);
  EXPECT_EQ(Error({"--tls-ca-file", P("ca.crt"), "--token-file", missing}), "token_file: cannot read " + missing);
  g_env = {{"CLUSTERD_CA", missing}};
  EXPECT_EQ(Error({}), "tls_ca_file (from CLUSTERD_CA): cannot read " + missing);
  // From the config file: the same key name.
  dir_.Write("noded.json", R"({"tls_ca_file": ")" + missing + R"("})");
  g_env.clear();
  EXPECT_EQ(Error({"--config", P("noded.json")}), "tls_ca_file: cannot read " + missing);
}

TEST_F(NodedConfigTest, UnknownSecurityFlagsAreRefused) {
  // clusterctl's short names are not NodeD's keys.
  EXPECT_NE(Error({"--ca", P("ca.crt")}), "");
  EXPECT_NE(Error({"--token", "t"}), "");
}

TEST_F(NodedConfigTest, UsageListsTheKeys) {
  const std::string usage = NodedUsage();
  for (const char* s : {"--tls-ca-file FILE", "--tls-cert-file FILE", "--tls-key-file FILE", "--token-file FILE",
                        "--server-name NAME", "CLUSTERD_CA", "CLUSTERD_CERT", "CLUSTERD_KEY", "CLUSTERD_TOKEN_FILE",
                        "CLUSTERD_TOKEN", "CLUSTERD_SERVER_NAME"}) {
    EXPECT_TRUE(Contains(usage, s)) << s;
  }
}

TEST_F(NodedConfigTest, StreamClientBuildsItsChannelWithTheSecurity) {
  StreamOptions bad;
  bad.security.token = "t";  // no TLS
  auto refused = StreamClient::Create(bad, nullptr, nullptr, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(Contains(refused.status().message(), "--token")) << refused.status().message();

  for (bool tls : {false, true}) {
    StreamOptions ok;
    if (tls) ok.security.ca_file = P("ca.crt");
    auto client = StreamClient::Create(ok, nullptr, nullptr, nullptr);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    EXPECT_FALSE((*client)->connected());  // not started: nothing dialled
  }
}

}  // namespace
}  // namespace clusterd::noded

namespace clusterd::noded {
namespace {

// The pod-resources keys and --probe (a switch), and `noded --probe` on the
// simulator: what the backend sees, as JSON.
TEST_F(NodedConfigTest, PodResourcesKeysAndTheProbeSwitch) {
  auto cfg = Parse({"--pod-resources-socket", "/run/k.sock", "--pod-resources-interval", "3s",
                    "--pod-resources-resources", "nvidia.com/gpu,example.com/acc-*", "--probe"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  EXPECT_EQ(cfg->pod_resources_socket, "/run/k.sock");
  EXPECT_EQ(cfg->pod_resources_interval, std::chrono::seconds(3));
  EXPECT_EQ(cfg->pod_resources_resources, (std::vector<std::string>{"nvidia.com/gpu", "example.com/acc-*"}));
  EXPECT_TRUE(cfg->probe);
  EXPECT_FALSE(Parse({})->probe);
  EXPECT_EQ(Parse({"--pod-resources-socket", ""})->pod_resources_socket, "");
  EXPECT_NE(Error({"--pod-resources-socket", "relative.sock"}), "");
  EXPECT_NE(Error({"--pod-resources-interval", "10ms"}), "");
  EXPECT_NE(Error({"--pod-resources-resources", "a,,b"}), "");
  EXPECT_NE(Error({"--pod-resources-resources", "*"}), "");
  EXPECT_TRUE(Contains(NodedUsage(), "--probe"));
}

TEST_F(NodedConfigTest, ProbePrintsWhatTheBackendSees) {
  auto cfg = Parse({"--accelerator", "sim", "--sim-devices", "3", "--probe"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  std::ostringstream out;
  EXPECT_EQ(RunProbe(*cfg, out), 0);
  const auto j = nlohmann::json::parse(out.str());
  EXPECT_EQ(j["backend"], "sim");
  ASSERT_EQ(j["devices"].size(), 3u);
  EXPECT_EQ(j["devices"][2]["id"], 2);
  ASSERT_EQ(j["health"].size(), 3u);
  EXPECT_EQ(j["health"][0]["healthy"], true);
  // A backend that cannot start: 1, the error in the answer.
  cfg->accelerator = "ascend";
  cfg->dcmi_path = P("no-such-libdcmi.so");
  std::ostringstream failed;
  const int rc = RunProbe(*cfg, failed);
  const auto f = nlohmann::json::parse(failed.str());
  if (rc == 0) {
    EXPECT_TRUE(f.contains("devices"));  // a machine with a real driver
  } else {
    EXPECT_EQ(rc, 1);
    EXPECT_TRUE(f.contains("error")) << failed.str();
  }
}

}  // namespace
}  // namespace clusterd::noded

namespace clusterd::noded {
namespace {

// ------------------------------------------------------ the table of keys ---

const NodedConfigKey* Row(const std::string& name) {
  for (const NodedConfigKey& k : NodedConfigKeys()) {
    if (k.name == name) return &k;
  }
  return nullptr;
}

// Every row of the table is complete, and the default it documents is a
// value its own parser takes back unchanged.
TEST(NodedConfigTable, EveryKeyIsDescribedAndItsDefaultParses) {
  clusterd::testing::ExpectEveryRowDescribed(NodedConfigKeys());
  // The defaults are NodedConfig's, shown as a flag spells them.
  EXPECT_EQ(Row("poll_interval")->show(NodedConfig{}), "1s");
  EXPECT_EQ(Row("nvml_xid_hold")->show(NodedConfig{}), "10m");
  EXPECT_EQ(Row("accelerator")->show(NodedConfig{}), "none");
  NodedConfig labelled;
  ASSERT_TRUE(Row("labels")->set("zone=b,pool=train", &labelled).ok());
  EXPECT_EQ(Row("labels")->show(labelled), "pool=train,zone=b");
}

// --help lists every key with its default, from the same table.
TEST(NodedConfigTable, HelpListsEveryKeyWithItsDefault) {
  const std::string help = NodedUsage();
  for (const NodedConfigKey& k : NodedConfigKeys()) {
    std::string flag = k.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_TRUE(Contains(help, "--" + flag + (k.value_name.empty() ? "" : " " + k.value_name))) << k.name;
  }
  EXPECT_TRUE(Contains(help, "--poll-interval DUR")) << help;
  EXPECT_TRUE(Contains(help, "(default 1s; at least 50ms)")) << help;
  EXPECT_TRUE(Contains(help, "/v1/sim/faults"));
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
}

// The chart's noded.config map (charts/clusterd/values.yaml) repeats the
// binary's defaults: each value it sets is the same setting as the default
// (parsed by the key's own row), and each key it names exists.
TEST(NodedConfigTable, ChartValuesAreTheDefaults) {
  const auto values = clusterd::testing::ChartConfigValues(std::string(CLUSTERD_CHART_DIR) + "/values.yaml", "noded");
  const int checked = clusterd::testing::ExpectChartValuesAreDefaults(NodedConfigKeys(), values, "noded.config.");
  EXPECT_GE(checked, 4);
}

// values.schema.json refuses any noded.config key it does not list: it lists
// exactly the keys whose chart value is noded.config.<key>.
TEST(NodedConfigTable, ChartSchemaListsTheChartKeys) {
  bool closed = false;
  const std::set<std::string> listed = clusterd::testing::ChartSchemaConfigKeys(
      std::string(CLUSTERD_CHART_DIR) + "/values.schema.json", "noded", &closed);
  EXPECT_TRUE(closed);
  std::set<std::string> chart;
  for (const NodedConfigKey& k : NodedConfigKeys()) {
    if (k.chart_value == "noded.config." + k.name) chart.insert(k.name);
  }
  EXPECT_EQ(listed, chart);
}

// What the DaemonSet sets besides noded.config (the config.json the chart's
// clusterd.nodedConfig writes, and the container's flags) is exactly what the
// table says the chart sets: every key it writes is a key whose chart value
// names a chart setting, and every such key is written.
TEST(NodedConfigTable, TheDaemonSetSetsWhatTheTableSays) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    std::stringstream buf;
    buf << in.rdbuf();
    return buf.str();
  };
  const std::string helpers = read(std::string(CLUSTERD_CHART_DIR) + "/templates/_helpers.tpl");
  const size_t begin = helpers.find("{{- define \"clusterd.nodedConfig\" -}}");
  const size_t end = helpers.find("include \"clusterd.flatJson\" $c", begin);
  ASSERT_NE(begin, std::string::npos);
  ASSERT_NE(end, std::string::npos);
  std::set<std::string> written;
  const std::regex set_key(R"re(set \$c "([a-z_0-9]+)")re");
  const std::string body = helpers.substr(begin, end - begin);
  for (std::sregex_iterator it(body.begin(), body.end(), set_key), last; it != last; ++it) written.insert((*it)[1]);
  const std::string daemonset = read(std::string(CLUSTERD_CHART_DIR) + "/templates/noded-daemonset.yaml");
  const std::regex flag(R"re(- --([a-z-]+)=)re");
  for (std::sregex_iterator it(daemonset.begin(), daemonset.end(), flag), last; it != last; ++it) {
    std::string key = (*it)[1];
    if (key == "config") continue;
    std::replace(key.begin(), key.end(), '-', '_');
    written.insert(key);
  }
  EXPECT_GT(written.size(), 10u);
  for (const std::string& key : written) {
    const NodedConfigKey* row = Row(key);
    ASSERT_NE(row, nullptr) << key << ": the chart writes a key NodeD does not have";
    EXPECT_EQ(row->chart_value.rfind("noded.extraArgs", 0), std::string::npos) << key;
    EXPECT_EQ(row->chart_value.rfind("none", 0), std::string::npos) << key;
  }
  for (const NodedConfigKey& k : NodedConfigKeys()) {
    const bool by_chart = k.chart_value.rfind("noded.extraArgs", 0) != 0 && k.chart_value.rfind("none", 0) != 0 &&
                          k.chart_value != "noded.config." + k.name;
    if (by_chart) {
      EXPECT_TRUE(written.count(k.name)) << k.name << ": " << k.chart_value << ", but the chart never sets it";
    }
  }
}

// docs/noded.md's reference tables are the table's, to the byte.
// CLUSTERD_UPDATE_DOCS=1 writes them into the document instead.
TEST(NodedConfigTable, ReferenceInDocsIsCurrent) {
  clusterd::testing::ExpectGeneratedSection(std::string(CLUSTERD_DOCS_DIR) + "/noded.md",
                                            "<!-- BEGIN GENERATED: the table of keys (noded/server/config.cc) -->\n",
                                            NodedConfigReference());
}

}  // namespace
}  // namespace clusterd::noded
