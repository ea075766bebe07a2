#include "clusterctl/client.h"

namespace clusterctl {
namespace {

// Large pages: a list is one round trip for most clusters.
constexpr int32_t kPageSize = 1000;
// A pagination loop that never ends means a server bug; stop rather than spin.
constexpr int kMaxPages = 1'000'000;

// Follows next_page_token until the last page, appending each page's items
// (items(resp) returns the repeated field) to *out. call(ctx, req, resp) is one RPC.
template <typename Req, typename Resp, typename Prepare, typename Call, typename Items>
grpc::Status ListAll(const char* what, Req req, Resp* out, Prepare prepare, Call call, Items items) {
  out->Clear();
  req.set_page_size(kPageSize);
  req.clear_page_token();
  for (int page = 0; page < kMaxPages; ++page) {
    grpc::ClientContext ctx;
    prepare(&ctx);
    Resp resp;
    grpc::Status st = call(&ctx, req, &resp);
    if (!st.ok()) return st;
    for (auto& item : *items(&resp)) *items(out)->Add() = std::move(item);
    out->set_total_size(resp.total_size());
    if (resp.next_page_token().empty()) return grpc::Status::OK;
    req.set_page_token(resp.next_page_token());
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, std::string(what) + ": pagination did not end");
}

}  // namespace

clusterd::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Create(std::string address,
                                                                         std::chrono::milliseconds timeout,
                                                                         const clusterd::ClientSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = clusterd::CreateClientChannel(address, security, args);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ClusterClient>(new ClusterClient(std::move(address), timeout, std::move(*channel)));
}

ClusterClient::ClusterClient(std::string address, std::chrono::milliseconds timeout,
                             std::shared_ptr<grpc::Channel> channel)
    : address_(std::move(address)), timeout_(timeout), channel_(std::move(channel)) {
  cluster_ = v1::ClusterService::NewStub(channel_);
  fault_ = v1::FaultService::NewStub(channel_);
  job_ = v1::JobService::NewStub(channel_);
  admin_ = v1::AdminService::NewStub(channel_);
  mindcluster_ = v1::MindClusterService::NewStub(channel_);
}

void ClusterClient::Prepare(grpc::ClientContext* ctx) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
}

grpc::Status ClusterClient::GetSummary(v1::GetSummaryResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return cluster_->GetSummary(&ctx, v1::GetSummaryRequest(), out);
}

grpc::Status ClusterClient::ListAllNodes(v1::ListNodesRequest req, v1::ListNodesResponse* out) {
  return ListAll(
      "ListNodes", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListNodesRequest& r, v1::ListNodesResponse* resp) {
        return cluster_->ListNodes(ctx, r, resp);
      },
      [](v1::ListNodesResponse* resp) { return resp->mutable_nodes(); });
}

grpc::Status ClusterClient::GetNode(const std::string& name, v1::GetNodeResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetNodeRequest req;
  req.set_name(name);
  return cluster_->GetNode(&ctx, req, out);
}

grpc::Status ClusterClient::ListAllFaults(v1::ListFaultsRequest req, v1::ListFaultsResponse* out) {
  return ListAll(
      "ListFaults", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListFaultsRequest& r, v1::ListFaultsResponse* resp) {
        return cluster_->ListFaults(ctx, r, resp);
      },
      [](v1::ListFaultsResponse* resp) { return resp->mutable_faults(); });
}

grpc::Status ClusterClient::ListAllRecoveries(v1::ListRecoveriesRequest req, v1::ListRecoveriesResponse* out) {
  return ListAll(
      "ListRecoveries", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListRecoveriesRequest& r, v1::ListRecoveriesResponse* resp) {
        return cluster_->ListRecoveries(ctx, r, resp);
      },
      [](v1::ListRecoveriesResponse* resp) { return resp->mutable_recoveries(); });
}

grpc::Status ClusterClient::ListValidations(const v1::ListValidationsRequest& req, v1::ListValidationsResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return cluster_->ListValidations(&ctx, req, out);
}

grpc::Status ClusterClient::ListAllValidations(v1::ListValidationsRequest req, v1::ListValidationsResponse* out) {
  // As ListAll, without a total (the list has none).
  out->Clear();
  req.set_page_size(kPageSize);
  req.clear_page_token();
  for (int page = 0; page < kMaxPages; ++page) {
    v1::ListValidationsResponse resp;
    grpc::Status st = ListValidations(req, &resp);
    if (!st.ok()) return st;
    for (auto& v : *resp.mutable_validations()) *out->add_validations() = std::move(v);
    if (resp.next_page_token().empty()) return grpc::Status::OK;
    req.set_page_token(resp.next_page_token());
  }
  return grpc::Status(grpc::StatusCode::INTERNAL, "ListValidations: pagination did not end");
}

grpc::Status ClusterClient::GetRecovery(const std::string& id, v1::GetRecoveryResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetRecoveryRequest req;
  req.set_id(id);
  return cluster_->GetRecovery(&ctx, req, out);
}

grpc::Status ClusterClient::ListAllDomains(v1::ListDomainsRequest req, v1::ListDomainsResponse* out) {
  return ListAll(
      "ListDomains", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListDomainsRequest& r, v1::ListDomainsResponse* resp) {
        return cluster_->ListDomains(ctx, r, resp);
      },
      [](v1::ListDomainsResponse* resp) { return resp->mutable_domains(); });
}

grpc::Status ClusterClient::ListAllIncidents(v1::ListIncidentsRequest req, v1::ListIncidentsResponse* out) {
  return ListAll(
      "ListIncidents", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListIncidentsRequest& r, v1::ListIncidentsResponse* resp) {
        return cluster_->ListIncidents(ctx, r, resp);
      },
      [](v1::ListIncidentsResponse* resp) { return resp->mutable_incidents(); });
}

grpc::Status ClusterClient::ListAllLinks(v1::ListLinksRequest req, v1::ListLinksResponse* out) {
  return ListAll(
      "ListLinks", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListLinksRequest& r, v1::ListLinksResponse* resp) {
        return cluster_->ListLinks(ctx, r, resp);
      },
      [](v1::ListLinksResponse* resp) { return resp->mutable_links(); });
}

grpc::Status ClusterClient::GetIncident(const std::string& id, v1::GetIncidentResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetIncidentRequest req;
  req.set_id(id);
  return cluster_->GetIncident(&ctx, req, out);
}

grpc::Status ClusterClient::GetIncidentEvidence(const v1::GetIncidentEvidenceRequest& req,
                                                v1::GetIncidentEvidenceResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return cluster_->GetIncidentEvidence(&ctx, req, out);
}

grpc::Status ClusterClient::Report(const v1::ReportRequest& req, v1::ReportResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return fault_->Report(&ctx, req, out);
}

grpc::Status ClusterClient::ListAllJobs(v1::ListJobsRequest req, v1::ListJobsResponse* out) {
  return ListAll(
      "ListJobs", std::move(req), out, [this](grpc::ClientContext* ctx) { Prepare(ctx); },
      [this](grpc::ClientContext* ctx, const v1::ListJobsRequest& r, v1::ListJobsResponse* resp) {
        return job_->ListJobs(ctx, r, resp);
      },
      [](v1::ListJobsResponse* resp) { return resp->mutable_jobs(); });
}

grpc::Status ClusterClient::GetJob(const std::string& id, v1::GetJobResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::GetJobRequest req;
  req.set_id(id);
  return job_->GetJob(&ctx, req, out);
}

grpc::Status ClusterClient::GetMindClusterJob(const std::string& job_id, v1::GetMindClusterJobResponse* out) {
  v1::GetMindClusterJobRequest req;
  req.set_job_id(job_id);
  out->Clear();
  // A server that hands back a token it gave before would loop: stop there.
  for (size_t pages = 0;; ++pages) {
    grpc::ClientContext ctx;
    Prepare(&ctx);
    v1::GetMindClusterJobResponse page;
    if (auto st = mindcluster_->GetMindClusterJob(&ctx, req, &page); !st.ok()) return st;
    if (pages == 0) {
      *out = page;
      out->clear_servers();
    }
    for (auto& s : *page.mutable_servers()) *out->add_servers() = std::move(s);
    if (page.next_page_token().empty()) break;
    if (page.next_page_token() == req.page_token() || pages >= 100000) {
      return grpc::Status(grpc::StatusCode::INTERNAL, "GetMindClusterJob: the server's paging does not advance");
    }
    req.set_page_token(page.next_page_token());
  }
  out->clear_next_page_token();
  return grpc::Status::OK;
}

grpc::Status ClusterClient::CreateJob(const v1::CreateJobRequest& req, v1::CreateJobResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return job_->CreateJob(&ctx, req, out);
}

grpc::Status ClusterClient::DeleteJob(const std::string& id, v1::DeleteJobResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  v1::DeleteJobRequest req;
  req.set_id(id);
  return job_->DeleteJob(&ctx, req, out);
}

grpc::Status ClusterClient::CordonNode(const v1::CordonNodeRequest& req, v1::CordonNodeResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->CordonNode(&ctx, req, out);
}

grpc::Status ClusterClient::UncordonNode(const v1::UncordonNodeRequest& req, v1::UncordonNodeResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->UncordonNode(&ctx, req, out);
}

grpc::Status ClusterClient::ClearFault(const v1::ClearFaultRequest& req, v1::ClearFaultResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->ClearFault(&ctx, req, out);
}

grpc::Status ClusterClient::ReleaseDevice(const v1::ReleaseDeviceRequest& req, v1::ReleaseDeviceResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->ReleaseDevice(&ctx, req, out);
}

grpc::Status ClusterClient::StartValidation(const v1::StartValidationRequest& req, v1::StartValidationResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->StartValidation(&ctx, req, out);
}

grpc::Status ClusterClient::SkipValidation(const v1::SkipValidationRequest& req, v1::SkipValidationResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->SkipValidation(&ctx, req, out);
}

grpc::Status ClusterClient::HoldOut(const v1::HoldOutRequest& req, v1::HoldOutResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->HoldOut(&ctx, req, out);
}

grpc::Status ClusterClient::SetRecoveryMode(const v1::SetRecoveryModeRequest& req, v1::SetRecoveryModeResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->SetRecoveryMode(&ctx, req, out);
}

grpc::Status ClusterClient::GetAdminState(v1::GetAdminStateResponse* out) {
  grpc::ClientContext ctx;
  Prepare(&ctx);
  return admin_->GetAdminState(&ctx, v1::GetAdminStateRequest(), out);
}

grpc::Status ClusterClient::Watch(const v1::WatchRequest& req,
                                  const std::function<bool(const v1::WatchResponse&)>& on_message) {
  // No deadline: a watch runs until the server ends it or the caller stops.
  // Without wait_for_ready an unreachable server fails the call at once.
  grpc::ClientContext ctx;
  auto reader = cluster_->Watch(&ctx, req);
  v1::WatchResponse resp;
  bool stopped = false;
  while (reader->Read(&resp)) {
    if (!on_message(resp)) {
      stopped = true;
      ctx.TryCancel();
      break;
    }
  }
  if (stopped) {
    while (reader->Read(&resp)) {
    }
    reader->Finish();
    return grpc::Status::OK;
  }
  return reader->Finish();
}

const char* GrpcCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

}  // namespace clusterctl
