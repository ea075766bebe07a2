#include "clusterd/mindcluster/om.h"

#include <algorithm>
#include <charconv>
#include <map>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/taskd.h"

namespace clusterd::mindcluster {
namespace {

// Text from a client, cut for a message (it is never echoed whole).
std::string Cut(std::string_view s, size_t n = 64) {
  std::string out(s.substr(0, n));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

std::optional<uint32_t> ParseU32(std::string_view s) {
  uint32_t v = 0;
  if (s.empty() || s.size() > 10) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

OmCheck Refuse(int32_t code, std::string info) {
  OmCheck c;
  c.code = code;
  c.info = std::move(info);
  return c;
}

// The job's own checks, the reference's first: known, TaskD registered,
// running (a recovery under way: 411).
std::optional<OmCheck> CheckJob(const std::string& id, const v1::Job* job, bool registered) {
  if (job == nullptr) return Refuse(kOmParamInvalid, "job:" + Cut(id, 253) + " not exist");
  if (!registered) return Refuse(kOmParamInvalid, "job:" + id + " is not registered");
  if (job->state() == v1::JOB_STATE_RECOVERING) {
    return Refuse(kOmIsRunning, "jobId=" + id + " om is running, or job recovering");
  }
  if (job->state() != v1::JOB_STATE_RUNNING) return Refuse(kOmParamInvalid, "job:" + id + " is not running");
  return std::nullopt;
}

// node -> placements, in rank order.
std::map<std::string, std::vector<const v1::RankPlacement*>> ByNode(const v1::Job& job) {
  std::map<std::string, std::vector<const v1::RankPlacement*>> out;
  for (const auto& p : job.placement()) out[p.node()].push_back(&p);
  for (auto& [node, ps] : out) {
    std::sort(ps.begin(), ps.end(), [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
  }
  return out;
}

std::optional<std::string> CheckOps(const google::protobuf::RepeatedField<int64_t>& ops, std::string_view where) {
  std::set<int64_t> seen;
  for (int64_t op : ops) {
    if (op != kStressOpAic && op != kStressOpP2p) {
      return "op:" + std::to_string(op) + " not exist in support operation:[0 1]";
    }
    seen.insert(op);
  }
  if (seen.size() != static_cast<size_t>(ops.size())) {
    return "node:" + Cut(where) + " stress test ops should not repeat";
  }
  return std::nullopt;
}

}  // namespace

OmCheck CheckSwitchNics(const ::SwitchNics& req, const v1::Job* job, bool registered) {
  if (auto refused = CheckJob(req.jobid(), job, registered)) return *refused;
  const auto nodes = ByNode(*job);
  OmCheck out;
  storage::v1::OmOperation& op = out.op;
  op.set_kind(std::string(kOmNicSwitch));
  op.set_job_id(req.jobid());
  if (req.nicops().empty()) return Refuse(kOmParamInvalid, "nicOps is empty");
  // In node order (the map's is unordered): the same request, the same ranks.
  std::map<std::string, const ::DeviceList*> sorted;
  for (const auto& [node, devs] : req.nicops()) sorted.emplace(node, &devs);
  size_t entries = 0;
  for (const auto& [node, devs] : sorted) {
    auto it = nodes.find(node);
    if (it == nodes.end()) return Refuse(kOmParamInvalid, "node:" + Cut(node) + " not exist in job:" + req.jobid());
    if (devs->dev_size() != devs->op_size()) return Refuse(kOmParamInvalid, "dev and op length is not equal");
    if (devs->dev_size() == 0) return Refuse(kOmParamInvalid, "dev or op is empty");
    entries += static_cast<size_t>(devs->dev_size());
    if (entries > kOmMaxEntries) return Refuse(kOmParamInvalid, "more than 131072 devs");
    for (int i = 0; i < devs->dev_size(); ++i) {
      const auto id = ParseU32(devs->dev(i));
      const v1::RankPlacement* found = nullptr;
      for (const auto* p : it->second) {
        if (id && p->has_device_id() && p->device_id() == *id) found = p;
      }
      if (found == nullptr) {
        return Refuse(kOmParamInvalid, "device:" + Cut(devs->dev(i)) + " not exist in node:" + node);
      }
      op.add_ranks(std::to_string(found->rank()));
      op.add_ops(devs->op(i));
    }
  }
  return out;
}

OmCheck CheckStressTest(const ::StressTestParam& req, const v1::Job* job, bool registered) {
  if (auto refused = CheckJob(req.jobid(), job, registered)) return *refused;
  const auto nodes = ByNode(*job);
  OmCheck out;
  storage::v1::OmOperation& op = out.op;
  op.set_kind(std::string(kOmStressTest));
  op.set_job_id(req.jobid());
  auto add = [&](const std::vector<const v1::RankPlacement*>& ranks,
                 const google::protobuf::RepeatedField<int64_t>& ops) {
    for (const auto* p : ranks) {
      auto& entry = (*op.mutable_stress())[std::to_string(p->rank())];
      *entry.mutable_ops() = ops;
    }
  };
  if (!req.allnodesops().empty()) {
    if (auto bad = CheckOps(req.allnodesops(), "AllNodes")) return Refuse(kOmParamInvalid, *bad);
    for (const auto& [node, ranks] : nodes) add(ranks, req.allnodesops());
    return out;
  }
  if (req.stressparam().empty()) return Refuse(kOmParamInvalid, "stress test node is nil");
  std::map<std::string, const ::StressOpList*> sorted;
  for (const auto& [node, ops] : req.stressparam()) sorted.emplace(node, &ops);
  for (const auto& [node, ops] : sorted) {
    if (ops->ops().empty()) return Refuse(kOmParamInvalid, "node:" + Cut(node) + " stress test ops is 0");
    auto it = nodes.find(node);
    if (it == nodes.end()) return Refuse(kOmParamInvalid, "node:" + Cut(node) + " not exist in job:" + req.jobid());
    if (auto bad = CheckOps(ops->ops(), node)) return Refuse(kOmParamInvalid, *bad);
    add(it->second, ops->ops());
  }
  return out;
}

OmFlow::OmFlow(storage::v1::OmJobRecord record, int64_t wait_ms) : record_(std::move(record)), wait_ms_(wait_ms) {}

std::string OmFlow::Token() const { return busy() ? op().id() + "/" + op().stage() : std::string(); }

::ProcessManageSignal OmFlow::Signal(std::string_view type, std::string_view action, std::string_view stage) const {
  ::ProcessManageSignal s;
  s.set_uuid(op().id() + "/" + std::string(stage));
  s.set_jobid(op().job_id());
  s.set_signaltype(std::string(type));
  s.add_actions(std::string(action));
  return s;
}

::ProcessManageSignal OmFlow::PauseSignal() const {
  ::ProcessManageSignal s = Signal("stopTrain", kActionPauseTrain, "pause");
  if (!IsNic()) s.set_timeout(kStressTestPauseTimeoutS);
  return s;
}

::ProcessManageSignal OmFlow::ContinueSignal() const {
  ::ProcessManageSignal s = Signal("changeStrategy", "change_strategy", "continue");
  s.set_changestrategy(std::string(kStrategyContinue));
  return s;
}

void OmFlow::Notify(OmOutput* out) const {
  if (IsNic()) {
    ::SwitchRankList l;
    *l.mutable_rankid() = op().ranks();
    *l.mutable_op() = op().ops();
    l.set_jobid(op().job_id());
    out->switch_ranks = std::move(l);
  } else {
    ::StressTestRankParams p;
    for (const auto& [rank, ops] : op().stress()) *(*p.mutable_stressparam())[rank].mutable_ops() = ops.ops();
    p.set_jobid(op().job_id());
    out->stress_ranks = std::move(p);
  }
}

void OmFlow::Enter(std::string_view stage, int64_t now_ms, OmOutput* out) {
  op().set_stage(std::string(stage));
  op().set_deadline_unix_ms(now_ms + wait_ms_);
  out->changed = true;
  out->expire_after_ms = std::max<int64_t>(wait_ms_, 1);
  out->expire_token = Token();
}

void OmFlow::Say(std::string msg, OmOutput* out) {
  op().add_messages(msg);
  out->messages.push_back(std::move(msg));
  out->changed = true;
}

std::vector<std::string> OmFlow::Ranks() const {
  std::vector<std::string> out;
  if (IsNic()) {
    out.assign(op().ranks().begin(), op().ranks().end());
  } else {
    for (const auto& [rank, ops] : op().stress()) out.push_back(rank);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void OmFlow::Finish(bool ok, std::string msg, bool raise_ranks, const v1::Job* job, int64_t now_ms, OmOutput* out) {
  if (raise_ranks && job != nullptr) {
    std::map<uint32_t, const v1::RankPlacement*> placed;
    for (const auto& p : job->placement()) placed.emplace(p.rank(), &p);
    for (const std::string& rank : Ranks()) {
      const auto r = ParseU32(rank);
      auto it = r ? placed.find(*r) : placed.end();
      if (it == placed.end() || out->faults.size() >= kMaxProcessFaultRanks) continue;
      v1::ReportRequest f;
      f.set_reporter(std::string(kTaskdReporter));
      f.set_id(job->id() + "/rank/" + rank);
      f.set_node(it->second->node());
      if (it->second->has_device_id()) f.set_device_id(it->second->device_id());
      f.set_code(std::string(kCodeOmFailed));
      f.set_level(v1::FAULT_LEVEL_RESTART_BUSINESS);
      f.set_action(v1::TRANSITION_ACTION_RAISE);
      f.set_message("the " + op().kind() + " " + op().id() + " failed with the job paused: " + msg.substr(0, 256));
      out->faults.push_back(std::move(f));
    }
  }
  // A stress test that ends without its result: the mark goes too.
  if (!IsNic() && op().stage() == kOmAwaitResult) out->reset = ResetOp::kClear;
  Say(std::move(msg), out);
  op().set_stage(std::string(ok ? kOmSucceeded : kOmFailed));
  op().set_finished_unix_ms(now_ms);
  op().clear_deadline_unix_ms();
  *record_.add_history() = std::move(op());
  record_.clear_current();
  while (record_.history_size() > kOmHistory) record_.mutable_history()->DeleteSubrange(0, 1);
  out->finished = true;
  out->changed = true;
  out->expire_after_ms = 0;
  out->expire_token.clear();
}

OmOutput OmFlow::Start(storage::v1::OmOperation op_in, const std::string& actor, int64_t now_ms) {
  OmOutput out;
  if (busy()) {
    out.code = kOmIsRunning;
    return out;
  }
  const uint64_t seq = record_.next_seq() + 1;
  record_.set_next_seq(seq);
  record_.set_job_id(op_in.job_id());
  op_in.set_id(op_in.job_id() + "/" + op_in.kind() + "/" + std::to_string(seq));
  op_in.set_actor(actor);
  op_in.set_started_unix_ms(now_ms);
  *record_.mutable_current() = std::move(op_in);
  Enter(kOmAwaitPause, now_ms, &out);
  out.signals.push_back(PauseSignal());
  out.info = IsNic() ? "switching operation was successfully distributed"
                     : "stress test operation was successfully distributed";
  return out;
}

OmOutput OmFlow::OnStopComplete(const ::StopCompleteRequest& req, const v1::Job& job, int64_t now_ms) {
  OmOutput out;
  if (!TakesStopComplete()) return out;
  if (req.status().code() == kRecoverClientError) {
    // MindIO could not pause: the job is stuck, ClusterD recovers it (the
    // reference kills it).
    Finish(false, "om failed, pause train failed", true, &job, now_ms, &out);
    return out;
  }
  Enter(kOmAwaitResult, now_ms, &out);
  if (!IsNic()) {
    // The reference tells the agents to hold off restarting workers while
    // the chips are under load.
    out.signals.push_back(Signal(kSignalPauseStartAgent, kActionPauseStartAgent, "pause-start-agent"));
    out.reset = ResetOp::kFlushing;
  }
  Notify(&out);
  return out;
}

OmOutput OmFlow::OnSwitchResult(const ::SwitchResult& req, const v1::Job& job, int64_t now_ms) {
  OmOutput out;
  if (!busy() || !IsNic() || op().stage() != kOmAwaitResult) {
    out.code = kRecoverClientError;
    out.info = "job " + Cut(req.jobid(), 253) + " is not switching NICs";
    return out;
  }
  out.info = "reply success";
  if (!req.result()) {
    Finish(false, "switch nic failed, switch nic failed", true, &job, now_ms, &out);
    return out;
  }
  Enter(kOmAwaitContinue, now_ms, &out);
  out.signals.push_back(ContinueSignal());
  return out;
}

OmOutput OmFlow::OnStressResult(const ::StressTestResult& req, const v1::Job& job, int64_t now_ms) {
  OmOutput out;
  if (!busy() || IsNic() || op().stage() != kOmAwaitResult) {
    out.code = kRecoverClientError;
    out.info = "job " + Cut(req.jobid(), 253) + " is not running a stress test";
    return out;
  }
  out.info = "reply success";
  out.signals.push_back(Signal(kSignalContinueStartAgent, kActionContinueStartAgent, "continue-start-agent"));
  out.reset = ResetOp::kClear;
  std::map<uint32_t, const v1::RankPlacement*> placed;
  for (const auto& p : job.placement()) placed.emplace(p.rank(), &p);
  // node -> device -> the chip's results, as the reference reports them;
  // and the worst outcome per chip.
  nlohmann::json result = nlohmann::json::object();
  struct Chip {
    std::string node;
    uint32_t device = 0;
    bool any_device = true;
    v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
    std::string code, why;
  };
  std::map<std::pair<std::string, uint32_t>, Chip> chips;
  std::map<std::string, const ::StressTestRankResult*> sorted;
  for (const auto& [rank, res] : req.stressresult()) sorted.emplace(rank, &res);
  for (const auto& [rank, res] : sorted) {
    const auto r = ParseU32(rank);
    auto it = r ? placed.find(*r) : placed.end();
    if (it == placed.end()) continue;  // not a rank of the job: nothing to blame
    const v1::RankPlacement& p = *it->second;
    const std::string dev = p.has_device_id() ? std::to_string(p.device_id()) : "rank-" + rank;
    nlohmann::json ops = nlohmann::json::object();
    std::map<std::string, const ::StressTestOpResult*> by_op;
    for (const auto& [o, v] : res->rankresult()) by_op.emplace(o, &v);
    for (const auto& [o, v] : by_op) {
      ops[Cut(o, 16)] = {{"code", Cut(v->code(), 16)}, {"result", Cut(v->result(), 256)}};
      v1::FaultLevel level = v1::FAULT_LEVEL_UNSPECIFIED;
      std::string code;
      if (v->code() == kStressFoundFault) {
        level = v1::FAULT_LEVEL_SEPARATE;
        code = kCodeStressTestFault;
      } else if (v->code() == kStressTimedOut) {
        level = v1::FAULT_LEVEL_RESTART_NPU;
        code = kCodeStressTestTimeout;
      } else if (v->code() == kStressVoltageNotRecovered) {
        level = v1::FAULT_LEVEL_RESTART_NPU;
        code = kCodeStressTestVoltage;
      }
      if (level == v1::FAULT_LEVEL_UNSPECIFIED || !p.has_device_id()) continue;
      Chip& c = chips[{p.node(), p.device_id()}];
      c.node = p.node();
      c.device = p.device_id();
      if (level > c.level) {
        c.level = level;
        c.code = code;
        c.why = "the stress test's " +
                std::string(o == "1"   ? "P2P"
                            : o == "0" ? "AIC"
                                       : "operation " + Cut(o, 16)) +
                " on rank " + rank + " answered code " + v->code() + ": " + Cut(v->result(), 256);
      }
    }
    result[p.node()][dev] = {{"rankResult", ops}};
  }
  const std::string text = result.dump();
  std::string taken;
  for (const auto& [key, c] : chips) {
    v1::ReportRequest f;
    f.set_reporter(std::string(kStressTestReporter));
    f.set_id(c.node + "/" + std::to_string(c.device));
    f.set_node(c.node);
    f.set_device_id(c.device);
    f.set_code(c.code);
    f.set_level(c.level);
    f.set_action(v1::TRANSITION_ACTION_RAISE);
    f.set_message("job " + job.id() + ", " + op().id() + ": " + c.why);
    out.faults.push_back(std::move(f));
    taken += (taken.empty() ? "" : ",") + c.node + "/" + std::to_string(c.device) + " " +
             (c.level == v1::FAULT_LEVEL_SEPARATE ? "SEPARATE" : "RESTART_NPU");
  }
  if (!chips.empty()) {
    // The faults start the job's recovery, which stops it (no continue).
    Finish(false, "stress test find fault, chips " + taken + ", result:" + text, false, &job, now_ms, &out);
    return out;
  }
  if (op().fault_reported()) {
    Finish(false, "stress test failed, TaskD reported a fault while it ran, result:" + text, true, &job, now_ms, &out);
    return out;
  }
  Say("stress test result:" + text, &out);
  Enter(kOmAwaitContinue, now_ms, &out);
  out.signals.push_back(ContinueSignal());
  return out;
}

OmOutput OmFlow::OnRecoverStatus(const ::RecoverStatusRequest& req, const v1::Job& job, int64_t now_ms) {
  OmOutput out;
  if (!TakesRecoverStatus()) return out;
  const int32_t code = req.status().code();
  if (op().stage() == kOmAwaitResult) {
    // MindIO reports an error while the NICs switch or the chips are under
    // load (its unrecoverable-retry code).
    if (code != kRecoverRetryUnrecoverable) return out;
    if (IsNic()) {
      Finish(false, "switch nic failed, report error when switching nic", true, &job, now_ms, &out);
    } else if (!op().fault_reported()) {
      op().set_fault_reported(true);
      Say("recv fault, when stressing test", &out);
    }
    return out;
  }
  if (code != kRecoverOk) {
    Finish(false,
           std::string(IsNic() ? "switch nic" : "stress test") + " failed, continue train failed (code " +
               std::to_string(code) + ")",
           true, &job, now_ms, &out);
    return out;
  }
  Finish(true, IsNic() ? "switch nic finish" : "stress test finish", false, &job, now_ms, &out);
  return out;
}

OmOutput OmFlow::Expire(std::string_view token, const v1::Job& job, int64_t now_ms) {
  OmOutput out;
  if (!busy() || token != Token()) return out;
  const std::string what = IsNic() ? "switch nic" : "stress test";
  const std::string stage = op().stage() == kOmAwaitPause    ? "pause train"
                            : op().stage() == kOmAwaitResult ? "report " + what + " result"
                                                             : "continue train";
  Finish(false, what + " failed, " + stage + " timeout", true, &job, now_ms, &out);
  return out;
}

OmOutput OmFlow::Abandon(const std::string& why, int64_t now_ms) {
  OmOutput out;
  if (!busy()) return out;
  Finish(false, std::string(IsNic() ? "switch nic" : "stress test") + " failed, " + why, false, nullptr, now_ms, &out);
  return out;
}

OmOutput OmFlow::Resend(int64_t now_ms) const {
  OmOutput out;
  if (!busy()) return out;
  const std::string& stage = op().stage();
  if (stage == kOmAwaitPause) out.signals.push_back(PauseSignal());
  if (stage == kOmAwaitContinue) out.signals.push_back(ContinueSignal());
  out.expire_after_ms = std::max<int64_t>(op().deadline_unix_ms() - now_ms, 1);
  out.expire_token = Token();
  return out;
}

OmOutput OmFlow::ResendNotify() const {
  OmOutput out;
  if (busy() && op().stage() == kOmAwaitResult) Notify(&out);
  return out;
}

}  // namespace clusterd::mindcluster
