#include "clusterd/recovery/coordinator/job_agent_hub.h"

namespace clusterd {

uint64_t JobAgentHub::Attach(const std::string& job, std::shared_ptr<Sink> sink) {
  std::shared_ptr<Sink> old;
  uint64_t session;
  {
    std::lock_guard lock(mu_);
    seen_.insert(job);
    Entry& e = agents_[job];
    old = std::move(e.sink);
    e.sink = std::move(sink);
    e.session = session = ++next_session_;
  }
  if (old) old->Replaced();
  return session;
}

void JobAgentHub::Detach(const std::string& job, uint64_t session) {
  std::lock_guard lock(mu_);
  auto it = agents_.find(job);
  if (it != agents_.end() && it->second.session == session) agents_.erase(it);
}

bool JobAgentHub::Send(const std::string& job, const v1::Command& command) {
  std::shared_ptr<Sink> sink;
  {
    std::lock_guard lock(mu_);
    auto it = agents_.find(job);
    if (it == agents_.end()) return false;
    sink = it->second.sink;
  }
  v1::AttachResponse msg;
  *msg.mutable_command() = command;
  sink->Send(std::move(msg));
  return true;
}

bool JobAgentHub::IsAttached(const std::string& job) const {
  std::lock_guard lock(mu_);
  return agents_.contains(job);
}

bool JobAgentHub::Seen(const std::string& job) const {
  std::lock_guard lock(mu_);
  return seen_.contains(job);
}

void JobAgentHub::Forget(const std::string& job) {
  std::lock_guard lock(mu_);
  seen_.erase(job);
}

size_t JobAgentHub::attached() const {
  std::lock_guard lock(mu_);
  return agents_.size();
}

}  // namespace clusterd
