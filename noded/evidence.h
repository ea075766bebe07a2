// NodeD's side of an incident's evidence (docs/domains.md, "Evidence
// bundles"): ClusterD asks, over the agent stream, for this node's
// diagnostic bundle of an incident it is a member of; the collector builds
// it on its own thread and hands it back for the stream to send.
//
// A bundle's sections, each with its own cap, the whole under the smaller of
// the request's max_bytes and the agent's max_bytes:
//   kernel-log   the kernel log (kmsg_path, /dev/kmsg by default: a file in
//                tests) from the request's `since` on, the newest kept
//   accelerator  the backend's last full readout, chain: the software chain,
//   metrics      the last metric snapshot (the link counters among them)
//                (from the agent: `Readout`)
//   command/<n>  each configured vendor tool (ParseEvidenceCommands): argv
//                without a shell, a timeout, its output's tail under a cap
//
// At most max_queued requests wait (more are dropped, counted); a request
// for an incident already waiting is ignored.
//
// Thread contract: Submit and TakeReady are thread-safe; Collect runs on the
// collector's thread (or a test's); the destructor stops and joins it. No
// gRPC here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "clusterd/v1/domain.pb.h"
#include "common/status.h"

namespace clusterd::noded {

struct EvidenceCommand {
  std::string name;
  std::vector<std::string> argv;
  std::chrono::milliseconds timeout{10'000};
  size_t max_bytes = size_t{64} << 10;
};

// The evidence commands file: {"commands": [{"name": "npu-smi-info", "argv":
// ["npu-smi", "info"], "timeout_seconds": 10, "max_bytes": 65536}]}. At most
// 16 commands, names of 1 to 64 characters of [A-Za-z0-9._-], argv of 1 to
// 64 entries, timeouts of 1 to 600 s, max_bytes of 1 to 1048576.
// InvalidArgument naming the entry.
StatusOr<std::vector<EvidenceCommand>> ParseEvidenceCommands(const std::string& json);

struct EvidenceCollectorOptions {
  std::string kmsg_path = "/dev/kmsg";  // "": no kernel-log section
  // The agent's own cap on a bundle (the request's may be smaller).
  size_t max_bytes = size_t{512} << 10;
  // The kernel-log section's share, and any other section's.
  size_t max_kmsg_bytes = size_t{256} << 10;
  size_t max_section_bytes = size_t{64} << 10;
  std::vector<EvidenceCommand> commands;
  size_t max_queued = 16;
};

class EvidenceCollector {
 public:
  // The agent's readout: (section name, text) pairs.
  using Readout = std::function<std::vector<std::pair<std::string, std::string>>()>;

  EvidenceCollector(EvidenceCollectorOptions options, Readout readout, std::function<void()> ready);
  ~EvidenceCollector();
  EvidenceCollector(const EvidenceCollector&) = delete;
  EvidenceCollector& operator=(const EvidenceCollector&) = delete;

  // A request from ClusterD (the stream's reader thread).
  void Submit(const v1::EvidenceRequest& req);
  // Bundles collected and not yet taken, oldest first.
  std::vector<v1::EvidenceBundle> TakeReady();
  uint64_t collected() const;
  uint64_t dropped() const;

  // One bundle, on the caller's thread.
  v1::EvidenceBundle Collect(const v1::EvidenceRequest& req) const;

 private:
  void Work();

  const EvidenceCollectorOptions options_;
  const Readout readout_;
  const std::function<void()> ready_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<v1::EvidenceRequest> waiting_;
  std::set<std::string> waiting_ids_;
  std::vector<v1::EvidenceBundle> ready_bundles_;
  uint64_t collected_ = 0;
  uint64_t dropped_ = 0;
  std::thread worker_;
};

// The kernel log's records from `since_unix_ns` on, one line each
// ("2026-12-07T10:00:00.123456Z <level> message"), the newest that fit in
// max_bytes (truncated set when older ones were left out). Reads `path`
// once from its start (/dev/kmsg: the kernel's ring buffer); the records'
// times since boot become wall times through the monotonic clock.
StatusOr<std::string> KernelLogExcerpt(const std::string& path, int64_t since_unix_ns, size_t max_bytes,
                                       bool* truncated);

}  // namespace clusterd::noded
