// clusterd.v1.MindClusterService (docs/mindcluster.md, "A job's MindCluster
// view"): one job's job.Job summary, rank table and NIC switches and stress
// tests in one read, for clusterctl and the status page (the HTTP API's
// GET /api/v1/mindcluster/jobs/<job> answers View too). Viewers and
// operators; the answer is bounded (mindcluster/job_view.h).
//
// Threads: gRPC's; View reads the summary feed and the Recover service
// under their own locks and builds the answer outside them.
#pragma once

#include "clusterd/mindcluster/grpc/job_feed.h"
#include "clusterd/mindcluster/grpc/recover_service.h"
#include "clusterd/edge/auth.h"
#include "clusterd/v1/mindcluster.grpc.pb.h"
#include "common/status.h"

namespace clusterd {

class MindClusterViewService final : public v1::MindClusterService::CallbackService {
 public:
  // Everything passed must outlive this; `recover` may be nullptr (no
  // operations shown).
  MindClusterViewService(const JobSummaryFeed* feed, const RecoverServiceImpl* recover, const Authenticator* auth)
      : feed_(feed), recover_(recover), auth_(auth) {}

  grpc::ServerUnaryReactor* GetMindClusterJob(grpc::CallbackServerContext* ctx, const v1::GetMindClusterJobRequest* req,
                                              v1::GetMindClusterJobResponse* resp) override;

  // The answer, without the caller's authorization (the HTTP API checks its own).
  StatusOr<v1::GetMindClusterJobResponse> View(const v1::GetMindClusterJobRequest& req) const;

 private:
  const JobSummaryFeed* feed_;
  const RecoverServiceImpl* recover_;
  const Authenticator* auth_;
};

}  // namespace clusterd
