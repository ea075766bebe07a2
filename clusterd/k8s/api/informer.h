// List + watch of one Kubernetes resource, kept in a local cache (the
// informer pattern of client-go, reduced to what ClusterD needs).
//
// The loop: list (paged) -> replace the cache and report the difference ->
// watch from the list's resourceVersion with bookmarks -> apply each event
// -> when the server ends the watch (timeoutSeconds), watch again from the
// last resourceVersion seen; on 410 Gone (that version was compacted away)
// list again; on any other error back off (exponential with jitter, capped)
// and retry. Nothing is ever skipped silently: after a relist, objects that
// vanished while the watch was down are reported as deleted.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/object.h"  // ObjectKey, ResourceVersionOf
#include "common/metrics.h"
#include "common/status.h"

namespace clusterd::k8s {

// One line of a watch answer.
struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark, kError };
  Type type = Type::kError;
  nlohmann::json object;
  std::string resource_version;  // of the object (empty for kError)
  int error_code = 0;            // kError: the Status object's code (410: expired)
  std::string error_message;
};
// InvalidArgument for a line that is not a watch event.
StatusOr<WatchEvent> ParseWatchEvent(std::string_view line);

// The cache and its difference rules, apart from the network so that tests
// can drive it with recorded events.
class ObjectCache {
 public:
  enum class Change { kNone, kUpserted, kDeleted };
  // An added or modified object; kNone when the cache already held this
  // resourceVersion of it.
  Change Upsert(const nlohmann::json& object);
  // kNone when the object was not cached.
  Change Erase(const nlohmann::json& object);
  // Replaces the whole content with a fresh list; `upserted` gets the objects
  // that are new or changed, `deleted` the cached ones the list no longer has.
  void Replace(std::vector<nlohmann::json> objects, std::vector<nlohmann::json>* upserted,
               std::vector<nlohmann::json>* deleted);
  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> List() const;
  size_t size() const { return objects_.size(); }

 private:
  std::map<std::string, nlohmann::json> objects_;
};

struct InformerOptions {
  std::string name;  // "pods": logs and metric labels
  std::string path;  // "/api/v1/pods", "/apis/scheduling.volcano.sh/v1beta1/podgroups"
  std::string label_selector;
  std::string field_selector;
  uint32_t page_size = 500;
  // Asked of the server per watch (timeoutSeconds); each watch takes a
  // random share between half and all of it so that informers do not all
  // reconnect at once.
  std::chrono::seconds watch_timeout{300};
  std::chrono::milliseconds backoff_initial{500};
  std::chrono::milliseconds backoff_max{30'000};
  // A resource that a CRD provides (Volcano's PodGroups) may not be served
  // at all. With this set, a list answered 404 means "not served": the
  // informer counts as synced with no objects (those it held are reported
  // deleted), says so once in the log and in clusterd_k8s_resource_served,
  // and lists again every absent_recheck, so that the resource is picked up
  // when its CRD is installed. Without it a 404 is an error like any other.
  bool may_be_absent = false;
  std::chrono::milliseconds absent_recheck{30'000};
  // Applied to every listed or watched object before it is cached and
  // handed to the handlers (client-go's SetTransform), so that an informer
  // of a large kind (16,000 Nodes) keeps only the fields its user reads. It
  // must keep metadata.name, metadata.namespace and metadata.resourceVersion
  // (the cache's key and change test). Empty: objects as the server sent them.
  std::function<nlohmann::json(nlohmann::json)> transform;
};

class Informer {
 public:
  // Called on the informer's thread, one at a time, after the cache changed.
  struct Handlers {
    std::function<void(const nlohmann::json& object)> on_upsert;
    std::function<void(const nlohmann::json& object)> on_delete;
    // After each complete (re)list, once its differences were reported.
    std::function<void()> on_synced;
  };

  // `client` and `metrics` (may be null) must outlive the informer.
  Informer(const ApiClient* client, InformerOptions options, Handlers handlers, MetricsRegistry* metrics);
  ~Informer();

  void Start();
  // Ends the watch and joins the thread; no handler runs after it returns.
  void Stop();

  // True once the first list has been applied (or, for a resource that may
  // be absent, once the server said it does not serve it).
  bool synced() const { return synced_.load(); }
  // False while a resource that may be absent is not served (404).
  bool served() const { return served_.load(); }
  // Waits (real time) until synced or `timeout` passed.
  bool WaitSynced(std::chrono::milliseconds timeout) const;
  std::optional<nlohmann::json> Get(const std::string& key) const;
  std::vector<nlohmann::json> List() const;

 private:
  void Run();
  Status ListAll(std::string* resource_version);
  // The list answered 404 for a resource that may be absent: the cache
  // empties (deletions reported) and the informer counts as synced.
  void ApplyAbsent();
  // Waits `delay` or until stopped; false when stopped.
  bool Pause(std::chrono::milliseconds delay);
  // Watches from rv; returns why the watch ended (OutOfRange: relist).
  Status Watch(std::string* resource_version);
  void Backoff(std::chrono::milliseconds* delay);
  std::string Url(std::string_view extra) const;

  const ApiClient* client_;
  const InformerOptions options_;
  const Handlers handlers_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  ObjectCache cache_;      // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::atomic<bool> synced_{false};
  std::atomic<bool> served_{true};
  StreamCancel cancel_;
  std::thread thread_;

  Counter* lists_ = nullptr;
  Counter* watches_ = nullptr;
  Counter* events_ = nullptr;
  Counter* relists_gone_ = nullptr;
  Counter* errors_ = nullptr;
};

}  // namespace clusterd::k8s
