// The real writer on a MemoryStore for tests of what sits on it (the
// progress monitor, a room's gRPC service): a loaded ClusterState, its
// WatchHub and an Engine on the test's clock. The test starts the Engine's
// thread (Start) or steps it by hand (Idle), and submits through Write.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "clusterd/engine/engine.h"
#include "clusterd/engine/watch_hub.h"
#include "clusterd/storage/memory_store.h"
#include "common/metrics.h"

namespace clusterd::testing {

class WriterOnMemory {
 public:
  // Fatal failures if the store does not open or the state does not load.
  void Open(const Clock* clock, EngineOptions options, MetricsRegistry* metrics) {
    auto store = storage::MemoryStore::Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, clock);
    ASSERT_TRUE(state_->Load().ok());
    hub_ = std::make_unique<WatchHub>(store_.get(), 1024);
    hub_->Init(state_->revision());
    engine_ = std::make_unique<Engine>(state_.get(), store_.get(), hub_.get(), clock, options, metrics);
  }
  ~WriterOnMemory() {
    if (engine_) engine_->Stop();
  }

  // One change through the writer; with the Engine stepped by hand, Idle
  // then commits it.
  template <typename Fn>
  void Write(Fn fn) {
    ASSERT_TRUE(engine_->Submit([fn](ClusterState& s, Mutation* m) -> Engine::Done {
      EXPECT_TRUE(fn(s, m).ok());
      return nullptr;
    }));
  }
  // Steps the writer until nothing is queued (not with Start).
  void Idle() {
    for (;;) {
      const Engine::StepResult r = engine_->Step();
      ASSERT_FALSE(r.held);
      if (!r.gathering && engine_->queue_depth() == 0) return;
    }
  }

  ClusterState* state() { return state_.get(); }
  Engine* engine() { return engine_.get(); }
  WatchHub* hub() { return hub_.get(); }

 private:
  Catalog catalog_ = Catalog::Default();
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::unique_ptr<WatchHub> hub_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace clusterd::testing
