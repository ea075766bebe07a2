#include "clusterd/mindcluster/manual_separation.h"

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "clusterd/mindcluster/go_json.h"

namespace clusterd::mindcluster {

namespace {

using nlohmann::json;

// ---- a block-mapping subset of YAML ----

struct Node {
  bool mapping = false;
  std::string scalar;
  bool quoted = false;  // a quoted scalar is a string, never a number or a bool
  bool null = false;    // "key:" with nothing (no nested lines), "~", "null"
  // Flow style, a block scalar, an anchor or a tag: refused where the policy
  // reads it, ignored under a key it does not read (as yaml.v2 ignores it).
  bool unsupported = false;
  std::map<std::string, std::unique_ptr<Node>> children;
  int line = 0;
};

struct Line {
  int number = 0;
  size_t indent = 0;
  std::string text;  // without indentation and comment
};

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

// The line without a comment: '#' at its start or after a blank, outside quotes.
std::string StripComment(std::string_view s) {
  char quote = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '#' && (i == 0 || s[i - 1] == ' ' || s[i - 1] == '\t')) {
      return std::string(s.substr(0, i));
    }
  }
  return std::string(s);
}

Status Bad(int line, const std::string& why) {
  return InvalidArgument("manually_separate_policy.conf line " + std::to_string(line) + ": " + why);
}

// A scalar's text: plain, 'single' ('' is a quote) or "double" (simple escapes).
Status ParseScalar(const std::string& text, int line, Node* out) {
  out->line = line;
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL") {
    out->null = true;
    return Status::Ok();
  }
  const char first = text.front();
  if (first == '{' || first == '[' || first == '|' || first == '>' || first == '&' || first == '*' || first == '!') {
    out->unsupported = true;
    out->scalar = text;
    return Status::Ok();
  }
  if (first == '\'' || first == '"') {
    if (text.size() < 2 || text.back() != first) return Bad(line, "unterminated quoted value");
    std::string v;
    for (size_t i = 1; i + 1 < text.size(); ++i) {
      char c = text[i];
      if (first == '\'' && c == '\'') {
        if (i + 2 < text.size() && text[i + 1] == '\'') {
          v += '\'';
          ++i;
          continue;
        }
        return Bad(line, "a quote inside a single-quoted value");
      }
      if (first == '"' && c == '\\' && i + 2 < text.size()) {
        c = text[++i];
        v += c == 'n' ? '\n' : c == 't' ? '\t' : c;
        continue;
      }
      if (first == '"' && c == '"') return Bad(line, "a quote inside a double-quoted value");
      v += c;
    }
    out->scalar = std::move(v);
    out->quoted = true;
    return Status::Ok();
  }
  out->scalar = text;
  return Status::Ok();
}

// Parses lines[*pos...] indented exactly `indent` into the mapping `out`.
Status ParseMapping(const std::vector<Line>& lines, size_t* pos, size_t indent, Node* out, int depth) {
  if (depth > 16) return Bad(lines[*pos].number, "nested too deep");
  out->mapping = true;
  while (*pos < lines.size()) {
    const Line& l = lines[*pos];
    if (l.indent < indent) return Status::Ok();
    if (l.indent > indent) return Bad(l.number, "unexpected indentation");
    if (l.text.rfind("- ", 0) == 0 || l.text == "-") return Bad(l.number, "lists are not supported");
    // "key: value" (the colon followed by a blank or the end).
    size_t colon = std::string::npos;
    for (size_t i = 0; i < l.text.size(); ++i) {
      if (l.text[i] == ':' && (i + 1 == l.text.size() || l.text[i + 1] == ' ' || l.text[i + 1] == '\t')) {
        colon = i;
        break;
      }
    }
    if (colon == std::string::npos) return Bad(l.number, "expected `key: value`");
    Node key_node;
    CLUSTERD_RETURN_IF_ERROR(ParseScalar(Trim(l.text.substr(0, colon)), l.number, &key_node));
    if (key_node.null && !key_node.quoted) return Bad(l.number, "empty key");
    const std::string key = key_node.scalar;
    if (out->children.count(key)) return Bad(l.number, "key \"" + key + "\" is set twice");
    auto child = std::make_unique<Node>();
    const std::string value = Trim(l.text.substr(colon + 1));
    ++*pos;
    if (value.empty() && *pos < lines.size() && lines[*pos].indent > indent) {
      child->line = l.number;
      CLUSTERD_RETURN_IF_ERROR(ParseMapping(lines, pos, lines[*pos].indent, child.get(), depth + 1));
    } else {
      CLUSTERD_RETURN_IF_ERROR(ParseScalar(value, l.number, child.get()));
    }
    out->children[key] = std::move(child);
  }
  return Status::Ok();
}

StatusOr<Node> ParseYamlMapping(std::string_view text) {
  std::vector<Line> lines;
  int number = 0;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view raw = text.substr(start, end - start);
    ++number;
    start = end + 1;
    size_t indent = 0;
    while (indent < raw.size() && raw[indent] == ' ') ++indent;
    std::string body = Trim(StripComment(raw.substr(indent)));
    if (body.empty()) continue;
    if (indent < raw.size() && raw[indent] == '\t') return Bad(number, "a tab in the indentation");
    if (lines.empty() && indent == 0 && body == "---") continue;
    if (body == "---" || body == "...") return Bad(number, "more than one document");
    lines.push_back({number, indent, std::move(body)});
  }
  Node root;
  root.mapping = true;
  if (lines.empty()) return root;
  size_t pos = 0;
  CLUSTERD_RETURN_IF_ERROR(ParseMapping(lines, &pos, lines[0].indent, &root, 0));
  if (pos < lines.size()) return Bad(lines[pos].number, "unexpected indentation");
  return root;
}

// yaml.v2's booleans (YAML 1.1).
std::optional<bool> YamlBool(const std::string& s) {
  static const std::set<std::string> kTrue = {"y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string> kFalse = {"n",     "N",     "no",  "No",  "NO", "false",
                                               "False", "FALSE", "off", "Off", "OFF"};
  if (kTrue.count(s)) return true;
  if (kFalse.count(s)) return false;
  return std::nullopt;
}

Status Unsupported(const Node& n, const std::string& field) {
  return Bad(n.line, field +
                         ": flow style, block scalars, anchors and tags are not supported; write `key: value` "
                         "lines");
}

Status ReadBool(const Node& n, const std::string& field, bool* out) {
  if (n.unsupported) return Unsupported(n, field);
  if (n.mapping) return Bad(n.line, field + ": a mapping where a boolean belongs");
  if (n.null) {
    *out = false;
    return Status::Ok();
  }
  auto b = n.quoted ? std::nullopt : YamlBool(n.scalar);
  if (!b) return Bad(n.line, field + ": \"" + n.scalar.substr(0, 64) + "\" is not a boolean");
  *out = *b;
  return Status::Ok();
}

Status ReadInt(const Node& n, const std::string& field, int64_t* out) {
  if (n.unsupported) return Unsupported(n, field);
  if (n.mapping) return Bad(n.line, field + ": a mapping where an integer belongs");
  if (n.null) {
    *out = 0;
    return Status::Ok();
  }
  std::string_view s = n.scalar;
  if (!n.quoted && !s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (n.quoted || s.empty() || ec != std::errc() || end != s.data() + s.size()) {
    return Bad(n.line, field + ": \"" + n.scalar.substr(0, 64) + "\" is not an integer");
  }
  *out = v;
  return Status::Ok();
}

const Node* Child(const Node& n, const std::string& key) {
  auto it = n.children.find(key);
  return it == n.children.end() ? nullptr : it->second.get();
}

// A section ("separate", "release"): a mapping, or absent/null (zero fields).
StatusOr<const Node*> Section(const Node& root, const std::string& key) {
  const Node* s = Child(root, key);
  if (s == nullptr || s->null) return static_cast<const Node*>(nullptr);
  if (s->unsupported) return Unsupported(*s, key);
  if (!s->mapping) return Bad(s->line, key + ": a value where a mapping belongs");
  return s;
}

}  // namespace

Status CheckManualSeparatePolicy(const ManualSeparatePolicy& p) {
  if (p.fault_window_hours < 1 || p.fault_window_hours > 720) {
    return InvalidArgument("fault_window_hours must be in [1, 720]");
  }
  if (p.fault_threshold < 1 || p.fault_threshold > 50) return InvalidArgument("fault_threshold must be in [1, 50]");
  if (p.fault_free_hours == -1) return Status::Ok();
  if (p.fault_free_hours < 1 || p.fault_free_hours > 240) {
    return InvalidArgument("fault_free_hours must be in [1, 240] or -1");
  }
  return Status::Ok();
}

StatusOr<ManualSeparatePolicy> ParseManualSeparatePolicy(std::string_view yaml) {
  if (yaml.size() > kMaxPolicyBytes) {
    return InvalidArgument("manually_separate_policy.conf is " + std::to_string(yaml.size()) + " bytes, more than " +
                           std::to_string(kMaxPolicyBytes));
  }
  auto root = ParseYamlMapping(yaml);
  if (!root.ok()) return root.status();
  ManualSeparatePolicy p;
  if (const Node* n = Child(*root, "enabled")) CLUSTERD_RETURN_IF_ERROR(ReadBool(*n, "enabled", &p.enabled));
  auto separate = Section(*root, "separate");
  if (!separate.ok()) return separate.status();
  if (*separate != nullptr) {
    if (const Node* n = Child(**separate, "fault_window_hours")) {
      CLUSTERD_RETURN_IF_ERROR(ReadInt(*n, "separate.fault_window_hours", &p.fault_window_hours));
    }
    if (const Node* n = Child(**separate, "fault_threshold")) {
      CLUSTERD_RETURN_IF_ERROR(ReadInt(*n, "separate.fault_threshold", &p.fault_threshold));
    }
  }
  auto release = Section(*root, "release");
  if (!release.ok()) return release.status();
  if (*release != nullptr) {
    if (const Node* n = Child(**release, "fault_free_hours")) {
      CLUSTERD_RETURN_IF_ERROR(ReadInt(*n, "release.fault_free_hours", &p.fault_free_hours));
    }
  }
  CLUSTERD_RETURN_IF_ERROR(CheckManualSeparatePolicy(p));
  return p;
}

SeparationPolicy ToSeparationPolicy(const ManualSeparatePolicy& p, const SeparationPolicy& base) {
  SeparationPolicy out = base;
  out.enabled = p.enabled;
  out.threshold = static_cast<uint32_t>(p.fault_threshold);
  out.window = std::chrono::hours(p.fault_window_hours);
  if (p.fault_free_hours == -1) {
    out.release_after = std::nullopt;
  } else {
    out.release_after = std::chrono::hours(p.fault_free_hours);
  }
  return out;
}

std::map<std::string, std::string> ManualInfoCmData(const ManualInfo& info) {
  std::map<std::string, std::string> data;
  for (const auto& [node, chips] : info) {
    if (chips.empty()) continue;
    std::map<std::string, const ManualChip*> by_name;
    for (const ManualChip& c : chips) by_name[c.name] = &c;
    std::string total, detail;
    for (const auto& [name, c] : by_name) {
      total += (total.empty() ? "" : ",") + GoJsonString(name);
      std::string entries;
      std::vector<std::string> codes = c->codes;
      if (codes.empty()) codes.emplace_back();
      for (const std::string& code : codes) {
        entries += std::string(entries.empty() ? "" : ",") + "{\"FaultCode\":" + GoJsonString(code) +
                   ",\"FaultLevel\":" + GoJsonString(kManuallySeparateNPU) +
                   ",\"LastSeparateTime\":" + std::to_string(c->separated_ms) + "}";
      }
      detail += (detail.empty() ? "" : ",") + GoJsonString(name) + ":[" + entries + "]";
    }
    data[node] = "{\"Total\":[" + total + "],\"Detail\":{" + detail + "}}";
  }
  return data;
}

StatusOr<std::map<std::string, std::set<std::string>>> ParseManualInfoTotals(std::string_view data_json) {
  const json data = json::parse(data_json, nullptr, false);
  std::map<std::string, std::set<std::string>> out;
  if (data.is_null()) return out;  // a ConfigMap without data lists nothing
  if (!data.is_object()) return InvalidArgument("data is not an object of strings");
  if (data.size() > kMaxManualInfoNodes) {
    return InvalidArgument("lists " + std::to_string(data.size()) + " nodes, more than " +
                           std::to_string(kMaxManualInfoNodes));
  }
  for (auto it = data.begin(); it != data.end(); ++it) {
    if (!it->is_string()) return InvalidArgument("key " + it.key() + " is not a string");
    const json node = json::parse(it->get_ref<const std::string&>(), nullptr, false);
    if (!node.is_object()) return InvalidArgument("key " + it.key() + " is not a JSON object");
    auto& chips = out[it.key()];
    const json total = node.value("Total", json());
    if (total.is_null()) continue;
    if (!total.is_array()) return InvalidArgument("key " + it.key() + ": Total is not a list");
    if (total.size() > kMaxManualInfoChipsPerNode) {
      return InvalidArgument("key " + it.key() + ": Total lists more than " +
                             std::to_string(kMaxManualInfoChipsPerNode) + " chips");
    }
    for (const json& chip : total) {
      if (!chip.is_string()) return InvalidArgument("key " + it.key() + ": Total has an entry that is not a string");
      chips.insert(chip.get<std::string>());
    }
  }
  return out;
}

std::string ListingJson(const std::map<std::string, std::set<std::string>>& listing) {
  json out = json::object();
  for (const auto& [node, chips] : listing) {
    if (!chips.empty()) out[node] = chips;
  }
  return out.dump();
}

StatusOr<std::map<std::string, std::set<std::string>>> ParseListingJson(std::string_view text) {
  const json doc = json::parse(text, nullptr, false);
  if (!doc.is_object()) return InvalidArgument("not a JSON object");
  std::map<std::string, std::set<std::string>> out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!it->is_array()) return InvalidArgument("node " + it.key() + " is not a list");
    for (const json& chip : *it) {
      if (!chip.is_string()) return InvalidArgument("node " + it.key() + " lists a chip that is not a string");
      out[it.key()].insert(chip.get<std::string>());
    }
  }
  return out;
}

}  // namespace clusterd::mindcluster
