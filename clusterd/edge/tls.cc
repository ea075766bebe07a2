#include "clusterd/edge/tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "common/config_util.h"

namespace clusterd {
namespace {

// The certificates of a PEM bundle (none when it has none).
std::vector<X509*> ReadCerts(const std::string& pem) {
  std::vector<X509*> out;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return out;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) out.push_back(cert);
  BIO_free(bio);
  return out;
}

void FreeCerts(std::vector<X509*>& certs) {
  for (X509* c : certs) X509_free(c);
  certs.clear();
}

Status CheckFiles(const ClusterdConfig& cfg) {
  auto cert_pem = ReadFileToString(cfg.tls.cert_file);
  if (!cert_pem.ok()) return InvalidArgument("tls_cert_file: " + cert_pem.status().message());
  auto key_pem = ReadFileToString(cfg.tls.key_file);
  if (!key_pem.ok()) return InvalidArgument("tls_key_file: " + key_pem.status().message());
  auto certs = ReadCerts(*cert_pem);
  if (certs.empty()) return InvalidArgument("tls_cert_file " + cfg.tls.cert_file + ": no PEM certificate in it");
  BIO* bio = BIO_new_mem_buf(key_pem->data(), static_cast<int>(key_pem->size()));
  EVP_PKEY* key = bio ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  if (bio) BIO_free(bio);
  if (key == nullptr) {
    FreeCerts(certs);
    return InvalidArgument("tls_key_file " + cfg.tls.key_file + ": no PEM private key in it (or it is encrypted)");
  }
  const bool match = X509_check_private_key(certs.front(), key) == 1;
  EVP_PKEY_free(key);
  FreeCerts(certs);
  if (!match) return InvalidArgument("tls_key_file " + cfg.tls.key_file + " is not the key of " + cfg.tls.cert_file);
  if (!cfg.tls.client_ca_file.empty()) {
    auto ca_pem = ReadFileToString(cfg.tls.client_ca_file);
    if (!ca_pem.ok()) return InvalidArgument("tls_client_ca_file: " + ca_pem.status().message());
    auto cas = ReadCerts(*ca_pem);
    const bool any = !cas.empty();
    FreeCerts(cas);
    if (!any) return InvalidArgument("tls_client_ca_file " + cfg.tls.client_ca_file + ": no PEM certificate in it");
  }
  return Status::Ok();
}

std::string ClientAuthMode(const ClusterdConfig& cfg) {
  if (!cfg.tls.client_auth.empty()) return cfg.tls.client_auth;
  return cfg.tls.client_ca_file.empty() ? "none" : "require";
}

unsigned RefreshSeconds(const ClusterdConfig& cfg) {
  return static_cast<unsigned>(
      std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(cfg.tls.reload_interval).count()));
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ClusterdConfig& cfg) {
  if (cfg.insecure) return grpc::InsecureServerCredentials();
  CLUSTERD_RETURN_IF_ERROR(CheckFiles(cfg));
  // Re-read every reload_interval: a renewed certificate (cert-manager, a
  // rotated Secret) is used for new handshakes; open connections keep theirs.
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      cfg.tls.key_file, cfg.tls.cert_file, cfg.tls.client_ca_file, RefreshSeconds(cfg));
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  const std::string mode = ClientAuthMode(cfg);
  if (!cfg.tls.client_ca_file.empty()) options.watch_root_certs();
  if (mode == "require") {
    options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else if (mode == "request") {
    options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  auto creds = grpc::experimental::TlsServerCredentials(options);
  if (creds == nullptr) return InvalidArgument("TLS: gRPC refused the server credentials");
  return creds;
}

std::shared_ptr<grpc::ChannelCredentials> MakeSelfCheckCredentials(const ClusterdConfig& cfg) {
  if (cfg.insecure) return grpc::InsecureChannelCredentials();
  grpc::experimental::TlsChannelCredentialsOptions options;
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      cfg.tls.key_file, cfg.tls.cert_file, RefreshSeconds(cfg));
  options.set_certificate_provider(provider);
  // Only where a certificate is required: the server's own must then be
  // accepted as a client certificate (same CA, client-auth usage allowed).
  if (ClientAuthMode(cfg) == "require") options.watch_identity_key_cert_pairs();
  options.set_verify_server_certs(false);
  options.set_check_call_host(false);
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

StatusOr<std::function<std::shared_ptr<boost::asio::ssl::context>()>> MakeHttpTls(const ClusterdConfig& cfg) {
  using Source = std::function<std::shared_ptr<boost::asio::ssl::context>()>;
  if (cfg.insecure) return Source();
  TlsServerFiles files;
  files.cert_file = cfg.tls.cert_file;
  files.key_file = cfg.tls.key_file;
  files.client_ca_file = cfg.tls.client_ca_file;
  files.client_auth = ClientAuthMode(cfg);
  files.reload_interval = std::chrono::seconds(RefreshSeconds(cfg));
  auto source = ReloadingTlsContext::Create(std::move(files));
  if (!source.ok()) return source.status();
  return Source([source = std::move(*source)] { return source->Current(); });
}

StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeHttpPeerTls(const ClusterdConfig& cfg) {
  if (cfg.insecure) return std::shared_ptr<boost::asio::ssl::context>();
  return MakeTlsClientContext("", cfg.tls.cert_file, cfg.tls.key_file);
}

}  // namespace clusterd
