#include "clusterd/server/http_api.h"

#include <algorithm>
#include <cstdlib>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "clusterd/state/incidents.h"
#include "clusterd/state/pingmesh_rule.h"
#include "common/chain_doctor.h"

namespace clusterd {
namespace {

using google::protobuf::FieldDescriptor;

// Answers over this size are cut (events) or refused: what a client with
// default limits accepts.
constexpr size_t kMaxAnswerBytes = 4u << 20;
// Findings of GET /api/v1/doctor at most: each under 1.3 KiB (a node name,
// 512 bytes of evidence or a drift message, a fix), so the answer stays under
// kMaxAnswerBytes; "truncated" and "total" say when there are more.
constexpr size_t kMaxDoctorFindings = 3000;

int HttpStatusOf(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kOutOfRange: return 410;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

HttpResponse Error(const Status& st) {
  nlohmann::json body = {{"code", StatusCodeName(st.code())}, {"message", st.message()}};
  // A message may quote client bytes that are not UTF-8: replaced, not thrown.
  return HttpResponse{HttpStatusOf(st.code()), "application/json",
                      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
}

HttpResponse Json(const google::protobuf::Message& msg) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  auto st = google::protobuf::util::MessageToJsonString(msg, &out, options);
  if (!st.ok()) return Error(Internal("cannot render the answer as JSON"));
  return HttpResponse{200, "application/json", out + "\n"};
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

StatusOr<std::string> UrlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size()) return InvalidArgument("bad %-escape in the query");
      const int hi = Hex(s[i + 1]), lo = Hex(s[i + 2]);
      if (hi < 0 || lo < 0) return InvalidArgument("bad %-escape in the query");
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string_view QueryOf(const std::string& target) {
  auto q = target.find('?');
  return q == std::string::npos ? std::string_view() : std::string_view(target).substr(q + 1);
}

// The part of the path after `prefix` ("/api/v1/nodes/"), URL-decoded.
StatusOr<std::string> PathTail(const std::string& target, std::string_view prefix) {
  std::string_view path(target);
  path = path.substr(0, path.find('?'));
  return UrlDecode(path.substr(prefix.size()));
}

}  // namespace

Status QueryToMessage(std::string_view query, google::protobuf::Message* msg) {
  const auto* desc = msg->GetDescriptor();
  nlohmann::json doc = nlohmann::json::object();
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    auto key = UrlDecode(pair.substr(0, eq));
    if (!key.ok()) return key.status();
    auto value = UrlDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    if (!value.ok()) return value.status();
    const FieldDescriptor* field = desc->FindFieldByName(*key);
    if (field == nullptr) field = desc->FindFieldByCamelcaseName(*key);
    if (field == nullptr || field->type() == FieldDescriptor::TYPE_MESSAGE) {
      return InvalidArgument("unknown query parameter \"" + key->substr(0, 64) + "\"");
    }
    nlohmann::json v;
    if (field->type() == FieldDescriptor::TYPE_BOOL) {
      if (*value != "true" && *value != "false") {
        return InvalidArgument(*key + ": \"" + value->substr(0, 64) + "\" is not true or false");
      }
      v = *value == "true";
    } else {
      v = *value;  // numbers and enum names as strings: the proto3 JSON parser takes both
    }
    if (field->is_repeated()) {
      // Repeated: "nodes=a&nodes=b" or "nodes=a,b".
      auto& arr = doc[field->name()];
      if (!arr.is_array()) arr = nlohmann::json::array();
      if (v.is_string()) {
        std::string s = v.get<std::string>();
        size_t start = 0;
        while (start <= s.size()) {
          auto comma = s.find(',', start);
          std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
          if (!item.empty()) arr.push_back(item);
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      } else {
        arr.push_back(v);
      }
    } else {
      // One value per field: "a=1&a=2" (or a=1&A=2 by its camelCase name) is
      // refused rather than silently taking the last.
      if (doc.contains(field->name())) {
        return InvalidArgument("query parameter \"" + key->substr(0, 64) + "\" is given more than once");
      }
      doc[field->name()] = v;
    }
  }
  google::protobuf::util::JsonParseOptions options;
  // Bytes that are not UTF-8 are replaced (U+FFFD): such a value is then
  // refused by the query itself (a page token that does not decode) instead
  // of throwing here.
  auto st = google::protobuf::util::JsonStringToMessage(
      doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), msg, options);
  if (!st.ok()) return InvalidArgument("query: " + std::string(st.message()));
  return Status::Ok();
}

void RegisterHttpApi(HttpServer* http, const ClusterState* state, const WatchHub* hub, const Authenticator* auth,
                     const HttpApiOptions& options) {
  // Every route: who is asking first, then the query.
  auto route = [http, auth, options](const std::string& path,
                                     const std::function<HttpResponse(const HttpRequest&)>& answer) {
    http->Handle("GET", path, [auth, options, answer](const HttpRequest& req) {
      if (options.require_viewer) {
        const std::string what = "GET " + req.target.substr(0, req.target.find('?'));
        if (Status st = auth->AuthorizeHttp(req, kReaderRoles, what); !st.ok()) return Error(st);
      }
      return answer(req);
    });
  };
  // A query of one request type answered under the state's shared lock.
  auto list = [state](auto request, auto call) {
    return [state, request, call](const HttpRequest& req) {
      auto r = request;
      if (Status st = QueryToMessage(QueryOf(req.target), &r); !st.ok()) return Error(st);
      auto resp = state->Read([&](const StateView& s) { return call(s, r); });
      if (!resp.ok()) return Error(resp.status());
      return Json(*resp);
    };
  };
  route("/api/v1/summary",
        [state](const HttpRequest&) { return Json(state->Read([](const StateView& s) { return s.GetSummary(); })); });
  route("/api/v1/admin",
        [state](const HttpRequest&) { return Json(state->Read([](const StateView& s) { return s.admin_state(); })); });
  route("/api/v1/nodes",
        list(v1::ListNodesRequest(), [](const StateView& s, const v1::ListNodesRequest& r) { return s.ListNodes(r); }));
  route("/api/v1/faults", list(v1::ListFaultsRequest(),
                               [](const StateView& s, const v1::ListFaultsRequest& r) { return s.ListFaults(r); }));
  route("/api/v1/jobs",
        list(v1::ListJobsRequest(), [](const StateView& s, const v1::ListJobsRequest& r) { return s.ListJobs(r); }));
  route("/api/v1/recoveries",
        list(v1::ListRecoveriesRequest(),
             [](const StateView& s, const v1::ListRecoveriesRequest& r) { return s.ListRecoveries(r); }));
  // The software chain's diagnosis (common/chain_doctor.h), as clusterctl
  // doctor prints it: the cluster's broken links, allocatable shortfalls and
  // version drift, worst first; with a node, its every link. A page of nodes
  // or faults per read, so the walk never holds the writer for long.
  route("/api/v1/doctor", [state](const HttpRequest&) {
    std::vector<ChainFinding> found;
    size_t nodes = 0, reporting = 0;
    v1::ListNodesRequest nr;
    nr.set_page_size(500);
    for (;;) {
      auto page = state->Read([&](const StateView& s) { return s.ListNodes(nr); });
      if (!page.ok()) return Error(page.status());
      for (const auto& n : page->nodes()) {
        ++nodes;
        reporting += n.inventory().chain_size() > 0;
        AddChainLinks(n, /*all=*/false, &found);
      }
      if (page->next_page_token().empty()) break;
      nr.set_page_token(page->next_page_token());
    }
    v1::ListFaultsRequest fr;
    fr.set_active_only(true);
    fr.set_min_level(v1::FAULT_LEVEL_SUB_HEALTH);
    fr.set_page_size(1000);
    for (;;) {
      auto page = state->Read([&](const StateView& s) { return s.ListFaults(fr); });
      if (!page.ok()) return Error(page.status());
      AddChainFaults(page->faults(), &found);
      if (page->next_page_token().empty()) break;
      fr.set_page_token(page->next_page_token());
    }
    // Pending pods no node can take (the kubernetes integration's).
    google::protobuf::RepeatedPtrField<v1::SchedulingFinding> pending;
    state->Read([&](const StateView& s) {
      for (const auto& f : s.scheduling_findings()) *pending.Add() = f;
    });
    AddSchedulingFindings(pending, &found);
    SortChainFindings(&found);
    const std::string summary = ChainClusterSummary(nodes, reporting, found);
    return HttpResponse{200, "application/json",
                        ChainFindingsJson(found, summary, kMaxDoctorFindings)
                                .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            "\n"};
  });
  route("/api/v1/doctor/*", [state](const HttpRequest& req) {
    auto name = PathTail(req.target, "/api/v1/doctor/");
    if (!name.ok()) return Error(name.status());
    v1::GetNodeRequest r;
    r.set_name(*name);
    auto resp = state->Read([&](const StateView& s) { return s.GetNode(r); });
    if (!resp.ok()) return Error(resp.status());
    std::vector<ChainFinding> found;
    AddChainLinks(resp->node(), /*all=*/true, &found);
    AddChainFaults(resp->active_faults(), &found);
    SortChainFindings(&found);
    const size_t broken = static_cast<size_t>(
        std::count_if(found.begin(), found.end(), [](const ChainFinding& f) { return f.rank <= 1; }));
    const std::string summary = resp->node().inventory().chain_size() == 0 ? "its agent reports no software chain"
                                                                           : std::to_string(broken) + " link(s) to fix";
    return HttpResponse{
        200, "application/json",
        ChainFindingsJson(found, summary).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n"};
  });
  route("/api/v1/nodes/*", [state](const HttpRequest& req) {
    auto name = PathTail(req.target, "/api/v1/nodes/");
    if (!name.ok()) return Error(name.status());
    v1::GetNodeRequest r;
    r.set_name(*name);
    auto resp = state->Read([&](const StateView& s) { return s.GetNode(r); });
    return resp.ok() ? Json(*resp) : Error(resp.status());
  });
  route("/api/v1/jobs/*", [state, progress = options.progress](const HttpRequest& req) {
    auto id = PathTail(req.target, "/api/v1/jobs/");
    if (!id.ok()) return Error(id.status());
    auto job = state->Read([&](const StateView& s) { return s.GetJob(*id); });
    if (!job.ok()) return Error(job.status());
    // The live progress, as GetJob answers it.
    if (progress != nullptr) {
      if (auto live = progress->Live(*id)) *job->mutable_progress() = std::move(*live);
    }
    return Json(*job);
  });
  if (options.mindcluster_job) {
    route("/api/v1/mindcluster/jobs/*", [view = options.mindcluster_job](const HttpRequest& req) {
      auto id = PathTail(req.target, "/api/v1/mindcluster/jobs/");
      if (!id.ok()) return Error(id.status());
      v1::GetMindClusterJobRequest r;
      if (Status st = QueryToMessage(QueryOf(req.target), &r); !st.ok()) return Error(st);
      if (!r.job_id().empty()) return Error(InvalidArgument("the job is the path's, not a job_id parameter"));
      r.set_job_id(*id);
      auto resp = view(r);
      return resp.ok() ? Json(*resp) : Error(resp.status());
    });
  }
  // Fault domains and incidents (docs/domains.md).
  route("/api/v1/domains", list(v1::ListDomainsRequest(), [state](const StateView& s, const v1::ListDomainsRequest& r) {
          return ListDomainsWith(s, IncidentsOf(*state), r);
        }));
  route("/api/v1/incidents",
        list(v1::ListIncidentsRequest(), [state](const StateView&, const v1::ListIncidentsRequest& r) {
          return ListIncidentsWith(IncidentsOf(*state), r);
        }));
  route("/api/v1/links", list(v1::ListLinksRequest(), [state](const StateView&, const v1::ListLinksRequest& r) {
          return ListLinksWith(*state, r);
        }));
  route("/api/v1/incidents/*", [state](const HttpRequest& req) {
    auto id = PathTail(req.target, "/api/v1/incidents/");
    if (!id.ok()) return Error(id.status());
    auto r = state->Read([&](const StateView&) { return GetIncidentWith(IncidentsOf(*state), *id); });
    return r.ok() ? Json(*r) : Error(r.status());
  });
  route("/api/v1/recoveries/*", [state](const HttpRequest& req) {
    auto id = PathTail(req.target, "/api/v1/recoveries/");
    if (!id.ok()) return Error(id.status());
    auto r = state->Read([&](const StateView& s) { return s.GetRecovery(*id); });
    return r.ok() ? Json(*r) : Error(r.status());
  });
  route("/api/v1/events", [state, hub, options](const HttpRequest& req) {
    // from_revision and the Watch filters, plus limit.
    v1::WatchRequest watch;
    std::string query(QueryOf(req.target));
    size_t limit = 256;
    bool limit_seen = false;
    {
      std::string rest;
      size_t start = 0;
      while (start <= query.size() && !query.empty()) {
        auto amp = query.find('&', start);
        std::string pair = query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
        if (pair.rfind("limit=", 0) == 0) {
          const std::string v = pair.substr(6);
          if (limit_seen) return Error(InvalidArgument("query parameter \"limit\" is given more than once"));
          limit_seen = true;
          // Digits only: strtoull alone would take "-1" (or " 5", "+5") as a number.
          const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
          const unsigned long long n = digits ? std::strtoull(v.c_str(), nullptr, 10) : 0;
          if (n == 0) {
            return Error(InvalidArgument("limit: \"" + v.substr(0, 32) + "\" is not a positive number"));
          }
          // Beyond the range of the type (ERANGE gives the maximum) it is the maximum, as any large value.
          limit = static_cast<size_t>(std::min<unsigned long long>(n, options.max_events));
        } else if (!pair.empty()) {
          rest += (rest.empty() ? "" : "&") + pair;
        }
        if (amp == std::string::npos) break;
        start = amp + 1;
      }
      query = rest;
    }
    if (Status st = QueryToMessage(query, &watch); !st.ok()) return Error(st);
    auto filter = WatchFilter::FromRequest(watch);
    if (!filter.ok()) return Error(filter.status());
    const uint64_t compacted = state->compacted_revision();
    if (watch.from_revision() < compacted) {
      return Error(OutOfRange("revision " + std::to_string(watch.from_revision()) +
                              " is compacted; the oldest revision available is " + std::to_string(compacted + 1) +
                              " (from_revision=" + std::to_string(compacted) + ")"));
    }
    // A revision this server has not reached: the history the client resumes
    // from is not this server's (a restore from an older backup, another
    // cluster). Refused, so the client sees it instead of empty pages that
    // echo its revision back.
    // The state's revision too: an answer (the summary's revision) may name
    // one the feed publishes a moment later.
    const uint64_t head = std::max(hub->head(), state->Read([](const StateView& s) { return s.revision(); }));
    if (watch.from_revision() > head) {
      return Error(OutOfRange(
          "revision " + std::to_string(watch.from_revision()) + " is beyond the head revision " + std::to_string(head) +
          ": this server's history ends there (from_revision=" + std::to_string(head) + " reads from its end)"));
    }
    // Filtered events are skipped, not counted: read on until `limit` match
    // or the history ends (bounded: at most 8 reads of `limit`).
    std::string events;
    size_t count = 0;
    uint64_t after = watch.from_revision();
    bool more = false;
    google::protobuf::util::JsonPrintOptions print;
    for (int reads = 0; reads < 8 && count < limit; ++reads) {
      auto batch = hub->Fetch(after, limit);
      if (!batch.ok()) return Error(batch.status());
      if (batch->empty()) break;
      for (const auto& e : *batch) {
        if (count >= limit || events.size() > kMaxAnswerBytes / 2) {
          more = true;
          break;
        }
        after = e->revision();
        if (!filter->Matches(*e)) continue;
        std::string one;
        if (!google::protobuf::util::MessageToJsonString(*e, &one, print).ok()) continue;
        events += (count ? "," : "") + one;
        ++count;
      }
      if (more) break;
    }
    std::string body = "{\"events\":[" + events + "],\"nextFromRevision\":\"" + std::to_string(after) +
                       "\",\"headRevision\":\"" + std::to_string(hub->head()) + "\"}\n";
    return HttpResponse{200, "application/json", std::move(body)};
  });
}

}  // namespace clusterd
