// ListNodes' label_selector (clusterd/state/cluster_state.cc), a string any client
// sends. Anything must give a page of nodes or an InvalidArgument, never a
// crash; the empty selector matches every node; a selector can only narrow.
#include "fuzz_util.h"
#include "query_state.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  (void)fuzz::QueryState::Get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::QueryState::Get().state().Read([&](const StateView& state) {
    v1::ListNodesRequest req;
    req.set_label_selector(std::string(fuzz::AsView(data, size)));
    auto resp = state.ListNodes(req);
    if (!resp.ok()) {
      FUZZ_CHECK(resp.status().code() == StatusCode::kInvalidArgument);
      return 0;
    }
    FUZZ_CHECK(resp->nodes_size() <= static_cast<int>(state.node_count()));
    if (size == 0) FUZZ_CHECK(resp->nodes_size() == static_cast<int>(state.node_count()));
    return 0;
  });
}
