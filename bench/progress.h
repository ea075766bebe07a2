// Scenario 16: job progress at fleet scale. clusterd with --progress-jobs
// jobs of --progress-ranks ranks each, every job's agent attached
// (JobService.Attach) and reporting all its ranks every
// --progress-interval seconds (one ProgressReport per job):
//   - clusterd's CPU (cores) while they report, and its memory per tracked
//     rank (RSS growth from before the first report);
//   - slow-rank detection: one rank of one job turns 40 % slow; the reports
//     (and report windows of 5) until GetJob names it;
//   - hang detection: one job (hang timeout 5 s in its policy) stops; the
//     time from its last report to GetJob's HUNG, less the timeout.
// See docs/performance.md.
#pragma once

#include <string>
#include <vector>

#include "common.h"

namespace clusterd::bench {

std::string RunProgress(const Options& o, const TempDir& tmp, json* out, std::vector<Row>* rows);

}  // namespace clusterd::bench
