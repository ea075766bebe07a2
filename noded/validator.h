// NodeD's side of a return to service (docs/validation.md): ClusterD asks,
// over the agent stream, to validate devices (or the whole node) before they
// take work again; the Validator runs the checks and hands back the result.
//
//   health-stable  built in: for the request's stable_window, sampled every
//                  `sample` interval, no active fault of the devices, their
//                  readings complete and healthy, no BROKEN link of the
//                  software chain (what NodeD already watches, through
//                  `Probe`); and, against the window's first sample, no
//                  error counter of the backend grown (ECC counts, Xid
//                  events) and no new error code (an Xid, a DCMI code).
//   commands       configured per vendor and model (ParseValidationCommands):
//                  argv without a shell ("{devices}" becomes "0,3"), a
//                  timeout and a pass rule (exit 0, and an output regex when
//                  given); the output's tail (16 KiB) is the evidence.
//
// Each validation id runs once: a request sent again (a reconnect, a ClusterD
// restart) while it runs is ignored, and once finished is answered again with
// the kept result. At most max_running run at once, the rest wait in order;
// at most `remembered` finished results are kept (the oldest go).
//
// Thread contract: Submit, TakeReady and ResendAll are thread-safe; the
// checks run on the Validator's own threads; the destructor stops and joins
// them. No gRPC here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "clusterd/v1/agent.pb.h"
#include "common/status.h"
#include "noded/accel/backend.h"

namespace clusterd::noded {

struct ValidationCommand {
  std::string name;
  // Which devices it applies to ("" any; the model is a prefix: "910B"
  // matches "910B3").
  std::string vendor;
  std::string model;
  std::vector<std::string> argv;
  std::chrono::milliseconds timeout{60'000};
  // Passes on exit status 0 and, when set, the output matching it.
  std::string pass_regex;
};

// The commands file: {"commands": [{"name": "hccn-link", "vendor": "huawei",
// "model": "910B", "argv": ["hccn_tool", "-i", "{devices}", "-link", "-g"],
// "timeout_seconds": 30, "pass_regex": "link status: UP"}]}. At most 32
// commands, names of 1 to 64 characters, argv of 1 to 64 entries, timeouts
// of 1 to 3600 s, regexes that compile. InvalidArgument naming the entry.
StatusOr<std::vector<ValidationCommand>> ParseValidationCommands(const std::string& json);

// One look at the targets by the built-in check.
struct ValidationSample {
  // Wrong now (an active fault, an unreadable or unhealthy device, a BROKEN
  // chain link): the check fails at once with these.
  std::vector<std::string> problems;
  // The backend's error counters ("device 3 ecc_corrected" -> 12) and error
  // codes ("device 3 code XID_79"), compared with the window's first sample:
  // a counter that grew or a code that appeared fails the check.
  std::map<std::string, uint64_t> counters;
  std::set<std::string> codes;
};

// Adds what the backend read of `devices` (`reading`: a device's latest
// DeviceStatus, nullopt when it has none) to `sample`: a device not read, not
// read completely or not healthy is a problem; its error counters and codes
// go to the comparison.
void AddReadings(const std::vector<uint32_t>& devices,
                 const std::function<std::optional<DeviceStatus>(int32_t)>& reading, ValidationSample* sample);

struct ValidatorOptions {
  std::vector<ValidationCommand> commands;
  std::chrono::milliseconds sample{1000};
  size_t max_running = 4;
  size_t remembered = 256;
  size_t max_evidence = size_t{16} * 1024;
};

class Validator {
 public:
  // A look at the devices now (ValidationSample): active faults, readings,
  // counters and codes, the chain. With whole_node, `devices` are the node's
  // and the node's own faults count too.
  using Probe = std::function<ValidationSample(const std::vector<uint32_t>& devices, bool whole_node)>;
  // A device's vendor and model (for the commands' match); the node's
  // devices for a whole-node request.
  using DeviceModel = std::function<std::pair<std::string, std::string>(uint32_t device)>;
  using NodeDevices = std::function<std::vector<uint32_t>()>;

  Validator(ValidatorOptions options, Probe probe, DeviceModel model, NodeDevices node_devices,
            std::function<void()> ready);
  ~Validator();
  Validator(const Validator&) = delete;
  Validator& operator=(const Validator&) = delete;

  // A request from ClusterD (the stream's reader thread).
  void Submit(const v1::ValidationRequest& req);
  // The results finished and not yet taken, oldest first.
  std::vector<v1::ValidationResult> TakeReady();
  size_t running() const;
  uint64_t duplicates() const;

  // One validation, on the caller's thread (the worker's; tests).
  v1::ValidationResult Run(const v1::ValidationRequest& req);

 private:
  void Work();
  v1::ValidationCheckResult HealthStable(const v1::ValidationRequest& req, const std::vector<uint32_t>& devices);
  v1::ValidationCheckResult RunCommand(const ValidationCommand& c, const std::vector<uint32_t>& devices);

  const ValidatorOptions options_;
  const Probe probe_;
  const DeviceModel model_;
  const NodeDevices node_devices_;
  const std::function<void()> ready_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<v1::ValidationRequest> waiting_;
  std::set<std::string> active_;                      // waiting or running ids
  std::map<std::string, v1::ValidationResult> done_;  // finished, by id
  std::deque<std::string> done_order_;                // oldest first, for the bound
  std::vector<v1::ValidationResult> ready_results_;   // to send
  size_t running_ = 0;
  uint64_t duplicates_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace clusterd::noded
