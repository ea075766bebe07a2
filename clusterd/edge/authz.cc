#include "clusterd/edge/authz.h"

namespace clusterd {
namespace {

constexpr RoleMask kViewers = RoleBit(Role::kViewer) | RoleBit(Role::kOperator);
constexpr RoleMask kOperators = RoleBit(Role::kOperator);

}  // namespace

const std::vector<MethodRule>& MethodRules() {
  static const std::vector<MethodRule> rules = {
      // Queries and history: viewers and operators.
      {"/clusterd.v1.ClusterService/GetSummary", kViewers},
      {"/clusterd.v1.ClusterService/ListNodes", kViewers},
      {"/clusterd.v1.ClusterService/GetNode", kViewers},
      {"/clusterd.v1.ClusterService/ListFaults", kViewers},
      {"/clusterd.v1.ClusterService/Watch", kViewers},
      {"/clusterd.v1.ClusterService/ListRecoveries", kViewers},
      {"/clusterd.v1.ClusterService/GetRecovery", kViewers},
      {"/clusterd.v1.ClusterService/ListDomains", kViewers},
      {"/clusterd.v1.ClusterService/GetIncident", kViewers},
      {"/clusterd.v1.ClusterService/ListIncidents", kViewers},
      {"/clusterd.v1.ClusterService/ListLinks", kViewers},
      // Incident evidence holds kernel logs and tool output: operators.
      {"/clusterd.v1.ClusterService/GetIncidentEvidence", kOperators},
      {"/clusterd.v1.JobService/GetJob", kViewers},
      {"/clusterd.v1.JobService/ListJobs", kViewers},
      {"/clusterd.v1.AdminService/GetAdminState", kViewers},
      // MindCluster's job-fault subscriptions (MindIE's controller).
      {"/fault.Fault/Register", kViewers},
      {"/fault.Fault/SubscribeFaultMsgSignal", kViewers},
      {"/fault.Fault/GetFaultMsgSignal", kViewers},
      // MindCluster's job summaries (faultdiag-online) and rank tables (MindIE).
      {"/job.Job/Register", kViewers},
      {"/job.Job/SubscribeJobSummarySignal", kViewers},
      {"/job.Job/SubscribeJobSummarySignalList", kViewers},
      {"/config.Config/Register", kViewers},
      {"/config.Config/SubscribeRankTable", kViewers},
      // A job's MindCluster view (clusterctl, the status page).
      {"/clusterd.v1.MindClusterService/GetMindClusterJob", kViewers},
      // External fault sources, each under its own reporter name.
      {"/clusterd.v1.FaultService/Report", RoleBit(Role::kReporter)},
      // MindCluster's public faults, each resource under its own name.
      {"/PubFault/SendPublicFault", RoleBit(Role::kReporter)},
      // Changes to the cluster's state: operators.
      {"/clusterd.v1.AdminService/CordonNode", kOperators},
      {"/clusterd.v1.AdminService/UncordonNode", kOperators},
      {"/clusterd.v1.AdminService/ClearFault", kOperators},
      {"/clusterd.v1.AdminService/ReleaseDevice", kOperators},
      // Return to service (docs/validation.md).
      {"/clusterd.v1.AdminService/StartValidation", kOperators},
      {"/clusterd.v1.AdminService/SkipValidation", kOperators},
      {"/clusterd.v1.AdminService/HoldOut", kOperators},
      {"/clusterd.v1.ClusterService/ListValidations", kViewers},
      {"/clusterd.v1.JobService/CreateJob", kOperators},
      {"/clusterd.v1.JobService/UpdateJob", kOperators},
      {"/clusterd.v1.JobService/DeleteJob", kOperators},
      // Pause and dry-run: admins only.
      {"/clusterd.v1.AdminService/SetRecoveryMode", 0},
      // Scoped channels: a job's recovery agent, a node's agent.
      {"/clusterd.v1.JobService/Attach", RoleBit(Role::kJobAgent)},
      {"/clusterd.v1.NodeAgentService/Connect", RoleBit(Role::kAgent)},
      // MindCluster's Recover service: TaskD, a job's recovery agent, for its
      // own job; an operator asks for a job's NIC switch or stress test and
      // follows its result (viewers may follow it too).
      {"/Recover/Init", RoleBit(Role::kJobAgent)},
      {"/Recover/Register", RoleBit(Role::kJobAgent)},
      {"/Recover/HealthCheck", RoleBit(Role::kJobAgent)},
      {"/Recover/SubscribeProcessManageSignal", RoleBit(Role::kJobAgent)},
      {"/Recover/ReportStopComplete", RoleBit(Role::kJobAgent)},
      {"/Recover/ReportRecoverStrategy", RoleBit(Role::kJobAgent)},
      {"/Recover/ReportRecoverStatus", RoleBit(Role::kJobAgent)},
      {"/Recover/ReportProcessFault", RoleBit(Role::kJobAgent)},
      {"/Recover/SwitchNicTrack", kOperators},
      {"/Recover/SubscribeSwitchNicSignal", kViewers},
      {"/Recover/SubscribeNotifySwitch", RoleBit(Role::kJobAgent)},
      {"/Recover/ReplySwitchNicResult", RoleBit(Role::kJobAgent)},
      {"/Recover/StressTest", kOperators},
      {"/Recover/SubscribeStressTestResponse", kViewers},
      {"/Recover/SubscribeNotifyExecStressTest", RoleBit(Role::kJobAgent)},
      {"/Recover/ReplyStressTestResult", RoleBit(Role::kJobAgent)},
      // MindCluster's profiling switches: faultdiag-online (an operator) sets
      // them; TaskD (a job's agent, for its own job) and viewers read them.
      {"/TrainingDataTrace/ModifyTrainingDataTraceSwitch", kOperators},
      {"/TrainingDataTrace/GetTrainingDataTraceSwitch", kViewers | RoleBit(Role::kJobAgent)},
      {"/TrainingDataTrace/SubscribeDataTraceSwitch", kViewers | RoleBit(Role::kJobAgent)},
      // Probes and schema: anyone, before any identity.
      {"/grpc.health.v1.Health/Check", 0, true},
      {"/grpc.health.v1.Health/Watch", 0, true},
      {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", 0, true},
  };
  return rules;
}

const MethodRule* FindMethodRule(std::string_view method) {
  for (const auto& r : MethodRules()) {
    if (r.method == method) return &r;
  }
  return nullptr;
}

}  // namespace clusterd
