// A server streaming reactor with a bounded queue, for the job.Job and
// config.Config subscriptions (docs/mindcluster.md): one write in flight,
// at most `limit` messages waiting behind it; a push beyond ends the stream
// with RESOURCE_EXHAUSTED (a client that does not read holds a bounded
// amount of memory, then is let go, and gets the whole picture again when it
// subscribes again); when a write is stuck on the client, the call is
// cancelled (the client sees CANCELLED). Replace keeps only the newest message (a rank table:
// only the latest matters).
//
// Its cleanup (detaching from the feed and the service) runs on the pool
// after OnDone, never inline: gRPC may run OnDone inside a Finish called
// under the feed's mutex.
//
// Thread-safe: every method takes the stream's recursive mutex (gRPC may run
// a reaction inline from inside an operation started under it).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <grpcpp/grpcpp.h>

#include "clusterd/edge/stream_writer.h"
#include "common/metrics.h"

namespace clusterd {

template <typename Message>
class QueuedStream final : public grpc::ServerWriteReactor<Message> {
 public:
  // `ctx` is the call's (valid until OnDone).
  QueuedStream(grpc::CallbackServerContext* ctx, boost::asio::thread_pool* pool, Counter* messages,
               Counter* slow_refused)
      : ctx_(ctx), pool_(pool), messages_(messages), slow_refused_(slow_refused) {}

  // gRPC owns the stream through self until OnDone.
  void Begin(std::shared_ptr<QueuedStream> self) { self_ = std::move(self); }
  // Messages that may wait behind the one in flight.
  void SetLimit(size_t limit) {
    std::lock_guard lock(mu_);
    limit_ = limit;
  }
  // Queues msg; beyond the limit the stream ends instead (false).
  bool Push(Message msg) {
    std::lock_guard lock(mu_);
    if (out_.finishing()) return false;
    if (out_.queue().size() >= limit_) {
      if (slow_refused_ != nullptr) slow_refused_->Inc();
      out_.Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "the subscriber does not read: " + std::to_string(limit_) +
                                   " messages wait for it (the most one stream may hold); subscribe again"));
      // The write in flight waits for a client that does not read, and the
      // Finish waits for it: cancel the call, which fails that write.
      if (!out_.finished()) ctx_->TryCancel();
      return false;
    }
    out_.Push(std::move(msg));
    return true;
  }
  // Replaces whatever waits with msg.
  void Replace(Message msg) {
    std::lock_guard lock(mu_);
    if (out_.finishing()) return;
    out_.queue().clear();
    out_.Push(std::move(msg));
  }
  void End(grpc::Status status) {
    std::lock_guard lock(mu_);
    out_.Finish(std::move(status));
  }
  bool finishing() const {
    std::lock_guard lock(mu_);
    return out_.finishing();
  }
  // What to run on the pool once the stream is done (at once, on the pool,
  // if it is done already). Set once.
  void SetCleanup(std::function<void()> cleanup) {
    std::lock_guard lock(mu_);
    if (done_) {
      boost::asio::post(*pool_, std::move(cleanup));
      return;
    }
    cleanup_ = std::move(cleanup);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mu_);
    if (ok && messages_ != nullptr) messages_->Inc();
    if (out_.WriteDone()) return;
    if (!ok) {
      out_.Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write to the subscriber failed"));
      return;
    }
    out_.Next();
  }
  void OnCancel() override { End(grpc::Status(grpc::StatusCode::CANCELLED, "subscription cancelled")); }
  void OnDone() override {
    std::function<void()> cleanup;
    {
      std::lock_guard lock(mu_);
      done_ = true;
      cleanup = std::move(cleanup_);
    }
    // The cleanup holds its own reference if it needs the stream.
    if (cleanup) boost::asio::post(*pool_, std::move(cleanup));
    self_.reset();  // may delete this
  }

 private:
  grpc::CallbackServerContext* const ctx_;
  boost::asio::thread_pool* const pool_;
  Counter* const messages_;
  Counter* const slow_refused_;
  std::shared_ptr<QueuedStream> self_;
  mutable std::recursive_mutex mu_;
  size_t limit_ = 10;
  bool done_ = false;
  std::function<void()> cleanup_;
  StreamWriter<QueuedStream, Message> out_{this};
};

}  // namespace clusterd
