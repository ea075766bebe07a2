// A server-streaming call read on a thread of its own: the messages as they
// come (those `keep` accepts), and the stream's end. Tests wait on a
// condition with a deadline, never a sleep.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace clusterd::testing {

template <typename Message>
class StreamReader {
 public:
  using Open = std::function<std::unique_ptr<grpc::ClientReader<Message>>(grpc::ClientContext*)>;
  explicit StreamReader(const Open& open, std::function<bool(const Message&)> keep = nullptr,
                        std::chrono::seconds deadline = std::chrono::seconds(30))
      : deadline_(deadline) {
    reader_ = open(&ctx_);
    thread_ = std::thread([this, keep = std::move(keep)] {
      Message msg;
      while (reader_->Read(&msg)) {
        if (keep && !keep(msg)) continue;
        std::lock_guard lock(mu_);
        messages_.push_back(msg);
        cv_.notify_all();
      }
      grpc::Status st = reader_->Finish();
      std::lock_guard lock(mu_);
      status_ = std::move(st);
      done_ = true;
      cv_.notify_all();
    });
  }
  ~StreamReader() {
    ctx_.TryCancel();
    thread_.join();
  }
  StreamReader(const StreamReader&) = delete;
  StreamReader& operator=(const StreamReader&) = delete;

  // Waits until at least n messages came (or the stream ended, or the
  // deadline passed); returns them.
  std::vector<Message> WaitMessages(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, deadline_, [&] { return messages_.size() >= n || done_; });
    return messages_;
  }
  std::vector<Message> Messages() {
    std::lock_guard lock(mu_);
    return messages_;
  }
  // Waits until the server ended the stream; its status (UNKNOWN on timeout).
  grpc::Status WaitEnd() {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, deadline_, [&] { return done_; })) {
      return grpc::Status(grpc::StatusCode::UNKNOWN, "stream did not end in time");
    }
    return status_;
  }

 private:
  const std::chrono::seconds deadline_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<Message>> reader_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> messages_;
  grpc::Status status_;
  bool done_ = false;
};

}  // namespace clusterd::testing
