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
    const bool tls = e.rfind("https://", 0) == 0;
    m.target = tls ? e.substr(8) : e.rfind("http://", 0) == 0 ? e.substr(7) : e;
    grpc::ChannelArguments args;
    // A dead member is noticed within seconds, not at the TCP timeout.
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    if (tls) {
      grpc::SslCredentialsOptions ssl;
      ssl.pem_root_certs = options_.ca_pem;
      ssl.pem_cert_chain = options_.cert_pem;
      ssl.pem_private_key = options_.key_pem;
      credentials = grpc::SslCredentials(ssl);
    }
    m.channel = grpc::CreateCustomChannel(m.target, credentials, args);
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

template <typename Response, typename Call>
StatusOr<Response> EtcdClient::Unary(const char* what, Call call) {
  size_t i;
  Member& m = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  Response response;
  CLUSTERD_RETURN_IF_ERROR(Check(call(m, &ctx, &response), i, what));
  return response;
}

StatusOr<epb::RangeResponse> EtcdClient::Range(const epb::RangeRequest& request) {
  return Unary<epb::RangeResponse>(
      "range", [&](Member& m, grpc::ClientContext* ctx, auto* out) { return m.kv->Range(ctx, request, out); });
}

StatusOr<epb::TxnResponse> EtcdClient::Txn(const epb::TxnRequest& request) {
  return Unary<epb::TxnResponse>(
      "txn", [&](Member& m, grpc::ClientContext* ctx, auto* out) { return m.kv->Txn(ctx, request, out); });
}

StatusOr<epb::PutResponse> EtcdClient::Put(const epb::PutRequest& request) {
  return Unary<epb::PutResponse>(
      "put", [&](Member& m, grpc::ClientContext* ctx, auto* out) { return m.kv->Put(ctx, request, out); });
}

StatusOr<epb::DeleteRangeResponse> EtcdClient::DeleteRange(const epb::DeleteRangeRequest& request) {
  return Unary<epb::DeleteRangeResponse>(
      "delete", [&](Member& m, grpc::ClientContext* ctx, auto* out) { return m.kv->DeleteRange(ctx, request, out); });
}

Status EtcdClient::Compact(int64_t revision) {
  epb::CompactionRequest request;
  request.set_revision(revision);
  return Unary<epb::CompactionResponse>("compact", [&](Member& m, grpc::ClientContext* ctx,
                                                       auto* out) { return m.kv->Compact(ctx, request, out); })
      .status();
}

StatusOr<epb::LeaseGrantResponse> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  epb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  auto response = Unary<epb::LeaseGrantResponse>("lease grant", [&](Member& m, grpc::ClientContext* ctx, auto* out) {
    return m.lease->LeaseGrant(ctx, request, out);
  });
  if (response.ok() && !response->error().empty()) return Unavailable("etcd lease grant: " + response->error());
  return response;
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  epb::LeaseRevokeRequest request;
  request.set_id(id);
  return Unary<epb::LeaseRevokeResponse>(
             "lease revoke",
             [&](Member& m, grpc::ClientContext* ctx, auto* out) { return m.lease->LeaseRevoke(ctx, request, out); })
      .status();
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
