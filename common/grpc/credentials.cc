#include "common/grpc/credentials.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "common/token_file.h"

namespace clusterd {
namespace {

// How often the client re-reads a rotated certificate, key or CA.
constexpr unsigned kCertRefreshSeconds = 10;

Status Readable(const std::string& flag, const std::string& path) {
  std::ifstream in(path);
  if (!in) return InvalidArgument("--" + flag + ": cannot read " + path);
  return Status::Ok();
}

// Sends "authorization: Bearer <token>" on every call. A token file is
// re-read when its modification time changes (a projected service-account
// token is rotated in place by the kubelet).
class BearerTokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  BearerTokenPlugin(std::string token, const std::string& file) : token_(std::move(token)), file_(file) {}

  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "clusterd-bearer"; }

  grpc::Status GetMetadata(grpc::string_ref /*service_url*/, grpc::string_ref /*method_name*/,
                           const grpc::AuthContext& /*channel_auth_context*/,
                           std::multimap<grpc::string, grpc::string>* metadata) override {
    std::string token = file_.path().empty() ? token_ : file_.Current();
    if (token.empty()) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no bearer token in " + file_.path());
    metadata->emplace("authorization", "Bearer " + token);
    return grpc::Status::OK;
  }

 private:
  const std::string token_;
  const WatchedTokenFile file_;
};

}  // namespace

void ApplyClientSecurityEnv(ClientSecurity* s, const char* (*getenv)(const char*)) {
  if (getenv == nullptr) getenv = [](const char* name) -> const char* { return std::getenv(name); };
  auto env = [getenv](const char* name, std::string* field) {
    if (!field->empty()) return;
    if (const char* v = getenv(name); v != nullptr) *field = v;
  };
  env("CLUSTERD_CA", &s->ca_file);
  env("CLUSTERD_CERT", &s->cert_file);
  env("CLUSTERD_KEY", &s->key_file);
  if (!s->has_token()) {
    env("CLUSTERD_TOKEN", &s->token);
    env("CLUSTERD_TOKEN_FILE", &s->token_file);
  }
  env("CLUSTERD_SERVER_NAME", &s->server_name);
}

bool SetClientSecurityFlag(const std::string& flag, const std::string& value, ClientSecurity* s) {
  if (flag == "ca")
    s->ca_file = value;
  else if (flag == "cert")
    s->cert_file = value;
  else if (flag == "key")
    s->key_file = value;
  else if (flag == "token")
    s->token = value;
  else if (flag == "token-file")
    s->token_file = value;
  else if (flag == "server-name")
    s->server_name = value;
  else
    return false;
  return true;
}

const char* ClientSecurityUsage() {
  return R"(  --ca FILE                   CA bundle of ClusterD's certificate; turns TLS on (env CLUSTERD_CA)
  --cert FILE                 client certificate for mutual TLS (env CLUSTERD_CERT)
  --key FILE                  its private key (env CLUSTERD_KEY)
  --token TOKEN               bearer token, sent over TLS only (env CLUSTERD_TOKEN)
  --token-file FILE           bearer token read from a file, re-read when it changes (env CLUSTERD_TOKEN_FILE)
  --server-name NAME          name to verify ClusterD's certificate against (env CLUSTERD_SERVER_NAME)
)";
}

Status ValidateClientSecurity(const ClientSecurity& s) {
  if (s.cert_file.empty() != s.key_file.empty())
    return InvalidArgument(s.cert_file.empty() ? "--key: needs --cert" : "--cert: needs --key");
  if (!s.token.empty() && !s.token_file.empty()) return InvalidArgument("--token and --token-file: give one");
  if (s.has_token() && !s.tls())
    return InvalidArgument(std::string(s.token.empty() ? "--token-file" : "--token") +
                           ": a bearer token is only sent over TLS (give --ca)");
  if (!s.server_name.empty() && !s.tls()) return InvalidArgument("--server-name: needs TLS (give --ca)");
  if (!s.ca_file.empty()) CLUSTERD_RETURN_IF_ERROR(Readable("ca", s.ca_file));
  if (!s.cert_file.empty()) CLUSTERD_RETURN_IF_ERROR(Readable("cert", s.cert_file));
  if (!s.key_file.empty()) CLUSTERD_RETURN_IF_ERROR(Readable("key", s.key_file));
  if (!s.token_file.empty()) CLUSTERD_RETURN_IF_ERROR(Readable("token-file", s.token_file));
  return Status::Ok();
}

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientSecurity& s) {
  CLUSTERD_RETURN_IF_ERROR(ValidateClientSecurity(s));
  if (!s.tls()) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  if (!s.ca_file.empty() || !s.cert_file.empty()) {
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        s.key_file, s.cert_file, s.ca_file, kCertRefreshSeconds);
    options.set_certificate_provider(provider);
    if (!s.ca_file.empty()) options.watch_root_certs();
    if (!s.cert_file.empty()) options.watch_identity_key_cert_pairs();
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::experimental::TlsCredentials(options);
  if (creds == nullptr) return InvalidArgument("TLS: gRPC refused the credentials options");
  if (s.has_token()) {
    auto call = grpc::MetadataCredentialsFromPlugin(std::make_unique<BearerTokenPlugin>(s.token, s.token_file));
    creds = grpc::CompositeChannelCredentials(creds, call);
  }
  return creds;
}

StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& target, const ClientSecurity& s,
                                                             grpc::ChannelArguments args) {
  auto creds = MakeChannelCredentials(s);
  if (!creds.ok()) return creds.status();
  if (!s.server_name.empty()) args.SetSslTargetNameOverride(s.server_name);
  return grpc::CreateCustomChannel(target, *creds, args);
}

namespace {

// The scheme ("ipv4:") and the addresses of a list target; none otherwise.
std::pair<std::string, std::vector<std::string>> SplitAddresses(const std::string& target) {
  for (const char* scheme : {"ipv4:", "ipv6:"}) {
    if (target.rfind(scheme, 0) != 0) continue;
    std::vector<std::string> out;
    size_t begin = std::strlen(scheme);
    for (;;) {
      const size_t comma = target.find(',', begin);
      out.push_back(target.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
    return {scheme, out};
  }
  return {};
}

}  // namespace

size_t AddressCount(const std::string& target) {
  const auto split = SplitAddresses(target);
  return split.first.empty() ? 1 : split.second.size();
}

std::string RotateAddresses(const std::string& target, size_t k) {
  auto [scheme, addresses] = SplitAddresses(target);
  if (addresses.size() < 2) return target;
  std::string out = scheme;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (i > 0) out += ',';
    out += addresses[(i + k) % addresses.size()];
  }
  return out;
}

void SpreadCallsOverAddresses(const std::string& target, grpc::ChannelArguments* args) {
  if (AddressCount(target) < 2) return;
  args->SetServiceConfigJSON(R"({"loadBalancingConfig":[{"round_robin":{}}]})");
}

}  // namespace clusterd
