// Requests whose strings are not UTF-8 get INVALID_ARGUMENT naming the field.
//
// proto3 refuses to parse a message with invalid UTF-8 in a `string` field,
// and gRPC 1.51 then answers a unary call with a bare UNIMPLEMENTED (the
// callback handler drops the parse status) and ends a stream's read without a
// word. For the requests ClusterD serves, the parse below tries the normal
// parse first (nothing else happens on that path); when it fails, it replaces
// every byte of an invalid UTF-8 sequence inside a string field with NUL, in
// place (lengths are unchanged, so the wire structure is too), and parses
// again. Every string a request carries is validated before use, and the
// validators refuse NUL naming the field ("contains a NUL byte or invalid
// UTF-8"), so the client learns which field is bad and nothing changes.
//
// This header is force-included (-include) into every translation unit that
// links clusterd_grpc, so that each one sees these explicit specializations
// before it instantiates the deserializer of one of these requests; their
// definitions are in wire_parse.cc.
#pragma once

#include <cstddef>

#include <grpcpp/impl/codegen/proto_utils.h>

#include "clusterd/v1/admin.pb.h"
#include "clusterd/v1/agent.pb.h"
#include "clusterd/v1/cluster.pb.h"
#include "clusterd/v1/fault.pb.h"
#include "clusterd/v1/job.pb.h"

namespace clusterd::wire {

// Replaces, in place, each byte of an invalid UTF-8 sequence in the string
// fields (nested messages and maps included) of the serialized message of
// type `type` with NUL. False when the bytes are not a well-formed message of
// that type (then nothing is promised about *data).
bool ScrubInvalidUtf8(char* data, size_t size, const google::protobuf::Descriptor* type);

// The normal parse, and on failure the scrubbed one described above.
grpc::Status LenientDeserialize(grpc::ByteBuffer* buffer, google::protobuf::Message* msg);

}  // namespace clusterd::wire

#define CLUSTERD_LENIENT_REQUESTS(X)      \
  X(clusterd::v1::ConnectRequest)         \
  X(clusterd::v1::GetSummaryRequest)      \
  X(clusterd::v1::ListNodesRequest)       \
  X(clusterd::v1::GetNodeRequest)         \
  X(clusterd::v1::ListFaultsRequest)      \
  X(clusterd::v1::WatchRequest)           \
  X(clusterd::v1::ListRecoveriesRequest)  \
  X(clusterd::v1::GetRecoveryRequest)     \
  X(clusterd::v1::ReportRequest)          \
  X(clusterd::v1::CreateJobRequest)       \
  X(clusterd::v1::UpdateJobRequest)       \
  X(clusterd::v1::GetJobRequest)          \
  X(clusterd::v1::ListJobsRequest)        \
  X(clusterd::v1::DeleteJobRequest)       \
  X(clusterd::v1::AttachRequest)          \
  X(clusterd::v1::CordonNodeRequest)      \
  X(clusterd::v1::UncordonNodeRequest)    \
  X(clusterd::v1::ClearFaultRequest)      \
  X(clusterd::v1::SetRecoveryModeRequest) \
  X(clusterd::v1::GetAdminStateRequest)   \
  X(clusterd::v1::ReleaseDeviceRequest)

namespace grpc {
#define CLUSTERD_DECLARE_LENIENT(T) \
  template <>                       \
  Status SerializationTraits<T, void>::Deserialize(ByteBuffer* buffer, protobuf::MessageLite* msg);
CLUSTERD_LENIENT_REQUESTS(CLUSTERD_DECLARE_LENIENT)
#undef CLUSTERD_DECLARE_LENIENT
}  // namespace grpc
