// gRPC adapter for AdminService: every action is a durable change with its
// own event (actor and reason recorded).
#pragma once

#include "clusterd/cluster_state.h"
#include "clusterd/engine.h"
#include "clusterd/v1/admin.grpc.pb.h"

namespace clusterd {

class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  AdminServiceImpl(const ClusterState* state, Engine* engine) : state_(state), engine_(engine) {}

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

 private:
  const ClusterState* state_;
  Engine* engine_;
};

}  // namespace clusterd
