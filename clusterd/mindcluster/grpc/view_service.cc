#include "clusterd/mindcluster/grpc/view_service.h"

#include <optional>
#include <utility>

#include "clusterd/mindcluster/job_view.h"

namespace clusterd {

StatusOr<v1::GetMindClusterJobResponse> MindClusterViewService::View(const v1::GetMindClusterJobRequest& req) const {
  if (req.job_id().empty()) return InvalidArgument("job_id is required");
  if (req.job_id().size() > 253) return InvalidArgument("job_id is longer than 253 bytes");
  // Copied out under the feed's lock; parsed and paged outside it.
  std::optional<mindcluster::JobSummaryEntry> entry;
  feed_->Read([&](const mindcluster::JobSummaryBook& book) {
    if (const auto* e = book.Find(req.job_id())) entry = *e;
  });
  std::optional<storage::v1::OmJobRecord> om;
  if (recover_ != nullptr) om = recover_->OmRecord(req.job_id());
  mindcluster::JobViewInput in;
  in.job_id = req.job_id();
  in.entry = entry ? &*entry : nullptr;
  in.om = om ? &*om : nullptr;
  in.page_size = req.page_size();
  in.page_token = req.page_token();
  return mindcluster::BuildJobView(in);
}

grpc::ServerUnaryReactor* MindClusterViewService::GetMindClusterJob(grpc::CallbackServerContext* ctx,
                                                                    const v1::GetMindClusterJobRequest* req,
                                                                    v1::GetMindClusterJobResponse* resp) {
  if (auto* refused = RefuseUnary(ctx, *auth_, "/clusterd.v1.MindClusterService/GetMindClusterJob")) return refused;
  auto view = View(*req);
  if (view.ok()) *resp = std::move(*view);
  return FinishUnary(ctx, view.status());
}

}  // namespace clusterd
