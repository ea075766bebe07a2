// Page tokens of every List call (ListNodes, ListFaults, ListJobs,
// ListRecoveries): opaque to clients, so any bytes may come back. Anything must
// give a page or an InvalidArgument; from whatever page a token starts,
// following next_page_token ends, each page within page_size.
//
// Input: byte 0 picks the call, byte 1 the page size (0 = the default), the
// rest is the token.
#include "fuzz_util.h"
#include "query_state.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  (void)fuzz::QueryState::Get();
  return 0;
}

namespace {

// Follows tokens from `token` to the end; fails the run on a non-InvalidArgument
// error, an oversized page or a loop.
template <typename Req, typename Call, typename Count>
void Page(const StateView& state, int32_t page_size, std::string token, Call call, Count count, size_t total) {
  for (size_t pages = 0;; ++pages) {
    FUZZ_CHECK(pages <= total + 1);  // every page but the last holds at least one item
    Req req;
    req.set_page_size(page_size);
    req.set_page_token(token);
    auto resp = (state.*call)(req);
    if (!resp.ok()) {
      FUZZ_CHECK(resp.status().code() == StatusCode::kInvalidArgument);
      FUZZ_CHECK(pages == 0);  // tokens the server issued are always accepted
      return;
    }
    const int n = count(*resp);
    FUZZ_CHECK(n <= (page_size == 0 ? 100 : page_size));
    if (resp->next_page_token().empty()) return;
    FUZZ_CHECK(resp->next_page_token() != token);
    token = resp->next_page_token();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  fuzz::QueryState::Get().state().Read([&](const StateView& state) {
    const int32_t page_size = data[1] % 8;
    std::string token(fuzz::AsView(data + 2, size - 2));
    switch (data[0] % 4) {
      case 0:
        Page<v1::ListNodesRequest>(
            state, page_size, token, &ClusterState::ListNodes,
            [](const v1::ListNodesResponse& r) { return r.nodes_size(); }, state.node_count());
        break;
      case 1:
        Page<v1::ListFaultsRequest>(
            state, page_size, token, &ClusterState::ListFaults,
            [](const v1::ListFaultsResponse& r) { return r.faults_size(); }, 64);
        break;
      case 2:
        Page<v1::ListJobsRequest>(
            state, page_size, token, &ClusterState::ListJobs,
            [](const v1::ListJobsResponse& r) { return r.jobs_size(); }, state.job_count());
        break;
      case 3:
        Page<v1::ListRecoveriesRequest>(
            state, page_size, token, &ClusterState::ListRecoveries,
            [](const v1::ListRecoveriesResponse& r) { return r.recoveries_size(); }, state.recoveries().size());
        break;
    }
  });
  return 0;
}
