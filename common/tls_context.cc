#include "common/tls_context.h"

#include <boost/asio/ssl/context.hpp>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "common/config_util.h"
#include "common/logging.h"

namespace clusterd {
namespace {

namespace ssl = boost::asio::ssl;

// TLS 1.2 and 1.3 only; no compression, no renegotiation by the client.
void HardenContext(ssl::context& ctx) {
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::no_compression);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_RENEGOTIATION);
}

Status LoadKeyPair(ssl::context& ctx, const std::string& cert_file, const std::string& key_file,
                   const std::string& cert_pem, const std::string& key_pem) {
  boost::system::error_code ec;
  if (ctx.use_certificate_chain(boost::asio::buffer(cert_pem), ec)) {
    return InvalidArgument("tls_cert_file " + cert_file + ": no PEM certificate in it (" + ec.message() + ")");
  }
  // Parsed alone first: OpenSSL refuses a key that does not match the
  // certificate already loaded, and the two errors need different words.
  BIO* bio = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = bio != nullptr ? PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr) : nullptr;
  if (bio != nullptr) BIO_free(bio);
  if (key == nullptr) {
    return InvalidArgument("tls_key_file " + key_file + ": no PEM private key in it (or it is encrypted)");
  }
  EVP_PKEY_free(key);
  if (ctx.use_private_key(boost::asio::buffer(key_pem), ssl::context::pem, ec) ||
      SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
    return InvalidArgument("tls_key_file " + key_file + " is not the key of " + cert_file);
  }
  return Status::Ok();
}

Status LoadCa(ssl::context& ctx, const std::string& ca_file, const std::string& ca_pem) {
  boost::system::error_code ec;
  if (ctx.add_certificate_authority(boost::asio::buffer(ca_pem), ec)) {
    return InvalidArgument("tls_client_ca_file " + ca_file + ": no PEM certificate in it (" + ec.message() + ")");
  }
  return Status::Ok();
}

StatusOr<std::shared_ptr<ssl::context>> BuildServerContext(const TlsServerFiles& files, const std::string& cert_pem,
                                                           const std::string& key_pem, const std::string& ca_pem) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  HardenContext(*ctx);
  CLUSTERD_RETURN_IF_ERROR(LoadKeyPair(*ctx, files.cert_file, files.key_file, cert_pem, key_pem));
  int mode = SSL_VERIFY_NONE;
  if (!files.client_ca_file.empty()) {
    CLUSTERD_RETURN_IF_ERROR(LoadCa(*ctx, files.client_ca_file, ca_pem));
    // The CA names sent in the certificate request: a browser offers only
    // certificates of these issuers.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    }
    if (files.client_auth == "require") {
      mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    } else if (files.client_auth == "request") {
      mode = SSL_VERIFY_PEER;
    }
  }
  SSL_CTX_set_verify(ctx->native_handle(), mode, nullptr);
  // Session ids are per context; name them so resumption works within one.
  static const unsigned char kSessionContext[] = "clusterd-http";
  SSL_CTX_set_session_id_context(ctx->native_handle(), kSessionContext, sizeof(kSessionContext) - 1);
  return ctx;
}

StatusOr<std::string> ReadNamed(const char* key, const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return InvalidArgument(std::string(key) + ": " + text.status().message());
  return text;
}

}  // namespace

StatusOr<std::shared_ptr<ssl::context>> MakeTlsServerContext(const TlsServerFiles& files) {
  auto cert = ReadNamed("tls_cert_file", files.cert_file);
  if (!cert.ok()) return cert.status();
  auto key = ReadNamed("tls_key_file", files.key_file);
  if (!key.ok()) return key.status();
  std::string ca;
  if (!files.client_ca_file.empty()) {
    auto read = ReadNamed("tls_client_ca_file", files.client_ca_file);
    if (!read.ok()) return read.status();
    ca = std::move(*read);
  }
  return BuildServerContext(files, *cert, *key, ca);
}

StatusOr<std::shared_ptr<ssl::context>> MakeVerifyingTlsClientContext(const std::string& ca_file,
                                                                      const std::string& cert_file,
                                                                      const std::string& key_file) {
  auto ctx = MakeTlsClientContext(ca_file, cert_file, key_file);
  if (!ctx.ok() || !ca_file.empty()) return ctx;
  boost::system::error_code ec;
  if ((*ctx)->set_default_verify_paths(ec)) {
    return InvalidArgument("TLS: the system's CA certificates cannot be loaded: " + ec.message());
  }
  (*ctx)->set_verify_mode(ssl::verify_peer);
  return ctx;
}

std::string CertificateCommonName(std::string_view pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return {};
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (cert == nullptr) return {};
  std::string cn;
  X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) {
    unsigned char* utf8 = nullptr;
    const int len = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i)));
    if (len >= 0 && utf8 != nullptr) cn.assign(reinterpret_cast<char*>(utf8), static_cast<size_t>(len));
    if (utf8 != nullptr) OPENSSL_free(utf8);
  }
  X509_free(cert);
  return cn;
}

StatusOr<std::shared_ptr<ssl::context>> MakeTlsClientContext(const std::string& ca_file, const std::string& cert_file,
                                                             const std::string& key_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  HardenContext(*ctx);
  if (!ca_file.empty()) {
    auto ca = ReadNamed("tls_client_ca_file", ca_file);
    if (!ca.ok()) return ca.status();
    CLUSTERD_RETURN_IF_ERROR(LoadCa(*ctx, ca_file, *ca));
    ctx->set_verify_mode(ssl::verify_peer);
  } else {
    ctx->set_verify_mode(ssl::verify_none);
  }
  if (!cert_file.empty()) {
    auto cert = ReadNamed("tls_cert_file", cert_file);
    if (!cert.ok()) return cert.status();
    auto key = ReadNamed("tls_key_file", key_file);
    if (!key.ok()) return key.status();
    CLUSTERD_RETURN_IF_ERROR(LoadKeyPair(*ctx, cert_file, key_file, *cert, *key));
  }
  return ctx;
}

StatusOr<std::shared_ptr<ReloadingTlsContext>> ReloadingTlsContext::Create(TlsServerFiles files) {
  std::shared_ptr<ReloadingTlsContext> self(new ReloadingTlsContext(std::move(files)));
  auto ctx = MakeTlsServerContext(self->files_);
  if (!ctx.ok()) return ctx.status();
  self->current_ = std::move(*ctx);
  self->contents_ = self->ReadAll();
  self->next_check_ = std::chrono::steady_clock::now() + self->files_.reload_interval;
  return self;
}

// The three files side by side ("" for one that cannot be read), to tell
// whether anything changed.
std::string ReloadingTlsContext::ReadAll() const {
  std::string all;
  for (const std::string* path : {&files_.cert_file, &files_.key_file, &files_.client_ca_file}) {
    if (path->empty()) continue;
    auto text = ReadFileToString(*path);
    all += std::to_string(text.ok() ? text->size() : 0) + ":" + (text.ok() ? *text : std::string()) + "\n";
  }
  return all;
}

std::shared_ptr<ssl::context> ReloadingTlsContext::Current() {
  std::lock_guard lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return current_;
  next_check_ = now + files_.reload_interval;
  std::string contents = ReadAll();
  if (contents == contents_ || contents == failed_contents_) return current_;
  auto ctx = MakeTlsServerContext(files_);
  // A failed load leaves OpenSSL's per-thread error queue filled; this runs on
  // the HTTP server's thread, whose next TLS read must not see those errors.
  ERR_clear_error();
  if (!ctx.ok()) {
    // A Secret being replaced, a pair written one file at a time: the old
    // context serves until the files make a good pair.
    ++failures_;
    failed_contents_ = std::move(contents);
    GetLogger("tls")->warn("HTTP TLS files changed but cannot be used; keeping the previous certificate: {}",
                           ctx.status().message());
    return current_;
  }
  ++reloads_;
  current_ = std::move(*ctx);
  contents_ = std::move(contents);
  failed_contents_.clear();
  GetLogger("tls")->info("HTTP TLS: certificate files reloaded ({})", files_.cert_file);
  return current_;
}

uint64_t ReloadingTlsContext::reloads() const {
  std::lock_guard lock(mu_);
  return reloads_;
}

uint64_t ReloadingTlsContext::reload_failures() const {
  std::lock_guard lock(mu_);
  return failures_;
}

}  // namespace clusterd
