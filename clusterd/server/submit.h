// Unary writes: run `apply` on the Engine's writer thread and finish the call
// once the change it recorded is durable (or with apply's error).
#pragma once

#include <grpcpp/grpcpp.h>

#include "clusterd/engine/engine.h"
#include "clusterd/edge/grpc_status.h"

namespace clusterd {

// apply: Status(ClusterState&, Mutation*), called on the writer thread; it may
// fill the response, which stays valid until Finish.
template <typename Apply>
grpc::ServerUnaryReactor* SubmitWrite(grpc::CallbackServerContext* ctx, Engine* engine, Apply apply) {
  auto* reactor = ctx->DefaultReactor();
  // Refused with UNAVAILABLE (and why) while the disk is below its reserve
  // or the store cannot be written, and after shutdown.
  Status submitted = engine->SubmitWrite([reactor, apply](ClusterState& state, Mutation* m) -> Engine::Done {
    Status st = apply(state, m);
    return [reactor, st] { reactor->Finish(ToGrpc(st)); };
  });
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
  return reactor;
}

// Reads under the state's shared lock. query: Status(const ClusterState&).
template <typename Query>
grpc::ServerUnaryReactor* AnswerRead(grpc::CallbackServerContext* ctx, const ClusterState* state, Query query) {
  auto* reactor = ctx->DefaultReactor();
  const Status st = state->Read(query);
  reactor->Finish(ToGrpc(st));
  return reactor;
}

// Reads a StatusOr<T> under the shared lock into *out. query: StatusOr<T>(const ClusterState&).
template <typename T, typename Query>
grpc::ServerUnaryReactor* AnswerQuery(grpc::CallbackServerContext* ctx, const ClusterState* state, T* out,
                                      Query query) {
  return AnswerRead(ctx, state, [out, &query](const StateView& s) {
    auto result = query(s);
    if (!result.ok()) return result.status();
    *out = std::move(*result);
    return Status::Ok();
  });
}

}  // namespace clusterd
