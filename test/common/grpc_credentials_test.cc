// The clients' transport security (common/grpc/credentials.h): the flag and
// environment plumbing, the checks, and channels that really do TLS, mutual
// TLS and bearer tokens against an in-process TLS server.
#include "common/grpc/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>

#include <gtest/gtest.h>

#include "test/support/grpc/tls_test_server.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"

namespace clusterd {
namespace {

using testing::TempDir;
using testing::TlsTestServer;

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A ClientSecurity from {flag, value} pairs, as a client's argument loop builds it.
ClientSecurity Sec(std::initializer_list<std::pair<std::string, std::string>> flags) {
  ClientSecurity s;
  for (const auto& [flag, value] : flags) {
    if (!SetClientSecurityFlag(flag, value, &s)) ADD_FAILURE() << "not a security flag: " << flag;
  }
  return s;
}

// A fake environment for ApplyClientSecurityEnv.
std::map<std::string, std::string> g_env;
const char* FakeEnv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}

// ----------------------------------------------------------------- flags ---

TEST(ClientSecurityFlagTest, EveryFlagSetsItsField) {
  ClientSecurity s;
  EXPECT_TRUE(SetClientSecurityFlag("ca", "/ca.crt", &s));
  EXPECT_TRUE(SetClientSecurityFlag("cert", "/c.crt", &s));
  EXPECT_TRUE(SetClientSecurityFlag("key", "/c.key", &s));
  EXPECT_TRUE(SetClientSecurityFlag("token", "t0k", &s));
  EXPECT_TRUE(SetClientSecurityFlag("token-file", "/tok", &s));
  EXPECT_TRUE(SetClientSecurityFlag("server-name", "clusterd", &s));
  EXPECT_EQ(s.ca_file, "/ca.crt");
  EXPECT_EQ(s.cert_file, "/c.crt");
  EXPECT_EQ(s.key_file, "/c.key");
  EXPECT_EQ(s.token, "t0k");
  EXPECT_EQ(s.token_file, "/tok");
  EXPECT_EQ(s.server_name, "clusterd");
  EXPECT_TRUE(s.tls());
  EXPECT_TRUE(s.has_token());
}

TEST(ClientSecurityFlagTest, OtherFlagsAreNotTaken) {
  ClientSecurity s;
  for (const char* flag : {"server", "--ca", "ca-file", "tls-ca-file", "token_file", "CA", ""}) {
    EXPECT_FALSE(SetClientSecurityFlag(flag, "x", &s)) << flag;
  }
  EXPECT_FALSE(s.tls());
  EXPECT_FALSE(s.has_token());
  EXPECT_TRUE(s.server_name.empty());
}

TEST(ClientSecurityFlagTest, TlsOnlyWithAFile) {
  ClientSecurity s;
  EXPECT_FALSE(s.tls());
  s.token = "t";
  s.server_name = "n";
  EXPECT_FALSE(s.tls());  // neither a token nor a server name turns TLS on
  for (std::string ClientSecurity::*field :
       {&ClientSecurity::ca_file, &ClientSecurity::cert_file, &ClientSecurity::key_file}) {
    ClientSecurity one;
    one.*field = "/f";
    EXPECT_TRUE(one.tls());
  }
}

TEST(ClientSecurityUsageTest, ListsEveryFlagAndVariable) {
  const std::string usage = ClientSecurityUsage();
  for (const char* s : {"--ca FILE", "--cert FILE", "--key FILE", "--token TOKEN", "--token-file FILE",
                        "--server-name NAME", "CLUSTERD_CA", "CLUSTERD_CERT", "CLUSTERD_KEY", "CLUSTERD_TOKEN",
                        "CLUSTERD_TOKEN_FILE", "CLUSTERD_SERVER_NAME"}) {
    EXPECT_TRUE(Contains(usage, s)) << s;
  }
}

// ------------------------------------------------------------ environment ---

class ClientSecurityEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { g_env.clear(); }
  void TearDown() override { g_env.clear(); }
};

TEST_F(ClientSecurityEnvTest, FillsWhatIsUnset) {
  g_env = {{"CLUSTERD_CA", "/env/ca"},      {"CLUSTERD_CERT", "/env/cert"},     {"CLUSTERD_KEY", "/env/key"},
           {"CLUSTERD_TOKEN", "env-token"}, {"CLUSTERD_SERVER_NAME", "env-sn"}, {"CLUSTERD_ADDR", "ignored:1"}};
  ClientSecurity s;
  ApplyClientSecurityEnv(&s, FakeEnv);
  EXPECT_EQ(s.ca_file, "/env/ca");
  EXPECT_EQ(s.cert_file, "/env/cert");
  EXPECT_EQ(s.key_file, "/env/key");
  EXPECT_EQ(s.token, "env-token");
  EXPECT_TRUE(s.token_file.empty());
  EXPECT_EQ(s.server_name, "env-sn");
}

TEST_F(ClientSecurityEnvTest, AFlagWinsOverTheEnvironment) {
  g_env = {{"CLUSTERD_CA", "/env/ca"}, {"CLUSTERD_SERVER_NAME", "env-sn"}, {"CLUSTERD_TOKEN_FILE", "/env/tok"}};
  ClientSecurity s;
  ASSERT_TRUE(SetClientSecurityFlag("ca", "/flag/ca", &s));
  ASSERT_TRUE(SetClientSecurityFlag("token-file", "/flag/tok", &s));
  ApplyClientSecurityEnv(&s, FakeEnv);
  EXPECT_EQ(s.ca_file, "/flag/ca");
  EXPECT_EQ(s.token_file, "/flag/tok");
  EXPECT_EQ(s.server_name, "env-sn");  // not given as a flag: from the environment
}

TEST_F(ClientSecurityEnvTest, ATokenFlagHidesBothTokenVariables) {
  // The token and the token file are one setting: an exported CLUSTERD_TOKEN
  // must not turn "--token-file F" into "two tokens given".
  g_env = {{"CLUSTERD_TOKEN", "env-token"}, {"CLUSTERD_TOKEN_FILE", "/env/tok"}};
  ClientSecurity by_file;
  by_file.token_file = "/flag/tok";
  ApplyClientSecurityEnv(&by_file, FakeEnv);
  EXPECT_EQ(by_file.token_file, "/flag/tok");
  EXPECT_TRUE(by_file.token.empty());

  ClientSecurity by_token;
  by_token.token = "flag-token";
  ApplyClientSecurityEnv(&by_token, FakeEnv);
  EXPECT_EQ(by_token.token, "flag-token");
  EXPECT_TRUE(by_token.token_file.empty());
}

TEST_F(ClientSecurityEnvTest, NoEnvironmentLeavesItPlaintext) {
  ClientSecurity s;
  ApplyClientSecurityEnv(&s, FakeEnv);
  EXPECT_FALSE(s.tls());
  EXPECT_FALSE(s.has_token());
  EXPECT_TRUE(ValidateClientSecurity(s).ok());
}

// ------------------------------------------------------------- validation ---

class ValidateClientSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(ca_, "ca\n");
    WriteFile(cert_, "cert\n");
    WriteFile(key_, "key\n");
    WriteFile(token_file_, "tok\n");
  }
  // The message of the error, "" when valid.
  static std::string Error(const ClientSecurity& s) {
    Status st = ValidateClientSecurity(s);
    if (!st.ok()) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    }
    return st.message();
  }

  TempDir dir_;
  const std::string ca_ = dir_.Sub("ca.crt"), cert_ = dir_.Sub("c.crt"), key_ = dir_.Sub("c.key"),
                    token_file_ = dir_.Sub("token"), missing_ = dir_.Sub("missing");
};

TEST_F(ValidateClientSecurityTest, ValidCombinations) {
  EXPECT_EQ(Error({}), "");                                                  // plaintext
  EXPECT_EQ(Error(Sec({{"ca", ca_}})), "");                                  // TLS
  EXPECT_EQ(Error(Sec({{"ca", ca_}, {"cert", cert_}, {"key", key_}})), "");  // mutual TLS
  EXPECT_EQ(Error(Sec({{"cert", cert_}, {"key", key_}})), "");               // mutual TLS, system roots
  EXPECT_EQ(Error(Sec({{"ca", ca_}, {"token", "t"}})), "");
  EXPECT_EQ(Error(Sec({{"ca", ca_}, {"token-file", token_file_}, {"server-name", "clusterd"}})), "");
}

TEST_F(ValidateClientSecurityTest, ATokenNeedsTls) {
  std::string e = Error(Sec({{"token", "t"}}));
  EXPECT_TRUE(Contains(e, "--token:")) << e;
  EXPECT_TRUE(Contains(e, "--ca")) << e;
  e = Error(Sec({{"token-file", token_file_}}));
  EXPECT_TRUE(Contains(e, "--token-file:")) << e;
  EXPECT_TRUE(Contains(e, "--ca")) << e;
}

TEST_F(ValidateClientSecurityTest, ACertificateNeedsItsKeyAndAKeyItsCertificate) {
  std::string e = Error(Sec({{"ca", ca_}, {"cert", cert_}}));
  EXPECT_TRUE(Contains(e, "--cert: needs --key")) << e;
  e = Error(Sec({{"ca", ca_}, {"key", key_}}));
  EXPECT_TRUE(Contains(e, "--key: needs --cert")) << e;
}

TEST_F(ValidateClientSecurityTest, OneTokenAtATime) {
  std::string e = Error(Sec({{"ca", ca_}, {"token", "t"}, {"token-file", token_file_}}));
  EXPECT_TRUE(Contains(e, "--token")) << e;
  EXPECT_TRUE(Contains(e, "--token-file")) << e;
}

TEST_F(ValidateClientSecurityTest, AServerNameNeedsTls) {
  std::string e = Error(Sec({{"server-name", "clusterd"}}));
  EXPECT_TRUE(Contains(e, "--server-name:")) << e;
}

TEST_F(ValidateClientSecurityTest, UnreadableFilesNameTheFlagAndThePath) {
  struct Case {
    ClientSecurity s;
    std::string flag;
  };
  for (const Case& c :
       {Case{Sec({{"ca", missing_}}), "--ca"}, Case{Sec({{"ca", ca_}, {"cert", missing_}, {"key", key_}}), "--cert"},
        Case{Sec({{"ca", ca_}, {"cert", cert_}, {"key", missing_}}), "--key"},
        Case{Sec({{"ca", ca_}, {"token-file", missing_}}), "--token-file"}}) {
    const std::string e = Error(c.s);
    EXPECT_EQ(e.rfind(c.flag + ":", 0), 0u) << e;
    EXPECT_TRUE(Contains(e, missing_)) << e;
  }
}

TEST_F(ValidateClientSecurityTest, ChannelCreationRefusesWhatValidationRefuses) {
  auto ch = CreateClientChannel("127.0.0.1:1", Sec({{"token", "t"}}));
  ASSERT_FALSE(ch.ok());
  EXPECT_TRUE(Contains(ch.status().message(), "--token")) << ch.status().message();
  auto plain = CreateClientChannel("127.0.0.1:1", {});
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_NE(*plain, nullptr);
}

// ------------------------------------------------- against a TLS server ---

// The PKI is made once per test binary (openssl; well under a second).
class ClientTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing::TestCerts::Get().ok()) << "test/security/make_certs.sh failed";
    ASSERT_TRUE(server_.Start(testing::TestCerts::Get().dir()));
  }

  static std::string Cert(const std::string& name) { return testing::TestCerts::Get().Path(name); }

  // One GetSummary over a channel made from `security`.
  grpc::Status Call(const ClientSecurity& security) {
    auto channel = CreateClientChannel(server_.address(), security);
    EXPECT_TRUE(channel.ok()) << channel.status().ToString();
    if (!channel.ok()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, channel.status().message());
    auto stub = v1::ClusterService::NewStub(*channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));  // a failure bound only
    v1::GetSummaryResponse resp;
    grpc::Status st = stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp);
    if (st.ok()) {
      EXPECT_EQ(resp.revision(), testing::RecordingClusterService::kRevision);
    }
    return st;
  }

  TlsTestServer server_;
};

TEST_F(ClientTlsTest, TlsWithTheCaAlone) {
  grpc::Status st = Call(Sec({{"ca", Cert("ca.crt")}}));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_.service().last().authorization, "");
  EXPECT_EQ(server_.service().last().common_name, "");
}

TEST_F(ClientTlsTest, MutualTlsPresentsTheClientCertificate) {
  grpc::Status st = Call(Sec({{"ca", Cert("ca.crt")}, {"cert", Cert("viewer.crt")}, {"key", Cert("viewer.key")}}));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_.service().last().common_name, "alice");
  EXPECT_EQ(server_.service().last().authorization, "");
}

TEST_F(ClientTlsTest, BearerTokenIsSentAsAuthorization) {
  grpc::Status st = Call(Sec({{"ca", Cert("ca.crt")}, {"token", "s3cret"}}));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_.service().last().authorization, "Bearer s3cret");
}

TEST_F(ClientTlsTest, TokenAndClientCertificateTogether) {
  grpc::Status st = Call(Sec({{"ca", Cert("ca.crt")},
                              {"cert", Cert("worker01.crt")},
                              {"key", Cert("worker01.key")},
                              {"token-file", Cert("token-viewer")}}));
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(server_.service().last().common_name, "system:node:worker01");
  EXPECT_EQ(server_.service().last().authorization, "Bearer " + testing::ReadWholeFile(Cert("token-viewer")));
}

TEST_F(ClientTlsTest, TokenFileIsReReadWhenItChanges) {
  TempDir dir;
  const std::string path = dir.Sub("token");
  WriteFile(path, "first\n");  // a trailing newline is not part of the token
  auto channel = CreateClientChannel(server_.address(), Sec({{"ca", Cert("ca.crt")}, {"token-file", path}}));
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  auto stub = v1::ClusterService::NewStub(*channel);
  auto call = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::GetSummaryResponse resp;
    return stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp);
  };
  ASSERT_TRUE(call().ok());
  EXPECT_EQ(server_.service().last().authorization, "Bearer first");

  // Rotated in place, as the kubelet does. The modification time is set
  // explicitly: a rewrite within the file system's timestamp granularity
  // could otherwise keep the old one.
  WriteFile(path, "second");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const timespec times[2] = {st.st_atim, {st.st_mtim.tv_sec + 60, st.st_mtim.tv_nsec}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ASSERT_TRUE(call().ok());
  EXPECT_EQ(server_.service().last().authorization, "Bearer second");
}

TEST_F(ClientTlsTest, ServerNameOverride) {
  // The server's certificate names localhost, 127.0.0.1, ::1 and clusterd.
  grpc::Status st = Call(Sec({{"ca", Cert("ca.crt")}, {"server-name", "clusterd"}}));
  ASSERT_TRUE(st.ok()) << st.error_message();
  st = Call(Sec({{"ca", Cert("ca.crt")}, {"server-name", "not-clusterd.example"}}));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
}

TEST_F(ClientTlsTest, AServerSignedByAnotherCaIsRefused) {
  grpc::Status st = Call(Sec({{"ca", Cert("other-ca.crt")}, {"token", "must-not-leak"}}));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(server_.service().calls().empty());
}

TEST_F(ClientTlsTest, PlaintextClientCannotTalkToTheTlsServer) {
  grpc::Status st = Call({});
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(server_.service().calls().empty());
}

TEST(ClientTlsPlaintextServerTest, TlsClientCannotTalkToAPlaintextServer) {
  // The flags really switch the channel to TLS: a plaintext server does not
  // understand it (and so never sees the token).
  TempDir certs;
  ASSERT_TRUE(testing::MakeTestCerts(certs.path()));
  TlsTestServer server;
  ASSERT_TRUE(server.Start(""));
  auto channel = CreateClientChannel(server.address(), Sec({{"ca", certs.Sub("ca.crt")}, {"token", "t"}}));
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  auto stub = v1::ClusterService::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::GetSummaryResponse resp;
  grpc::Status st = stub->GetSummary(&ctx, v1::GetSummaryRequest(), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(server.service().calls().empty());
}

// ------------------------------------------------ replica address lists ---

TEST(AddressListTest, AddressCount) {
  EXPECT_EQ(AddressCount("ipv4:10.0.0.1:50051,10.0.0.2:50051,10.0.0.3:50051"), 3u);
  EXPECT_EQ(AddressCount("ipv6:[::1]:50051,[::2]:50051"), 2u);
  EXPECT_EQ(AddressCount("ipv4:10.0.0.1:50051"), 1u);
  // Anything but a list is one target, however many hosts it resolves to.
  EXPECT_EQ(AddressCount("dns:///clusterd.example:50051"), 1u);
  EXPECT_EQ(AddressCount("clusterd.example:50051"), 1u);
  EXPECT_EQ(AddressCount("127.0.0.1:50051"), 1u);
}

TEST(AddressListTest, RotateStartsAtTheKthAddress) {
  const std::string list = "ipv4:a:1,b:2,c:3";
  EXPECT_EQ(RotateAddresses(list, 0), list);
  EXPECT_EQ(RotateAddresses(list, 1), "ipv4:b:2,c:3,a:1");
  EXPECT_EQ(RotateAddresses(list, 2), "ipv4:c:3,a:1,b:2");
  EXPECT_EQ(RotateAddresses(list, 3), list);
  EXPECT_EQ(RotateAddresses(list, 4), "ipv4:b:2,c:3,a:1");
  EXPECT_EQ(RotateAddresses("ipv6:[::1]:1,[::2]:2", 1), "ipv6:[::2]:2,[::1]:1");
  EXPECT_EQ(RotateAddresses("ipv6:[::1]:1,[::2]:2,[::3]:3", 2), "ipv6:[::3]:3,[::1]:1,[::2]:2");
}

TEST(AddressListTest, RotateLeavesOtherTargetsAsTheyAre) {
  EXPECT_EQ(RotateAddresses("ipv4:a:1", 1), "ipv4:a:1");
  EXPECT_EQ(RotateAddresses("ipv6:[::1]:1", 5), "ipv6:[::1]:1");
  EXPECT_EQ(RotateAddresses("dns:///clusterd.example:50051", 1), "dns:///clusterd.example:50051");
  EXPECT_EQ(RotateAddresses("127.0.0.1:50051", 2), "127.0.0.1:50051");
}

// The channel's service config, if the arguments set one.
std::string ServiceConfigOf(const grpc::ChannelArguments& args) {
  const grpc_channel_args c = args.c_channel_args();
  for (size_t i = 0; i < c.num_args; ++i) {
    if (std::string(c.args[i].key) == GRPC_ARG_SERVICE_CONFIG) return c.args[i].value.string;
  }
  return "";
}

TEST(AddressListTest, SpreadCallsOnlyOverLists) {
  grpc::ChannelArguments list;
  SpreadCallsOverAddresses("ipv4:a:1,b:2", &list);
  EXPECT_TRUE(Contains(ServiceConfigOf(list), "round_robin")) << ServiceConfigOf(list);
  for (const char* target : {"ipv4:a:1", "dns:///clusterd.example:50051", "127.0.0.1:50051"}) {
    grpc::ChannelArguments args;
    SpreadCallsOverAddresses(target, &args);
    EXPECT_EQ(ServiceConfigOf(args), "") << target;
  }
}

}  // namespace
}  // namespace clusterd
