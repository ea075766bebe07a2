// Who made a write: derived in one place at the gRPC edge
// (edge/auth.h: Authenticator) or given to an integration's command facade
// (integration.h), and passed down to the write, which records actor().
// Domain code sees only this struct, never the transport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace clusterd {

struct Principal {
  enum class Kind {
    // No identity: the caller named no actor. Writes that must record one
    // refuse it ("actor: must not be empty"), as before principals existed.
    kAnonymous,
    // The client wrote its own name into the request's actor field and the
    // authenticator trusted it (the default, until mTLS or tokens).
    kClaimed,
    // An identity the transport proved (client certificate, bearer token).
    kAuthenticated,
    // ClusterD itself or an integration running inside it (integration.h);
    // the name is the integration's.
    kInternal,
  };

  Kind kind = Kind::kAnonymous;
  // The identity; empty for kAnonymous.
  std::string name;
  // Where the call came from, as gRPC names it ("ipv4:10.0.0.5:43122"); for
  // logs and per-peer decisions, never recorded as the actor. Empty for
  // kInternal.
  std::string peer;
  // What proved it: "x509", "token-file", "token-review"; "" otherwise.
  std::string method;
  // Groups (certificate O entries, token groups) and the roles they and the
  // bindings grant (roles.h: a RoleMask; everything in --insecure mode).
  std::vector<std::string> groups;
  uint32_t roles = 0;
  // Scopes: the node an agent may speak for, the job a job agent may attach
  // to (roles.h: from the user name or the token's node binding).
  std::string node;
  std::string job;

  // The actor a write records: the name (so a claimed actor is recorded
  // exactly as the client wrote it).
  const std::string& actor() const { return name; }
};

inline const char* PrincipalKindName(Principal::Kind kind) {
  switch (kind) {
    case Principal::Kind::kAnonymous: return "anonymous";
    case Principal::Kind::kClaimed: return "claimed";
    case Principal::Kind::kAuthenticated: return "authenticated";
    case Principal::Kind::kInternal: return "internal";
  }
  return "unknown";
}

}  // namespace clusterd
