// Where the validation rule's requests meet the agents' streams
// (docs/validation.md). The rule (writer thread, once a decision is durable)
// hands a ValidationRequest for a node and the agent session it was meant
// for; the node's stream, once its hello is durable, attaches and takes
// what waits for its session. A request for a session no stream attached
// yet waits for it; one for an older session is dropped (the rule sends
// again to the newer session, with the same id). Bounded: at most
// kMaxPendingPerNode requests wait per node (the rule asks at most
// validation_max_per_node per node at once), the oldest go first.
//
// Thread contract: every method is thread-safe; a deliver function runs on
// the caller's thread without the outbox's lock held.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "clusterd/v1/agent.pb.h"

namespace clusterd {

class ValidationOutbox {
 public:
  using Deliver = std::function<void(const v1::ValidationRequest&)>;
  static constexpr size_t kMaxPendingPerNode = 64;

  // Writer side: sends `req` to the node's stream of `session`.
  void Send(const std::string& node, uint64_t session, const v1::ValidationRequest& req) {
    Deliver fn;
    {
      std::lock_guard lock(mu_);
      auto it = attached_.find(node);
      if (it != attached_.end() && it->second.first == session) {
        fn = it->second.second;
      } else {
        auto& q = pending_[node];
        q.emplace_back(session, req);
        while (q.size() > kMaxPendingPerNode) q.pop_front();
        return;
      }
    }
    fn(req);
  }
  // Stream side: the node's stream of `session` takes requests from now on
  // (and what waits for it).
  void Attach(const std::string& node, uint64_t session, Deliver deliver) {
    std::vector<v1::ValidationRequest> ready;
    {
      std::lock_guard lock(mu_);
      attached_[node] = {session, deliver};
      auto it = pending_.find(node);
      if (it != pending_.end()) {
        for (auto& [s, req] : it->second) {
          if (s == session) ready.push_back(std::move(req));
        }
        pending_.erase(it);
      }
    }
    for (const auto& req : ready) deliver(req);
  }
  // The stream of `session` ended (a newer one's attachment is kept).
  void Detach(const std::string& node, uint64_t session) {
    std::lock_guard lock(mu_);
    auto it = attached_.find(node);
    if (it != attached_.end() && it->second.first == session) attached_.erase(it);
  }
  size_t pending() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [node, q] : pending_) n += q.size();
    return n;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::pair<uint64_t, Deliver>> attached_;
  std::map<std::string, std::deque<std::pair<uint64_t, v1::ValidationRequest>>> pending_;
};

}  // namespace clusterd
