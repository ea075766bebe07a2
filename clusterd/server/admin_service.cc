#include "clusterd/server/admin_service.h"

#include "clusterd/edge/auth.h"
#include "clusterd/server/submit.h"
#include "clusterd/state/rules.h"
#include "clusterd/state/validation_rule.h"

namespace clusterd {
namespace {

// A node out for its hardware: isolated (it or a device), or held.
bool HardwareOut(const NodeState& n) {
  const v1::Node& node = n.record.node();
  if (node.isolated() || node.service_phase() != v1::SERVICE_PHASE_UNSPECIFIED) return true;
  for (const auto& [id, d] : n.devices) {
    if (d.isolated()) return true;
  }
  return false;
}

const v1::Device* FindDevice(const ClusterState& state, const std::string& node, uint32_t device) {
  const NodeState* n = state.node_table().Find(node);
  if (!n) return nullptr;
  auto it = n->devices.find(device);
  return it == n->devices.end() ? nullptr : &it->second;
}

}  // namespace

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
  return SubmitAuthenticatedWrite(
      ctx, engine_, *auth_, "/clusterd.v1.AdminService/UncordonNode", req->actor(),
      [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
        if (!req->force()) {
          CLUSTERD_RETURN_IF_ERROR(state.ChainAllowsRelease(req->node(), false));
        }
        // With validation on, a node out for its hardware returns
        // after a validation (docs/validation.md); force skips it.
        ValidationRule* validation = state.Attached<ValidationRule>();
        const NodeState* n = state.node_table().Find(req->node());
        if (validation && validation->enabled() && n && HardwareOut(*n)) {
          if (req->force()) {
            auto skipped = validation->Skip(state, req->node(), std::nullopt, who.actor(), req->reason(), m);
            if (!skipped.ok()) return skipped.status();
          } else {
            auto started =
                validation->Start(state, req->node(), std::nullopt, "operator", who.actor(), req->reason(), m);
            if (!started.ok()) return started.status();
            *resp->mutable_node() = state.node_table().Find(req->node())->Describe();
            return Status::Ok();
          }
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
  return SubmitAuthenticatedWrite(
      ctx, engine_, *auth_, "/clusterd.v1.AdminService/ReleaseDevice", req->actor(),
      [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
        // With validation on, a device out for its hardware returns after a
        // validation (docs/validation.md); force skips it.
        ValidationRule* validation = state.Attached<ValidationRule>();
        const v1::Device* d = FindDevice(state, req->node(), req->device_id());
        if (validation && validation->enabled() && d &&
            (d->isolated() || d->separated() || d->service_phase() != v1::SERVICE_PHASE_UNSPECIFIED)) {
          auto v = req->force() ? validation->Skip(state, req->node(), req->device_id(), who.actor(), req->reason(), m)
                                : validation->Start(state, req->node(), req->device_id(), "operator", who.actor(),
                                                    req->reason(), m);
          if (!v.ok()) return v.status();
          *resp->mutable_device() = *FindDevice(state, req->node(), req->device_id());
          return Status::Ok();
        }
        auto device = ReleaseSeparatedDevice(state, req->node(), req->device_id(), who.actor(), req->reason(), m);
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

grpc::ServerUnaryReactor* AdminServiceImpl::StartValidation(grpc::CallbackServerContext* ctx,
                                                            const v1::StartValidationRequest* req,
                                                            v1::StartValidationResponse* resp) {
  return SubmitAuthenticatedWrite(
      ctx, engine_, *auth_, "/clusterd.v1.AdminService/StartValidation", req->actor(),
      [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
        ValidationRule* validation = state.Attached<ValidationRule>();
        if (validation == nullptr) return FailedPrecondition("this ClusterD runs no validations");
        auto v =
            validation->Start(state, req->node(), req->has_device_id() ? std::optional(req->device_id()) : std::nullopt,
                              "operator", who.actor(), req->reason(), m);
        if (!v.ok()) return v.status();
        *resp->mutable_validation() = std::move(*v);
        return Status::Ok();
      });
}

grpc::ServerUnaryReactor* AdminServiceImpl::SkipValidation(grpc::CallbackServerContext* ctx,
                                                           const v1::SkipValidationRequest* req,
                                                           v1::SkipValidationResponse* resp) {
  return SubmitAuthenticatedWrite(
      ctx, engine_, *auth_, "/clusterd.v1.AdminService/SkipValidation", req->actor(),
      [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
        ValidationRule* validation = state.Attached<ValidationRule>();
        if (validation == nullptr) return FailedPrecondition("this ClusterD runs no validations");
        auto v =
            validation->Skip(state, req->node(), req->has_device_id() ? std::optional(req->device_id()) : std::nullopt,
                             who.actor(), req->reason(), m);
        if (!v.ok()) return v.status();
        *resp->mutable_validation() = std::move(*v);
        return Status::Ok();
      });
}

grpc::ServerUnaryReactor* AdminServiceImpl::HoldOut(grpc::CallbackServerContext* ctx, const v1::HoldOutRequest* req,
                                                    v1::HoldOutResponse* resp) {
  return SubmitAuthenticatedWrite(
      ctx, engine_, *auth_, "/clusterd.v1.AdminService/HoldOut", req->actor(),
      [req, resp](const Principal& who, ClusterState& state, Mutation* m) {
        ValidationRule* validation = state.Attached<ValidationRule>();
        if (validation == nullptr) return FailedPrecondition("this ClusterD runs no validations");
        const std::optional<uint32_t> device = req->has_device_id() ? std::optional(req->device_id()) : std::nullopt;
        CLUSTERD_RETURN_IF_ERROR(validation->Hold(state, req->node(), device, who.actor(), req->reason(), m));
        *resp->mutable_node() = state.node_table().Find(req->node())->Describe();
        if (device) *resp->mutable_device() = *FindDevice(state, req->node(), *device);
        return Status::Ok();
      });
}

}  // namespace clusterd
