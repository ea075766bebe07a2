#include "clusterd/k8s/api/informer.h"

#include <random>

#include "common/logging.h"

namespace clusterd::k8s {

StatusOr<WatchEvent> ParseWatchEvent(std::string_view line) {
  auto parsed = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (!parsed.is_object()) return InvalidArgument("watch: a line is not a JSON object");
  auto type = parsed.find("type");
  auto object = parsed.find("object");
  if (type == parsed.end() || !type->is_string() || object == parsed.end() || !object->is_object()) {
    return InvalidArgument("watch: an event without type or object");
  }
  WatchEvent ev;
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "ADDED") {
    ev.type = WatchEvent::Type::kAdded;
  } else if (t == "MODIFIED") {
    ev.type = WatchEvent::Type::kModified;
  } else if (t == "DELETED") {
    ev.type = WatchEvent::Type::kDeleted;
  } else if (t == "BOOKMARK") {
    ev.type = WatchEvent::Type::kBookmark;
  } else if (t == "ERROR") {
    ev.type = WatchEvent::Type::kError;
    auto code = object->find("code");
    if (code != object->end() && code->is_number_integer()) ev.error_code = code->get<int>();
    auto msg = object->find("message");
    if (msg != object->end() && msg->is_string()) ev.error_message = msg->get<std::string>();
    return ev;
  } else {
    return InvalidArgument("watch: unknown event type \"" + t.substr(0, 32) + "\"");
  }
  ev.resource_version = ResourceVersionOf(*object);
  if (ev.type != WatchEvent::Type::kBookmark && ObjectKey(*object).empty()) {
    return InvalidArgument("watch: an object without a name");
  }
  ev.object = std::move(*object);
  return ev;
}

ObjectCache::Change ObjectCache::Upsert(const nlohmann::json& object) {
  std::string key = ObjectKey(object);
  if (key.empty()) return Change::kNone;
  auto it = objects_.find(key);
  if (it != objects_.end() && ResourceVersionOf(it->second) == ResourceVersionOf(object) &&
      !ResourceVersionOf(object).empty()) {
    return Change::kNone;
  }
  objects_[key] = object;
  return Change::kUpserted;
}

ObjectCache::Change ObjectCache::Erase(const nlohmann::json& object) {
  return objects_.erase(ObjectKey(object)) != 0 ? Change::kDeleted : Change::kNone;
}

void ObjectCache::Replace(std::vector<nlohmann::json> objects, std::vector<nlohmann::json>* upserted,
                          std::vector<nlohmann::json>* deleted) {
  std::map<std::string, nlohmann::json> fresh;
  for (auto& obj : objects) {
    std::string key = ObjectKey(obj);
    if (key.empty()) continue;
    auto old = objects_.find(key);
    if (old == objects_.end() || ResourceVersionOf(old->second) != ResourceVersionOf(obj) ||
        ResourceVersionOf(obj).empty()) {
      upserted->push_back(obj);
    }
    fresh[key] = std::move(obj);
  }
  for (auto& [key, obj] : objects_) {
    if (!fresh.contains(key)) deleted->push_back(std::move(obj));
  }
  objects_ = std::move(fresh);
}

std::optional<nlohmann::json> ObjectCache::Get(const std::string& key) const {
  auto it = objects_.find(key);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<nlohmann::json> ObjectCache::List() const {
  std::vector<nlohmann::json> out;
  out.reserve(objects_.size());
  for (const auto& [key, obj] : objects_) out.push_back(obj);
  return out;
}

Informer::Informer(const ApiClient* client, InformerOptions options, Handlers handlers, MetricsRegistry* metrics)
    : client_(client), options_(std::move(options)), handlers_(std::move(handlers)) {
  if (metrics != nullptr) {
    MetricLabels l = {{"resource", options_.name}};
    lists_ = &metrics->AddCounter("clusterd_k8s_lists_total", "Complete lists of a Kubernetes resource.", l);
    watches_ = &metrics->AddCounter("clusterd_k8s_watches_total", "Watches of a Kubernetes resource started.", l);
    events_ = &metrics->AddCounter("clusterd_k8s_watch_events_total", "Watch events received.", l);
    relists_gone_ = &metrics->AddCounter("clusterd_k8s_relists_gone_total",
                                         "Relists because the watched resourceVersion was compacted (410 Gone).", l);
    errors_ = &metrics->AddCounter("clusterd_k8s_informer_errors_total",
                                   "List or watch attempts that failed and were retried after a backoff.", l);
    if (options_.may_be_absent) {
      metrics->AddCallbackGauge(
          "clusterd_k8s_resource_served",
          "1 while the API server serves a resource that may be absent (a CRD's), 0 while it answers 404.",
          [this] { return served_.load() ? 1.0 : 0.0; }, l);
    }
  }
}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  {
    std::lock_guard lock(mu_);
    stopping_ = false;
  }
  cancel_.Reset();
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitSynced(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return synced_.load() || stopping_; }) && synced_.load();
}

std::optional<nlohmann::json> Informer::Get(const std::string& key) const {
  std::lock_guard lock(mu_);
  return cache_.Get(key);
}

std::vector<nlohmann::json> Informer::List() const {
  std::lock_guard lock(mu_);
  return cache_.List();
}

std::string Informer::Url(std::string_view extra) const {
  std::string url = options_.path + "?";
  if (!options_.label_selector.empty()) url += "labelSelector=" + UrlEncode(options_.label_selector) + "&";
  if (!options_.field_selector.empty()) url += "fieldSelector=" + UrlEncode(options_.field_selector) + "&";
  url += extra;
  return url;
}

Status Informer::ListAll(std::string* resource_version) {
  std::vector<nlohmann::json> items;
  std::string cont;
  std::string rv;
  do {
    std::string q = "limit=" + std::to_string(options_.page_size);
    if (!cont.empty()) q += "&continue=" + UrlEncode(cont);
    auto page = client_->Get(Url(q));
    if (!page.ok()) {
      if (options_.may_be_absent && cont.empty() && page.status().code() == StatusCode::kNotFound) {
        ApplyAbsent();
        resource_version->clear();
        return Status::Ok();
      }
      return page.status();
    }
    auto& list = *page;
    if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
      return Unavailable("kubernetes: list of " + options_.name + " is not a list");
    }
    for (auto& item : list["items"]) {
      items.push_back(options_.transform ? options_.transform(std::move(item)) : std::move(item));
    }
    const auto& meta = list.value("metadata", nlohmann::json::object());
    rv = meta.is_object() ? meta.value("resourceVersion", std::string()) : std::string();
    cont = meta.is_object() ? meta.value("continue", std::string()) : std::string();
  } while (!cont.empty());
  std::vector<nlohmann::json> upserted, deleted;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return {StatusCode::kCancelled, "stopping"};
    cache_.Replace(std::move(items), &upserted, &deleted);
  }
  for (const auto& obj : deleted) {
    if (handlers_.on_delete) handlers_.on_delete(obj);
  }
  for (const auto& obj : upserted) {
    if (handlers_.on_upsert) handlers_.on_upsert(obj);
  }
  served_ = true;
  synced_ = true;
  cv_.notify_all();
  if (handlers_.on_synced) handlers_.on_synced();
  if (lists_ != nullptr) lists_->Inc();
  *resource_version = rv;
  return Status::Ok();
}

void Informer::ApplyAbsent() {
  std::vector<nlohmann::json> upserted, deleted;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    cache_.Replace({}, &upserted, &deleted);
  }
  for (const auto& obj : deleted) {
    if (handlers_.on_delete) handlers_.on_delete(obj);
  }
  served_ = false;
  synced_ = true;
  cv_.notify_all();
  if (handlers_.on_synced) handlers_.on_synced();
}

bool Informer::Pause(std::chrono::milliseconds delay) {
  std::unique_lock lock(mu_);
  return !cv_.wait_for(lock, delay, [this] { return stopping_; });
}

Status Informer::Watch(std::string* resource_version) {
  static thread_local std::mt19937 rng(std::random_device{}());
  const int64_t full = std::max<int64_t>(2, options_.watch_timeout.count());
  const int64_t timeout = std::uniform_int_distribution<int64_t>(full / 2, full)(rng);
  std::string q = "watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(timeout);
  if (!resource_version->empty()) q += "&resourceVersion=" + UrlEncode(*resource_version);
  if (watches_ != nullptr) watches_->Inc();
  Status ended = Status::Ok();
  auto on_line = [&](std::string_view line) -> bool {
    auto ev = ParseWatchEvent(line);
    if (!ev.ok()) {
      ended = Unavailable("kubernetes: watch of " + options_.name + ": " + ev.status().message());
      return false;
    }
    if (events_ != nullptr) events_->Inc();
    if (options_.transform && (ev->type == WatchEvent::Type::kAdded || ev->type == WatchEvent::Type::kModified ||
                               ev->type == WatchEvent::Type::kDeleted)) {
      ev->object = options_.transform(std::move(ev->object));
    }
    switch (ev->type) {
      case WatchEvent::Type::kError:
        ended = ev->error_code == 410 ? OutOfRange("kubernetes: watch of " + options_.name + ": " + ev->error_message)
                                      : Unavailable("kubernetes: watch of " + options_.name + ": " +
                                                    std::to_string(ev->error_code) + " " + ev->error_message);
        return false;
      case WatchEvent::Type::kBookmark:
        if (!ev->resource_version.empty()) *resource_version = ev->resource_version;
        return true;
      case WatchEvent::Type::kDeleted: {
        ObjectCache::Change change;
        {
          std::lock_guard lock(mu_);
          change = cache_.Erase(ev->object);
        }
        if (!ev->resource_version.empty()) *resource_version = ev->resource_version;
        if (change == ObjectCache::Change::kDeleted && handlers_.on_delete) handlers_.on_delete(ev->object);
        return true;
      }
      default: {
        ObjectCache::Change change;
        {
          std::lock_guard lock(mu_);
          change = cache_.Upsert(ev->object);
        }
        if (!ev->resource_version.empty()) *resource_version = ev->resource_version;
        if (change == ObjectCache::Change::kUpserted && handlers_.on_upsert) handlers_.on_upsert(ev->object);
        return true;
      }
    }
  };
  // Bookmarks arrive about once a minute and the server ends the watch at its
  // timeout; silence well past that is a dead connection.
  Status s = client_->Stream(Url(q), std::chrono::seconds(timeout + 90), on_line, &cancel_);
  if (!ended.ok()) return ended;
  return s;
}

void Informer::Backoff(std::chrono::milliseconds* delay) {
  static thread_local std::mt19937 rng(std::random_device{}());
  auto jittered = std::chrono::milliseconds(
      std::uniform_int_distribution<int64_t>(delay->count() / 2, std::max<int64_t>(1, delay->count()))(rng));
  Pause(jittered);
  *delay = std::min(options_.backoff_max, *delay * 2);
}

void Informer::Run() {
  auto log = GetLogger("k8s");
  std::string rv;
  bool need_list = true;
  auto delay = options_.backoff_initial;
  Status last_error = Status::Ok();
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
    }
    Status s = Status::Ok();
    if (need_list) {
      const bool was_served = served_.load();
      s = ListAll(&rv);
      if (s.ok() && !served_.load()) {
        // Not served (a CRD that is not installed): nothing to watch; look
        // again later. Said once per change, not per look.
        if (was_served || !last_error.ok()) {
          log->warn(
              "{}: not served by the API server (404 for {}: is its CRD installed?); none of it is known "
              "until it is, checked every {} s",
              options_.name, options_.path, options_.absent_recheck.count() / 1000);
        }
        last_error = Status::Ok();
        delay = options_.backoff_initial;
        if (!Pause(options_.absent_recheck)) return;
        continue;
      }
      if (s.ok()) {
        need_list = false;
        if (!was_served) log->info("{}: served now, listed", options_.name);
        if (!last_error.ok()) log->info("{}: listed again after: {}", options_.name, last_error.message());
        last_error = Status::Ok();
      }
    } else {
      s = Watch(&rv);
      if (s.ok() || s.code() == StatusCode::kDeadlineExceeded) {
        // The server ended the watch at timeoutSeconds (or it went silent):
        // watch again from the last version seen.
        delay = options_.backoff_initial;
        continue;
      }
      if (s.code() == StatusCode::kNotFound && options_.may_be_absent) {
        need_list = true;  // the CRD went away: the list says so
        continue;
      }
      if (s.code() == StatusCode::kOutOfRange) {
        if (relists_gone_ != nullptr) relists_gone_->Inc();
        log->info("{}: resourceVersion {} is gone, listing again", options_.name, rv);
        need_list = true;
        continue;
      }
    }
    if (s.ok()) {
      delay = options_.backoff_initial;
      continue;
    }
    if (s.code() == StatusCode::kCancelled) return;
    if (errors_ != nullptr) errors_->Inc();
    if (s.message() != last_error.message()) log->warn("{}: {} (retrying with backoff)", options_.name, s.message());
    last_error = s;
    // A broken watch is retried from the same version; the server says 410
    // if that version is gone by then.
    Backoff(&delay);
  }
}

}  // namespace clusterd::k8s
