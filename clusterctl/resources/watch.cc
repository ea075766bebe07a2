// watch: every change after a revision, then live changes, one line each.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "clusterctl/resources/resources.h"
#include "common/durable_file.h"

namespace clusterctl {
namespace {

// RESOURCE_EXHAUSTED resumes in a row without any progress before giving up.
constexpr int kMaxResumesWithoutProgress = 10;

// Fixed widths: a stream cannot be aligned after the fact.
std::string Col(const std::string& s, size_t width) {
  std::string out = Sanitize(s);
  if (out.size() < width) out += std::string(width - out.size(), ' ');
  return out + "  ";
}

std::string WatchHeader() {
  std::string line = Col("REVISION", 8) + Col("TIME", 24) + Col("TYPE", 21) + Col("NODE", 16) + Col("DEVICE", 6) +
                     Col("CODE", 16) + Col("LEVEL", 16) + "STATE";
  return line;
}

std::string WatchLine(const v1::Event& e) {
  std::optional<uint32_t> device = e.has_device_id() ? std::optional<uint32_t>(e.device_id()) : std::nullopt;
  std::string code = "-", level = "-", state = "-";
  switch (e.type()) {
    case v1::EVENT_TYPE_FAULT_RAISED:
    case v1::EVENT_TYPE_FAULT_UPDATED:
    case v1::EVENT_TYPE_FAULT_CLEARED:
      code = FaultCode(e.fault());
      level = ShortLevel(e.fault().level());
      state = ShortState(e.fault().state());
      if (!device) device = FaultDevice(e.fault());
      if (!e.job_ids().empty()) {
        std::string jobs;
        for (const auto& id : e.job_ids()) jobs += (jobs.empty() ? "" : ",") + id;
        state += " jobs=" + jobs;
      }
      if (!e.actor().empty()) state += " by " + e.actor();
      break;
    case v1::EVENT_TYPE_NODE_HEALTH_CHANGED:
    case v1::EVENT_TYPE_DEVICE_HEALTH_CHANGED:
      state = ShortHealth(e.previous_health()) + "->" + ShortHealth(e.health());
      break;
    case v1::EVENT_TYPE_NODE_REGISTERED:
    case v1::EVENT_TYPE_NODE_UPDATED:
      if (e.has_node_info()) state = ShortHealth(e.node_info().health());
      break;
    case v1::EVENT_TYPE_JOB_CREATED:
    case v1::EVENT_TYPE_JOB_UPDATED:
    case v1::EVENT_TYPE_JOB_DELETED: {
      const std::string id = e.has_job() ? e.job().id() : (e.job_ids().empty() ? "" : e.job_ids(0));
      state = "job " + (id.empty() ? std::string("-") : id);
      if (e.has_job() && e.type() != v1::EVENT_TYPE_JOB_DELETED) state += " " + ShortJobState(e.job().state());
      break;
    }
    case v1::EVENT_TYPE_DEVICE_SEPARATED:
    case v1::EVENT_TYPE_DEVICE_RELEASED:
      state = e.type() == v1::EVENT_TYPE_DEVICE_SEPARATED ? "separated " : "released ";
      state += "by " + (e.actor().empty() ? std::string("-") : e.actor());
      if (!e.reason().empty()) state += ": " + e.reason();
      break;
    case v1::EVENT_TYPE_NODE_CORDONED:
    case v1::EVENT_TYPE_NODE_UNCORDONED:
    case v1::EVENT_TYPE_RECOVERY_MODE_CHANGED:
      state = e.message().empty() ? "" : e.message() + " ";
      state += "by " + (e.actor().empty() ? std::string("-") : e.actor());
      if (!e.reason().empty()) state += ": " + e.reason();
      break;
    case v1::EVENT_TYPE_RECOVERY_STARTED:
    case v1::EVENT_TYPE_RECOVERY_UPDATED:
    case v1::EVENT_TYPE_RECOVERY_FINISHED:
      if (e.has_recovery()) {
        const v1::Recovery& r = e.recovery();
        level = ShortLevel(r.level());
        state = "recovery " + r.id() + " " + ShortRecoveryState(r.state()) + " " + RecoveryStrategyText(r) + " steps " +
                StepsText(r);
      }
      break;
    default: break;
  }
  std::string line = Col(std::to_string(e.revision()), 8) + Col(FormatTime(e.time(), true), 24) +
                     Col(ShortEventType(e.type()), 21) + Col(e.node().empty() ? "-" : e.node(), 16) +
                     Col(DeviceText(device), 6) + Col(code, 16) + Col(level, 16) + Sanitize(state);
  while (!line.empty() && line.back() == ' ') line.pop_back();
  return line;
}

// The cursor file holds one decimal revision. Missing file: nullopt.
// Unreadable or malformed: an error message in *error.
std::optional<uint64_t> ReadCursor(const std::string& path, std::string* error) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) {
    if (in.eof() && text.empty()) {
      *error = "cursor file " + path + " is empty";
    } else {
      *error = "cannot read cursor file " + path;
    }
    return std::nullopt;
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r' || text.back() == '\t')) text.pop_back();
  uint64_t v = 0;
  if (!ParseU64(text, &v)) {
    *error = "cursor file " + path + " does not hold a revision: '" + Sanitize(Truncate(text, 40)) + "'";
    return std::nullopt;
  }
  return v;
}

// Replaces the cursor durably (temp file, fsync, rename, fsync of the
// directory), so a crash or a power loss leaves either the old or the new
// cursor, never a torn or an empty one.
bool WriteCursor(const std::string& path, uint64_t revision, std::string* error) {
  const clusterd::Status st = clusterd::WriteFileDurably(path, std::to_string(revision) + "\n");
  if (!st.ok()) {
    *error = "cannot write cursor file " + path + ": " + st.message();
    return false;
  }
  return true;
}

int Watch(Context& c) {
  if (auto e = CheckPositional(c, 0, 0, "")) return *e;
  std::optional<uint64_t> from_flag, max_events;
  if (auto e = U64Flag(c, "from-revision", &from_flag)) return *e;
  if (auto e = U64Flag(c, "max-events", &max_events)) return *e;
  v1::WatchRequest req;
  v1::FaultLevel min_level = v1::FAULT_LEVEL_UNSPECIFIED;
  if (auto e = LevelFlag(c, "min-level", &min_level)) return *e;
  req.set_min_level(min_level);
  for (const auto& n : c.args.All("node")) req.add_nodes(n);
  for (const auto& t : c.args.All("type")) {
    auto type = ParseEventType(t);
    if (!type) {
      std::string names;
      for (int i = v1::EVENT_TYPE_NODE_REGISTERED; i <= v1::EventType_MAX; ++i) {
        if (!v1::EventType_IsValid(i)) continue;
        names += (names.empty() ? "" : ", ") + ShortEventType(static_cast<v1::EventType>(i));
      }
      return Usage(c, "--type: unknown event type '" + t + "' (one of " + names + ")");
    }
    req.add_types(*type);
  }
  if (max_events && *max_events == 0) return kExitOk;

  // Where to start: the cursor file if it exists, else --from-revision, else now.
  const std::string cursor_file = c.args.Get("cursor-file");
  std::optional<uint64_t> from;
  if (!cursor_file.empty()) {
    // Temp files of a watch that was killed while writing the cursor.
    if (auto st = clusterd::RemoveStaleTempFiles(cursor_file); !st.ok()) {
      c.err << "clusterctl: warning: " << st.message() << "\n";
    }
    std::string error;
    from = ReadCursor(cursor_file, &error);
    if (!error.empty()) {
      c.err << "clusterctl: " << error << "\n";
      return kExitUsage;
    }
  }
  const bool from_cursor = from.has_value();
  if (!from) from = from_flag;
  if (!from) {
    v1::GetSummaryResponse s;
    if (auto st = c.Client().GetSummary(&s); !st.ok()) return RpcFailure(c, "GetSummary", st);
    from = s.revision();
  }
  if (!cursor_file.empty() && !from_cursor) {
    // Record the starting point at once: a restart before the first event
    // must not skip what happened in between.
    std::string error;
    if (!WriteCursor(cursor_file, *from, &error)) {
      c.err << "clusterctl: " << error << "\n";
      return kExitRpcError;
    }
  }

  if (!c.json()) c.out << WatchHeader() << std::endl;
  uint64_t cursor = *from;
  uint64_t printed = 0;
  bool done = false;
  std::string write_error;
  int resumes_without_progress = 0;
  for (;;) {
    req.set_from_revision(cursor);
    const uint64_t cursor_at_start = cursor;
    grpc::Status st = c.Client().Watch(req, [&](const v1::WatchResponse& resp) {
      for (const auto& e : resp.events()) {
        if (c.json()) {
          c.out << ToJson(e, false) << "\n";
        } else {
          c.out << WatchLine(e) << "\n";
        }
        ++printed;
        if (max_events && printed >= *max_events) {
          // Stopped inside this response: resume after the last event shown.
          done = true;
          cursor = &e == &resp.events(resp.events_size() - 1) ? std::max(resp.revision(), e.revision()) : e.revision();
          break;
        }
      }
      if (!done) cursor = std::max(cursor, resp.revision());
      c.out.flush();
      if (!cursor_file.empty() && !WriteCursor(cursor_file, cursor, &write_error)) return false;
      return !done;
    });
    if (!write_error.empty()) {
      c.err << "clusterctl: " << write_error << "\n";
      return kExitRpcError;
    }
    if (st.ok()) {
      if (done) return kExitOk;
      c.err << "clusterctl: clusterd ended the watch at revision " << cursor << "\n";
      return kExitRpcError;
    }
    if (st.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      // The server ends a watcher that falls too far behind; nothing is lost
      // by resuming from the last revision received.
      resumes_without_progress = cursor == cursor_at_start ? resumes_without_progress + 1 : 0;
      if (resumes_without_progress >= kMaxResumesWithoutProgress) return RpcFailure(c, "Watch", st);
      c.err << "clusterctl: watch fell behind (" << Sanitize(st.error_message()) << "); resuming from revision "
            << cursor << "\n";
      continue;
    }
    if (st.error_code() == grpc::StatusCode::OUT_OF_RANGE) {
      c.err << "clusterctl: revision " << cursor << " is no longer in the history (" << Sanitize(st.error_message())
            << ")\n";
      v1::GetSummaryResponse s;
      if (c.Client().GetSummary(&s).ok()) {
        c.err << "clusterctl: the oldest available revision is " << s.compacted_revision() + 1
              << "; watch with --from-revision " << s.compacted_revision()
              << (cursor_file.empty() ? "" : " (and remove the cursor file)") << " to read what is left\n";
      }
      return kExitOutOfRange;
    }
    return RpcFailure(c, "Watch", st);
  }
}

}  // namespace

std::vector<Command> WatchCommands() {
  return {Command{
      "watch",
      {},
      "",
      {{"from-revision", 0, true, false},
       {"node", 0, true, true},
       {"type", 0, true, true},
       {"min-level", 0, true, false},
       {"cursor-file", 0, true, false},
       {"max-events", 0, true, false}},
      Watch,
      "  watch [--from-revision R] [--node N]... [--type T]... [--min-level L] [--cursor-file F]\n"
      "                                      print every change after revision R (default: from now),\n"
      "                                      then follow live changes; one line (or JSON object) per\n"
      "                                      event. --cursor-file keeps the last revision seen and\n"
      "                                      resumes from it when it exists. T: NODE_REGISTERED,\n"
      "                                      NODE_UPDATED, NODE_HEALTH_CHANGED, DEVICE_HEALTH_CHANGED,\n"
      "                                      FAULT_RAISED, FAULT_UPDATED, FAULT_CLEARED, JOB_CREATED,\n"
      "                                      JOB_UPDATED, JOB_DELETED, NODE_CORDONED, NODE_UNCORDONED,\n"
      "                                      RECOVERY_MODE_CHANGED, RECOVERY_STARTED, RECOVERY_UPDATED,\n"
      "                                      RECOVERY_FINISHED\n",
  }};
}

}  // namespace clusterctl
