#include "fake_kubelet/fake_kubelet.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <utility>

#include <google/protobuf/util/json_util.h>

namespace clusterd::testing {

std::unique_ptr<FakeKubelet> FakeKubelet::Start(const std::string& path) {
  std::unique_ptr<FakeKubelet> k(new FakeKubelet());
  k->path_ = path;
  ::unlink(path.c_str());
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
  builder.RegisterService(k.get());
  k->server_ = builder.BuildAndStart();
  if (!k->server_) return nullptr;
  return k;
}

FakeKubelet::~FakeKubelet() {
  if (server_) server_->Shutdown();
  ::unlink(path_.c_str());
}

void FakeKubelet::Answer(::v1::ListPodResourcesResponse response) {
  std::lock_guard lock(mu_);
  response_ = std::move(response);
  file_.clear();
  status_ = grpc::Status::OK;
}

void FakeKubelet::AnswerFromFile(std::string json_file) {
  std::lock_guard lock(mu_);
  file_ = std::move(json_file);
  status_ = grpc::Status::OK;
}

void FakeKubelet::Fail(grpc::Status status) {
  std::lock_guard lock(mu_);
  status_ = std::move(status);
}

grpc::ServerUnaryReactor* FakeKubelet::List(grpc::CallbackServerContext* ctx, const ::v1::ListPodResourcesRequest*,
                                            ::v1::ListPodResourcesResponse* resp) {
  ++calls_;
  auto* reactor = ctx->DefaultReactor();
  std::lock_guard lock(mu_);
  if (!status_.ok()) {
    reactor->Finish(status_);
    return reactor;
  }
  if (file_.empty()) {
    *resp = response_;
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  std::ifstream in(file_);
  if (!in) {
    reactor->Finish(grpc::Status::OK);  // no file yet: no pods
    return reactor;
  }
  std::stringstream text;
  text << in.rdbuf();
  auto st = google::protobuf::util::JsonStringToMessage(text.str(), resp);
  reactor->Finish(
      st.ok() ? grpc::Status::OK
              : grpc::Status(grpc::StatusCode::INTERNAL, "fake kubelet: " + file_ + ": " + std::string(st.message())));
  return reactor;
}

}  // namespace clusterd::testing
