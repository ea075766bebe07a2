#include "clusterd/ha/etcd_client.h"

#include "common/logging.h"

namespace clusterd::ha {

std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    auto& last = reinterpret_cast<unsigned char&>(prefix.back());
    if (last < 0xff) {
      ++last;
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

EtcdClient::EtcdClient(Options options) : options_(std::move(options)) {
  for (const std::string& e : options_.endpoints) {
    Member m;
    m.target = e.rfind("http://", 0) == 0 ? e.substr(7) : e;
    grpc::ChannelArguments args;
    // A dead member is noticed within seconds, not at the TCP timeout.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
    m.channel = grpc::CreateCustomChannel(m.target, grpc::InsecureChannelCredentials(), args);
    m.kv = epb::KV::NewStub(m.channel);
    m.lease = epb::Lease::NewStub(m.channel);
    members_.push_back(std::move(m));
  }
}

std::string EtcdClient::current_endpoint() const {
  if (members_.empty()) return "";
  return members_[current_.load(std::memory_order_relaxed) % members_.size()].target;
}

EtcdClient::Member& EtcdClient::Pick(size_t* index) {
  *index = current_.load(std::memory_order_relaxed) % members_.size();
  return members_[*index];
}

void EtcdClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.timeout);
}

Status EtcdClient::Check(const grpc::Status& st, size_t index, const char* what) {
  if (st.ok()) return Status::Ok();
  const std::string msg = std::string("etcd ") + what + " at " + members_[index].target + ": " + st.error_message();
  switch (st.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::CANCELLED: {
      // Next call: the next member (unless another call moved on already).
      size_t expected = index;
      current_.compare_exchange_strong(expected, (index + 1) % members_.size());
      return Unavailable(msg);
    }
    case grpc::StatusCode::INVALID_ARGUMENT: return InvalidArgument(msg);
    case grpc::StatusCode::FAILED_PRECONDITION: return FailedPrecondition(msg);
    case grpc::StatusCode::NOT_FOUND: return NotFound(msg);
    case grpc::StatusCode::OUT_OF_RANGE: return OutOfRange(msg);
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return ResourceExhausted(msg);
    default: return Unavailable(msg);
  }
}

StatusOr<epb::RangeResponse> EtcdClient::Range(const epb::RangeRequest& request) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::RangeResponse response;
  CLUSTERD_RETURN_IF_ERROR(Check(m.kv->Range(&ctx, request, &response), i, "range"));
  return response;
}

StatusOr<epb::TxnResponse> EtcdClient::Txn(const epb::TxnRequest& request) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::TxnResponse response;
  CLUSTERD_RETURN_IF_ERROR(Check(m.kv->Txn(&ctx, request, &response), i, "txn"));
  return response;
}

StatusOr<epb::PutResponse> EtcdClient::Put(const epb::PutRequest& request) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::PutResponse response;
  CLUSTERD_RETURN_IF_ERROR(Check(m.kv->Put(&ctx, request, &response), i, "put"));
  return response;
}

StatusOr<epb::DeleteRangeResponse> EtcdClient::DeleteRange(const epb::DeleteRangeRequest& request) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::DeleteRangeResponse response;
  CLUSTERD_RETURN_IF_ERROR(Check(m.kv->DeleteRange(&ctx, request, &response), i, "delete"));
  return response;
}

StatusOr<epb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  epb::LeaseGrantResponse response;
  CLUSTERD_RETURN_IF_ERROR(Check(m.lease->LeaseGrant(&ctx, request, &response), i, "lease grant"));
  if (!response.error().empty()) return Unavailable("etcd lease grant: " + response.error());
  return response;
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  epb::LeaseRevokeRequest request;
  request.set_id(id);
  epb::LeaseRevokeResponse response;
  return Check(m.lease->LeaseRevoke(&ctx, request, &response), i, "lease revoke");
}

StatusOr<epb::LeaseKeepAliveResponse> EtcdClient::LeaseKeepAlive(int64_t id) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto stream = m.lease->LeaseKeepAlive(&ctx);
  epb::LeaseKeepAliveRequest request;
  request.set_id(id);
  epb::LeaseKeepAliveResponse response;
  bool got = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  if (got) {
    ctx.TryCancel();  // the answer is in; do not wait for the server to close
    stream->Finish();
    return response;
  }
  CLUSTERD_RETURN_IF_ERROR(Check(stream->Finish(), i, "lease keep-alive"));
  return Unavailable("etcd lease keep-alive at " + m.target + ": the stream ended without an answer");
}

}  // namespace clusterd::ha
