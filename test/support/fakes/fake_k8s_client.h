// An in-memory Kubernetes API server behind k8s::ApiClient, for unit tests of
// the kubernetes integration and actuator (and the informers under them): no
// network, no TLS, no clock.
//
// It keeps objects by path ("/api/v1/nodes/worker01",
// "/api/v1/namespaces/train/pods/w-0") with one resourceVersion counter for
// all of them, and answers the verbs ClusterD uses as kube-apiserver does:
// GET of an object or of a collection (all namespaces or one); POST to a
// collection (409 AlreadyExists) and to pods/<name>/eviction (the pod is
// deleted; 409 on a UID precondition that does not match); PATCH as a merge,
// strategic-merge (status.conditions merged by type, the rest as a merge) or
// JSON patch (a failed "test" op is 422), on an object or its status; DELETE
// with a UID precondition. Watches (Stream with watch=1) send ADDED,
// MODIFIED and DELETED events from the resourceVersion asked for. A test
// scripts answers per call (409, 429 with Retry-After, 404, 500, an
// unreachable server), runs a hook before a call (to change an object
// between a read and a write), plays a workload controller that replaces
// removed pods, and reads the call log.
//
// Thread-safe: informer threads stream while the test and the actuator call.
// Every stream must have ended (its informer stopped) before the fake is
// destroyed: hold it in a shared_ptr that the contexts share.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/client.h"

namespace clusterd::testing {

class FakeK8sClient final : public k8s::ApiClient {
 public:
  // One request as the fake received it, and the HTTP status it answered.
  struct Call {
    std::string method;  // "GET", "POST", "PATCH", "DELETE", "PUT", or "WATCH" for a Stream
    std::string path;    // without the query
    std::string query;
    std::string content_type;
    nlohmann::json body;  // null when there was none or it was not JSON
    int status = 0;       // 0: answered as unreachable
  };

  // ---- the test's side: changes the objects without a logged call ----

  // Creates or replaces the object at `path` (its name and namespace are set
  // from the path, a uid is made up when it has none, the resourceVersion is
  // the next one) and tells the watches. Returns it as stored.
  nlohmann::json Set(const std::string& path, nlohmann::json object) {
    std::lock_guard lock(mu_);
    return Store(ParsePath(path), std::move(object));
  }
  std::optional<nlohmann::json> Object(const std::string& path) const {
    std::lock_guard lock(mu_);
    auto it = objects_.find(ParsePath(path).ObjectPath());
    if (it == objects_.end()) return std::nullopt;
    return it->second;
  }
  // Deletes the object (a DELETED event); false when there was none.
  bool Remove(const std::string& path) {
    std::lock_guard lock(mu_);
    return Erase(ParsePath(path));
  }
  // The objects of a collection path ("/api/v1/namespaces/train/pods"), by path.
  std::vector<nlohmann::json> Objects(const std::string& collection) const {
    std::lock_guard lock(mu_);
    return ListLocked(ParsePath(collection));
  }

  // The next `times` calls of `method` to `path` (exactly, query aside) are
  // answered with `status` (a Kubernetes Status object with `reason`, and a
  // Retry-After header when given) instead of being carried out. Status 0:
  // the server cannot be reached (Do fails with Unavailable).
  void Script(std::string method, std::string path, int status, std::string reason = "", std::string retry_after = "",
              int times = 1) {
    std::lock_guard lock(mu_);
    scripts_.push_back({std::move(method), std::move(path), status, std::move(reason), std::move(retry_after), times});
  }
  // Runs `hook` (once, without the fake's lock: it may Set objects) before
  // the next call of `method` to `path` is carried out.
  void Before(std::string method, std::string path, std::function<void()> hook) {
    std::lock_guard lock(mu_);
    hooks_.push_back({std::move(method), std::move(path), std::move(hook)});
  }

  // Plays the workload's controller: `controller` runs (without the fake's
  // lock: it may Set objects) after each pod removed by an eviction or a
  // DELETE, with the pod as it was. Empty: nothing replaces removed pods.
  void SetPodController(std::function<void(const nlohmann::json& removed)> controller) {
    std::lock_guard lock(mu_);
    pod_controller_ = std::move(controller);
  }

  std::vector<Call> Calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  // The calls of `method` to `path` (query aside).
  std::vector<Call> CallsTo(std::string_view method, std::string_view path) const {
    std::lock_guard lock(mu_);
    std::vector<Call> out;
    for (const auto& c : calls_) {
      if (c.method == method && c.path == path) out.push_back(c);
    }
    return out;
  }
  // The calls that write (everything but GET and WATCH).
  std::vector<Call> Writes() const {
    std::lock_guard lock(mu_);
    std::vector<Call> out;
    for (const auto& c : calls_) {
      if (c.method != "GET" && c.method != "WATCH") out.push_back(c);
    }
    return out;
  }
  void ClearCalls() {
    std::lock_guard lock(mu_);
    calls_.clear();
  }

  // Waits until `started` watches have been opened since the fake was made
  // and each open one has delivered every event so far (an informer watches
  // once its list is in its cache, so its cache then holds every object as
  // it is now). False when `deadline` passed first: a failure bound, not a
  // timing.
  bool WaitCaughtUp(size_t started, std::chrono::milliseconds deadline = std::chrono::seconds(20)) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, deadline, [&] {
      if (watches_started_ < started) return false;
      for (const Watch* w : watches_) {
        if (w->busy || w->cursor < events_.size()) return false;
      }
      return true;
    });
  }

  // ---- k8s::ApiClient ----

  StatusOr<k8s::Response> Do(std::string_view method, std::string_view target, std::string_view body,
                             std::string_view content_type) const override {
    auto [path, query] = SplitTarget(target);
    Call call{std::string(method),
              path,
              query,
              std::string(content_type),
              body.empty() ? nlohmann::json() : nlohmann::json::parse(body, nullptr, false),
              0};
    if (call.body.is_discarded()) call.body = nullptr;
    std::unique_lock lock(mu_);
    for (auto it = hooks_.begin(); it != hooks_.end(); ++it) {
      if (it->method == method && it->path == path) {
        auto hook = std::move(it->hook);
        hooks_.erase(it);
        lock.unlock();
        hook();
        lock.lock();
        break;
      }
    }
    for (auto it = scripts_.begin(); it != scripts_.end(); ++it) {
      if (it->method != method || it->path != path) continue;
      Scripted s = *it;
      if (--it->times <= 0) scripts_.erase(it);
      call.status = s.status;
      calls_.push_back(call);
      if (s.status == 0) return Unavailable("fake: " + std::string(method) + " " + path + ": unreachable (scripted)");
      k8s::Response r = Failure(s.status, s.reason, "scripted " + s.reason);
      r.retry_after = s.retry_after;
      return r;
    }
    // A pod about to be removed, for the controller.
    std::optional<nlohmann::json> pod;
    if (const Ref ref = ParsePath(call.path);
        ref.resource == "pods" && !ref.name.empty() &&
        ((call.method == "POST" && ref.sub == "eviction") || (call.method == "DELETE" && ref.sub.empty()))) {
      Ref object = ref;
      object.sub.clear();
      if (auto it = objects_.find(object.ObjectPath()); it != objects_.end()) pod = it->second;
    }
    k8s::Response r = Handle(call);
    call.status = r.status;
    calls_.push_back(std::move(call));
    if (pod && r.status / 100 == 2 && pod_controller_) {
      auto controller = pod_controller_;
      lock.unlock();
      controller(*pod);
    }
    return r;
  }

  Status Stream(std::string_view target, std::chrono::milliseconds, const k8s::LineSink& on_line,
                k8s::StreamCancel* cancel) const override {
    auto [path, query] = SplitTarget(target);
    const Ref collection = ParsePath(path);
    if (cancel != nullptr) {
      cancel->Attach([this] {
        { std::lock_guard lock(mu_); }
        cv_.notify_all();
      });
    }
    auto cancelled = [cancel] { return cancel != nullptr && cancel->cancelled(); };
    std::unique_lock lock(mu_);
    calls_.push_back({"WATCH", path, query, "", nullptr, 200});
    // From the event after the resourceVersion asked for; without one, from now.
    Watch w;
    w.cursor = events_.size();
    if (auto rv = QueryValue(query, "resourceVersion"); !rv.empty()) {
      const int64_t from = std::stoll(rv);
      w.cursor = 0;
      while (w.cursor < events_.size() && events_[w.cursor].rv <= from) ++w.cursor;
    }
    watches_.push_back(&w);
    ++watches_started_;
    cv_.notify_all();
    Status result = Status::Ok();
    for (;;) {
      cv_.wait(lock, [&] { return cancelled() || w.cursor < events_.size(); });
      if (cancelled()) {
        result = {StatusCode::kCancelled, "fake: watch cancelled"};
        break;
      }
      const WatchEvent ev = events_[w.cursor++];
      if (!ev.ref.InCollection(collection) || !LabelsMatch(ev.object, QueryValue(query, "labelSelector"))) {
        cv_.notify_all();
        continue;
      }
      w.busy = true;
      lock.unlock();
      const bool more = on_line(nlohmann::json{{"type", ev.type}, {"object", ev.object}}.dump());
      lock.lock();
      w.busy = false;
      cv_.notify_all();
      if (!more) break;
    }
    watches_.remove(&w);
    cv_.notify_all();
    lock.unlock();
    if (cancel != nullptr) cancel->Detach();
    return result;
  }

 private:
  // A path taken apart: /api/v1 or /apis/<group>/<version>, then
  // [namespaces/<ns>/]<resource>[/<name>[/<subresource>]].
  struct Ref {
    std::string group, ns, resource, name, sub;
    std::string ObjectPath() const {
      return group + (ns.empty() ? "" : "/namespaces/" + ns) + "/" + resource + "/" + name;
    }
    bool InCollection(const Ref& collection) const {
      return group == collection.group && resource == collection.resource &&
             (collection.ns.empty() || collection.ns == ns);
    }
  };
  struct WatchEvent {
    int64_t rv = 0;
    std::string type;  // ADDED, MODIFIED, DELETED
    Ref ref;
    nlohmann::json object;
  };
  struct Watch {
    size_t cursor = 0;  // the next event of events_ to look at
    bool busy = false;  // on_line is running
  };
  struct Scripted {
    std::string method, path;
    int status = 0;
    std::string reason, retry_after;
    int times = 1;
  };
  struct Hook {
    std::string method, path;
    std::function<void()> hook;
  };

  // "%2F" -> "/" (what k8s::UrlEncode wrote).
  static std::string Decode(std::string_view s) {
    auto hex = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '%' && i + 2 < s.size()) {
        out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    }
    return out;
  }

  static std::pair<std::string, std::string> SplitTarget(std::string_view target) {
    size_t q = target.find('?');
    if (q == std::string_view::npos) return {std::string(target), ""};
    return {std::string(target.substr(0, q)), std::string(target.substr(q + 1))};
  }

  static std::string QueryValue(const std::string& query, const std::string& key) {
    for (size_t start = 0; start <= query.size();) {
      size_t amp = query.find('&', start);
      if (amp == std::string::npos) amp = query.size();
      std::string item = query.substr(start, amp - start);
      if (item.rfind(key + "=", 0) == 0) return Decode(item.substr(key.size() + 1));
      start = amp + 1;
    }
    return {};
  }

  static Ref ParsePath(const std::string& path) {
    std::vector<std::string> seg;
    for (size_t start = 1; start <= path.size();) {
      size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      if (slash > start) seg.push_back(Decode(std::string_view(path).substr(start, slash - start)));
      start = slash + 1;
    }
    Ref r;
    size_t i = 0;
    if (seg.size() >= 2 && seg[0] == "api") {
      r.group = "/api/" + seg[1];
      i = 2;
    } else if (seg.size() >= 3 && seg[0] == "apis") {
      r.group = "/apis/" + seg[1] + "/" + seg[2];
      i = 3;
    }
    if (seg.size() >= i + 3 && seg[i] == "namespaces") {
      r.ns = seg[i + 1];
      i += 2;
    }
    if (i < seg.size()) r.resource = seg[i++];
    if (i < seg.size()) r.name = seg[i++];
    if (i < seg.size()) r.sub = seg[i++];
    return r;
  }

  static k8s::Response Answer(int status, const nlohmann::json& body) { return {status, body.dump(), ""}; }
  static k8s::Response Failure(int status, const std::string& reason, const std::string& message) {
    return Answer(status, {{"kind", "Status"},
                           {"apiVersion", "v1"},
                           {"status", "Failure"},
                           {"message", message},
                           {"reason", reason},
                           {"code", status}});
  }

  static std::string PreconditionUid(const nlohmann::json& body) {
    const nlohmann::json* opts = &body;
    if (body.is_object() && body.contains("deleteOptions")) opts = &body["deleteOptions"];
    if (!opts->is_object() || !opts->contains("preconditions")) return {};
    const auto& pre = (*opts)["preconditions"];
    return pre.is_object() && pre.contains("uid") && pre["uid"].is_string() ? pre["uid"].get<std::string>() : "";
  }

  // Under mu_. The fake plays the API server, whose objects change under a
  // const client: the server's state is mutable, and these are const.
  nlohmann::json Store(const Ref& ref, nlohmann::json object) const {
    const std::string path = ref.ObjectPath();
    auto old = objects_.find(path);
    if (!object.is_object()) object = nlohmann::json::object();
    auto& meta = object["metadata"];
    if (!meta.is_object()) meta = nlohmann::json::object();
    meta["name"] = ref.name;
    if (!ref.ns.empty()) meta["namespace"] = ref.ns;
    if (!meta.contains("uid")) {
      meta["uid"] =
          old != objects_.end() ? old->second["metadata"]["uid"] : nlohmann::json("uid-" + std::to_string(++uids_));
    }
    // As kube-apiserver serves them, Nodes and Pods always have a spec and a status.
    if (ref.resource == "nodes" || ref.resource == "pods") {
      if (!object.contains("spec")) object["spec"] = nlohmann::json::object();
      if (!object.contains("status")) object["status"] = nlohmann::json::object();
    }
    meta["resourceVersion"] = std::to_string(++rv_);
    const bool existed = old != objects_.end();
    objects_[path] = object;
    events_.push_back({rv_, existed ? "MODIFIED" : "ADDED", ref, object});
    cv_.notify_all();
    return object;
  }

  bool Erase(const Ref& ref) const {
    auto it = objects_.find(ref.ObjectPath());
    if (it == objects_.end()) return false;
    nlohmann::json object = std::move(it->second);
    objects_.erase(it);
    object["metadata"]["resourceVersion"] = std::to_string(++rv_);
    events_.push_back({rv_, "DELETED", ref, std::move(object)});
    cv_.notify_all();
    return true;
  }

  std::vector<nlohmann::json> ListLocked(const Ref& collection, const std::string& selector = "") const {
    std::vector<nlohmann::json> items;
    for (const auto& [path, obj] : objects_) {
      if (ParsePath(path).InCollection(collection) && LabelsMatch(obj, selector)) items.push_back(obj);
    }
    return items;
  }

  // A label selector of equality terms only ("a=b,c=d"); "" matches all.
  static bool LabelsMatch(const nlohmann::json& object, const std::string& selector) {
    for (size_t start = 0; start < selector.size();) {
      size_t comma = selector.find(',', start);
      if (comma == std::string::npos) comma = selector.size();
      const std::string term = selector.substr(start, comma - start);
      start = comma + 1;
      const size_t eq = term.find('=');
      if (eq == std::string::npos) continue;
      const nlohmann::json* labels = nullptr;
      if (object.contains("metadata") && object["metadata"].is_object() && object["metadata"].contains("labels")) {
        labels = &object["metadata"]["labels"];
      }
      const std::string key = term.substr(0, eq), want = term.substr(eq + 1);
      if (labels == nullptr || !labels->is_object() || !labels->contains(key) || !(*labels)[key].is_string() ||
          (*labels)[key].get<std::string>() != want) {
        return false;
      }
    }
    return true;
  }

  static void StrategicMerge(nlohmann::json* object, nlohmann::json patch) {
    if (patch.is_object() && patch.contains("status") && patch["status"].is_object() &&
        patch["status"].contains("conditions") && patch["status"]["conditions"].is_array()) {
      auto& have = (*object)["status"]["conditions"];
      if (!have.is_array()) have = nlohmann::json::array();
      for (const auto& c : patch["status"]["conditions"]) {
        bool merged = false;
        for (auto& h : have) {
          if (h.is_object() && c.is_object() && h.value("type", "") == c.value("type", "")) {
            h.merge_patch(c);
            merged = true;
          }
        }
        if (!merged) have.push_back(c);
      }
      patch["status"].erase("conditions");
    }
    object->merge_patch(patch);
  }

  // Under mu_.
  k8s::Response Handle(const Call& call) const {
    const Ref ref = ParsePath(call.path);
    const std::string path = ref.ObjectPath();
    auto it = objects_.find(path);
    const bool exists = !ref.name.empty() && it != objects_.end();
    if (call.method == "GET") {
      if (ref.name.empty()) {
        return Answer(200, {{"apiVersion", "v1"},
                            {"kind", "List"},
                            {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
                            {"items", ListLocked(ref, QueryValue(call.query, "labelSelector"))}});
      }
      return exists ? Answer(200, it->second) : Failure(404, "NotFound", path + " not found");
    }
    if (call.method == "POST" && ref.sub == "eviction") {
      if (!exists) return Failure(404, "NotFound", "pods \"" + ref.name + "\" not found");
      const std::string uid = PreconditionUid(call.body);
      if (!uid.empty() && uid != it->second["metadata"].value("uid", "")) {
        return Failure(409, "Conflict", "Precondition failed: UID in precondition: " + uid);
      }
      Ref pod = ref;
      pod.sub.clear();
      Erase(pod);
      return Answer(201, {{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Success"}});
    }
    if (call.method == "POST" && ref.name.empty()) {
      if (!call.body.is_object() || call.body.value("metadata", nlohmann::json::object()).value("name", "").empty()) {
        return Failure(422, "Invalid", "metadata.name: Required value");
      }
      Ref made = ref;
      made.name = call.body["metadata"]["name"].get<std::string>();
      if (objects_.count(made.ObjectPath())) {
        return Failure(409, "AlreadyExists", made.resource + " \"" + made.name + "\" already exists");
      }
      return Answer(201, Store(made, call.body));
    }
    if (!exists) return Failure(ref.name.empty() ? 405 : 404, ref.name.empty() ? "MethodNotAllowed" : "NotFound", path);
    if (call.method == "PUT") {
      // An update names the version it replaces: another one is a conflict.
      const std::string want_rv =
          call.body.is_object() && call.body.contains("metadata") && call.body["metadata"].is_object()
              ? call.body["metadata"].value("resourceVersion", "")
              : "";
      if (!want_rv.empty() && want_rv != it->second["metadata"].value("resourceVersion", "")) {
        return Failure(409, "Conflict",
                       "the object has been modified; please apply your changes to the latest version");
      }
      return Answer(200, Store(ref, call.body));
    }
    if (call.method == "DELETE") {
      const std::string uid = PreconditionUid(call.body);
      if (!uid.empty() && uid != it->second["metadata"].value("uid", "")) {
        return Failure(409, "Conflict", "Precondition failed: UID in precondition: " + uid);
      }
      nlohmann::json gone = it->second;
      Erase(ref);
      return Answer(200, gone);
    }
    if (call.method == "PATCH") return Patch(call, ref, it->second);
    return Failure(405, "MethodNotAllowed", call.method + " " + path);
  }

  // Under mu_.
  k8s::Response Patch(const Call& call, const Ref& ref, nlohmann::json object) const {
    try {
      const nlohmann::json uid = object["metadata"]["uid"];
      if (call.content_type == "application/json-patch+json") {
        // A failed "test" op (the resourceVersion guard) throws: 422.
        object = object.patch(call.body);
      } else {
        const std::string want_rv =
            call.body.is_object() && call.body.contains("metadata") && call.body["metadata"].is_object()
                ? call.body["metadata"].value("resourceVersion", "")
                : "";
        if (!want_rv.empty() && want_rv != object["metadata"].value("resourceVersion", "")) {
          return Failure(409, "Conflict", "the object has been modified");
        }
        if (call.content_type == "application/strategic-merge-patch+json") {
          StrategicMerge(&object, call.body);
        } else {
          object.merge_patch(call.body);
        }
      }
      object["metadata"]["uid"] = uid;
      return Answer(200, Store(ref, std::move(object)));
    } catch (const nlohmann::json::exception& e) {
      return Failure(422, "Invalid", std::string("the server rejected our request: ") + e.what());
    }
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::map<std::string, nlohmann::json> objects_;  // by object path
  mutable int64_t rv_ = 0;
  mutable int64_t uids_ = 0;
  mutable std::vector<WatchEvent> events_;  // every change, in resourceVersion order
  mutable std::list<Watch*> watches_;       // open ones
  mutable size_t watches_started_ = 0;
  mutable std::vector<Scripted> scripts_;
  mutable std::vector<Hook> hooks_;
  std::function<void(const nlohmann::json&)> pod_controller_;
  mutable std::vector<Call> calls_;
};

}  // namespace clusterd::testing
