// MindCluster's observability ConfigMaps, pure (clusterd/mindcluster/statistics.h):
// statistic-fault-info, current-job-statistic and scheduling-exception-report
// in the reference's Go-JSON bytes.
#include "clusterd/mindcluster/statistics.h"

#include <string>

#include <gtest/gtest.h>

namespace clusterd::mindcluster {
namespace {

TEST(StatisticsCmTest, PublicFaultsInTheReferencesShape) {
  std::map<std::string, std::vector<PublicFaultStat>> faults;
  faults["n2"] = {PublicFaultStat{"pingmesh", {3}, "f-2", "", "220001001", "SeparateNPU", 1'700'000'000'000},
                  PublicFaultStat{"CCAE", {1, 2}, "f-1", "NPU", "010001001", "SubHealthFault", 1'700'000'000'001}};
  faults["n1"] = {};
  const auto data = StatisticFaultCmData(faults);
  ASSERT_EQ(data.size(), 2u);  // no Description below the limit
  // Fields in the struct's order, omitempty, faults sorted by resource and id.
  EXPECT_EQ(data.at("PublicFaults"),
            R"({"n2":[{"resource":"CCAE","devIds":[1,2],"faultId":"f-1","type":"NPU","faultCode":"010001001",)"
            R"("level":"SubHealthFault","faultTime":1700000000001},{"resource":"pingmesh","devIds":[3],)"
            R"("faultId":"f-2","faultCode":"220001001","level":"SeparateNPU","faultTime":1700000000000}]})");
  EXPECT_EQ(data.at("FaultNum"), R"({"publicFaultNum":2})");
  EXPECT_EQ(StatisticFaultCmData({}).at("PublicFaults"), "{}");
  EXPECT_EQ(StatisticFaultCmData({}).at("FaultNum"), R"({"publicFaultNum":0})");
}

TEST(StatisticsCmTest, TooManyPublicFaultsAreCutWithADescription) {
  std::map<std::string, std::vector<PublicFaultStat>> faults;
  for (int n = 0; n < 10; ++n) {
    auto& list = faults["node-" + std::to_string(n)];
    for (int i = 0; i < 500; ++i) list.push_back(PublicFaultStat{"CCAE", {0}, "f" + std::to_string(i), "", "1", "", 1});
  }
  const auto data = StatisticFaultCmData(faults);
  EXPECT_EQ(data.at("FaultNum"), R"({"publicFaultNum":5000})");
  EXPECT_EQ(data.at("Description"), std::string(kTooManyFaultsDescription));
  // Whole nodes up to the limit: nine of ten.
  EXPECT_NE(data.at("PublicFaults").find("\"node-8\""), std::string::npos);
  EXPECT_EQ(data.at("PublicFaults").find("\"node-9\""), std::string::npos);
}

TEST(StatisticsCmTest, JobsAndSchedulingExceptions) {
  const auto jobs = JobStatisticCmData(
      {JobStat{"uid-b", "", 16, 1'700'000'000'000, 0, 0, 0, 0}, JobStat{"uid-a", "custom", 0, 0, 5, 0, 7, 2}});
  EXPECT_EQ(jobs.at("data"),
            R"([{"id":"uid-a","customID":"custom","stopTime":5,"podLastFaultTime":7,"podFaultTimes":2},)"
            R"({"id":"uid-b","cardNum":16,"podFirstRunTime":1700000000000}])");
  EXPECT_EQ(jobs.at("totalJob"), "2");
  EXPECT_EQ(JobStatisticCmData({}).at("data"), "[]");

  const auto report = SchedulingExceptionCmData(
      {SchedulingException{"train-0.ml/train-0", "train-0", "Pod", "ml", "PodGroupInqueue", "NotEnoughResources",
                           "0/3 nodes are available: <Insufficient huawei.com/Ascend910> & more"}});
  // '<' becomes ' ', '>' goes, as the reference writes it; Go escapes '&'.
  EXPECT_EQ(report.at("train-0.ml/train-0"),
            R"({"jobName":"train-0","jobType":"Pod","nameSpace":"ml","conditions":{"status":"PodGroupInqueue",)"
            R"("reason":"NotEnoughResources","message":"0/3 nodes are available:  Insufficient huawei.com/Ascend910 )"
            R"(\u0026 more"}})");
}

}  // namespace
}  // namespace clusterd::mindcluster
