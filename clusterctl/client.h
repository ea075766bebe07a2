// The gRPC calls clusterctl makes, behind one small class. Unary calls carry a
// deadline; list calls follow pagination; Watch hands each message to a
// callback until the callback says stop or the stream ends.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/admin.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"
#include "clusterd/v1/job.grpc.pb.h"
#include "clusterd/v1/mindcluster.grpc.pb.h"
#include "common/grpc/credentials.h"
#include "common/status.h"

namespace clusterctl {

namespace v1 = clusterd::v1;

class ClusterClient {
 public:
  // A client whose channel has the given transport security (TLS, client
  // certificate, bearer token; plaintext when none). Fails, naming the flag,
  // when `security` is invalid (ValidateClientSecurity).
  static clusterd::StatusOr<std::unique_ptr<ClusterClient>> Create(std::string address,
                                                                   std::chrono::milliseconds timeout,
                                                                   const clusterd::ClientSecurity& security);

  const std::string& address() const { return address_; }

  grpc::Status GetSummary(v1::GetSummaryResponse* out);
  // Every page: out holds all nodes, no next_page_token.
  grpc::Status ListAllNodes(v1::ListNodesRequest req, v1::ListNodesResponse* out);
  grpc::Status GetNode(const std::string& name, v1::GetNodeResponse* out);
  // Every page: out holds all faults, no next_page_token.
  grpc::Status ListAllFaults(v1::ListFaultsRequest req, v1::ListFaultsResponse* out);
  grpc::Status Report(const v1::ReportRequest& req, v1::ReportResponse* out);
  // Recoveries, newest first. ListAllRecoveries follows every page: out holds all.
  grpc::Status ListAllRecoveries(v1::ListRecoveriesRequest req, v1::ListRecoveriesResponse* out);
  // Validations (docs/validation.md), newest first: one page, or all of them.
  grpc::Status ListValidations(const v1::ListValidationsRequest& req, v1::ListValidationsResponse* out);
  grpc::Status ListAllValidations(v1::ListValidationsRequest req, v1::ListValidationsResponse* out);
  grpc::Status GetRecovery(const std::string& id, v1::GetRecoveryResponse* out);
  // Fault domains and incidents (docs/domains.md); the ListAll* follow every page.
  grpc::Status ListAllDomains(v1::ListDomainsRequest req, v1::ListDomainsResponse* out);
  grpc::Status ListAllIncidents(v1::ListIncidentsRequest req, v1::ListIncidentsResponse* out);
  grpc::Status GetIncident(const std::string& id, v1::GetIncidentResponse* out);
  // The pingmesh's loss matrix (docs/pingmesh.md), every page.
  grpc::Status ListAllLinks(v1::ListLinksRequest req, v1::ListLinksResponse* out);
  // One page of an incident's evidence (one member's bundle).
  grpc::Status GetIncidentEvidence(const v1::GetIncidentEvidenceRequest& req, v1::GetIncidentEvidenceResponse* out);

  // JobService. ListAllJobs follows every page: out holds all jobs.
  grpc::Status ListAllJobs(v1::ListJobsRequest req, v1::ListJobsResponse* out);
  grpc::Status GetJob(const std::string& id, v1::GetJobResponse* out);
  grpc::Status CreateJob(const v1::CreateJobRequest& req, v1::CreateJobResponse* out);
  grpc::Status DeleteJob(const std::string& id, v1::DeleteJobResponse* out);

  // AdminService.
  grpc::Status CordonNode(const v1::CordonNodeRequest& req, v1::CordonNodeResponse* out);
  grpc::Status UncordonNode(const v1::UncordonNodeRequest& req, v1::UncordonNodeResponse* out);
  grpc::Status ClearFault(const v1::ClearFaultRequest& req, v1::ClearFaultResponse* out);
  grpc::Status SetRecoveryMode(const v1::SetRecoveryModeRequest& req, v1::SetRecoveryModeResponse* out);
  grpc::Status GetAdminState(v1::GetAdminStateResponse* out);
  grpc::Status ReleaseDevice(const v1::ReleaseDeviceRequest& req, v1::ReleaseDeviceResponse* out);
  grpc::Status StartValidation(const v1::StartValidationRequest& req, v1::StartValidationResponse* out);
  grpc::Status SkipValidation(const v1::SkipValidationRequest& req, v1::SkipValidationResponse* out);
  grpc::Status HoldOut(const v1::HoldOutRequest& req, v1::HoldOutResponse* out);

  // MindClusterService: a job's MindCluster view, every page of its rank
  // table's servers in out (no next_page_token; rank_table as the first page
  // had it).
  grpc::Status GetMindClusterJob(const std::string& job_id, v1::GetMindClusterJobResponse* out);

  // Opens a Watch stream and calls on_message for each response. Returns when
  // the server ends the stream (its status) or on_message returns false (OK).
  grpc::Status Watch(const v1::WatchRequest& req, const std::function<bool(const v1::WatchResponse&)>& on_message);

 private:
  ClusterClient(std::string address, std::chrono::milliseconds timeout, std::shared_ptr<grpc::Channel> channel);

  void Prepare(grpc::ClientContext* ctx) const;

  std::string address_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ClusterService::Stub> cluster_;
  std::unique_ptr<v1::FaultService::Stub> fault_;
  std::unique_ptr<v1::JobService::Stub> job_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<v1::MindClusterService::Stub> mindcluster_;
};

// "NOT_FOUND" for grpc::StatusCode::NOT_FOUND.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace clusterctl
