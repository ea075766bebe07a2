// Client-side transport security shared by every ClusterD client (clusterctl,
// noded, job-agent, the benchmark's and tests' clients): TLS with a CA bundle,
// an optional client certificate (mutual TLS) and an optional bearer token,
// each from a file that may be rotated while the client runs.
//
// TLS is used when any of ca_file, cert_file, key_file is set; otherwise the
// channel is plaintext (a ClusterD started with --insecure). A token is only
// ever sent over TLS: ValidateClientSecurity refuses a token without it.
//
// Flags and environment variables (docs/security.md):
//   --ca FILE          CLUSTERD_CA           CA bundle that signed the server's certificate
//   --cert FILE        CLUSTERD_CERT         client certificate (PEM, chain allowed)
//   --key FILE         CLUSTERD_KEY          its private key
//   --token TOKEN      CLUSTERD_TOKEN        bearer token
//   --token-file FILE  CLUSTERD_TOKEN_FILE   bearer token read from a file (re-read when it changes)
//   --server-name NAME CLUSTERD_SERVER_NAME  name to verify the server's certificate against
#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace clusterd {

struct ClientSecurity {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string token;
  std::string token_file;
  std::string server_name;

  bool tls() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
  bool has_token() const { return !token.empty() || !token_file.empty(); }
};

// Fills every empty field from its CLUSTERD_* environment variable, so a flag
// wins over the environment. The token and the token file are one setting:
// the environment's is used only when neither was given (else a --token-file
// flag and an exported CLUSTERD_TOKEN would be refused as two tokens). Both
// CLUSTERD_TOKEN and CLUSTERD_TOKEN_FILE set is left to
// ValidateClientSecurity to refuse. `getenv` (default std::getenv) lets tests
// supply the environment.
void ApplyClientSecurityEnv(ClientSecurity* security, const char* (*getenv)(const char*) = nullptr);

// If `flag` (without the leading dashes) is one of ca, cert, key, token,
// token-file, server-name: stores value and returns true. For the clients'
// own argument loops.
bool SetClientSecurityFlag(const std::string& flag, const std::string& value, ClientSecurity* security);

// The --help lines for the flags above.
const char* ClientSecurityUsage();

// Checks that the files exist and are readable, that a certificate comes with
// its key, and that a token is only configured with TLS. The error names the
// flag.
Status ValidateClientSecurity(const ClientSecurity& security);

// Channel credentials for `security` (validated first): TLS whose client
// certificate and CA are re-read from their files when they change, composed
// with the bearer token as call credentials; or plaintext.
StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const ClientSecurity& security);

// A channel to `target` with those credentials; `args` is extended with the
// server-name override when one is set.
StatusOr<std::shared_ptr<grpc::Channel>> CreateClientChannel(const std::string& target, const ClientSecurity& security,
                                                             grpc::ChannelArguments args = {});

// A target that lists more than one address ("ipv4:a,b,c", "ipv6:..."):
// every replica of a highly available ClusterD, of which only the leader
// takes writes and the standbys refuse them with UNAVAILABLE (docs/ha.md).
size_t AddressCount(const std::string& target);
// The list starting at its k-th address (mod their number): a client that
// opens a new channel after a refusal tries the next replica first. Any
// other target is returned as it is.
std::string RotateAddresses(const std::string& target, size_t k);
// For a list: each call goes to the next connected address (round_robin),
// so a call that a standby refused is retried on another replica; nothing
// for any other target.
void SpreadCallsOverAddresses(const std::string& target, grpc::ChannelArguments* args);

}  // namespace clusterd
