// Evidence bundles (docs/domains.md, "Evidence bundles"): when an incident
// opens (state/incidents.h), ClusterD asks each member node's agent, over its
// stream, for a bounded diagnostic bundle (the kernel log around the faults,
// the accelerator backend's readout, the software chain, the link counters,
// the configured vendor tools' output) and keeps it with the incident.
//
// Bounds, all on ClusterD's side (an agent keeps its own too):
//   - at most max_in_flight members asked at once (the rest queue, in the
//     order they were hit); an asked member answers within timeout or is
//     FAILED;
//   - a bundle of at most max_bundle_bytes (encoded), from the node asked
//     only (the stream's authenticated node), for an incident it was asked
//     about only, once;
//   - the stored bundles expire by age (max_age) and by total size
//     (max_total_bytes: the oldest go first);
//   - at most kMaxEntries members tracked (asked, stored or failed).
//
// A WriterRule attached to the state, run after the incident rule: each run
// it asks the members of open incidents that changed, times out, expires,
// and stores bundles under the meta prefix "evidence/" (storage/schema.h;
// no revision, no event). Load reads the stored bundles back; members of
// incidents still open that have none are asked again.
//
// Thread contract: Advance, Loaded, AgentUp and ApplyBundle on the writer
// thread with the state locked exclusively; Get with the state's lock held
// (a ClusterState::Read). The gauges are atomic.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "clusterd/state/writer_rule.h"
#include "clusterd/v1/domain.pb.h"
#include "common/status.h"

namespace clusterd {

class AgentOutbox;
class Counter;
class Gauge;
class IncidentRule;

struct EvidenceOptions {
  // Off: no member is asked (the incidents still form).
  bool enabled = true;
  // One member's bundle, encoded; larger ones are refused. Under 3 MiB so
  // that an answer holding one stays under 4 MiB.
  uint64_t max_bundle_bytes = uint64_t{512} << 10;
  // All stored bundles together: the oldest go first past it.
  uint64_t max_total_bytes = uint64_t{64} << 20;
  // A stored bundle is deleted this long after it was stored.
  std::chrono::nanoseconds max_age = std::chrono::hours(24 * 7);
  // An asked member answers within this, or its evidence FAILED; a queued
  // one whose agent is not connected within it FAILED too.
  std::chrono::nanoseconds timeout = std::chrono::minutes(2);
  // Members asked at once, over all incidents.
  uint32_t max_in_flight = 16;
  // The kernel log from the member's first fault less this.
  std::chrono::nanoseconds log_before = std::chrono::minutes(1);
};

// InvalidArgument naming the key for options out of bounds.
Status ValidateEvidenceOptions(const EvidenceOptions& options);

struct EvidenceMetrics {
  Counter* asked = nullptr;         // members asked
  Counter* stored = nullptr;        // bundles stored
  Counter* failed = nullptr;        // members whose evidence failed (timeout, no collector)
  Counter* refused = nullptr;       // bundles refused (not asked, over the cap, twice)
  Counter* dropped = nullptr;       // members not tracked: kMaxEntries reached
  Counter* expired_age = nullptr;   // bundles deleted by age
  Counter* expired_size = nullptr;  // bundles deleted by the total size cap
  Gauge* bytes = nullptr;           // stored bytes
  Gauge* bundles = nullptr;         // stored bundles
  Gauge* in_flight = nullptr;       // members asked, not answered
  Gauge* queued = nullptr;          // members waiting to be asked
};

class EvidenceRule final : public WriterRule {
 public:
  static constexpr size_t kMaxEntries = 16384;
  // A bundle's sections and their names.
  static constexpr int kMaxSections = 64;
  static constexpr size_t kMaxSectionName = 128;

  explicit EvidenceRule(EvidenceOptions options) : options_(options) {}

  // Before the Engine starts.
  void set_outbox(AgentOutbox* outbox) { outbox_ = outbox; }
  void set_metrics(const EvidenceMetrics& metrics) { metrics_ = metrics; }
  const EvidenceOptions& options() const { return options_; }

  std::string_view name() const override { return "evidence"; }
  TimePoint Advance(ClusterState& state, const WriterTick& tick) override;
  void Loaded(ClusterState& state) override;

  // ---- writer thread ----
  // `node`'s agent said hello on `session`; `collects`: it answers
  // EvidenceRequests. Members it was asked about are asked again there.
  void AgentUp(const std::string& node, uint64_t session, bool collects);
  // A bundle from `node`'s agent (the stream's node). PERMISSION_DENIED when
  // the node was not asked for that incident's evidence or the bundle names
  // another node (the stream ends); RESOURCE_EXHAUSTED over
  // max_bundle_bytes; FAILED_PRECONDITION when already stored; INVALID_ARGUMENT
  // for a malformed bundle. Nothing is changed on an error but the member's
  // FAILED state for an oversized bundle.
  Status ApplyBundle(ClusterState& state, const std::string& node, v1::EvidenceBundle bundle, Mutation* m);

  // ---- readers (state lock held) ----
  // The incident's members and one stored bundle (paged by member node).
  StatusOr<v1::GetIncidentEvidenceResponse> Get(const IncidentRule* incidents,
                                                const v1::GetIncidentEvidenceRequest& req) const;
  uint64_t total_bytes() const { return total_bytes_; }
  size_t stored() const { return stored_order_.size(); }

 private:
  struct Entry {
    v1::EvidenceMember member;
    TimePoint since;
    TimePoint queued_at;
    TimePoint deadline;
    TimePoint stored_at;
    uint64_t sent_session = 0;
    std::optional<v1::EvidenceBundle> bundle;
  };
  using Key = std::pair<std::string, std::string>;  // incident id, node

  Entry* Find(const std::string& incident, const std::string& node);
  void Scan(ClusterState& state, TimePoint now);
  void Dispatch(ClusterState& state, const WriterTick& tick);
  void Fail(Entry& e, const std::string& detail);
  void Expire(const Key& key, v1::EvidenceState why, Mutation* m);
  void DropIncident(const std::string& incident, Mutation* m);
  void UpdateGauges();

  const EvidenceOptions options_;
  AgentOutbox* outbox_ = nullptr;
  EvidenceMetrics metrics_;
  // incident id -> member node -> its evidence.
  std::map<std::string, std::map<std::string, Entry>> entries_;
  size_t entry_count_ = 0;
  // Open incidents' revisions when their members were last scanned.
  std::map<std::string, uint64_t> scanned_;
  std::deque<Key> queue_;  // members to ask, in order
  size_t queued_ = 0;
  size_t in_flight_ = 0;
  std::set<std::pair<TimePoint, Key>> deadlines_;     // asked members
  std::set<std::pair<TimePoint, Key>> stored_order_;  // stored bundles, oldest first
  uint64_t total_bytes_ = 0;
  // Agents that collect evidence: node -> their session.
  std::map<std::string, uint64_t> agents_;
  // Agents that do not (an older NodeD, evidence off there).
  std::map<std::string, uint64_t> non_collecting_;
  bool dispatch_ = false;
  TimePoint next_housekeeping_{};
};

}  // namespace clusterd
