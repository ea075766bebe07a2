#include "clusterd/engine/watch_hub.h"

#include <algorithm>

#include "common/validation.h"

namespace clusterd {

WatchHub::WatchHub(const storage::Store* store, size_t cache_events, size_t cache_bytes)
    : store_(store), cache_events_(cache_events), cache_bytes_(cache_bytes) {}

void WatchHub::Init(uint64_t head) {
  std::unique_lock lock(cache_mu_);
  head_ = head;
  cache_.clear();
  cache_sizes_.clear();
  cache_used_ = 0;
}

void WatchHub::Publish(std::vector<v1::Event> events) {
  if (events.empty()) return;
  uint64_t head;
  {
    std::unique_lock lock(cache_mu_);
    for (auto& e : events) {
      const size_t size = e.ByteSizeLong();
      cache_.push_back(std::make_shared<const v1::Event>(std::move(e)));
      cache_sizes_.push_back(size);
      cache_used_ += size;
      head_ = cache_.back()->revision();
    }
    // Oldest first out; an event larger than the whole budget is not kept
    // at all (the store serves it).
    while (!cache_.empty() && (cache_.size() > cache_events_ || cache_used_ > cache_bytes_)) {
      cache_used_ -= cache_sizes_.front();
      cache_.pop_front();
      cache_sizes_.pop_front();
    }
    head = head_;
  }
  std::vector<std::shared_ptr<Listener>> listeners;
  {
    std::lock_guard lock(listeners_mu_);
    listeners.reserve(listeners_.size());
    for (auto& [id, l] : listeners_) listeners.push_back(l);
  }
  for (auto& l : listeners) (*l)(head);
}

uint64_t WatchHub::head() const {
  std::shared_lock lock(cache_mu_);
  return head_;
}

size_t WatchHub::cached_events() const {
  std::shared_lock lock(cache_mu_);
  return cache_.size();
}

size_t WatchHub::cached_bytes() const {
  std::shared_lock lock(cache_mu_);
  return cache_used_;
}

uint64_t WatchHub::Subscribe(Listener listener) {
  std::lock_guard lock(listeners_mu_);
  uint64_t id = next_id_++;
  listeners_[id] = std::make_shared<Listener>(std::move(listener));
  return id;
}

void WatchHub::Unsubscribe(uint64_t id) {
  std::lock_guard lock(listeners_mu_);
  listeners_.erase(id);
}

size_t WatchHub::watcher_count() const {
  std::lock_guard lock(listeners_mu_);
  return listeners_.size();
}

bool WatchHub::ReadCached(uint64_t after, size_t max, std::vector<EventPtr>* out) const {
  std::shared_lock lock(cache_mu_);
  if (after >= head_) return true;
  if (cache_.empty()) return false;
  const uint64_t first = cache_.front()->revision();
  if (after + 1 < first) return false;
  for (size_t i = after + 1 - first; i < cache_.size() && out->size() < max; ++i) out->push_back(cache_[i]);
  return true;
}

StatusOr<std::vector<EventPtr>> WatchHub::Fetch(uint64_t after, size_t max) const {
  std::vector<EventPtr> out;
  if (ReadCached(after, max, &out)) return out;
  auto events = store_->ReadEvents(after, max);
  if (!events.ok()) return events.status();
  // Retention may have removed the range between the caller's check and this
  // read: never skip silently.
  if (!events->empty() && events->front().revision() != after + 1) {
    return OutOfRange("revision " + std::to_string(after) + " is compacted; the oldest revision available is " +
                      std::to_string(events->front().revision()));
  }
  out.reserve(events->size());
  for (auto& e : *events) out.push_back(std::make_shared<const v1::Event>(std::move(e)));
  return out;
}

StatusOr<WatchFilter> WatchFilter::FromRequest(const v1::WatchRequest& req) {
  WatchFilter f;
  for (const auto& node : req.nodes()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("nodes", node));
    f.nodes_.push_back(node);
  }
  for (const auto& job : req.jobs()) {
    CLUSTERD_RETURN_IF_ERROR(ValidateNodeName("jobs", job));
    f.jobs_.push_back(job);
  }
  for (int t : req.types()) {
    if (!v1::EventType_IsValid(t) || t == v1::EVENT_TYPE_UNSPECIFIED) {
      return InvalidArgument("types: unknown event type " + std::to_string(t));
    }
    f.types_.push_back(static_cast<v1::EventType>(t));
  }
  if (!v1::FaultLevel_IsValid(req.min_level())) return InvalidArgument("min_level: unknown value");
  f.min_level_ = req.min_level();
  return f;
}

bool WatchFilter::Matches(const v1::Event& e) const {
  if (!nodes_.empty() && std::find(nodes_.begin(), nodes_.end(), e.node()) == nodes_.end()) return false;
  if (!types_.empty() && std::find(types_.begin(), types_.end(), e.type()) == types_.end()) return false;
  if (!jobs_.empty() && std::none_of(e.job_ids().begin(), e.job_ids().end(), [&](const std::string& id) {
        return std::find(jobs_.begin(), jobs_.end(), id) != jobs_.end();
      })) {
    return false;
  }
  if (e.has_fault() && e.fault().level() < min_level_) return false;
  return true;
}

}  // namespace clusterd
