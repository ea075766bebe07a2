// What one commit changes, and the limits on what the state may hold.
#pragma once

#include <cstdint>
#include <vector>

#include "clusterd/storage/change_set.h"
#include "clusterd/v1/types.pb.h"

namespace clusterd {

// The stored effect of one or more logical changes, committed together
// (after ClusterState::FlushDirty has added the records written once per
// commit): the change set the Store applies, and the events to publish to
// watchers once it is durable.
struct Mutation {
  storage::ChangeSet changes;
  std::vector<v1::Event> events;
  bool empty() const { return changes.empty(); }
};

class Counter;

// Limits on what one node or job may hold, so that every answer and every
// computation over them stays bounded (see response_limits.h for the byte
// budgets). The counters are optional; each is incremented when its limit
// is hit.
struct StateLimits {
  // Ranks per job: CreateJob/UpdateJob beyond it are INVALID_ARGUMENT.
  uint32_t max_job_ranks = 131'072;
  // Active faults per node, counted apart for the node's agent and for
  // external reporters (so external reports can never crowd out the agent's
  // own faults): a raise of a new fault beyond it is RESOURCE_EXHAUSTED.
  uint32_t max_faults_per_node = 4096;
  // Impacts listed per job in an answer (Job.impacts_truncated beyond it).
  uint32_t max_job_impacts = 1024;
  Counter* faults_refused_agent = nullptr;
  Counter* faults_refused_external = nullptr;
  Counter* jobs_refused = nullptr;
  Counter* job_impacts_truncated = nullptr;
  Counter* node_faults_truncated = nullptr;
};

}  // namespace clusterd
