// The authentication seam at the gRPC edge: every write's Principal is
// derived here, in one place, from the call's context, and handed to the
// write (SubmitAuthenticatedWrite) instead of adapters reading the request's
// actor field themselves. Today's authenticator trusts the client-written
// actor; the security issue plugs mTLS and token authenticators in here
// without touching the adapters or ClusterState.
#pragma once

#include <memory>
#include <string_view>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "clusterd/engine.h"
#include "clusterd/principal.h"
#include "clusterd/server/grpc_status.h"
#include "common/status.h"

namespace clusterd {

class Authenticator {
 public:
  virtual ~Authenticator() = default;
  // Who made the call. `claimed_actor` is the request's actor field ("" when
  // the request has none or left it empty). An error (e.g. UNAUTHENTICATED,
  // PERMISSION_DENIED) ends the call with it and changes nothing.
  // Thread-safe; runs on gRPC threads, so it must not block.
  virtual StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx,
                                           std::string_view claimed_actor) const = 0;
};

// Today's behaviour: a non-empty claimed actor is trusted as is (kClaimed);
// otherwise the caller is kAnonymous. The peer address is kept either way.
// Never fails.
std::unique_ptr<Authenticator> MakeClaimedActorAuthenticator();

// SubmitWrite (submit.h) with the caller's principal: authenticates on the
// gRPC thread (finishing the call with the error if that fails), then runs
// apply(const Principal&, ClusterState&, Mutation*) -> Status on the writer
// thread and finishes the call once its change is durable.
template <typename Apply>
grpc::ServerUnaryReactor* SubmitAuthenticatedWrite(grpc::CallbackServerContext* ctx, Engine* engine,
                                                   const Authenticator& auth, std::string_view claimed_actor,
                                                   Apply apply) {
  auto* reactor = ctx->DefaultReactor();
  auto who = auth.Authenticate(*ctx, claimed_actor);
  if (!who.ok()) {
    reactor->Finish(ToGrpc(who.status()));
    return reactor;
  }
  // Refused with UNAVAILABLE (and why) while the disk is below its reserve
  // or the store cannot be written, and after shutdown.
  Status submitted = engine->SubmitWrite(
      [reactor, apply, principal = std::move(*who)](ClusterState& state, Mutation* m) -> Engine::Done {
        Status st = apply(principal, state, m);
        return [reactor, st] { reactor->Finish(ToGrpc(st)); };
      });
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
  return reactor;
}

}  // namespace clusterd
