#include "clusterd/server/admin_service.h"

#include "clusterd/edge/auth.h"
#include "clusterd/server/submit.h"
#include "clusterd/state/rules.h"

namespace clusterd {

grpc::ServerUnaryReactor* AdminServiceImpl::CordonNode(grpc::CallbackServerContext* ctx,
                                                       const v1::CordonNodeRequest* req, v1::CordonNodeResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.AdminService/CordonNode", req->actor(),
                                  [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
                                    auto node = state.ApplyCordon(req->node(), true, who.actor(), req->reason(), m);
                                    if (!node.ok()) return node.status();
                                    *resp->mutable_node() = std::move(*node);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::UncordonNode(grpc::CallbackServerContext* ctx,
                                                         const v1::UncordonNodeRequest* req,
                                                         v1::UncordonNodeResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.AdminService/UncordonNode", req->actor(),
                                  [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
                                    if (!req->force()) {
                                      CLUSTERD_RETURN_IF_ERROR(state.ChainAllowsRelease(req->node(), false));
                                    }
                                    auto node = state.ApplyCordon(req->node(), false, who.actor(), req->reason(), m);
                                    if (!node.ok()) return node.status();
                                    *resp->mutable_node() = std::move(*node);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ClearFault(grpc::CallbackServerContext* ctx,
                                                       const v1::ClearFaultRequest* req, v1::ClearFaultResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.AdminService/ClearFault", req->actor(),
                                  [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
                                    auto fault = state.ApplyClearFault(req->fault_id(), who.actor(), req->reason(), m);
                                    if (!fault.ok()) return fault.status();
                                    *resp->mutable_fault() = std::move(*fault);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::ReleaseDevice(grpc::CallbackServerContext* ctx,
                                                          const v1::ReleaseDeviceRequest* req,
                                                          v1::ReleaseDeviceResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.AdminService/ReleaseDevice", req->actor(),
                                  [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
                                    auto device = ReleaseSeparatedDevice(state, req->node(), req->device_id(),
                                                                         who.actor(), req->reason(), m);
                                    if (!device.ok()) return device.status();
                                    *resp->mutable_device() = std::move(*device);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetRecoveryMode(grpc::CallbackServerContext* ctx,
                                                            const v1::SetRecoveryModeRequest* req,
                                                            v1::SetRecoveryModeResponse* resp) {
  return SubmitAuthenticatedWrite(ctx, engine_, *auth_, "/clusterd.v1.AdminService/SetRecoveryMode", req->actor(),
                                  [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
                                    v1::SetRecoveryModeRequest change = *req;
                                    change.set_actor(who.actor());
                                    auto admin = state.ApplySetRecoveryMode(change, m);
                                    if (!admin.ok()) return admin.status();
                                    *resp->mutable_state() = std::move(*admin);
                                    return Status::Ok();
                                  });
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetAdminState(grpc::CallbackServerContext* ctx,
                                                          const v1::GetAdminStateRequest*,
                                                          v1::GetAdminStateResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.AdminService/GetAdminState")) return refused;
  return AnswerRead(ctx, state_, [resp](const StateView& state) {
    *resp->mutable_state() = state.admin_state();
    return Status::Ok();
  });
}

}  // namespace clusterd
