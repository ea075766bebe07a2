// Who made a write: derived in one place at the gRPC edge
// (server/auth.h: Authenticator) or given to an integration's command facade
// (integration.h), and passed down to the write, which records actor().
// Domain code sees only this struct, never the transport.
#pragma once

#include <string>

namespace clusterd {

struct Principal {
  enum class Kind {
    // No identity: the caller named no actor. Writes that must record one
    // refuse it ("actor: must not be empty"), as before principals existed.
    kAnonymous,
    // The client wrote its own name into the request's actor field and the
    // authenticator trusted it (the default, until mTLS or tokens).
    kClaimed,
    // An identity the transport proved (client certificate, token). Not
    // produced yet: the security issue's authenticators will.
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
