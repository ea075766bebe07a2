// get jobs [ID], describe job ID, create-job -f FILE, delete-job ID.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include <google/protobuf/util/json_util.h>

#include "clusterctl/resources/resources.h"

namespace clusterctl {
namespace {

using JobResource = Resource<v1::Job, v1::GetJobResponse, v1::ListJobsRequest, v1::ListJobsResponse>;

size_t NodeCount(const v1::Job& j) {
  std::set<std::string> nodes;
  for (const auto& p : j.placement()) nodes.insert(p.node());
  return nodes.size();
}

std::vector<uint32_t> ImpactedRanks(const v1::Job& j) {
  std::vector<uint32_t> ranks;
  for (const auto& i : j.impacts()) ranks.insert(ranks.end(), i.ranks().begin(), i.ranks().end());
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

// A job's progress state in one word ("-" before any report).
std::string ProgressText(const v1::JobProgress& p) {
  if (p.state() == v1::PROGRESS_STATE_UNSPECIFIED) return "-";
  std::string s = v1::ProgressState_Name(p.state()).substr(std::string_view("PROGRESS_STATE_").size());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string EttrText(const v1::JobProgress& p) {
  if (p.state() == v1::PROGRESS_STATE_UNSPECIFIED) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * p.ettr());
  return buf;
}

Columns<v1::Job> JobColumns() {
  return {
      {"ID", false, [](const v1::Job& j, bool) { return j.id(); }},
      {"KIND", false, [](const v1::Job& j, bool) { return ShortJobKind(j.kind()); }},
      {"STATE", false, [](const v1::Job& j, bool) { return ShortJobState(j.state()); }},
      {"SOURCE", false, [](const v1::Job& j, bool) { return j.source().empty() ? std::string("api") : j.source(); }},
      {"RANKS", false, [](const v1::Job& j, bool) { return std::to_string(j.placement_size()); }},
      {"NODES", false, [](const v1::Job& j, bool) { return std::to_string(NodeCount(j)); }},
      {"IMPACTED-RANKS", false, [](const v1::Job& j, bool) { return std::to_string(ImpactedRanks(j).size()); }},
      {"RANKS-HIT", true, [](const v1::Job& j, bool) { return RankRanges(ImpactedRanks(j)); }},
      {"IMPACTING-FAULTS", true, [](const v1::Job& j, bool) { return std::to_string(j.impacts_size()); }},
      {"PROGRESS", false, [](const v1::Job& j, bool) { return ProgressText(j.progress()); }},
      {"ETTR", false, [](const v1::Job& j, bool) { return EttrText(j.progress()); }},
      {"CREATED", true, [](const v1::Job& j, bool) { return FormatTime(j.create_time()); }},
      {"REVISION", true, [](const v1::Job& j, bool) { return std::to_string(j.revision()); }},
      {"LABELS", true, [](const v1::Job& j, bool) { return LabelsText(j.labels()); }},
  };
}

std::optional<int> ReadJobFilters(Context& c, v1::ListJobsRequest* req) {
  if (c.args.Has("state")) {
    auto s = ParseJobState(c.args.Get("state"));
    if (!s) {
      return Usage(c, "--state: unknown job state '" + c.args.Get("state") +
                          "' (one of PENDING, RUNNING, RECOVERING, SUCCEEDED, FAILED)");
    }
    req->set_state(*s);
  }
  if (c.args.Has("kind")) {
    auto k = ParseJobKind(c.args.Get("kind"));
    if (!k) return Usage(c, "--kind: unknown job kind '" + c.args.Get("kind") + "' (one of TRAINING, INFERENCE)");
    req->set_kind(*k);
  }
  return std::nullopt;
}

std::string PolicyStrategies(const v1::RecoveryPolicy& p) {
  if (p.allowed_strategies().empty()) return "all";
  std::string out;
  for (int s : p.allowed_strategies()) {
    if (!out.empty()) out += ", ";
    out += ShortStrategy(static_cast<v1::RecoveryStrategy>(s));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> PolicyLines(const v1::RecoveryPolicy& p) {
  std::vector<std::pair<std::string, std::string>> kv = {{"Allowed strategies", PolicyStrategies(p)}};
  std::string timeouts;
  for (const auto& t : p.step_timeouts()) {
    if (!timeouts.empty()) timeouts += ", ";
    timeouts += ShortStrategy(t.strategy()) + "=" + DurationText(t.timeout());
  }
  kv.push_back({"Step timeouts", timeouts.empty() ? "-" : timeouts});
  kv.push_back({"Max retries per job",
                p.has_max_retries_per_job() ? std::to_string(p.max_retries_per_job()) : std::string("-")});
  kv.push_back({"Max retries per node",
                p.has_max_retries_per_node() ? std::to_string(p.max_retries_per_node()) : std::string("-")});
  kv.push_back({"Hold-down", DurationText(p.hold_down())});
  kv.push_back({"Min replicas", std::to_string(p.min_replicas())});
  kv.push_back({"Ranks per replica", std::to_string(p.ranks_per_replica() == 0 ? 1 : p.ranks_per_replica())});
  std::string silences;
  for (const auto& w : p.silences()) {
    if (!silences.empty()) silences += ", ";
    silences += w.code() + (w.has_until() ? " until " + FormatTime(w.until()) : std::string(" (no end)"));
  }
  kv.push_back({"Silences", silences.empty() ? "-" : silences});
  return kv;
}

void DescribeJob(Context& c, const v1::GetJobResponse& resp) {
  const v1::Job& j = resp.job();
  const std::vector<uint32_t> impacted = ImpactedRanks(j);
  PrintKeyValues(c.out,
                 {
                     {"Id", j.id()},
                     {"Kind", ShortJobKind(j.kind())},
                     {"State", ShortJobState(j.state())},
                     {"Source", j.source().empty() ? std::string("api") : j.source()},
                     {"Ranks", std::to_string(j.placement_size()) + " on " + std::to_string(NodeCount(j)) +
                                   (NodeCount(j) == 1 ? " node" : " nodes")},
                     {"Impacted ranks",
                      impacted.empty() ? "none" : std::to_string(impacted.size()) + " (" + RankRanges(impacted) + ")"},
                     {"Labels", LabelsText(j.labels())},
                     {"Created", FormatTime(j.create_time())},
                     {"Updated", FormatTime(j.update_time())},
                     {"Revision", std::to_string(j.revision())},
                 });

  // The faults hitting each rank, by code, for the placement table.
  std::map<uint32_t, std::set<std::string>> faults_by_rank;
  for (const auto& i : j.impacts()) {
    for (uint32_t r : i.ranks()) faults_by_rank[r].insert(i.code());
  }
  c.out << "\nPlacement:\n";
  if (j.placement().empty()) {
    c.out << "  <none>\n";
  } else {
    std::vector<const v1::RankPlacement*> placement;
    for (const auto& p : j.placement()) placement.push_back(&p);
    std::sort(placement.begin(), placement.end(), [](const auto* a, const auto* b) { return a->rank() < b->rank(); });
    Table t({"RANK", "NODE", "DEVICE", "FAULTS"});
    for (const auto* p : placement) {
      std::string faults;
      if (auto it = faults_by_rank.find(p->rank()); it != faults_by_rank.end()) {
        for (const auto& code : it->second) faults += (faults.empty() ? "" : ",") + code;
      }
      t.AddRow({std::to_string(p->rank()), p->node(),
                DeviceText(p->has_device_id() ? std::optional<uint32_t>(p->device_id()) : std::nullopt),
                faults.empty() ? "-" : faults});
    }
    c.out << Indent(TableText(t));
  }

  if (j.progress().state() != v1::PROGRESS_STATE_UNSPECIFIED) {
    const v1::JobProgress& p = j.progress();
    c.out << "\nProgress:\n";
    std::string slow, hung, lost;
    for (const auto& s : p.slow_ranks()) {
      slow += (slow.empty() ? "" : ", ") + std::to_string(s.rank()) + " (" + DurationText(s.step_time()) + " vs " +
              DurationText(s.job_median()) + ")";
    }
    for (uint32_t r : p.hung_ranks()) hung += (hung.empty() ? "" : ",") + std::to_string(r);
    for (const auto& l : p.lost_by_cause()) {
      lost += (lost.empty() ? "" : ", ") + Sanitize(l.cause()) + " " + DurationText(l.lost()) + " (" +
              std::to_string(l.count()) + "x)";
    }
    PrintKeyValues(
        c.out,
        {{"State", ProgressText(p)},
         {"Step", std::to_string(p.step()) + " (" + std::to_string(p.ranks_reporting()) + " ranks reporting)"},
         {"Median step time", DurationText(p.median_step_time())},
         {"Hang timeout", DurationText(p.hang_timeout())},
         {"Slow ranks", slow.empty() ? "-" : slow},
         {"Stopped first", hung.empty() ? "-" : hung},
         {"ETTR",
          EttrText(p) + " (productive " + DurationText(p.productive()) + ", lost " + DurationText(p.lost()) + ")"},
         {"Lost to", lost.empty() ? "-" : lost}},
        "  ");
  }

  c.out << "\nRecovery policy:\n";
  PrintKeyValues(c.out, PolicyLines(j.policy()), "  ");

  c.out << "\nImpacts (active faults hitting the job):\n";
  if (j.impacts().empty()) {
    c.out << "  <none>\n";
  } else {
    Table t({"NODE", "DEVICE", "CODE", "LEVEL", "RANKS", "FAULT-ID"});
    for (const auto& i : j.impacts()) {
      t.AddRow({i.node(), DeviceText(i.has_device_id() ? std::optional<uint32_t>(i.device_id()) : std::nullopt),
                i.code(), ShortLevel(i.level()),
                RankRanges(std::vector<uint32_t>(i.ranks().begin(), i.ranks().end())) +
                    (i.total_ranks() > static_cast<uint32_t>(i.ranks_size())
                         ? " (+" + std::to_string(i.total_ranks() - i.ranks_size()) + " more)"
                         : ""),
                i.fault_id()});
    }
    c.out << Indent(TableText(t));
    if (j.impacts_truncated()) {
      c.out << "  (" << j.impacts_size() << " of " << j.total_impacts()
            << " impacts shown: the answer is cut to fit 4 MiB; grpcurl ListFaults with job=" << Sanitize(j.id())
            << " lists every fault)\n";
    }
  }
}

// A possibly multi-line message (the JSON parser points at the error on a
// second line): each line sanitised, continuation lines indented.
std::string MultiLine(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out += (out.empty() ? "" : "\n  ") + Sanitize(line);
  return out;
}

// Reads FILE ("-": standard input) into *text. Returns an error message, empty on success.
std::string ReadInput(const std::string& path, std::string* text) {
  if (path == "-") {
    text->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return std::cin.bad() ? "cannot read standard input" : "";
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path + " is a directory";
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  text->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return "cannot read " + path;
  return "";
}

int CreateJob(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  if (c.args.Get("filename").empty()) return Usage(c, "create-job: -f FILE is required (a Job in proto JSON)");
  const std::string path = c.args.Get("filename");
  std::string text;
  if (std::string error = ReadInput(path, &text); !error.empty()) {
    c.err << "clusterctl: create-job: " << Sanitize(error) << "\n";
    return kExitUsage;
  }
  v1::CreateJobRequest req;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = false;  // a misspelt field is an error, not a silent default
  if (auto st = google::protobuf::util::JsonStringToMessage(text, req.mutable_job(), opts); !st.ok()) {
    c.err << "clusterctl: create-job: " << Sanitize(path == "-" ? "standard input" : path)
          << " is not a valid Job (proto JSON): " << MultiLine(std::string(st.message())) << "\n";
    return kExitUsage;
  }
  return CallAndPrint<v1::CreateJobResponse>(
      c, "CreateJob", [&](ClusterClient& client, v1::CreateJobResponse* resp) { return client.CreateJob(req, resp); },
      [&](const v1::CreateJobResponse& resp) {
        const v1::Job& j = resp.job();
        c.out << "job " << Sanitize(j.id()) << " created: " << ShortJobKind(j.kind()) << ", " << j.placement_size()
              << " ranks on " << NodeCount(j) << (NodeCount(j) == 1 ? " node" : " nodes") << ", state "
              << ShortJobState(j.state()) << ", revision " << j.revision() << "\n";
        const std::vector<uint32_t> impacted = ImpactedRanks(j);
        if (!impacted.empty()) {
          c.out << "warning: " << impacted.size() << " ranks already hit by active faults (" << RankRanges(impacted)
                << "); see 'clusterctl describe job " << Sanitize(j.id()) << "'\n";
        }
      });
}

int DeleteJob(Context& c) {
  if (auto e = CheckPositional(c, 1, 1, "job id")) return *e;
  const std::string& id = c.args.positional[0];
  return CallAndPrint<v1::DeleteJobResponse>(
      c, "DeleteJob", [&](ClusterClient& client, v1::DeleteJobResponse* resp) { return client.DeleteJob(id, resp); },
      [&](const v1::DeleteJobResponse& resp) {
        c.out << "job " << Sanitize(id) << " deleted, revision " << resp.revision() << "\n";
      });
}

}  // namespace

std::vector<Command> JobCommands() {
  auto jobs = std::make_shared<const JobResource>(JobResource{
      .singular = "job",
      .plural = "jobs",
      .operand = "ID",
      .columns = JobColumns(),
      .list_rpc = "ListJobs",
      .list = &ClusterClient::ListAllJobs,
      .items = [](const v1::ListJobsResponse& r) -> const auto& { return r.jobs();
}
, .filters = {"state", "kind"}, .read_filters = ReadJobFilters, .get_rpc = "GetJob", .get = &ClusterClient::GetJob,
  .item = [](const v1::GetJobResponse& r) -> const auto& {
  return r.job();
}
, .describe = DescribeJob,
}  // namespace clusterctl
);
return {
    GetCommand(jobs, {"jobs", "job"}, {{"state", 0, true, false}, {"kind", 0, true, false}},
               "  get jobs [ID] [--state S] [--kind K]\n"
               "                                      jobs (all pages) with their ranks, nodes and the ranks hit\n"
               "                                      by active faults; S: PENDING, RUNNING, RECOVERING,\n"
               "                                      SUCCEEDED, FAILED; K: TRAINING, INFERENCE\n"),
    DescribeCommand(jobs, {"job", "jobs"},
                    "  describe job ID                     job, placement (rank -> node/device), recovery policy "
                    "and\n"
                    "                                      the active faults that hit it (impacts)\n"),
    Command{"create-job",
            {},
            "",
            {{"filename", 'f', true, false}},
            CreateJob,
            "  create-job -f FILE                  create a job from a Job in proto JSON (FILE '-': stdin)\n"},
    Command{"delete-job", {}, "", {}, DeleteJob, "  delete-job ID                       delete a job\n"},
};
}

}  // namespace clusterctl
