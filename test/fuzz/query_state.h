// A small ClusterState (three nodes with labels and devices, faults, two jobs,
// a recovery) in a private RocksDB, built once per fuzz process, for the
// targets that fuzz query parameters: label selectors and page tokens.
#pragma once

#include <memory>

#include "clusterd/state/cluster_state.h"
#include "clusterd/storage/rocksdb_store.h"
#include "fuzz_util.h"

namespace clusterd::fuzz {

class QueryState {
 public:
  static QueryState& Get() {
    static QueryState s;  // closed at exit, before the temp dir is removed
    return s;
  }
  const ClusterState& state() const { return *state_; }

 private:
  QueryState() {
    auto store = storage::RocksDbStore::Open(TempDir() + "/store", storage::StoreOptions{.sync = false});
    FUZZ_CHECK(store.ok());
    store_ = std::move(*store);
    state_ = std::make_unique<ClusterState>(store_.get(), &catalog_, &clock_);
    FUZZ_CHECK(state_->Load().ok());
    const char* racks[] = {"r1", "r1", "r2"};
    for (int n = 0; n < 3; ++n) {
      v1::Hello h;
      h.set_node_name("worker0" + std::to_string(n));
      h.set_boot_id("boot-1");
      h.set_agent_version("fuzz");
      h.set_epoch(1);
      (*h.mutable_labels())["rack"] = racks[n];
      (*h.mutable_labels())["zone"] = n == 2 ? "b" : "a";
      if (n == 0) (*h.mutable_labels())["gpu"] = "";
      for (int d = 0; d < 4; ++d) {
        auto* dev = h.mutable_inventory()->add_devices();
        dev->set_id(d);
        dev->set_vendor("huawei");
        dev->set_model("910B3");
      }
      Commit([&](Mutation* m) { return state_->ApplyHello(h, n + 1, m).status(); });
      for (int seq = 1; seq <= 3; ++seq) {
        v1::FaultTransition t;
        t.mutable_id()->set_epoch(1);
        t.mutable_id()->set_seq(seq);
        t.set_action(v1::TRANSITION_ACTION_RAISE);
        t.mutable_fault()->set_device_id(seq);
        t.mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
        t.mutable_fault()->set_code(seq == 1 ? "80E01801" : "8C084E00");
        Commit([&](Mutation* m) { return state_->ApplyTransition(h.node_name(), n + 1, t, m).status(); });
      }
    }
    for (const char* id : {"job-a", "job-b"}) {
      v1::Job job;
      job.set_id(id);
      job.set_kind(v1::JOB_KIND_TRAINING);
      for (uint32_t r = 0; r < 4; ++r) {
        auto* p = job.add_placement();
        p->set_rank(r);
        p->set_node("worker0" + std::to_string(r % 3));
        p->set_device_id(r);
      }
      Commit([&](Mutation* m) { return state_->ApplyCreateJob(job, m).status(); });
    }
    for (int i = 1; i <= 2; ++i) {
      v1::Recovery r;
      r.set_id("job-a." + std::to_string(i));
      r.set_job_id("job-a");
      Commit([&](Mutation* m) {
        state_->PutRecovery(r, v1::EVENT_TYPE_RECOVERY_STARTED, m);
        return Status::Ok();
      });
    }
  }

  template <typename Fn>
  void Commit(Fn&& fn) {
    Mutation m;
    Status st = fn(&m);
    if (!st.ok()) {
      std::fprintf(stderr, "fuzz state setup: %s\n", st.ToString().c_str());
      std::abort();
    }
    state_->FlushDirty(&m);
    FUZZ_CHECK(store_->Write(m.changes).ok());
    state_->set_durable_revision(state_->revision());
  }

  Catalog catalog_ = Catalog::Default();
  FakeClock clock_;
  std::unique_ptr<storage::Store> store_;
  std::unique_ptr<ClusterState> state_;
};

}  // namespace clusterd::fuzz
