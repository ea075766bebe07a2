#include "clusterd/k8s/api/object.h"

#include <cstdio>
#include <ctime>

namespace clusterd::k8s {

using nlohmann::json;

const json* ValueAt(const json& object, std::initializer_list<std::string_view> path) {
  const json* cur = &object;
  for (std::string_view key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end() || it->is_null()) return nullptr;
    cur = &*it;
  }
  return cur;
}

const std::string* StringPtrAt(const json& object, std::initializer_list<std::string_view> path) {
  const json* value = ValueAt(object, path);
  return value != nullptr && value->is_string() ? &value->get_ref<const std::string&>() : nullptr;
}

std::string StringAt(const json& object, std::initializer_list<std::string_view> path) {
  const std::string* value = StringPtrAt(object, path);
  return value != nullptr ? *value : std::string();
}

std::string ObjectKey(const json& object) {
  std::string name = StringAt(object, {"metadata", "name"});
  if (name.empty()) return {};
  std::string ns = StringAt(object, {"metadata", "namespace"});
  return ns.empty() ? name : ns + "/" + name;
}

std::string ResourceVersionOf(const json& object) { return StringAt(object, {"metadata", "resourceVersion"}); }

json Annotations(const json& object) {
  const json* ann = ValueAt(object, {"metadata", "annotations"});
  return ann != nullptr && ann->is_object() ? *ann : json::object();
}

std::string Annotation(const json& object, const std::string& key) {
  return StringAt(object, {"metadata", "annotations", key});
}

json Taints(const json& node) {
  const json* taints = ValueAt(node, {"spec", "taints"});
  return taints != nullptr && taints->is_array() ? *taints : json::array();
}

bool HasTaint(const json& node, std::string_view key) {
  for (const auto& t : Taints(node)) {
    if (StringAt(t, {"key"}) == key) return true;
  }
  return false;
}

bool Unschedulable(const json& node) {
  const json* value = ValueAt(node, {"spec", "unschedulable"});
  return value != nullptr && value->is_boolean() && value->get<bool>();
}

std::string Rfc3339(TimePoint t, bool micro) {
  const auto since = t.time_since_epoch();
  const auto secs = std::chrono::floor<std::chrono::seconds>(since);
  std::time_t tt = static_cast<std::time_t>(secs.count());
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out = buf;
  if (micro) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(since - secs).count();
    char frac[24];
    std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
    out += frac;
  }
  return out + "Z";
}

int64_t ParseRfc3339(const std::string& text) {
  std::tm tm{};
  if (strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) return -1;
  return static_cast<int64_t>(timegm(&tm));
}

std::string JsonPointerToken(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace clusterd::k8s
