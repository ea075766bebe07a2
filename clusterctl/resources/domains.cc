// get domains, get incidents [ID], describe incident ID (docs/domains.md);
// get links (docs/pingmesh.md).
#include <google/protobuf/util/time_util.h>

#include <cmath>
#include <string>
#include <vector>

#include "clusterctl/resources/resources.h"
#include "clusterd/v1/domain.pb.h"
#include "clusterd/v1/pingmesh.pb.h"

namespace clusterctl {
namespace {

using DomainResource = Resource<v1::Domain, NoGet, v1::ListDomainsRequest, v1::ListDomainsResponse>;
using IncidentResource =
    Resource<v1::Incident, v1::GetIncidentResponse, v1::ListIncidentsRequest, v1::ListIncidentsResponse>;

using LinkResource = Resource<v1::ProbeLink, NoGet, v1::ListLinksRequest, v1::ListLinksResponse>;

std::string DomainText(const v1::DomainRef& d) { return d.level() + "=" + d.name(); }

// "OPEN", "CLOSED".
std::string IncidentStateText(v1::IncidentState s) {
  std::string name = v1::IncidentState_Name(s);
  const std::string prefix = "INCIDENT_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// "switch sw-3", "link port7", "domain superpod=7", "-".
std::string RootText(const v1::IncidentRoot& r) {
  switch (r.kind()) {
    case v1::INCIDENT_ROOT_KIND_SWITCH: return "switch " + r.subject();
    case v1::INCIDENT_ROOT_KIND_LINK: return "link " + r.subject();
    case v1::INCIDENT_ROOT_KIND_DOMAIN: return "domain " + r.subject();
    default: return "-";
  }
}

Columns<v1::Domain> DomainColumns() {
  return {
      {"DOMAIN", false, [](const v1::Domain& d, bool) { return Sanitize(DomainText(d.ref())); }},
      {"NODES", false, [](const v1::Domain& d, bool) { return std::to_string(d.nodes()); }},
      {"CHIPS", false, [](const v1::Domain& d, bool) { return std::to_string(d.devices()); }},
      {"NODES-FAULTED", false, [](const v1::Domain& d, bool) { return std::to_string(d.nodes_faulted()); }},
      {"CHIPS-FAULTED", false, [](const v1::Domain& d, bool) { return std::to_string(d.devices_faulted()); }},
      {"INCIDENT", false,
       [](const v1::Domain& d, bool) { return d.open_incident().empty() ? "-" : Sanitize(d.open_incident()); }},
      {"ISOLATED", false, [](const v1::Domain& d, bool) { return d.isolated() ? "yes" : "no"; }},
      {"AVOIDED", false, [](const v1::Domain& d, bool) { return d.avoided() ? "yes" : "no"; }},
  };
}

Columns<v1::Incident> IncidentColumns() {
  return {
      {"ID", false, [](const v1::Incident& i, bool) { return i.id(); }},
      {"DOMAIN", false, [](const v1::Incident& i, bool) { return Sanitize(DomainText(i.domain())); }},
      {"STATE", false, [](const v1::Incident& i, bool) { return IncidentStateText(i.state()); }},
      {"ROOT", false,
       [](const v1::Incident& i, bool wide) {
         return wide ? Sanitize(RootText(i.root())) : Truncate(Sanitize(RootText(i.root())), 40);
       }},
      {"NODES", false,
       [](const v1::Incident& i, bool) {
         return std::to_string(i.nodes_hit()) + "/" + std::to_string(i.domain_nodes());
       }},
      {"CHIPS", false, [](const v1::Incident& i, bool) { return std::to_string(i.devices_hit()); }},
      {"ACTIVE", false, [](const v1::Incident& i, bool) { return std::to_string(i.active_faults()); }},
      {"ISOLATED", false, [](const v1::Incident& i, bool) { return i.isolated() ? "yes" : "no"; }},
      {"OPENED", false, [](const v1::Incident& i, bool) { return FormatTime(i.open_time()); }},
      {"CLOSED", true, [](const v1::Incident& i, bool) { return FormatTime(i.close_time()); }},
      {"REVISION", true, [](const v1::Incident& i, bool) { return std::to_string(i.revision()); }},
  };
}

// "0.412 ms", "-" when absent.
std::string RttText(const v1::ProbeLink& l, const google::protobuf::Duration& d, bool present) {
  if (!present || l.sent() == l.lost()) return "-";
  const double ms = static_cast<double>(google::protobuf::util::TimeUtil::DurationToMicroseconds(d)) / 1000.0;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f ms", ms);
  return buf;
}

Columns<v1::ProbeLink> LinkColumns() {
  return {
      {"SOURCE", false, [](const v1::ProbeLink& l, bool) { return Sanitize(l.source()); }},
      {"TARGET", false, [](const v1::ProbeLink& l, bool) { return Sanitize(l.target()); }},
      {"SENT", false, [](const v1::ProbeLink& l, bool) { return std::to_string(l.sent()); }},
      {"LOST", false, [](const v1::ProbeLink& l, bool) { return std::to_string(l.lost()); }},
      {"LOSS", false, [](const v1::ProbeLink& l, bool) { return std::to_string(std::lround(l.loss() * 100)) + "%"; }},
      {"RTT-MEAN", false, [](const v1::ProbeLink& l, bool) { return RttText(l, l.rtt_mean(), l.has_rtt_mean()); }},
      {"RTT-MAX", true, [](const v1::ProbeLink& l, bool) { return RttText(l, l.rtt_max(), l.has_rtt_max()); }},
      {"FINDING", false,
       [](const v1::ProbeLink& l, bool) { return l.finding().empty() ? "-" : Sanitize(l.finding()); }},
  };
}

std::optional<int> ReadLinkFilters(Context& c, v1::ListLinksRequest* req) {
  req->set_node(c.args.Get("node"));
  req->set_domain(c.args.Get("domain"));
  req->set_lossy_only(c.args.Has("lossy"));
  return std::nullopt;
}

std::optional<int> ReadDomainFilters(Context& c, v1::ListDomainsRequest* req) {
  req->set_level(c.args.Get("level"));
  req->set_degraded_only(c.args.Has("degraded"));
  return std::nullopt;
}

std::optional<int> ReadIncidentFilters(Context& c, v1::ListIncidentsRequest* req) {
  req->set_domain(c.args.Get("domain"));
  req->set_open_only(c.args.Has("open"));
  return std::nullopt;
}

void DescribeIncident(Context& c, const v1::GetIncidentResponse& resp) {
  const v1::Incident& i = resp.incident();
  PrintKeyValues(c.out, {
                            {"Id", i.id()},
                            {"Domain", Sanitize(DomainText(i.domain()))},
                            {"State", IncidentStateText(i.state())},
                            {"Root", Sanitize(RootText(i.root()))},
                            {"Root evidence", i.root().evidence().empty() ? "-" : Sanitize(i.root().evidence())},
                            {"Root fault", i.root().fault_id().empty() ? "-" : Sanitize(i.root().fault_id())},
                            {"Nodes hit", std::to_string(i.nodes_hit()) + " of " + std::to_string(i.domain_nodes())},
                            {"Chips hit", std::to_string(i.devices_hit())},
                            {"Active faults", std::to_string(i.active_faults())},
                            {"Isolated", i.isolated() ? "yes (the domain as a whole)" : "no"},
                            {"Avoided", i.avoid() ? "yes (no rank is placed into the domain while it is open)" : "no"},
                            {"Opened", FormatTime(i.open_time(), true)},
                            {"Updated", FormatTime(i.update_time(), true)},
                            {"Closed", FormatTime(i.close_time(), true)},
                            {"Revision", std::to_string(i.revision())},
                        });
  c.out << "\nDecisions:\n";
  if (i.decisions().empty()) c.out << "  <none>\n";
  for (const auto& d : i.decisions()) {
    c.out << "  " << FormatTime(d.time(), true) << "  " << Sanitize(d.action())
          << (d.job_id().empty() ? "" : " job " + Sanitize(d.job_id()))
          << (d.recovery_id().empty() ? "" : " recovery " + Sanitize(d.recovery_id()))
          << (d.dry_run() ? " (dry run)" : "") << (d.detail().empty() ? "" : ": " + Sanitize(d.detail())) << "\n";
  }
  c.out << "\nMembers hit (" << i.total_members() << "):\n";
  if (i.members().empty()) c.out << "  <none>\n";
  for (const auto& m : i.members()) {
    c.out << "  " << Sanitize(m.node()) << (m.has_device_id() ? " dev " + std::to_string(m.device_id()) : "") << "  "
          << Sanitize(m.code()) << "  " << FormatTime(m.time(), true) << "  active " << m.active_faults() << "  "
          << Sanitize(m.fault_id()) << "\n";
  }
  if (static_cast<uint32_t>(i.members_size()) < i.total_members()) {
    c.out << "  ... " << i.total_members() - static_cast<uint32_t>(i.members_size()) << " more not kept\n";
  }
  c.out << "\nTimeline:\n";
  for (int k = 0; k < i.timeline_size(); ++k) {
    if (i.timeline_dropped() > 0 && k == 16) c.out << "  ... " << i.timeline_dropped() << " entries left out\n";
    c.out << "  " << FormatTime(i.timeline(k).time(), true) << "  " << Sanitize(i.timeline(k).what()) << "\n";
  }
}

// "STORED", "FAILED" ...
std::string EvidenceStateText(v1::EvidenceState s) {
  std::string name = v1::EvidenceState_Name(s);
  const std::string prefix = "EVIDENCE_STATE_";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

// describe incident ID --bundle [--node NODE]: every member's evidence state,
// then each stored bundle (one page per member), or -o json: the pages.
int DescribeIncidentEvidence(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "incident id")) return *e;
  v1::GetIncidentEvidenceRequest req;
  req.set_id(c.args.positional[0]);
  req.set_node(c.args.Get("node"));
  bool first = true;
  for (;;) {
    v1::GetIncidentEvidenceResponse resp;
    if (auto st = c.Client().GetIncidentEvidence(req, &resp); !st.ok()) {
      return RpcFailure(c, "GetIncidentEvidence", st);
    }
    if (c.json()) {
      c.out << ToJson(resp, true) << "\n";
    } else {
      if (first) {
        c.out << "Evidence of incident " << Sanitize(req.id()) << " (" << resp.members_size() << " member(s)):\n";
        if (resp.members().empty()) c.out << "  <none asked>\n";
        for (const auto& m : resp.members()) {
          c.out << "  " << Sanitize(m.node()) << "  " << EvidenceStateText(m.state())
                << (m.state() == v1::EVIDENCE_STATE_STORED ? "  " + std::to_string(m.size_bytes()) + " bytes" : "")
                << (m.detail().empty() ? "" : "  " + Sanitize(m.detail())) << "\n";
        }
      }
      if (resp.has_bundle()) {
        const v1::EvidenceBundle& b = resp.bundle();
        c.out << "\n=== " << Sanitize(b.node()) << "  collected " << FormatTime(b.collect_time(), true) << "  "
              << b.size_bytes() << " bytes\n";
        for (const auto& s : b.sections()) {
          c.out << "--- " << Sanitize(s.name()) << (s.truncated() ? " (truncated: the newest part kept)" : "")
                << (s.error().empty() ? "" : " [" + Sanitize(s.error()) + "]") << "\n";
          // The content is the node's own text (kernel log, tool output):
          // printed line by line with control characters made visible.
          size_t pos = 0;
          const std::string& text = s.content();
          while (pos < text.size()) {
            size_t nl = text.find('\n', pos);
            if (nl == std::string::npos) nl = text.size();
            c.out << Sanitize(text.substr(pos, nl - pos)) << "\n";
            pos = nl + 1;
          }
        }
      }
    }
    first = false;
    if (!req.node().empty() || resp.next_page_token().empty()) break;
    req.set_page_token(resp.next_page_token());
  }
  return kExitOk;
}

}  // namespace

std::vector<Command> DomainCommands() {
  auto domains = std::make_shared<const DomainResource>(DomainResource{
      .singular = "domain",
      .plural = "domains",
      .operand = "",
      .columns = DomainColumns(),
      .list_rpc = "ListDomains",
      .list = &ClusterClient::ListAllDomains,
      .items = [](const v1::ListDomainsResponse& r) -> const auto& { return r.domains();
}
, .filters = {"level", "degraded"}, .read_filters = ReadDomainFilters,
}  // namespace clusterctl
);
  auto incidents = std::make_shared<const IncidentResource>(IncidentResource{
      .singular = "incident",
      .plural = "incidents",
      .operand = "ID",
      .columns = IncidentColumns(),
      .list_rpc = "ListIncidents",
      .list = &ClusterClient::ListAllIncidents,
      .items = [](const v1::ListIncidentsResponse& r) -> const auto& { return r.incidents();
  }
  , .filters = {"domain", "open"}, .read_filters = ReadIncidentFilters, .get_rpc = "GetIncident",
    .get = &ClusterClient::GetIncident, .item = [](const v1::GetIncidentResponse& r) -> const auto& {
    return r.incident();
  }
  , .describe = DescribeIncident,
  });
  auto links = std::make_shared<const LinkResource>(LinkResource{
      .singular = "link",
      .plural = "links",
      .operand = "",
      .columns = LinkColumns(),
      .list_rpc = "ListLinks",
      .list = &ClusterClient::ListAllLinks,
      .items = [](const v1::ListLinksResponse& r) -> const auto& { return r.links();
  }
  , .filters = {"node", "domain", "lossy"}, .read_filters = ReadLinkFilters,
  });
  return {
      GetCommand(links, {"links", "link"},
                 {{"node", 0, true, false}, {"domain", 0, true, false}, {"lossy", 0, false, false}},
                 "  get links [--node N] [--domain LEVEL=NAME] [--lossy]\n"
                 "                                      the pingmesh's loss matrix of its last window\n"
                 "                                      (docs/pingmesh.md): probes sent, lost, round trip, finding\n"),
      GetCommand(domains, {"domains", "domain"}, {{"level", 0, true, false}, {"degraded", 0, false, false}},
                 "  get domains [--level L] [--degraded]\n"
                 "                                      fault domains (docs/domains.md): members, faulted members,\n"
                 "                                      the open incident, isolation\n"),
      GetCommand(incidents, {"incidents", "incident"}, {{"domain", 0, true, false}, {"open", 0, false, false}},
                 "  get incidents [ID] [--domain LEVEL=NAME] [--open]\n"
                 "                                      incidents, newest first: domain, state, root, nodes hit\n"),
      [&] {
        Command describe = DescribeCommand(
            incidents, {"incident", "incidents"},
            "  describe incident ID [--bundle [--node NODE]]\n"
            "                                      incident: root and its evidence, decisions, members\n"
            "                                      hit, timeline; --bundle: the members' evidence bundles\n");
        describe.flags = {{"bundle", 0, false, false}, {"node", 0, true, false}};
        describe.run = [plain = describe.run](Context& c) {
          if (c.args.Has("bundle")) return DescribeIncidentEvidence(c);
          if (c.args.Has("node")) return Usage(c, "--node goes with --bundle");
          return plain(c);
        };
        return describe;
      }(),
  };
  }

  }  // namespace clusterctl
