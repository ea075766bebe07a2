#include "clusterd/state/fault_table.h"

#include <algorithm>

#include "common/time_proto.h"

namespace clusterd {

using storage::Cf;

Status FaultTable::Load(const storage::Store& store) {
  Status parse_error;
  CLUSTERD_RETURN_IF_ERROR(store.ForEach(Cf::kFaults, [&](std::string_view key, std::string_view value) {
    v1::Fault f;
    if (!f.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
      if (parse_error.ok()) parse_error = DataLoss("fault record " + storage::HexEncode(key) + " does not parse");
      return;
    }
    if (f.state() == v1::FAULT_STATE_ACTIVE) {
      CountPublic(f, +1);
      if (f.has_auto_clear_time()) auto_clears_.emplace(FromTimestamp(f.auto_clear_time()), std::string(key));
    }
    auto [it, inserted] = faults_.emplace(std::string(key), std::move(f));
    if (inserted) ++nodes_[it->second.node()];
  }));
  return parse_error;
}

const v1::Fault* FaultTable::Find(const std::string& key) const {
  auto it = faults_.find(key);
  return it == faults_.end() ? nullptr : &it->second;
}

bool FaultTable::IsActive(const std::string& key) const {
  const v1::Fault* f = Find(key);
  return f && f->state() == v1::FAULT_STATE_ACTIVE;
}

const v1::Fault* FaultTable::FindById(const std::string& fault_id) const {
  for (const auto& [key, f] : OfNode(fault_id.substr(0, fault_id.find('/')))) {
    if (f.id() == fault_id) return &f;
  }
  return nullptr;
}

FaultTable::NodeTally FaultTable::Active(const std::string& node, std::optional<uint32_t> device) const {
  NodeTally out;
  for (const auto& [key, f] : OfNode(node)) {
    if (f.state() != v1::FAULT_STATE_ACTIVE) continue;
    const bool blames = BlamesHardware(f);
    ++out.node.active;
    if (blames) out.node.worst = std::max(out.node.worst, f.level());
    if (device && f.has_device_id() && f.device_id() == *device) {
      ++out.device.active;
      if (blames) out.device.worst = std::max(out.device.worst, f.level());
    }
  }
  return out;
}

uint32_t FaultTable::ActiveFrom(const std::string& node, bool external) const {
  uint32_t active = 0;
  for (const auto& [k, f] : OfNode(node)) {
    if (f.state() != v1::FAULT_STATE_ACTIVE || f.source() == v1::FAULT_SOURCE_HEARTBEAT) continue;
    if ((f.source() == v1::FAULT_SOURCE_EXTERNAL) == external) ++active;
  }
  return active;
}

namespace {

// The level and where it came from (Fault.reported_level ...).
void SetLevel(v1::Fault& f, const v1::Fault& proposed) {
  f.set_level(proposed.level());
  f.set_reported_level(proposed.reported_level());
  f.set_catalog_level(proposed.catalog_level());
  f.set_level_source(proposed.level_source());
}

}  // namespace

FaultTable::Raised FaultTable::Raise(const std::string& key, const v1::Fault& proposed, Mutation* m) {
  const auto now = ToTimestamp(journal_->Now());
  auto [it, inserted] = faults_.try_emplace(key, proposed);
  v1::Fault& f = it->second;
  if (inserted) ++nodes_[f.node()];
  Raised out{&f, true, !inserted && f.state() == v1::FAULT_STATE_ACTIVE};
  if (out.was_active) {
    *f.mutable_last_seen() = now;
    if (f.level() == proposed.level() && f.message() == proposed.message() &&
        f.reported_level() == proposed.reported_level() && f.catalog_level() == proposed.catalog_level() &&
        f.level_source() == proposed.level_source()) {
      out.changed = false;  // a refresh, not a change
      return out;
    }
    SetLevel(f, proposed);
    f.set_message(proposed.message());
  } else {
    if (inserted) {
      *f.mutable_first_seen() = now;
      f.set_id(storage::FaultIdOf(f));
    }
    SetLevel(f, proposed);
    f.set_message(proposed.message());
    f.set_state(v1::FAULT_STATE_ACTIVE);
    CountPublic(f, +1);
    f.set_count(f.count() + 1);
    *f.mutable_last_seen() = now;
    *f.mutable_activated_time() = now;
    f.clear_cleared_time();
    f.clear_clear_reason();
  }
  const uint64_t rev = journal_->Next();
  f.set_revision(rev);
  if (inserted) f.set_create_revision(rev);
  m->changes.Put(Cf::kFaults, key, f);
  return out;
}

const v1::Fault* FaultTable::Clear(const std::string& key, const std::string& reason, Mutation* m) {
  auto it = faults_.find(key);
  if (it == faults_.end() || it->second.state() != v1::FAULT_STATE_ACTIVE) return nullptr;
  v1::Fault& f = it->second;
  f.set_state(v1::FAULT_STATE_CLEARED);
  CountPublic(f, -1);
  if (f.has_auto_clear_time()) {
    auto_clears_.erase({FromTimestamp(f.auto_clear_time()), key});
    f.clear_auto_clear_time();
  }
  *f.mutable_cleared_time() = ToTimestamp(journal_->Now());
  f.set_clear_reason(reason);
  f.set_revision(journal_->Next());
  m->changes.Put(Cf::kFaults, key, f);
  return &f;
}

void FaultTable::SetAutoClear(const std::string& key, std::optional<TimePoint> when, Mutation* m) {
  v1::Fault& f = faults_.at(key);
  if (f.has_auto_clear_time()) auto_clears_.erase({FromTimestamp(f.auto_clear_time()), key});
  if (when) {
    *f.mutable_auto_clear_time() = ToTimestamp(*when);
    auto_clears_.emplace(*when, key);
  } else if (!f.has_auto_clear_time()) {
    return;
  } else {
    f.clear_auto_clear_time();
  }
  m->changes.Put(Cf::kFaults, key, f);
}

std::optional<std::string> FaultTable::DueAutoClear(TimePoint now) {
  while (!auto_clears_.empty() && auto_clears_.begin()->first <= now) {
    const std::string& key = auto_clears_.begin()->second;
    if (IsActive(key)) return key;
    auto_clears_.erase(auto_clears_.begin());
  }
  return std::nullopt;
}

TimePoint FaultTable::NextAutoClear() const {
  return auto_clears_.empty() ? TimePoint::max() : auto_clears_.begin()->first;
}

void FaultTable::CountPublic(const v1::Fault& f, int delta) {
  if (f.source() != v1::FAULT_SOURCE_EXTERNAL || f.reporter().rfind(kPubFaultReporterPrefix, 0) != 0) return;
  if (delta > 0) {
    ++active_public_;
  } else if (active_public_ > 0) {
    --active_public_;
  }
}

}  // namespace clusterd
