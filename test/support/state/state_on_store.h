// ClusterState over a Store, driven like the Engine drives it (one commit
// per call), for scenario tests (MemoryStore or RocksDB: store_backends.h).
#pragma once

#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "clusterd/state/cluster_state.h"
#include "test/support/state/store_backends.h"

namespace clusterd::testing {

template <typename Backend>
class StateOnStore {
 public:
  // Opens the store and loads a fresh ClusterState from it (a restart).
  void Open() {
    state_.reset();
    store_.reset();
    auto store = backend_.Open();
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    ASSERT_TRUE(state_->Load().ok());
  }

  // Applies fn as one commit, like the Engine does.
  template <typename Fn>
  auto Commit(Fn&& fn) {
    Mutation m;
    auto result = fn(&m);
    state_->FlushDirty(&m);
    EXPECT_TRUE(store_->Write(m.changes).ok());
    state_->set_durable_revision(state_->revision());
    events_.insert(events_.end(), m.events.begin(), m.events.end());
    return result;
  }

  Backend backend_;
  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
  std::vector<v1::Event> events_;
};

}  // namespace clusterd::testing
