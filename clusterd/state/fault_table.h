// Every fault record, active or cleared, by storage key (node first, so one
// node's faults are one range): the fault aggregate. It owns the records,
// their delayed clears and the public-fault count, and writes each changed
// record to the change set. The events that report a change (they name the
// jobs it hits) and the health it implies are ClusterState's.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "clusterd/state/journal.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/store.h"
#include "clusterd/v1/types.pb.h"
#include "common/status.h"

namespace clusterd {

// Reporters that speak for a job, not for a node: the progress monitor's
// ("progress": JOB_HANG, SLOW_RANK, progress/monitor.h) and TaskD's process
// faults ("taskd", what a job's agent raises through the Recover service,
// mindcluster/taskd.h). Their faults sit on a rank's chip so that the
// coordinator finds the job, but a job's software hang is not its node's
// fault: they never count toward a node's repeat-offender tally.
inline constexpr std::string_view kJobReporters[] = {"progress", "taskd"};
inline bool IsJobReporter(std::string_view reporter) {
  for (std::string_view r : kJobReporters) {
    if (r == reporter) return true;
  }
  return false;
}

// Whether a fault speaks against the hardware it sits on. A job reporter's
// fault at a process-restart level (RESTART_REQUEST, RESTART_BUSINESS) asks
// only for the job's processes to restart: an unattributed JOB_HANG ("every
// rank stopped at the same step") sits on the first rank's chip only so that
// the coordinator finds the job. It is listed on that node like any fault,
// but it sets neither the chip's nor the node's health and worst level (so
// no node condition, device taint or scheduler view blames them) and counts
// toward no chip separation. Every other level counts: SLOW_RANK's
// SUB_HEALTH is evidence about the chip, and at SEPARATE (an attributed hang
// with hang_action RESCHEDULE) the job asks for the chip to be left.
inline bool BlamesHardware(const v1::Fault& f) {
  const bool restart_only =
      f.level() == v1::FAULT_LEVEL_RESTART_REQUEST || f.level() == v1::FAULT_LEVEL_RESTART_BUSINESS;
  return !restart_only || !IsJobReporter(f.reporter());
}

// A public fault's reporter: "pubfault/<resource>" (a name FaultService.Report
// cannot use, so no other reporter can clear these).
inline constexpr std::string_view kPubFaultReporterPrefix = "pubfault/";

class FaultTable {
 public:
  using Map = std::map<std::string, v1::Fault>;
  // One node's records in key order. (A plain iterator pair, not
  // std::ranges::subrange: clang 14, which builds the fuzzers, cannot
  // instantiate libstdc++ 12's subrange.)
  struct Range {
    Map::const_iterator first, last;
    auto begin() const { return first; }
    auto end() const { return last; }
  };
  // What a raise did.
  struct Raised {
    const v1::Fault* fault = nullptr;
    bool changed = false;     // a new revision (false: only last_seen moved)
    bool was_active = false;  // an update of an active fault, not a raise
  };
  // Active faults and the worst level among them.
  struct Tally {
    uint32_t active = 0;
    v1::FaultLevel worst = v1::FAULT_LEVEL_UNSPECIFIED;
  };

  explicit FaultTable(Journal* journal) : journal_(journal) {}

  Status Load(const storage::Store& store);

  const Map& all() const { return faults_; }
  size_t size() const { return faults_.size(); }
  const v1::Fault* Find(const std::string& key) const;
  bool IsActive(const std::string& key) const;
  // The fault with this id (Fault.id), or null.
  const v1::Fault* FindById(const std::string& fault_id) const;
  // The nodes that have fault records, and how many each (records are
  // never removed, so neither are nodes): what a walk over the nodes a job
  // uses can be narrowed to.
  const std::map<std::string, uint32_t>& nodes() const { return nodes_; }
  Range OfNode(const std::string& node) const {
    return {faults_.lower_bound(storage::NodePrefix(node)), faults_.lower_bound(storage::NodePrefixEnd(node))};
  }
  // The node's active faults, HEARTBEAT_LOST included, and those of them on
  // `device` (one walk over the node's records).
  struct NodeTally {
    Tally node;
    Tally device;
  };
  NodeTally Active(const std::string& node, std::optional<uint32_t> device) const;
  // Active faults on the node raised by external reporters (`external`) or
  // by its agent, HEARTBEAT_LOST not counted.
  uint32_t ActiveFrom(const std::string& node, bool external) const;
  uint32_t active_public() const { return active_public_; }

  // Raises the fault under `key` (or refreshes it: same level and message
  // only moves last_seen, no revision). Writes the record when it changed.
  Raised Raise(const std::string& key, const v1::Fault& proposed, Mutation* m);
  // Clears an active fault; null when none is active under `key`.
  const v1::Fault* Clear(const std::string& key, const std::string& reason, Mutation* m);
  // Sets (or, nullopt, removes) when an active fault clears itself.
  void SetAutoClear(const std::string& key, std::optional<TimePoint> when, Mutation* m);
  // The key of an active fault whose auto-clear time has come, if any (stale
  // entries are dropped on the way); NextAutoClear: when the next is due.
  std::optional<std::string> DueAutoClear(TimePoint now);
  TimePoint NextAutoClear() const;

 private:
  void CountPublic(const v1::Fault& f, int delta);

  Journal* journal_;
  Map faults_;
  std::map<std::string, uint32_t> nodes_;  // node -> records in faults_
  // Active faults with an auto_clear_time, by that time.
  std::set<std::pair<TimePoint, std::string>> auto_clears_;
  uint32_t active_public_ = 0;
};

}  // namespace clusterd
