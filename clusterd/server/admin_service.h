// gRPC adapter for AdminService: every action is a durable change with its
// own event (actor and reason recorded).
#pragma once

#include "clusterd/engine/engine.h"
#include "clusterd/edge/auth.h"
#include "clusterd/state/cluster_state.h"
#include "clusterd/v1/admin.grpc.pb.h"

namespace clusterd {

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  // `auth` derives each write's principal (its actor); it must outlive this.
  AdminServiceImpl(const ClusterState* state, Engine* engine, const Authenticator* auth)
      : state_(state), engine_(engine), auth_(auth) {}

  grpc::ServerUnaryReactor* CordonNode(grpc::CallbackServerContext* ctx, const v1::CordonNodeRequest* req,
                                       v1::CordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* UncordonNode(grpc::CallbackServerContext* ctx, const v1::UncordonNodeRequest* req,
                                         v1::UncordonNodeResponse* resp) override;
  grpc::ServerUnaryReactor* ClearFault(grpc::CallbackServerContext* ctx, const v1::ClearFaultRequest* req,
                                       v1::ClearFaultResponse* resp) override;
  grpc::ServerUnaryReactor* SetRecoveryMode(grpc::CallbackServerContext* ctx, const v1::SetRecoveryModeRequest* req,
                                            v1::SetRecoveryModeResponse* resp) override;
  grpc::ServerUnaryReactor* GetAdminState(grpc::CallbackServerContext* ctx, const v1::GetAdminStateRequest* req,
                                          v1::GetAdminStateResponse* resp) override;
  grpc::ServerUnaryReactor* ReleaseDevice(grpc::CallbackServerContext* ctx, const v1::ReleaseDeviceRequest* req,
                                          v1::ReleaseDeviceResponse* resp) override;

 private:
  const ClusterState* state_;
  Engine* engine_;
  const Authenticator* auth_;
};

}  // namespace clusterd
