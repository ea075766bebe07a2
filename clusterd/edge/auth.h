// Authentication and authorization at the gRPC edge (docs/security.md).
//
// Every call's Principal is derived here, in one place, from the call's
// context: a bearer token ("authorization: Bearer ...", from the token file
// or Kubernetes TokenReview) or else the verified client certificate
// (user = Subject CN, groups = Subject O). Its roles come from roles.h. Each
// handler then asks Authorize(ctx, method) before doing anything; the method
// must be in the one table (authz.h: MethodRules), which a test checks
// against every method every service declares.
//
// In --insecure mode there is no transport identity: the caller is the actor
// it claims and holds every role (local development).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/auth/principal.h"
#include "clusterd/auth/roles.h"
#include "clusterd/auth/token_review.h"
#include "clusterd/engine/engine.h"
#include "clusterd/edge/grpc_status.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd {

struct AuthOptions {
  bool insecure = false;
  std::string token_file;
  std::vector<RoleBinding> bindings;
  // "namespace/name" service accounts whose node-bound tokens are agents.
  std::vector<std::string> agent_service_accounts;
  TokenReviewer* reviewer = nullptr;  // not owned; nullptr: no TokenReview
  std::chrono::nanoseconds review_cache_ttl = std::chrono::seconds(60);
};

class Authenticator {
 public:
  virtual ~Authenticator() = default;
  // Who made the call. `claimed_actor` is the request's actor field ("" when
  // the request has none). No or bad credentials when they are needed:
  // UNAUTHENTICATED. Thread-safe.
  virtual StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx,
                                           std::string_view claimed_actor) const = 0;
  // A bearer token presented somewhere else (the HTTP port).
  virtual StatusOr<Principal> AuthenticateToken(std::string_view token, std::string peer) const = 0;
  // A request on the HTTP port (docs/security.md): its bearer token
  // (req.authorization), else its verified client certificate, must name a
  // principal with one of `roles` (admin always may). UNAUTHENTICATED without
  // either or with a bad token, PERMISSION_DENIED without the role,
  // UNAVAILABLE when the token could not be checked. Counts every decision
  // and audits every refusal as Authorize does, `what` ("GET /metrics") in
  // the place of the method. Always OK in --insecure mode.
  virtual Status AuthorizeHttp(const HttpRequest& req, RoleMask roles, std::string_view what) const = 0;
  // Authenticate, then check `method` ("/pkg.Service/Method") against the
  // method table and the principal's roles: PERMISSION_DENIED when it may
  // not. Counts and logs (the "audit" logger) every refusal.
  virtual StatusOr<Principal> Authorize(const grpc::ServerContextBase& ctx, std::string_view method,
                                        std::string_view claimed_actor = {}) const = 0;
  // Logs a refusal found by a handler's scope check (another node, job or
  // reporter) and counts it; returns PERMISSION_DENIED with `why`.
  virtual Status Deny(const Principal& p, std::string_view method, std::string why) const = 0;
  // Whether principals are proved (TLS with certificates or tokens) rather
  // than claimed.
  virtual bool enforcing() const = 0;
};

// The authenticator for `options`; metrics clusterd_auth_* are registered
// in `metrics` (may be nullptr).
std::unique_ptr<Authenticator> MakeAuthenticator(AuthOptions options, MetricsRegistry* metrics);

// Today's development behaviour, kept for tests: --insecure.
std::unique_ptr<Authenticator> MakeClaimedActorAuthenticator();

// The roles that may read the cluster: viewer, operator (and admin).
inline constexpr RoleMask kReaderRoles = RoleBit(Role::kViewer) | RoleBit(Role::kOperator) | RoleBit(Role::kAdmin);

// The roles a metrics_role names: "viewer" the readers, "operator" operator,
// "admin" admin only.
RoleMask MetricsRoles(std::string_view metrics_role);

// The HTTP status of a refusal from AuthorizeHttp: 401, 403 or 503.
int HttpStatusOfRefusal(const Status& st);

// Scope checks, true when p may act for that node / job / reporter name
// (admins always may).
bool MayActForNode(const Principal& p, std::string_view node);
bool MayAttachJob(const Principal& p, std::string_view job);
bool MayReportAs(const Principal& p, std::string_view reporter);

// The unary form of a refusal: finishes the call with `st`.
inline grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* ctx, const Status& st) {
  auto* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpc(st));
  return reactor;
}

// Authorizes a unary call: nullptr when `method` is allowed, else the
// reactor, already finished with the refusal, for the handler to return.
inline grpc::ServerUnaryReactor* RefuseUnary(grpc::CallbackServerContext* ctx, const Authenticator& auth,
                                             std::string_view method) {
  auto who = auth.Authorize(*ctx, method);
  return who.ok() ? nullptr : FinishUnary(ctx, who.status());
}

// SubmitWrite (submit.h) on behalf of an authorized principal: runs
// apply(const Principal&, ClusterState&, Mutation*) -> Status on the writer
// thread and finishes the call once its change is durable.
template <typename Apply>
grpc::ServerUnaryReactor* SubmitWriteAs(grpc::CallbackServerContext* ctx, Engine* engine, Principal principal,
                                        Apply apply) {
  auto* reactor = ctx->DefaultReactor();
  // Refused with UNAVAILABLE (and why) while the disk is below its reserve
  // or the store cannot be written, and after shutdown.
  Status submitted = engine->SubmitWrite(
      [reactor, apply, principal = std::move(principal)](ClusterState& state, Mutation* m) -> Engine::Done {
        Status st = apply(principal, state, m);
        return [reactor, st] { reactor->Finish(ToGrpc(st)); };
      });
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
  return reactor;
}

// Authorize `method` on the gRPC thread (finishing the call with the error
// if that fails), then SubmitWriteAs.
template <typename Apply>
grpc::ServerUnaryReactor* SubmitAuthenticatedWrite(grpc::CallbackServerContext* ctx, Engine* engine,
                                                   const Authenticator& auth, std::string_view method,
                                                   std::string_view claimed_actor, Apply apply) {
  auto who = auth.Authorize(*ctx, method, claimed_actor);
  if (!who.ok()) return FinishUnary(ctx, who.status());
  return SubmitWriteAs(ctx, engine, std::move(*who), std::move(apply));
}

}  // namespace clusterd
