#include "clusterd/state/incidents.h"

#include <algorithm>
#include <cctype>

#include "clusterd/state/cluster_state.h"
#include "clusterd/state/pingmesh_rule.h"
#include "clusterd/state/response_limits.h"
#include "clusterd/state/validation.h"
#include "clusterd/storage/key_codec.h"
#include "clusterd/storage/schema.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_proto.h"

namespace clusterd {

namespace {

// An incident's member: its node, or "<node>/<chip>".
std::string IncidentMemberKey(const std::string& node, std::optional<uint32_t> device) {
  return device ? node + "/" + std::to_string(*device) : node;
}

std::string IncidentMemberKeyOfMember(const v1::IncidentMember& m) {
  return m.has_device_id() ? m.node() + "/" + std::to_string(m.device_id()) : m.node();
}

std::string IncidentMemberKeyOf(const v1::Fault& f) {
  return IncidentMemberKey(f.node(), f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt);
}

bool ContainsSwitch(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower.find("switch") != std::string::npos;
}

// A switch-level fault: a reporter's switch (code, subject or message naming
// a switch: MindCluster's switch faults, a reporter's switch id), or a public
// fault of type Network (its message starts with the type).
bool IsSwitchFault(const v1::Fault& f) {
  if (ContainsSwitch(f.code()) || ContainsSwitch(f.subject())) return true;
  if (f.source() == v1::FAULT_SOURCE_NETWORK || f.source() == v1::FAULT_SOURCE_EXTERNAL) {
    if (ContainsSwitch(f.message())) return true;
    if (f.reporter().rfind("pubfault/", 0) == 0 && f.message().rfind("Network", 0) == 0) return true;
  }
  return false;
}

std::string IncidentStoreKey(const std::string& id) { return std::string(storage::kMetaIncidentPrefix) + id; }

// "inc-12" -> 12 (0 when it is not one of ours).
uint64_t IncidentSeq(const std::string& id) {
  if (id.rfind("inc-", 0) != 0) return 0;
  try {
    return std::stoull(id.substr(4));
  } catch (...) {
    return 0;
  }
}

std::string Seconds(std::chrono::nanoseconds d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

Status ValidateIncidentPolicy(const IncidentPolicy& p) {
  if (p.window < std::chrono::milliseconds(100) || p.window > std::chrono::hours(1)) {
    return InvalidArgument("incident_window: between 100ms and 1h");
  }
  if (p.min_nodes < 2) return InvalidArgument("incident_min_nodes: at least 2 (one node's faults are its own)");
  if (p.min_devices < 2) return InvalidArgument("incident_min_devices: at least 2 (a lone chip fault stays one)");
  if (p.isolate_percent > 100) return InvalidArgument("incident_isolate_percent: at most 100");
  return Status::Ok();
}

void IncidentRule::SetMetrics(Counter* opened, std::map<std::string, Gauge*> open_by_level,
                              std::map<std::string, Gauge*> isolated_by_level) {
  opened_total_ = opened;
  open_gauges_ = std::move(open_by_level);
  isolated_gauges_ = std::move(isolated_by_level);
}

void IncidentRule::UpdateGauges() {
  std::map<std::string, int> open, isolated;
  for (const auto& [key, id] : open_by_domain_) {
    const std::string level = key.substr(0, key.find('='));
    ++open[level];
    if (isolated_domains_.contains(key)) ++isolated[level];
  }
  for (const auto& [level, g] : open_gauges_) g->Set(open[level]);
  for (const auto& [level, g] : isolated_gauges_) g->Set(isolated[level]);
}

// ------------------------------------------------------------ the writer ---

void IncidentRule::Loaded(ClusterState& state) {
  incidents_.clear();
  open_by_domain_.clear();
  work_.clear();
  recent_.clear();
  dirty_.clear();
  isolated_domains_.clear();
  avoid_domains_.clear();
  index_generation_.reset();
  Status bad;
  const std::string prefix(storage::kMetaIncidentPrefix);
  (void)state.store().ForEach(storage::Cf::kMeta, [&](std::string_view key, std::string_view value) {
    if (key.substr(0, prefix.size()) != prefix) return;
    v1::Incident inc;
    if (!inc.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      GetLogger("state")->error("incident record {} does not parse: skipped", storage::HexEncode(key));
      return;
    }
    next_seq_ = std::max(next_seq_, IncidentSeq(inc.id()) + 1);
    incidents_[inc.id()] = std::move(inc);
  });
  for (auto& [id, inc] : incidents_) {
    if (inc.state() != v1::INCIDENT_STATE_OPEN) continue;
    const std::string key = DomainKey(inc.domain());
    open_by_domain_[key] = id;
    if (inc.isolated()) isolated_domains_.insert(key);
    if (inc.avoid()) avoid_domains_.insert(key);
    Work& w = work_[id];
    for (int i = 0; i < inc.members_size(); ++i) {
      const v1::IncidentMember& mem = inc.members(i);
      const std::string mk = IncidentMemberKeyOfMember(mem);
      w.member_pos[mk] = i;
      w.nodes.insert(mem.node());
      if (mem.has_device_id()) w.devices.insert(mk);
      if (const v1::Fault* f = state.FindFault(mem.fault_id()); f && !f->subject().empty()) {
        w.subjects[f->subject()].insert(mk);
      }
    }
    // Faults may have cleared while ClusterD was down: the first run
    // recounts and closes what has none left.
    w.recount = true;
    dirty_.try_emplace(id, Change::kNone);
  }
  UpdateGauges();
}

void IncidentRule::FaultChanged(ClusterState& state, const v1::Fault& f, bool raised, bool new_occurrence) {
  if (!policy_.enabled || model_.empty()) return;
  const v1::Node* node = state.FindNode(f.node());
  if (node == nullptr) return;
  const std::vector<v1::DomainRef> domains = model_.Of(*node);
  if (domains.empty()) return;
  if (!raised) {
    for (const v1::DomainRef& d : domains) {
      auto it = open_by_domain_.find(DomainKey(d));
      if (it == open_by_domain_.end()) continue;
      Work& w = work_[it->second];
      if (!w.nodes.contains(f.node())) continue;
      w.recount = true;
      dirty_.try_emplace(it->second, Change::kUpdated);
    }
    return;
  }
  if (!new_occurrence || f.level() < v1::FAULT_LEVEL_SUB_HEALTH) return;
  const TimePoint now = state.Now();
  const Hit hit{now, f.node(), f.has_device_id() ? std::optional(f.device_id()) : std::nullopt, f.id(), f.code()};
  // An open incident of one of its domains takes it, the narrowest first.
  for (auto d = domains.rbegin(); d != domains.rend(); ++d) {
    auto it = open_by_domain_.find(DomainKey(*d));
    if (it == open_by_domain_.end()) continue;
    AddMember(state, incidents_[it->second], work_[it->second], hit, now);
    dirty_.try_emplace(it->second, Change::kUpdated);
    return;
  }
  // Otherwise it counts in each domain's window; the narrowest domain that
  // crosses the thresholds opens an incident with the window's hits.
  for (const v1::DomainRef& d : domains) {
    std::deque<Hit>& q = recent_[DomainKey(d)];
    q.push_back(hit);
    while (!q.empty() && (now - q.front().time > policy_.window || q.size() > kMaxRecentHits)) q.pop_front();
  }
  for (auto d = domains.rbegin(); d != domains.rend(); ++d) {
    std::deque<Hit>& q = recent_[DomainKey(*d)];
    std::set<std::string> nodes, chips;
    for (const Hit& h : q) {
      nodes.insert(h.node);
      if (h.device) chips.insert(IncidentMemberKey(h.node, h.device));
    }
    if (nodes.size() < policy_.min_nodes && chips.size() < policy_.min_devices) continue;
    const std::vector<Hit> hits(q.begin(), q.end());
    std::set<std::string> taken;
    for (const Hit& h : hits) taken.insert(h.fault_id);
    // The hits belong to this incident now: no other domain counts them again.
    for (const v1::DomainRef& other : domains) {
      std::deque<Hit>& oq = recent_[DomainKey(other)];
      oq.erase(std::remove_if(oq.begin(), oq.end(), [&](const Hit& h) { return taken.contains(h.fault_id); }),
               oq.end());
    }
    Open(state, *d, hits, now);
    return;
  }
}

size_t IncidentRule::DomainSize(ClusterState& state, const std::string& key) {
  const uint64_t generation = state.node_table().labels_generation();
  if (index_generation_ != generation) {
    index_ = DomainIndex::Build(state, model_);
    index_generation_ = generation;
  }
  return index_.SizeOf(key);
}

void IncidentRule::Open(ClusterState& state, const v1::DomainRef& domain, const std::vector<Hit>& hits, TimePoint now) {
  const std::string id = "inc-" + std::to_string(next_seq_++);
  const std::string key = DomainKey(domain);
  v1::Incident& inc = incidents_[id];
  inc.set_id(id);
  *inc.mutable_domain() = domain;
  inc.set_state(v1::INCIDENT_STATE_OPEN);
  *inc.mutable_open_time() = ToTimestamp(hits.empty() ? now : hits.front().time);
  inc.set_domain_nodes(static_cast<uint32_t>(DomainSize(state, key)));
  open_by_domain_[key] = id;
  Work& w = work_[id];
  std::set<std::string> nodes, chips;
  for (const Hit& h : hits) {
    nodes.insert(h.node);
    if (h.device) chips.insert(IncidentMemberKey(h.node, h.device));
  }
  Note(inc, now,
       "opened: " + std::to_string(nodes.size()) + " node(s), " + std::to_string(chips.size()) + " chip(s) of " + key +
           " hit within " + Seconds(now - FromTimestamp(inc.open_time())));
  for (const Hit& h : hits) AddMember(state, inc, w, h, now);
  // Recoveries its first faults already started are the jobs' ones for it.
  for (const auto& [rid, r] : state.recoveries()) {
    if (r.state() == v1::RECOVERY_STATE_CANCELLED || r.state() == v1::RECOVERY_STATE_WAITING) continue;
    if (!Answers(inc, r)) continue;
    v1::IncidentDecision d;
    d.set_action("recovery");
    d.set_job_id(r.job_id());
    d.set_recovery_id(rid);
    d.set_dry_run(r.dry_run());
    d.set_detail("started by its first faults: the job's one recovery for this incident");
    Decide(inc, now, std::move(d));
  }
  dirty_[id] = Change::kOpened;
  if (opened_total_ != nullptr) opened_total_->Inc();
  GetLogger("state")->warn("incident {} opened in {}: {} nodes, {} chips hit", id, key, nodes.size(), chips.size());
}

void IncidentRule::AddMember(ClusterState& state, v1::Incident& inc, Work& w, const Hit& hit, TimePoint now) {
  const std::string mk = IncidentMemberKey(hit.node, hit.device);
  auto [it, added] = w.member_pos.try_emplace(mk, -1);
  if (added) {
    inc.set_total_members(inc.total_members() + 1);
    w.nodes.insert(hit.node);
    if (hit.device) w.devices.insert(mk);
    inc.set_nodes_hit(static_cast<uint32_t>(w.nodes.size()));
    inc.set_devices_hit(static_cast<uint32_t>(w.devices.size()));
    if (static_cast<size_t>(inc.members_size()) < kMaxMembers) {
      it->second = inc.members_size();
      v1::IncidentMember* mem = inc.add_members();
      mem->set_node(hit.node);
      if (hit.device) mem->set_device_id(*hit.device);
      mem->set_fault_id(hit.fault_id);
      mem->set_code(hit.code);
      *mem->mutable_time() = ToTimestamp(hit.time);
      mem->set_active_faults(1);
    }
    Note(inc, hit.time, "hit: " + mk + " " + hit.code + " (" + hit.fault_id + ")");
  } else if (it->second >= 0) {
    v1::IncidentMember* mem = inc.mutable_members(it->second);
    mem->set_active_faults(mem->active_faults() + 1);
  }
  inc.set_active_faults(inc.active_faults() + 1);
  *inc.mutable_update_time() = ToTimestamp(now);
  w.recount = true;
  UpdateRoot(state, inc, w, state.FindFault(hit.fault_id), now);
}

void IncidentRule::UpdateRoot(ClusterState& state, v1::Incident& inc, Work& w, const v1::Fault* f, TimePoint now) {
  (void)state;
  const auto kind = inc.root().kind();
  if (kind == v1::INCIDENT_ROOT_KIND_SWITCH) return;  // nothing is narrower
  if (f != nullptr && IsSwitchFault(*f)) {
    v1::IncidentRoot* root = inc.mutable_root();
    root->set_kind(v1::INCIDENT_ROOT_KIND_SWITCH);
    root->set_subject(f->subject().empty() ? f->code() : f->subject());
    root->set_fault_id(f->id());
    root->set_node(f->node());
    root->set_evidence("switch-level fault " + f->code() + " on " + f->node() +
                       (f->reporter().empty() ? std::string() : " (reporter " + f->reporter() + ")"));
    Note(inc, now, "root: switch " + root->subject() + " (" + f->id() + ")");
    return;
  }
  // The pingmesh judged the domain's network at fault (docs/pingmesh.md):
  // the domain is the root, with the probes as its evidence.
  if (f != nullptr && f->reporter() == kPingmeshReporter && f->code() == kPingmeshDomainCode &&
      kind != v1::INCIDENT_ROOT_KIND_LINK && inc.root().fault_id().empty()) {
    v1::IncidentRoot* root = inc.mutable_root();
    root->set_kind(v1::INCIDENT_ROOT_KIND_DOMAIN);
    root->set_subject(DomainKey(inc.domain()));
    root->set_fault_id(f->id());
    root->set_node(f->node());
    root->set_evidence("the pingmesh: " + f->message());
    Note(inc, now, "root: the domain's network, by the pingmesh (" + f->id() + ")");
    return;
  }
  if (f != nullptr && !f->subject().empty()) {
    std::set<std::string>& members = w.subjects[f->subject()];
    members.insert(IncidentMemberKeyOf(*f));
    if (members.size() >= 2 && kind != v1::INCIDENT_ROOT_KIND_LINK) {
      v1::IncidentRoot* root = inc.mutable_root();
      root->set_kind(v1::INCIDENT_ROOT_KIND_LINK);
      root->set_subject(f->subject());
      root->set_fault_id(f->id());
      root->set_node(f->node());
      root->set_evidence(std::to_string(members.size()) + " members report faults on " + f->subject());
      Note(inc, now, "root: shared link " + f->subject());
      return;
    }
  }
  if (kind == v1::INCIDENT_ROOT_KIND_UNSPECIFIED) {
    v1::IncidentRoot* root = inc.mutable_root();
    root->set_kind(v1::INCIDENT_ROOT_KIND_DOMAIN);
    root->set_subject(DomainKey(inc.domain()));
    root->set_evidence("no switch fault or shared link among the members' faults: the domain itself");
  }
}

bool IncidentRule::Recount(const ClusterState& state, v1::Incident& inc) {
  uint32_t total = 0;
  std::map<std::string, uint32_t> by_member;
  std::set<std::string> nodes;
  for (const v1::IncidentMember& mem : inc.members()) nodes.insert(mem.node());
  const Work& w = work_[inc.id()];
  for (const std::string& node : w.nodes) nodes.insert(node);
  std::vector<const v1::Fault*> faults;
  for (const std::string& node : nodes) state.AppendFaultsOnNode(node, &faults);
  for (const v1::Fault* f : faults) {
    if (f->state() != v1::FAULT_STATE_ACTIVE || f->level() < v1::FAULT_LEVEL_SUB_HEALTH) continue;
    const std::string mk = IncidentMemberKeyOf(*f);
    if (!w.member_pos.contains(mk)) continue;
    ++by_member[mk];
    ++total;
  }
  for (v1::IncidentMember& mem : *inc.mutable_members()) {
    auto it = by_member.find(IncidentMemberKeyOfMember(mem));
    mem.set_active_faults(it == by_member.end() ? 0 : it->second);
  }
  inc.set_active_faults(total);
  return total == 0;
}

void IncidentRule::Note(v1::Incident& inc, TimePoint now, std::string what) {
  auto* timeline = inc.mutable_timeline();
  if (static_cast<size_t>(timeline->size()) >= kMaxTimeline) {
    // Keep the first entries (how it began) and the newest.
    timeline->DeleteSubrange(static_cast<int>(kTimelineHead), 1);
    inc.set_timeline_dropped(inc.timeline_dropped() + 1);
  }
  v1::IncidentTimelineEntry* e = inc.add_timeline();
  *e->mutable_time() = ToTimestamp(now);
  e->set_what(std::move(what));
}

void IncidentRule::Decide(v1::Incident& inc, TimePoint now, v1::IncidentDecision d) {
  *d.mutable_time() = ToTimestamp(now);
  if (static_cast<size_t>(inc.decisions_size()) < kMaxDecisions) *inc.add_decisions() = d;
  Note(inc, now,
       "decision: " + d.action() + (d.job_id().empty() ? "" : " job " + d.job_id()) +
           (d.recovery_id().empty() ? "" : " recovery " + d.recovery_id()) + (d.dry_run() ? " (dry run)" : "") +
           (d.detail().empty() ? "" : ": " + d.detail()));
}

void IncidentRule::MaybeIsolate(ClusterState& state, v1::Incident& inc, TimePoint now, Mutation* m) {
  if (policy_.isolate_percent == 0 || inc.isolated() || inc.state() != v1::INCIDENT_STATE_OPEN) return;
  const std::string key = DomainKey(inc.domain());
  const size_t size = std::max<size_t>(DomainSize(state, key), 1);
  inc.set_domain_nodes(static_cast<uint32_t>(size));
  if (static_cast<size_t>(inc.nodes_hit()) * 100 <= size * policy_.isolate_percent) return;
  // Decided once per incident: held or done, the decision is recorded.
  for (const v1::IncidentDecision& d : inc.decisions()) {
    if (d.action() == "isolate-domain" || d.action() == "isolate-domain-held") return;
  }
  v1::IncidentDecision d;
  d.set_dry_run(state.admin_state().dry_run());
  const std::string why = std::to_string(inc.nodes_hit()) + " of " + std::to_string(size) + " nodes hit, over " +
                          std::to_string(policy_.isolate_percent) + "% (incident_isolate_percent)";
  // The blast-radius gates, per domain and cluster-wide.
  const auto it = index_.members.find(key);
  const std::vector<std::string> empty;
  const std::vector<std::string>& members = it == index_.members.end() ? empty : it->second;
  std::set<std::string> isolated = state.IsolatedNodes();
  size_t after = isolated.size();
  for (const std::string& n : members) after += isolated.contains(n) ? 0 : 1;
  const size_t total = std::max(state.node_count(), after);
  const size_t allowed =
      policy_.max_isolated_node_percent == 0 ? 0 : std::max<size_t>(1, total * policy_.max_isolated_node_percent / 100);
  std::string held;
  if (isolated_domains_.size() >= policy_.max_isolated_domains) {
    held = "blast radius: " + std::to_string(isolated_domains_.size()) + " domain(s) already isolated, the limit is " +
           std::to_string(policy_.max_isolated_domains) + " (incident_max_isolated_domains)";
  } else if (after > allowed) {
    held = "blast radius: isolating the domain would make " + std::to_string(after) + " of " + std::to_string(total) +
           " nodes isolated, over the " + std::to_string(policy_.max_isolated_node_percent) +
           "% limit (max_isolated_node_percent)";
  } else if (state.admin_state().recovery_paused()) {
    held = "paused: automatic recovery is paused cluster-wide";
  }
  if (!held.empty()) {
    d.set_action("isolate-domain-held");
    d.set_detail(why + "; " + held);
    Decide(inc, now, std::move(d));
    return;
  }
  d.set_action("isolate-domain");
  d.set_detail(why);
  if (!d.dry_run()) {
    for (const std::string& n : members) {
      (void)state.SetIsolated(n, std::nullopt, "incident " + inc.id() + ": domain " + key + " isolated", m);
    }
    inc.set_isolated(true);
    isolated_domains_.insert(key);
  }
  Decide(inc, now, std::move(d));
}

void IncidentRule::MaybeAvoid(ClusterState& state, v1::Incident& inc, TimePoint now) {
  // An isolated domain keeps work out already (Node.isolated, its taint).
  if (inc.avoid() || inc.isolated() || inc.state() != v1::INCIDENT_STATE_OPEN) return;
  const bool dry_run = state.admin_state().dry_run();
  // Decided once per incident; a dry-run decision is taken again for real
  // once dry-run is off.
  for (const v1::IncidentDecision& d : inc.decisions()) {
    if (d.action() == "avoid-domain" && (!d.dry_run() || dry_run)) return;
  }
  const std::string key = DomainKey(inc.domain());
  v1::IncidentDecision d;
  d.set_action("avoid-domain");
  d.set_dry_run(dry_run);
  d.set_detail("no rank is placed into " + key +
               " while the incident is open: its nodes are avoided (PreferNoSchedule on Kubernetes) and "
               "recoveries' cluster actions name the domain to avoid");
  if (!dry_run) {
    inc.set_avoid(true);
    avoid_domains_.insert(key);
  }
  Decide(inc, now, std::move(d));
}

void IncidentRule::Store(ClusterState& state, v1::Incident& inc, v1::EventType type, TimePoint now, Mutation* m) {
  inc.set_revision(state.NextRevision());
  *inc.mutable_update_time() = ToTimestamp(now);
  m->changes.Put(storage::Cf::kMeta, IncidentStoreKey(inc.id()), inc);
  v1::Event ev;
  ev.set_type(type);
  ev.set_revision(inc.revision());
  ev.set_message("incident " + inc.id() + " in " + DomainKey(inc.domain()) + ": " +
                 v1::IncidentState_Name(inc.state()) + ", " + std::to_string(inc.nodes_hit()) + " node(s), " +
                 std::to_string(inc.devices_hit()) + " chip(s) hit, root " + inc.root().subject());
  v1::Incident* summary = ev.mutable_incident();
  *summary = inc;
  summary->clear_members();
  summary->clear_timeline();
  state.Emit(m, std::move(ev));
}

void IncidentRule::DropOldClosed(Mutation* m) {
  std::vector<std::pair<uint64_t, std::string>> closed;
  for (const auto& [id, inc] : incidents_) {
    if (inc.state() == v1::INCIDENT_STATE_CLOSED) closed.emplace_back(IncidentSeq(id), id);
  }
  if (closed.size() <= policy_.keep_closed) return;
  std::sort(closed.begin(), closed.end());
  const size_t drop = closed.size() - policy_.keep_closed;
  for (size_t i = 0; i < drop; ++i) {
    m->changes.Delete(storage::Cf::kMeta, IncidentStoreKey(closed[i].second));
    incidents_.erase(closed[i].second);
  }
}

TimePoint IncidentRule::Advance(ClusterState& state, const WriterTick& tick) {
  const TimePoint now = tick.now;
  // Windows of domains with no recent hit go.
  for (auto it = recent_.begin(); it != recent_.end();) {
    if (it->second.empty() || now - it->second.back().time > policy_.window) {
      it = recent_.erase(it);
    } else {
      ++it;
    }
  }
  if (dirty_.empty()) return TimePoint::max();
  bool closed_any = false;
  for (const auto& [id, change] : dirty_) {
    auto it = incidents_.find(id);
    if (it == incidents_.end()) continue;
    v1::Incident& inc = it->second;
    if (inc.state() != v1::INCIDENT_STATE_OPEN) continue;
    Work& w = work_[id];
    bool closing = false;
    if (w.recount) {
      closing = Recount(state, inc);
      w.recount = false;
    }
    const std::string key = DomainKey(inc.domain());
    if (closing) {
      inc.set_state(v1::INCIDENT_STATE_CLOSED);
      *inc.mutable_close_time() = ToTimestamp(now);
      Note(inc, now, "closed: every member's faults cleared");
      if (inc.avoid()) {
        inc.set_avoid(false);
        v1::IncidentDecision lift;
        lift.set_action("avoid-domain-lifted");
        lift.set_detail("the incident closed: ranks may be placed into " + key + " again");
        Decide(inc, now, std::move(lift));
      }
      open_by_domain_.erase(key);
      isolated_domains_.erase(key);
      avoid_domains_.erase(key);
      work_.erase(id);
      Store(state, inc, v1::EVENT_TYPE_INCIDENT_CLOSED, now, tick.m);
      closed_any = true;
      GetLogger("state")->info("incident {} in {} closed", id, key);
      continue;
    }
    // A record loaded as it was (nothing cleared meanwhile) is not written again.
    if (change == Change::kNone) continue;
    MaybeIsolate(state, inc, now, tick.m);
    MaybeAvoid(state, inc, now);
    Store(state, inc, change == Change::kOpened ? v1::EVENT_TYPE_INCIDENT_OPENED : v1::EVENT_TYPE_INCIDENT_UPDATED, now,
          tick.m);
  }
  dirty_.clear();
  if (closed_any) DropOldClosed(tick.m);
  UpdateGauges();
  return TimePoint::max();
}

void IncidentRule::RecordRecovery(ClusterState& state, const v1::Recovery& recovery, Mutation* m) {
  std::set<std::string> ids;
  for (const std::string& fid : recovery.trigger_fault_ids()) {
    const v1::Fault* f = state.FindFault(fid);
    if (f == nullptr) continue;
    if (const v1::Incident* inc = IncidentOf(state, *f)) ids.insert(inc->id());
  }
  const TimePoint now = state.Now();
  for (const std::string& id : ids) {
    v1::Incident& inc = incidents_[id];
    bool known = false;
    for (const v1::IncidentDecision& d : inc.decisions()) {
      known = known || (d.action() == "recovery" && d.recovery_id() == recovery.id());
    }
    if (known) continue;
    v1::IncidentDecision d;
    d.set_action("recovery");
    d.set_job_id(recovery.job_id());
    d.set_recovery_id(recovery.id());
    d.set_dry_run(recovery.dry_run());
    std::string detail =
        "the job's one recovery for this incident (" + v1::RecoveryStrategy_Name(recovery.strategy()) + ")";
    if ((inc.avoid() || inc.isolated()) && (recovery.strategy() == v1::RECOVERY_STRATEGY_POD_RESCHEDULE ||
                                            recovery.strategy() == v1::RECOVERY_STRATEGY_JOB_RESCHEDULE)) {
      detail += "; no replacement is placed into " + DomainKey(inc.domain());
    }
    d.set_detail(std::move(detail));
    Decide(inc, now, std::move(d));
    dirty_.erase(id);
    if (Work& w = work_[id]; w.recount) {
      Recount(state, inc);
      w.recount = false;
    }
    Store(state, inc, v1::EVENT_TYPE_INCIDENT_UPDATED, now, m);
  }
}

// ------------------------------------------------------------ the readers ---

StatusOr<v1::Incident> IncidentRule::Get(const std::string& id) const {
  if (id.empty()) return InvalidArgument("id: required");
  auto it = incidents_.find(id);
  if (it == incidents_.end()) return NotFound("incident " + id + " not found");
  return it->second;
}

StatusOr<v1::ListIncidentsResponse> IncidentRule::List(const v1::ListIncidentsRequest& req) const {
  auto page = ParsePage(req.page_size(), req.page_token());
  if (!page.ok()) return page.status();
  std::string domain;
  if (!req.domain().empty()) {
    auto ref = ParseDomainRef(req.domain());
    if (!ref.ok()) return ref.status();
    domain = DomainKey(*ref);
  }
  // Newest first: by sequence, descending; the page key is the sequence.
  std::vector<std::pair<uint64_t, const v1::Incident*>> order;
  for (const auto& [id, inc] : incidents_) {
    if (req.open_only() && inc.state() != v1::INCIDENT_STATE_OPEN) continue;
    if (!domain.empty() && DomainKey(inc.domain()) != domain) continue;
    order.emplace_back(IncidentSeq(id), &inc);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t after = UINT64_MAX;
  if (!page->start.empty()) {
    try {
      after = std::stoull(page->start);
    } catch (...) {
      return InvalidArgument("page_token: not one this call returned");
    }
  }
  v1::ListIncidentsResponse out;
  out.set_total_size(static_cast<int32_t>(order.size()));
  PageBudget budget(page->size);
  uint64_t last = 0;
  for (const auto& [seq, inc] : order) {
    if (seq >= after) continue;
    v1::Incident summary = *inc;
    summary.clear_members();
    summary.clear_timeline();
    if (!budget.Take(summary.ByteSizeLong())) {
      if (last != 0) out.set_next_page_token(storage::HexEncode(std::to_string(last)));
      break;
    }
    last = seq;
    *out.add_incidents() = std::move(summary);
  }
  return out;
}

std::string IncidentRule::OpenIncidentOf(const std::string& domain_key, bool* isolated) const {
  auto it = open_by_domain_.find(domain_key);
  if (isolated != nullptr) *isolated = isolated_domains_.contains(domain_key);
  return it == open_by_domain_.end() ? std::string() : it->second;
}

bool IncidentRule::Avoided(const std::string& domain_key) const {
  return avoid_domains_.contains(domain_key) && !isolated_domains_.contains(domain_key);
}

std::map<std::string, std::string> IncidentRule::AvoidedDomains() const {
  std::map<std::string, std::string> out;
  for (const std::string& key : avoid_domains_) {
    if (isolated_domains_.contains(key)) continue;
    if (auto it = open_by_domain_.find(key); it != open_by_domain_.end()) out[key] = it->second;
  }
  return out;
}

std::map<std::string, std::string> IncidentRule::AvoidedNodes(const StateView& state) const {
  std::map<std::string, std::string> out;
  const std::map<std::string, std::string> domains = AvoidedDomains();
  if (domains.empty()) return out;
  const std::set<std::string> isolated = state.IsolatedNodes();
  const DomainIndex index = DomainIndex::Build(state, model_);
  for (const auto& [key, id] : domains) {
    auto it = index.members.find(key);
    if (it == index.members.end()) continue;
    for (const std::string& node : it->second) {
      if (!isolated.contains(node)) out.try_emplace(node, id);
    }
  }
  return out;
}

bool IncidentRule::RecordDecision(const std::string& id, v1::IncidentDecision d, TimePoint now) {
  auto it = incidents_.find(id);
  if (it == incidents_.end() || it->second.state() != v1::INCIDENT_STATE_OPEN) return false;
  for (const v1::IncidentDecision& known : it->second.decisions()) {
    if (known.action() == d.action() && known.recovery_id() == d.recovery_id() && known.job_id() == d.job_id()) {
      return true;
    }
  }
  Decide(it->second, now, std::move(d));
  dirty_.try_emplace(id, Change::kUpdated);
  return true;
}

std::set<std::string> IncidentRule::OpenDomains() const {
  std::set<std::string> out;
  for (const auto& [key, id] : open_by_domain_) out.insert(key);
  return out;
}

const v1::Incident* IncidentRule::IncidentOf(const StateView& state, const v1::Fault& fault) const {
  if (open_by_domain_.empty()) return nullptr;
  const v1::Node* node = state.FindNode(fault.node());
  if (node == nullptr) return nullptr;
  const std::string mk = IncidentMemberKeyOf(fault);
  for (const v1::DomainRef& d : model_.Of(*node)) {
    auto it = open_by_domain_.find(DomainKey(d));
    if (it == open_by_domain_.end()) continue;
    auto w = work_.find(it->second);
    if (w != work_.end() && w->second.member_pos.contains(mk)) return &incidents_.at(it->second);
  }
  return nullptr;
}

bool IncidentRule::Answers(const v1::Incident& incident, const v1::Recovery& recovery) const {
  if (FromTimestamp(recovery.create_time()) < FromTimestamp(incident.open_time())) return false;
  auto w = work_.find(incident.id());
  if (w == work_.end()) return false;
  for (const std::string& fid : recovery.trigger_fault_ids()) {
    if (w->second.nodes.contains(fid.substr(0, fid.find('/')))) return true;
  }
  return false;
}

std::optional<std::string> DomainAffinityOf(const v1::Job& job) {
  const auto& labels = job.labels();
  if (auto it = labels.find(std::string(kDomainAffinityLabel)); it != labels.end() && !it->second.empty()) {
    return std::string(kDomainAffinityLabel) + "=" + it->second;
  }
  // MindCluster (ascend-for-volcano's IsSuperPodJob): the schedule policy
  // decides when it is there; an sp-block otherwise.
  if (auto it = labels.find("mindcluster/huawei.com/schedule_policy"); it != labels.end()) {
    static const std::set<std::string, std::less<>> kSuperPodPolicies = {"chip2-node16-sp", "chip2-node8-sp",
                                                                         "chip8-node8-sp", "chip8-node8-ra64-sp"};
    if (kSuperPodPolicies.contains(it->second)) return "SuperPoD schedule policy " + it->second;
    return std::nullopt;
  }
  if (auto it = labels.find("mindcluster/sp-block"); it != labels.end()) return "SuperPoD sp-block " + it->second;
  return std::nullopt;
}

const IncidentRule* IncidentsOf(const ClusterState& state) { return state.Attached<IncidentRule>(); }

namespace {

Status NoDomainModel() { return Unavailable("no fault-domain model on this replica (a standby): ask the leader"); }

}  // namespace

StatusOr<v1::GetNodeResponse> GetNodeWithDomains(const StateView& view, const IncidentRule* rule,
                                                 const v1::GetNodeRequest& req) {
  auto out = view.GetNode(req);
  if (out.ok() && rule != nullptr) rule->model().Describe(out->mutable_node());
  return out;
}

StatusOr<v1::ListNodesResponse> ListNodesWithDomains(const StateView& view, const IncidentRule* rule,
                                                     const v1::ListNodesRequest& req) {
  if (req.domain().empty()) {
    auto out = view.ListNodes(req);
    if (out.ok() && rule != nullptr) {
      for (v1::Node& n : *out->mutable_nodes()) rule->model().Describe(&n);
    }
    return out;
  }
  if (rule == nullptr) return NoDomainModel();
  auto ref = ParseDomainRef(req.domain());
  if (!ref.ok()) return ref.status();
  auto term = rule->model().SelectorOf(*ref);
  if (!term.ok()) return term.status();
  v1::ListNodesRequest narrowed = req;
  narrowed.set_label_selector(req.label_selector().empty() ? *term : req.label_selector() + "," + *term);
  auto out = view.ListNodes(narrowed);
  if (out.ok()) {
    for (v1::Node& n : *out->mutable_nodes()) rule->model().Describe(&n);
  }
  return out;
}

StatusOr<v1::ListDomainsResponse> ListDomainsWith(const StateView& view, const IncidentRule* rule,
                                                  const v1::ListDomainsRequest& req) {
  if (rule == nullptr) return NoDomainModel();
  return ListDomains(view, rule->model(), rule, req);
}

StatusOr<v1::Incident> GetIncidentWith(const IncidentRule* rule, const std::string& id) {
  if (rule == nullptr) return NoDomainModel();
  return rule->Get(id);
}

StatusOr<v1::ListIncidentsResponse> ListIncidentsWith(const IncidentRule* rule, const v1::ListIncidentsRequest& req) {
  if (rule == nullptr) return NoDomainModel();
  return rule->List(req);
}

}  // namespace clusterd
