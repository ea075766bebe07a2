// Edge translation of clusterd::Status to grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"

namespace clusterd {

inline grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), s.message());
}

}  // namespace clusterd
