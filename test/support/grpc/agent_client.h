// A minimal synchronous agent for tests: says hello, sends transitions and
// reads the acknowledgements on the same thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clusterd/v1/agent.grpc.pb.h"
#include "clusterd/v1/cluster.grpc.pb.h"
#include "clusterd/v1/fault.grpc.pb.h"

namespace clusterd::testing {

inline std::shared_ptr<grpc::Channel> Dial(int port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
}

// Reads a Watch stream's events until `want` arrived or the stream ends.
inline std::vector<v1::Event> ReadEvents(grpc::ClientReader<v1::WatchResponse>* reader, size_t want) {
  std::vector<v1::Event> out;
  v1::WatchResponse resp;
  while (out.size() < want && reader->Read(&resp)) {
    for (const auto& e : resp.events()) out.push_back(e);
  }
  return out;
}

class TestAgent {
 public:
  TestAgent(std::shared_ptr<grpc::Channel> channel, std::string node, uint64_t epoch, int devices = 8)
      : stub_(v1::NodeAgentService::NewStub(channel)), node_(std::move(node)), epoch_(epoch), devices_(devices) {}

  v1::Hello MakeHello() const {
    v1::Hello h;
    h.set_node_name(node_);
    h.set_boot_id("boot");
    h.set_agent_version("test-agent");
    h.set_epoch(epoch_);
    for (int i = 0; i < devices_; ++i) {
      auto* d = h.mutable_inventory()->add_devices();
      d->set_id(i);
      d->set_vendor("huawei");
      d->set_model("910B3");
    }
    return h;
  }

  // Opens the stream and waits for the Welcome. Returns false if the server
  // ended the stream instead; status() tells why.
  bool Connect(const v1::Hello* hello = nullptr) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Connect(ctx_.get());
    v1::ConnectRequest req;
    *req.mutable_hello() = hello ? *hello : MakeHello();
    if (!stream_->Write(req)) return Close();
    v1::ConnectResponse resp;
    if (!stream_->Read(&resp) || !resp.has_welcome()) return Close();
    welcome_ = resp.welcome();
    return true;
  }

  bool Send(const v1::ConnectRequest& req) { return stream_->Write(req); }

  // Sends a transition with the next sequence number and waits for its ack.
  bool Transition(uint64_t seq, bool raise, uint32_t device, const std::string& code, v1::Ack* ack = nullptr,
                  const std::string& message = "") {
    v1::ConnectRequest req;
    auto* t = req.mutable_transition();
    t->mutable_id()->set_epoch(epoch_);
    t->mutable_id()->set_seq(seq);
    t->set_action(raise ? v1::TRANSITION_ACTION_RAISE : v1::TRANSITION_ACTION_CLEAR);
    t->mutable_fault()->set_device_id(device);
    t->mutable_fault()->set_source(v1::FAULT_SOURCE_ACCELERATOR);
    t->mutable_fault()->set_code(code);
    t->mutable_fault()->set_message(message);
    if (!stream_->Write(req)) return false;
    return ReadAckUpTo(seq, ack);
  }

  bool ReadAckUpTo(uint64_t seq, v1::Ack* out = nullptr) {
    v1::ConnectResponse resp;
    while (stream_->Read(&resp)) {
      if (resp.has_ack() && resp.ack().id().epoch() == epoch_ && resp.ack().id().seq() >= seq) {
        if (out) *out = resp.ack();
        return true;
      }
    }
    return false;
  }

  bool Heartbeat() {
    v1::ConnectRequest req;
    req.mutable_heartbeat();
    return stream_->Write(req);
  }

  // Half-closes and returns the final status's ok().
  bool Close() {
    if (!stream_) return false;
    stream_->WritesDone();
    v1::ConnectResponse drain;
    while (stream_->Read(&drain)) {
    }
    status_ = stream_->Finish();
    stream_.reset();
    return false;
  }

  const grpc::Status& status() const { return status_; }
  const v1::Welcome& welcome() const { return welcome_; }
  uint64_t epoch() const { return epoch_; }

 private:
  std::unique_ptr<v1::NodeAgentService::Stub> stub_;
  std::string node_;
  uint64_t epoch_;
  int devices_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ConnectRequest, v1::ConnectResponse>> stream_;
  v1::Welcome welcome_;
  grpc::Status status_;
};

}  // namespace clusterd::testing
