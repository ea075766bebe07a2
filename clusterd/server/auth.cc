#include "clusterd/server/auth.h"

#include <string>

namespace clusterd {
namespace {

class ClaimedActorAuthenticator final : public Authenticator {
 public:
  StatusOr<Principal> Authenticate(const grpc::ServerContextBase& ctx, std::string_view claimed_actor) const override {
    Principal p;
    p.peer = ctx.peer();
    // The claim is recorded exactly as written; ClusterState validates it
    // (and refuses an empty one where a write must name its actor).
    if (!claimed_actor.empty()) {
      p.kind = Principal::Kind::kClaimed;
      p.name = std::string(claimed_actor);
    }
    return p;
  }
};

}  // namespace

std::unique_ptr<Authenticator> MakeClaimedActorAuthenticator() { return std::make_unique<ClaimedActorAuthenticator>(); }

}  // namespace clusterd
