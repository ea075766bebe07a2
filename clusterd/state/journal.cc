#include "clusterd/state/journal.h"

#include "clusterd/storage/key_codec.h"
#include "common/time_proto.h"

namespace clusterd {

void Journal::Load(uint64_t revision, uint64_t compacted) {
  revision_ = revision;
  compacted_ = compacted;
  durable_ = revision;
}

uint64_t Journal::Next() {
  dirty_ = true;  // written once per commit, by Flush
  return ++revision_;
}

void Journal::Emit(Mutation* m, v1::Event event) {
  if (event.revision() == 0) event.set_revision(Next());
  *event.mutable_time() = ToTimestamp(clock_->Now());
  m->changes.Put(storage::Cf::kEvents, storage::EventKey(event.revision()), event);
  m->events.push_back(std::move(event));
}

void Journal::Flush(Mutation* m) {
  if (!dirty_) return;
  storage::PutRevision(&m->changes, revision_);
  dirty_ = false;
}

void Journal::Compact(uint64_t to, Mutation* m) {
  const uint64_t from = compacted_.load();
  if (to <= from) return;
  storage::AddCompaction(&m->changes, from, to);
  compacted_ = to;
}

}  // namespace clusterd
