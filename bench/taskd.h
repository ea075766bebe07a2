// Scenario 14: TaskD's Recover service, fault -> recovery. clusterd with one
// simulated NodeD (--devices chips) and a training job opted in to process
// recovery (mindcluster/recover-strategy "retry"); a TaskD client over the
// reference's proto (Init, Register, Subscribe) that answers each signal at
// once. --taskd-samples chip faults at RESTART_REQUEST (a step retry), one at
// a time, each cleared after its recovery:
//   - fault -> first signal (stopTrain), from the fault's acknowledgement;
//   - ClusterD's share of the recovery: the time between each of TaskD's
//     answers and ClusterD's next signal (the last: the recovery stored
//     SUCCEEDED), added up, TaskD's own time left out.
// Against MindCluster's documented figure: fault handling under 30 s. See
// docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunTaskd(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
