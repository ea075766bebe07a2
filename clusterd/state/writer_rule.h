// The seam for policies on the writer's schedule (docs/architecture.md, "The
// writer's rules"). A WriterRule is one timed policy in its own object: it
// owns its settings and what it keeps between runs, the Engine runs it after
// every group of changes (and when it said it is next due) on the writer
// thread with the state locked exclusively, and it records what it changes in
// the group's Mutation, committed with the group. The rules run in the order
// the composition root (clusterd/server/server.cc) lists them. A new timed
// policy is a new WriterRule added to that list: no existing class changes.
//
// A rule that must see changes as they happen (the separation policy counts
// each new fault on a chip) is also attached to the state
// (ClusterState::Attach): it is told of Load and of every fault raised or
// cleared, in the same writer turn.
//
// Thread contract: every method runs on the Engine's writer thread (or, for
// Loaded, in ClusterState::Load before the writer starts), with the state's
// lock held exclusively.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "clusterd/state/mutation.h"
#include "clusterd/v1/types.pb.h"
#include "common/clock.h"

namespace clusterd {

class ClusterState;
class Engine;

// What the writer runs after a commit is durable (Engine::Done).
using WriterDone = std::function<void()>;
// A change for the writer: applied to the state with its lock held, it
// records its change in the Mutation and returns what to run once durable
// (Engine::Apply).
using WriterApply = std::function<WriterDone(ClusterState& state, Mutation* m)>;
// Engine::Submit as a value, for results that come back later (an
// actuator's answer).
using WriterSubmit = std::function<bool(WriterApply)>;

// One run of the rules: the writer's time, the group's Mutation, the group's
// completions (run once the group is durable) and the Engine's Submit.
struct WriterTick {
  TimePoint now;
  Mutation* m = nullptr;
  std::vector<WriterDone>* after = nullptr;
  const WriterSubmit* submit = nullptr;
};

class WriterRule {
 public:
  virtual ~WriterRule() = default;
  // For logs and the docs' list ("separation", "chain-drift" ...).
  virtual std::string_view name() const = 0;
  // Does what is due at tick.now, recording every change in tick.m. Returns
  // when it next has something to do even if nothing changes meanwhile
  // (TimePoint::max(): nothing); the writer wakes up then. Rules that run
  // later in the same turn see what this one changed.
  virtual TimePoint Advance(ClusterState& state, const WriterTick& tick) = 0;

  // Attached rules only (ClusterState::Attach). The state was loaded from
  // the store: rebuild what the rule keeps from the records.
  virtual void Loaded(ClusterState& /*state*/) {}
  // A fault record was raised (`raised`; `new_occurrence`: it was not active
  // before) or cleared, inside an Apply* call; the rule may update the
  // records it keeps (as dirty records, flushed with the group) but emits no
  // event here.
  virtual void FaultChanged(ClusterState& /*state*/, const v1::Fault& /*fault*/, bool /*raised*/,
                            bool /*new_occurrence*/) {}
};

// The pass key to the state's lock: only the Engine, the one writer, can
// make one (ClusterState::mutex). Nothing else of the state is the Engine's.
class WriterKey {
 private:
  WriterKey() = default;
  friend class Engine;
};

}  // namespace clusterd
