// gRPC transport credentials of the server (docs/security.md): TLS from
// certificate files that are re-read when they change, client certificates
// verified against a CA when asked for; plaintext only with --insecure.
#pragma once

#include <memory>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "clusterd/config/config.h"
#include "common/status.h"

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

}  // namespace clusterd
