// gRPC transport credentials of the server (docs/security.md): TLS from
// certificate files that are re-read when they change, client certificates
// verified against a CA when asked for; plaintext only with --insecure.
#pragma once

#include <functional>
#include <memory>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "clusterd/config/config.h"
#include "common/status.h"
#include "common/tls_context.h"

namespace clusterd {

// Reads and checks the files first (a certificate that parses, a key that
// matches it, a CA bundle with at least one certificate), so that a bad file
// is a clear error at start rather than failed handshakes later.
StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ClusterdConfig& cfg);

// Credentials of /readyz's self-check: it proves that a new connection is
// accepted and answered, not who the server is, so it does not verify the
// server certificate; it presents the server's own certificate as a client
// certificate when client certificates are required (tls_client_auth
// "require"), so that certificate must then be one the client CA accepts with
// the client-auth usage (docs/security.md).
std::shared_ptr<grpc::ChannelCredentials> MakeSelfCheckCredentials(const ClusterdConfig& cfg);

// The HTTP port's TLS (HttpServer::Options::tls): the gRPC port's
// certificate, key, client CA, client-auth mode and reload interval, the
// files checked now. Null in --insecure mode (plaintext).
StatusOr<std::function<std::shared_ptr<boost::asio::ssl::context>()>> MakeHttpTls(const ClusterdConfig& cfg);

// The client side of a replica fetching a peer's checkpoint over the HTTP
// port: TLS presenting this replica's own certificate (what
// tls_client_auth "require" asks for); the peer is not verified here (the
// checkpoint token authenticates it). Null in --insecure mode.
StatusOr<std::shared_ptr<boost::asio::ssl::context>> MakeHttpPeerTls(const ClusterdConfig& cfg);

}  // namespace clusterd
