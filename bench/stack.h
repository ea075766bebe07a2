// Scenario 13: the MindCluster stack, fault -> Volcano-visible. A real etcd
// and kube-apiserver (kube.h), clusterd with `--integrations mindcluster`
// and --stack-nodes simulated NodeDs of 16 Ascend910B3 chips each; the
// cluster-info-device ConfigMaps Volcano reads are watched with a streaming
// GET, as Volcano's informer does:
//   (a) a chip fault raised through NodeD's stream, and one raised by the
//       device plugin's ConfigMap -> the event of the chunk that shows the
//       chip in huawei.com/Ascend910-Unhealthy, p50/p99 over
//       --stack-samples faults, one at a time, each cleared after;
//   (b) --stack-churn-nodes device-plugin ConfigMaps each rewritten once a
//       second (a chip's fault raised or cleared each time, the most the
//       plugin writes) for --stack-churn seconds: clusterd's writes to the
//       API server per second and its CPU.
// The baseline, run first on the same API server: MindCluster's ClusterD's
// cadence (a processing pass every 1 s, every chunk rewritten after each
// pass, 1 s pause before the first write) modelled in this process on the
// same entries and chunks, timed the same way from the plugin's write.
// Skipped with a note without etcd, kube-apiserver or openssl. See
// docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

// "" or a real error (a process, a stream or a request failed); a missed
// target or a fault never seen is a figure.
std::string RunStack(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
