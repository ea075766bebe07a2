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

void CompareCreateRevision(epb::TxnRequest* txn, const std::string& key, int64_t revision) {
  auto* cmp = txn->add_compare();
  cmp->set_key(key);
  cmp->set_target(epb::Compare::CREATE);
  cmp->set_result(epb::Compare::EQUAL);
  cmp->set_create_revision(revision);
}

EtcdClient::EtcdClient(Options options) : options_(std::move(options)) {
  const bool tls = !options_.endpoints.empty() && options_.endpoints.front().rfind("https://", 0) == 0;
  credentials_ = grpc::InsecureChannelCredentials();
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.ca_pem;
    ssl.pem_cert_chain = options_.cert_pem;
    ssl.pem_private_key = options_.key_pem;
    credentials_ = grpc::SslCredentials(ssl);
  }
  for (const std::string& e : options_.endpoints) {
    Member m;
    m.target = e.rfind("https://", 0) == 0 ? e.substr(8) : e.rfind("http://", 0) == 0 ? e.substr(7) : e;
    m.connection = Connect(m.target);
    m.replaced = std::chrono::steady_clock::now();
    members_.push_back(std::move(m));
  }
}

std::shared_ptr<const EtcdClient::Connection> EtcdClient::Connect(const std::string& target) const {
  grpc::ChannelArguments args;
  // A dead member is noticed within seconds, not at the TCP timeout.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, 64 << 20);
  // Its own subchannels: a replacement must not share the old channel's
  // connection through gRPC's global subchannel pool.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto c = std::make_shared<Connection>();
  c->channel = grpc::CreateCustomChannel(target, credentials_, args);
  c->kv = epb::KV::NewStub(c->channel);
  c->lease = epb::Lease::NewStub(c->channel);
  return c;
}

std::string EtcdClient::current_endpoint() const {
  if (members_.empty()) return "";
  return members_[current_.load(std::memory_order_relaxed) % members_.size()].target;
}

std::shared_ptr<const EtcdClient::Connection> EtcdClient::Pick(size_t* index) {
  *index = current_.load(std::memory_order_relaxed) % members_.size();
  std::lock_guard lock(mu_);
  return members_[*index].connection;
}

void EtcdClient::SetDeadline(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + options_.timeout);
}

Status EtcdClient::Check(const grpc::Status& st, size_t index, const Connection* used, const char* what) {
  Member& m = members_[index];
  const bool transport_failure = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
                                 st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                                 st.error_code() == grpc::StatusCode::CANCELLED;
  {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (m.connection.get() != used) {
      // Replaced since this call started: its outcome says nothing of the new channel.
    } else if (!transport_failure) {
      m.failures = 0;  // the member answered (a refusal too)
    } else if (++m.failures >= options_.reconnect_after_failures && now - m.replaced >= options_.reconnect_interval) {
      m.connection = Connect(m.target);
      m.failures = 0;
      m.replaced = now;
      reconnects_.fetch_add(1, std::memory_order_relaxed);
      GetLogger("ha")->warn("etcd {}: {} calls failed in a row ({}); reconnecting on a new channel", m.target,
                            options_.reconnect_after_failures, st.error_message());
    }
  }
  if (st.ok()) return Status::Ok();
  const std::string msg = std::string("etcd ") + what + " at " + m.target + ": " + st.error_message();
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
  std::shared_ptr<const Connection> c = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  Response response;
  CLUSTERD_RETURN_IF_ERROR(Check(call(*c, &ctx, &response), i, c.get(), what));
  return response;
}

StatusOr<epb::RangeResponse> EtcdClient::Range(const epb::RangeRequest& request) {
  return Unary<epb::RangeResponse>("range", [&](const Connection& m, grpc::ClientContext* ctx, auto* out) {
    return m.kv->Range(ctx, request, out);
  });
}

StatusOr<epb::TxnResponse> EtcdClient::Txn(const epb::TxnRequest& request) {
  return Unary<epb::TxnResponse>(
      "txn", [&](const Connection& m, grpc::ClientContext* ctx, auto* out) { return m.kv->Txn(ctx, request, out); });
}

StatusOr<epb::PutResponse> EtcdClient::Put(const epb::PutRequest& request) {
  return Unary<epb::PutResponse>(
      "put", [&](const Connection& m, grpc::ClientContext* ctx, auto* out) { return m.kv->Put(ctx, request, out); });
}

StatusOr<epb::DeleteRangeResponse> EtcdClient::DeleteRange(const epb::DeleteRangeRequest& request) {
  return Unary<epb::DeleteRangeResponse>("delete", [&](const Connection& m, grpc::ClientContext* ctx, auto* out) {
    return m.kv->DeleteRange(ctx, request, out);
  });
}

Status EtcdClient::Compact(int64_t revision) {
  epb::CompactionRequest request;
  request.set_revision(revision);
  return Unary<epb::CompactionResponse>("compact", [&](const Connection& m, grpc::ClientContext* ctx,
                                                       auto* out) { return m.kv->Compact(ctx, request, out); })
      .status();
}

StatusOr<LeaseKv::Lease> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  epb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  auto response = Unary<epb::LeaseGrantResponse>(
      "lease grant",
      [&](const Connection& m, grpc::ClientContext* ctx, auto* out) { return m.lease->LeaseGrant(ctx, request, out); });
  if (!response.ok()) return response.status();
  if (!response->error().empty()) return Unavailable("etcd lease grant: " + response->error());
  return Lease{response->id(), response->ttl()};
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  epb::LeaseRevokeRequest request;
  request.set_id(id);
  return Unary<epb::LeaseRevokeResponse>("lease revoke",
                                         [&](const Connection& m, grpc::ClientContext* ctx, auto* out) {
                                           return m.lease->LeaseRevoke(ctx, request, out);
                                         })
      .status();
}

StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  size_t i;
  std::shared_ptr<const Connection> c = Pick(&i);
  grpc::ClientContext ctx;
  SetDeadline(&ctx);
  auto stream = c->lease->LeaseKeepAlive(&ctx);
  epb::LeaseKeepAliveRequest request;
  request.set_id(id);
  epb::LeaseKeepAliveResponse response;
  bool got = stream->Write(request) && stream->Read(&response);
  stream->WritesDone();
  if (got) {
    ctx.TryCancel();  // the answer is in; do not wait for the server to close
    stream->Finish();
    (void)Check(grpc::Status::OK, i, c.get(), "lease keep-alive");
    return response.ttl();
  }
  CLUSTERD_RETURN_IF_ERROR(Check(stream->Finish(), i, c.get(), "lease keep-alive"));
  return Unavailable("etcd lease keep-alive at " + members_[i].target + ": the stream ended without an answer");
}

namespace {

LeaseKv::KeyValue FromEtcd(const mvccpb::KeyValue& kv) { return {kv.value(), kv.lease(), kv.create_revision()}; }

}  // namespace

StatusOr<LeaseKv::Claim> EtcdClient::CreateIfAbsent(const std::string& key, const std::string& value, int64_t lease) {
  epb::TxnRequest txn;
  CompareCreateRevision(&txn, key, 0);
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(key);
  auto answer = Txn(txn);
  if (!answer.ok()) return answer.status();
  Claim claim;
  if (answer->succeeded()) {
    // The transaction's revision is the one the put created the key at.
    claim.won = true;
    claim.holder = KeyValue{value, lease, answer->header().revision()};
  } else if (answer->responses_size() > 0 && answer->responses(0).response_range().kvs_size() > 0) {
    claim.holder = FromEtcd(answer->responses(0).response_range().kvs(0));
  }
  return claim;
}

StatusOr<std::optional<LeaseKv::KeyValue>> EtcdClient::Get(const std::string& key) {
  epb::RangeRequest range;
  range.set_key(key);
  range.set_serializable(true);
  auto answer = Range(range);
  if (!answer.ok()) return answer.status();
  if (answer->kvs_size() == 0) return std::optional<KeyValue>();
  return std::optional<KeyValue>(FromEtcd(answer->kvs(0)));
}

}  // namespace clusterd::ha
