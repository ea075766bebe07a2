// TLS contexts for the HTTP ports (Boost.Asio over OpenSSL), built from PEM
// files that are read again when they change, so that a renewed certificate
// (cert-manager, a rotated Secret) is used without a restart: new handshakes
// get the new files, open connections keep the context they were made with.
//
// Thread contract: ReloadingTlsContext::Current() is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace clusterd {

struct TlsServerFiles {
  std::string cert_file;  // PEM, chain allowed (leaf first)
  std::string key_file;   // PEM, unencrypted
  // CA bundle that client certificates must chain to; "" = none asked for.
  std::string client_ca_file;
  // "require": every client presents a certificate the bundle verifies;
  // "request": one is verified if sent; "none": none asked for.
  std::string client_auth = "none";
  // How often the files are looked at again (at most; checked when a
  // connection comes).
  std::chrono::nanoseconds reload_interval = std::chrono::seconds(10);
};

// A server context from `files`: InvalidArgument naming the file when one
// cannot be read, holds no certificate or key, or the key does not belong to
// the certificate. TLS 1.2 and later.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsServerContext(const TlsServerFiles& files);

// A client context: server certificates verified against `ca_file` ("" = not
// verified: the caller authenticates the peer some other way), and
// `cert_file`/`key_file` presented as the client certificate when set.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeTlsClientContext(const std::string& ca_file,
                                                                          const std::string& cert_file,
                                                                          const std::string& key_file);

// A client context that always verifies the server's certificate: against
// `ca_file`, or the system's roots when it is "" (the caller checks the name:
// HttpClientRequest::tls_verify_host); `cert_file`/`key_file` as above.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeVerifyingTlsClientContext(const std::string& ca_file,
                                                                                   const std::string& cert_file,
                                                                                   const std::string& key_file);

// The Subject common name of a certificate (PEM, the first in it; the last
// CN when it has several, as Kubernetes reads it); "" when it has none or
// is not a certificate.
std::string CertificateCommonName(std::string_view pem);

class ReloadingTlsContext {
 public:
  // Reads the files now: their error when they do not make a context.
  static StatusOr<std::shared_ptr<ReloadingTlsContext>> Create(TlsServerFiles files);

  // The context for a new connection. At most once per reload_interval it
  // reads the files again and, when their contents changed, builds a new
  // context; when that fails it logs why (the "tls" logger) and keeps the
  // previous one.
  std::shared_ptr<boost::asio::ssl::context> Current();

  // Contexts built after the first, and failed attempts.
  uint64_t reloads() const;
  uint64_t reload_failures() const;

 private:
  explicit ReloadingTlsContext(TlsServerFiles files) : files_(std::move(files)) {}
  std::string ReadAll() const;

  const TlsServerFiles files_;
  mutable std::mutex mu_;
  std::shared_ptr<boost::asio::ssl::context> current_;  // guarded by mu_
  std::string contents_;                                // the files current_ was built from
  std::string failed_contents_;                         // the last contents that failed (logged once)
  std::chrono::steady_clock::time_point next_check_{};
  uint64_t reloads_ = 0;
  uint64_t failures_ = 0;
};

}  // namespace clusterd
