// The write side of a server streaming reactor: one write in flight with a
// queue behind it, and a Finish that waits for the write in flight (gRPC
// allows no Finish while a write is outstanding). The first status asked for
// wins; queued messages are dropped once the stream is finishing.
//
// Not thread-safe: the owning reactor calls every method with its own mutex
// held, so that a Finish can never race a StartWrite.
#pragma once

#include <deque>
#include <optional>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace clusterd {

// The message a queued response is written as: the response itself, unless
// its type wraps one and overloads this (server/wire_events.h).
template <typename Message>
const Message& WireMessage(const Message& m) {
  return m;
}

template <typename Stream, typename Response>
class StreamWriter {
 public:
  explicit StreamWriter(Stream* stream) : stream_(stream) {}

  // Queues msg (dropped when finishing) and starts a write if none is in flight.
  void Push(Response msg) {
    if (finishing()) return;
    queue_.push_back(std::move(msg));
    Next();
  }
  // The messages not yet written, e.g. to coalesce a newer one into.
  std::deque<Response>& queue() { return queue_; }
  // Starts the next write if none is in flight.
  void Next() {
    if (finishing() || writing_ || queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    stream_->StartWrite(&WireMessage(current_));
  }
  // From OnWriteDone. Returns true if the stream finished now (a Finish was
  // waiting for this write): the reactor must not start anything else.
  bool WriteDone() {
    writing_ = false;
    if (!pending_finish_) return false;
    finish_called_ = true;
    stream_->Finish(*pending_finish_);
    return true;
  }
  void Finish(grpc::Status status) {
    if (finishing()) return;
    queue_.clear();
    if (writing_) {
      pending_finish_ = std::move(status);
      return;
    }
    finish_called_ = true;
    stream_->Finish(std::move(status));
  }

  bool finishing() const { return finish_called_ || pending_finish_.has_value(); }
  bool finished() const { return finish_called_; }
  bool writing() const { return writing_; }
  // Nothing queued and nothing in flight.
  bool idle() const { return !writing_ && queue_.empty(); }

 private:
  Stream* stream_;
  Response current_;
  std::deque<Response> queue_;
  bool writing_ = false;
  bool finish_called_ = false;
  std::optional<grpc::Status> pending_finish_;
};

}  // namespace clusterd
