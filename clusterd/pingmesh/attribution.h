// Who is to blame for failed probes (docs/pingmesh.md, "Attribution"). Pure:
// a window of probe results in, findings out; FindingTracker adds the
// hysteresis that turns findings into faults raised and cleared.
//
// The rules, by majority over one window:
//   - a pair (source -> target) is bad when at least bad_loss of its probes
//     in the window were lost, judged only with min_sent probes or more;
//   - a node is faulty when more than node_majority of the peers that probed
//     it found it bad (nothing reaches it: its port, its NIC, the node), or
//     more than node_majority of the peers it probed were bad from it (it
//     reaches nothing), each judged only with min_peers peers or more;
//   - a domain is faulty when more than domain_share of its judged members
//     are faulty (min_peers judged members at least): one finding for the
//     domain replaces its members' and its links';
//   - a bad pair whose ends are both healthy is a link finding, one per
//     unordered pair, carrying the worse direction's loss.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "clusterd/pingmesh/plan.h"
#include "common/status.h"

namespace clusterd::pingmesh {

// One direction of one pair over the window.
struct PairStats {
  std::string source;
  std::string target;
  uint32_t sent = 0;
  uint32_t lost = 0;
  // Over the replies (sent - lost): their round-trip times' sum and the
  // longest, in microseconds (for the loss matrix; attribution ignores them).
  uint64_t rtt_sum_us = 0;
  uint32_t rtt_max_us = 0;
};

struct AttributionRules {
  uint32_t min_sent = 3;
  double bad_loss = 0.5;
  uint32_t min_peers = 3;
  double node_majority = 0.5;
  double domain_share = 0.5;
};

Status ValidateRules(const AttributionRules& rules);

enum class FindingKind { kNode, kLink, kDomain };

struct Finding {
  FindingKind kind = FindingKind::kNode;
  // The node (kNode), the lower-named end (kLink) or the domain id (kDomain).
  std::string subject;
  // kLink: the other end. Empty otherwise.
  std::string peer;
  // kNode: bad peers / judged peers, the worse of the two directions.
  // kLink: the worse direction's loss. kDomain: faulty members / judged.
  uint32_t bad = 0;
  uint32_t judged = 0;
  double loss = 0;

  // "node/<name>", "link/<a>/<b>", "domain/<id>": unique per finding.
  std::string Key() const { return KeyOf(kind, subject, peer); }
  static std::string KeyOf(FindingKind kind, const std::string& subject, const std::string& peer = "");
  bool operator==(const Finding&) const = default;
};

// The findings of one window, sorted by key. Pairs naming the same
// direction twice are summed. With `judged`, the keys (Finding::Key) the
// window had enough data to judge, found or not: a node with min_peers
// judged peers in a direction, a pair with min_sent probes in a direction,
// a domain with min_peers judged members.
std::vector<Finding> Attribute(const std::vector<PairStats>& window, const std::vector<ProbeDomain>& domains,
                               const AttributionRules& rules, std::set<std::string>* judged = nullptr);

// What the findings make of each direction of `directions` (for the loss
// matrix), in the same order: "" (not bad, or fewer than min_sent probes),
// "domain:<id>" (both ends in a faulty domain), "node:<name>" (an end is a
// faulty node), "link" (a link finding between its ends), "bad" (bad,
// nothing named: too few peers judged).
std::vector<std::string> Explain(const std::vector<PairStats>& directions, const std::vector<Finding>& findings,
                                 const std::vector<ProbeDomain>& domains, const AttributionRules& rules);

// Explain one direction at a time: the findings indexed once, for a page of
// the loss matrix. Borrows `domains` and `rules`, which must outlive it.
class Explainer {
 public:
  Explainer(const std::vector<Finding>& findings, const std::vector<ProbeDomain>& domains,
            const AttributionRules& rules);
  std::string Of(const PairStats& direction) const;

 private:
  const AttributionRules& rules_;
  std::set<std::string> faulty_nodes_;
  std::set<std::pair<std::string, std::string>> links_;
  std::vector<const ProbeDomain*> faulty_domains_;
};

// Hysteresis: a finding becomes active after raise_after windows in a row
// and stops after clear_after windows in a row without it. Windows that did
// not judge it (no data: a pair of a large domain is probed only every few
// rounds, see Plan.rounds_to_cover) count neither way.
class FindingTracker {
 public:
  FindingTracker(uint32_t raise_after, uint32_t clear_after);

  struct Change {
    Finding finding;
    bool raised = false;  // false: cleared
  };
  // One window's findings (Attribute's answer) and what it judged (null:
  // everything); the changes, sorted by key.
  std::vector<Change> Update(const std::vector<Finding>& findings, const std::set<std::string>* judged = nullptr);
  // After a restart: the findings active before it (from the stored
  // faults) are active again, with no window counted against them.
  void Restore(const std::vector<Finding>& active);
  std::vector<Finding> Active() const;

 private:
  struct Entry {
    Finding finding;
    uint32_t seen = 0;    // windows in a row with it
    uint32_t missed = 0;  // windows in a row without it
    bool active = false;
  };
  uint32_t raise_after_;
  uint32_t clear_after_;
  std::map<std::string, Entry> entries_;
};

}  // namespace clusterd::pingmesh
