// Reading API objects (JSON as the API server returns them) and the times
// they carry. The objects are untrusted input: a field that is missing or of
// another JSON type reads as empty, and nothing here throws. No I/O, no
// shared state: call from any thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/clock.h"

namespace clusterd::k8s {

// The value at `path` ({"metadata", "uid"}); nullptr when a step is missing
// or not an object, or the value is null (an explicit null reads as absent,
// as the API server means it).
const nlohmann::json* ValueAt(const nlohmann::json& object, std::initializer_list<std::string_view> path);
// The string at `path`; nullptr when ValueAt finds none or the value is not
// a string.
const std::string* StringPtrAt(const nlohmann::json& object, std::initializer_list<std::string_view> path);
// The string at `path`; "" when StringPtrAt finds none.
std::string StringAt(const nlohmann::json& object, std::initializer_list<std::string_view> path);

// "namespace/name", or "name" for cluster-scoped objects; empty when the
// object has no name.
std::string ObjectKey(const nlohmann::json& object);
std::string ResourceVersionOf(const nlohmann::json& object);

// metadata.annotations as an object ({} when absent), and one of them ("" when absent).
nlohmann::json Annotations(const nlohmann::json& object);
std::string Annotation(const nlohmann::json& object, const std::string& key);

// A Node's spec.taints ([] when absent), whether one has this key, and
// spec.unschedulable (cordoned).
nlohmann::json Taints(const nlohmann::json& node);
bool HasTaint(const nlohmann::json& node, std::string_view key);
bool Unschedulable(const nlohmann::json& node);

// UTC, RFC 3339: "2026-11-30T01:02:03Z"; with microseconds
// ("2026-11-30T01:02:03.000123Z") for MicroTime fields (an Event's eventTime).
std::string Rfc3339(TimePoint t, bool micro);
// Seconds since the epoch of "2026-11-30T01:02:03Z" (what follows the
// seconds is ignored); -1 when it does not parse.
int64_t ParseRfc3339(const std::string& text);

// A key as one JSON Pointer reference token (RFC 6901), for a JSON patch path:
// "clusterd.io/cordoned" -> "clusterd.io~1cordoned".
std::string JsonPointerToken(std::string_view key);

}  // namespace clusterd::k8s
