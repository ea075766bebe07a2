// NodeD's HTTP port (noded/server/noded_server.cc, docs/noded.md "Securing
// the HTTP port"): a real NodedServer (sim accelerator, no ClusterD) over
// real sockets, with the throw-away PKI of test/security/make_certs.sh.
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "common/free_port.h"
#include "common/http_client.h"
#include "common/tls_context.h"
#include "noded/server/config.h"
#include "noded/server/noded_server.h"
#include "test/support/http_get.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"
#include "test/support/wait.h"

namespace clusterd::noded {
namespace {

using testing::HttpGet;
using testing::HttpsGet;
using testing::HttpTls;
using testing::TestCerts;

class NodedHttpTest : public ::testing::Test {
 protected:
  NodedConfig Config() const {
    NodedConfig cfg;
    cfg.server = "127.0.0.1:" + std::to_string(FreeLoopbackPort());  // no ClusterD: the stream keeps retrying
    cfg.node_name = "tls-node";
    cfg.http_listen = "127.0.0.1:0";
    cfg.state_dir = dir_.Sub("state");
    cfg.accelerator = "sim";
    cfg.sim_devices = 2;
    cfg.kmsg_path = "";
    cfg.progress_dir = "";
    cfg.pod_resources_socket = "";
    cfg.log_level = "off";
    return cfg;
  }

  // POST /v1/sim/faults over TLS (verified against ca.crt), presenting
  // `cert` (a make_certs.sh name) when set and `token` when set.
  int PostFault(int port, const std::string& cert, const std::string& token) const {
    const auto& certs = TestCerts::Get();
    auto ctx = MakeTlsClientContext(certs.Path("ca.crt"), cert.empty() ? "" : certs.Path(cert + ".crt"),
                                    cert.empty() ? "" : certs.Path(cert + ".key"));
    if (!ctx.ok()) return -1;
    HttpClientRequest req;
    req.method = "POST";
    req.host = "127.0.0.1";
    req.port = std::to_string(port);
    req.target = "/v1/sim/faults";
    req.body = R"({"device": 1, "code": "80E01801", "state": "raise"})";
    req.tls = *ctx;
    req.tls_verify_host = "127.0.0.1";
    if (!token.empty()) req.headers = {{"Authorization", "Bearer " + token}};
    auto answer = HttpCall(req, std::chrono::steady_clock::now() + std::chrono::seconds(10), 1 << 16);
    return answer.answered ? answer.status : 0;
  }

  testing::TempDir dir_;
};

// With a certificate, a client CA and a token: no plaintext; a client
// certificate from another CA or an expired one fails the handshake; /metrics
// and the sim injection answer 401 without a credential or with a wrong token
// (counted) and 200 with the token or a verified client certificate; the
// kubelet's probes need none.
TEST_F(NodedHttpTest, TlsRefusesPlaintextBadCertificatesAndMissingTokens) {
  const auto& certs = TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  NodedConfig cfg = Config();
  cfg.http_tls_cert_file = certs.Path("server.crt");
  cfg.http_tls_key_file = certs.Path("server.key");
  cfg.http_tls_client_ca_file = certs.Path("ca.crt");
  cfg.http_token_file = certs.Path("token-viewer");
  NodedServer server(cfg);
  ASSERT_TRUE(server.Start().ok());
  const int port = server.http_port();
  const std::string token = testing::ReadWholeFile(certs.Path("token-viewer"));
  const auto get = [&](const std::string& target, const std::string& cert, const std::string& authorization = "") {
    HttpTls tls{certs.Path("ca.crt"), cert.empty() ? "" : certs.Path(cert + ".crt"),
                cert.empty() ? "" : certs.Path(cert + ".key")};
    return HttpsGet(port, target, tls, authorization);
  };

  EXPECT_EQ(HttpGet(port, "/healthz").status, 0) << "plaintext is refused";
  EXPECT_EQ(HttpGet(port, "/metrics", "Bearer " + token).status, 0);
  EXPECT_EQ(get("/metrics", "wrongca", "Bearer " + token).status, 0) << "a client certificate of another CA";
  EXPECT_EQ(get("/metrics", "expired", "Bearer " + token).status, 0) << "an expired client certificate";
  // The client side: a server certificate of another CA is not trusted.
  HttpTls other{certs.Path("other-ca.crt"), "", ""};
  EXPECT_EQ(HttpsGet(port, "/healthz", other).status, 0);

  EXPECT_EQ(get("/healthz", "").status, 200);
  auto ready = get("/readyz", "");
  EXPECT_TRUE(ready.status == 200 || ready.status == 503) << ready.status;
  EXPECT_EQ(get("/metrics", "").status, 401);
  EXPECT_EQ(get("/metrics", "", "Bearer not-the-token").status, 401);
  EXPECT_EQ(get("/metrics", "", "Basic " + token).status, 401);
  EXPECT_EQ(get("/metrics", "viewer", "Bearer not-the-token").status, 401) << "a wrong token is not overruled";
  EXPECT_EQ(PostFault(port, "", ""), 401);
  EXPECT_EQ(PostFault(port, "", "not-the-token"), 401);

  auto by_token = get("/metrics", "", "Bearer " + token);
  ASSERT_EQ(by_token.status, 200);
  EXPECT_EQ(testing::MetricValue(by_token.body, "noded_http_requests_refused_total"), 6);
  EXPECT_GE(testing::MetricValue(by_token.body, "noded_http_tls_handshake_failures_total"), 3);
  EXPECT_EQ(get("/metrics", "viewer").status, 200);
  EXPECT_EQ(PostFault(port, "", token), 200);
  EXPECT_EQ(PostFault(port, "norole", ""), 200);
}

// The certificate is re-read when it changes: new connections get the new
// one, without a restart.
TEST_F(NodedHttpTest, ServesARotatedCertificateWithoutARestart) {
  const auto& certs = TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  std::filesystem::copy_file(certs.Path("server.crt"), dir_.Sub("tls.crt"));
  std::filesystem::copy_file(certs.Path("server.key"), dir_.Sub("tls.key"));
  NodedConfig cfg = Config();
  cfg.http_tls_cert_file = dir_.Sub("tls.crt");
  cfg.http_tls_key_file = dir_.Sub("tls.key");
  cfg.http_tls_reload_interval = std::chrono::nanoseconds(0);  // looked at on every connection
  NodedServer server(cfg);
  ASSERT_TRUE(server.Start().ok());
  const HttpTls tls{certs.Path("ca.crt"), "", ""};
  auto before = HttpsGet(server.http_port(), "/metrics", tls);
  ASSERT_EQ(before.status, 200) << before.tls_error << " (no credential is configured: /metrics is open)";
  EXPECT_EQ(before.server_certificate_pem, testing::ReadWholeFile(certs.Path("server.crt")));

  std::filesystem::copy_file(certs.Path("server2.key"), dir_.Sub("tls.key"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(certs.Path("server2.crt"), dir_.Sub("tls.crt"),
                             std::filesystem::copy_options::overwrite_existing);
  const std::string rotated = testing::ReadWholeFile(certs.Path("server2.crt"));
  EXPECT_TRUE(testing::WaitFor(
      [&] { return HttpsGet(server.http_port(), "/healthz", tls).server_certificate_pem == rotated; }));
}

// Plaintext on an address other than loopback needs the insecure switch.
TEST_F(NodedHttpTest, PlaintextBeyondLoopbackNeedsTheInsecureSwitch) {
  NodedConfig cfg = Config();
  cfg.http_listen = "0.0.0.0:0";
  {
    NodedServer server(cfg);
    Status st = server.Start();
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("http_insecure"), std::string::npos) << st.ToString();
    EXPECT_FALSE(std::filesystem::exists(cfg.state_dir)) << "nothing was opened";
  }
  cfg.http_insecure = true;
  NodedServer server(cfg);
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(HttpGet(server.http_port(), "/healthz").status, 200);
}

}  // namespace
}  // namespace clusterd::noded
