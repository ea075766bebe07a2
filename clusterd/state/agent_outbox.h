// Where the writer's messages for the agents meet their streams: a writer
// rule (on the writer thread, once what it decided is durable) hands a
// ConnectResponse for a node and the agent session it is meant for; the
// node's stream, once its hello is durable, attaches and takes what waits for
// its session. A message for a session no stream attached yet waits for it;
// one for an older session is dropped (a rule sends again to the newer
// session). Bounded: at most kMaxPendingPerNode messages wait per node, the
// oldest go first.
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

class AgentOutbox {
 public:
  using Deliver = std::function<void(const v1::ConnectResponse&)>;
  static constexpr size_t kMaxPendingPerNode = 64;

  // Writer side: sends `msg` to the node's stream of `session`.
  void Send(const std::string& node, uint64_t session, const v1::ConnectResponse& msg) {
    Deliver fn;
    {
      std::lock_guard lock(mu_);
      auto it = attached_.find(node);
      if (it == attached_.end() || it->second.first != session) {
        auto& q = pending_[node];
        q.emplace_back(session, msg);
        while (q.size() > kMaxPendingPerNode) {
          q.pop_front();
          ++dropped_;
        }
        return;
      }
      fn = it->second.second;
    }
    fn(msg);
  }
  // Stream side: the node's stream of `session` takes messages from now on
  // (and what waits for it).
  void Attach(const std::string& node, uint64_t session, const Deliver& deliver) {
    std::vector<v1::ConnectResponse> ready;
    {
      std::lock_guard lock(mu_);
      attached_[node] = {session, deliver};
      auto it = pending_.find(node);
      if (it != pending_.end()) {
        for (auto& [s, msg] : it->second) {
          if (s == session) ready.push_back(std::move(msg));
        }
        pending_.erase(it);
      }
    }
    for (const auto& msg : ready) deliver(msg);
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
  uint64_t dropped() const {
    std::lock_guard lock(mu_);
    return dropped_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::pair<uint64_t, Deliver>> attached_;
  std::map<std::string, std::deque<std::pair<uint64_t, v1::ConnectResponse>>> pending_;
  uint64_t dropped_ = 0;
};

}  // namespace clusterd
