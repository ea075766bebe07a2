// MindCluster public faults: any bytes a client sends to
// /PubFault/SendPublicFault, parsed as the PublicFaultRequest the server
// sees. Planning must answer one of the reference codes, never crash, and
// every fault it plans must be within the rules (a valid id and code, a
// DNS-1123 node or a serial, a device in 0..31), and a refusal plans none.
#include "clusterd/mindcluster/pubfault.h"
#include "fuzz_util.h"

using namespace clusterd;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ::PublicFaultRequest req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const PubFaultCodeTable table = PubFaultCodeTable::Default();
  PubFaultPlan plan;
  PubFaultVerdict v = PlanPublicFaults(req, table, PubFaultOptions(), &plan);
  FUZZ_CHECK(v.code == kPubFaultOk || v.code == kPubFaultInvalid || v.code == kPubFaultRefused);
  FUZZ_CHECK(v.info.size() <= 4096);
  if (v.code != kPubFaultOk) {
    FUZZ_CHECK(!v.info.empty());
    return 0;
  }
  FUZZ_CHECK(!plan.faults.empty());
  FUZZ_CHECK(plan.reporter == "pubfault/" + req.resource());
  FUZZ_CHECK(plan.faults.size() <= PubFaultOptions().max_faults);  // the size is checked first
  for (const auto& p : plan.faults) {
    FUZZ_CHECK(p.device <= 31);
    FUZZ_CHECK(p.fault_id.size() >= 8 && p.fault_id.size() <= 128);
    FUZZ_CHECK(table.Find(p.code).has_value());
    FUZZ_CHECK(p.node.empty() != p.node_sn.empty());
    for (char c : p.node) FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.');
  }
  return 0;
}
