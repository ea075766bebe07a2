#include "clusterd/server/wire_events.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <utility>

#include "clusterd/v1/cluster.pb.h"

namespace clusterd {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedOutputStream;

// `value` as field `field` of a WatchResponse, length-delimited or varint.
constexpr uint8_t kEventsTag =
    WireFormatLite::MakeTag(v1::WatchResponse::kEventsFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint8_t kRevisionTag =
    WireFormatLite::MakeTag(v1::WatchResponse::kRevisionFieldNumber, WireFormatLite::WIRETYPE_VARINT);
static_assert(kEventsTag < 0x80 && kRevisionTag < 0x80, "one-byte tags");

grpc::Slice Frame(const v1::Event& e) {
  // Several watchers may frame one shared event at once: ByteSizeLong only
  // stores the same cached sizes (relaxed atomics), nothing else is written.
  const size_t size = e.ByteSizeLong();
  grpc::Slice out(1 + CodedOutputStream::VarintSize64(size) + size);
  auto* p = const_cast<uint8_t*>(out.begin());  // a fresh slice: ours to fill
  *p++ = kEventsTag;
  p = CodedOutputStream::WriteVarint64ToArray(size, p);
  e.SerializeWithCachedSizesToArray(p);
  return out;
}

}  // namespace

WireEventCache::WireEventCache(Options options)
    : options_(options), slots_(std::make_unique<Slot[]>(std::max<size_t>(1, options.slots))) {}

grpc::Slice WireEventCache::Framed(const EventPtr& event) {
  Slot& slot = slots_[event->revision() % std::max<size_t>(1, options_.slots)];
  {
    std::lock_guard lock(slot.mu);
    if (slot.event == event) {
      hits_.fetch_add(1, std::memory_order_relaxed);
      if (hits_counter_) hits_counter_->Inc();
      return slot.bytes;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  if (misses_counter_) misses_counter_->Inc();
  grpc::Slice framed = Frame(*event);
  if (framed.size() > options_.max_event_bytes) return framed;
  std::lock_guard lock(slot.mu);
  if (slot.event == event) return framed;  // another watcher framed it meanwhile
  const size_t old = slot.bytes.size();
  // Over the budget: the slot keeps what it has (it is freed in turn when a
  // smaller event takes it).
  if (bytes_.load(std::memory_order_relaxed) - old + framed.size() > options_.max_bytes) return framed;
  bytes_.fetch_add(framed.size(), std::memory_order_relaxed);
  bytes_.fetch_sub(old, std::memory_order_relaxed);
  slot.event = event;
  slot.bytes = framed;
  return framed;
}

WireResponse WireResponseBuilder::Finish(uint64_t revision) {
  uint8_t trailer[1 + 10];  // a tag byte and at most 10 varint bytes
  trailer[0] = kRevisionTag;
  const uint8_t* end = CodedOutputStream::WriteVarint64ToArray(revision, trailer + 1);
  slices_.emplace_back(trailer, static_cast<size_t>(end - trailer));
  WireResponse out;
  grpc::ByteBuffer built(slices_.data(), slices_.size());
  out.buffer.Swap(&built);
  slices_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace clusterd
