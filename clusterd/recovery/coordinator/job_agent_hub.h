// Where the Coordinator finds a job's attached recovery agent. The gRPC
// adapter (server/job_service) implements Sink for one Attach stream and
// registers it here; the Coordinator sends commands through the hub. At most
// one agent per job: a newer attach replaces the older one. No gRPC here.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "clusterd/v1/job.pb.h"

namespace clusterd {

class JobAgentHub {
 public:
  class Sink {
   public:
    virtual ~Sink() = default;
    // Queues a message for the agent; never blocks.
    virtual void Send(v1::AttachResponse msg) = 0;
    // A newer agent attached for the same job: end this stream.
    virtual void Replaced() = 0;
  };

  // Registers `sink` for `job` and returns its session; a sink already
  // registered for the job is told Replaced().
  uint64_t Attach(const std::string& job, std::shared_ptr<Sink> sink);
  // Removes the registration if `session` is still the job's current one.
  void Detach(const std::string& job, uint64_t session);
  // False when no agent is attached for the job.
  bool Send(const std::string& job, const v1::Command& command);
  bool IsAttached(const std::string& job) const;
  // True when an agent attached for the job at any time since the hub was
  // made (it may be reconnecting now).
  bool Seen(const std::string& job) const;
  // The job is gone: Seen() forgets it.
  void Forget(const std::string& job);
  size_t attached() const;

 private:
  struct Entry {
    uint64_t session = 0;
    std::shared_ptr<Sink> sink;
  };
  mutable std::mutex mu_;
  std::map<std::string, Entry> agents_;
  std::set<std::string> seen_;
  uint64_t next_session_ = 0;
};

}  // namespace clusterd
