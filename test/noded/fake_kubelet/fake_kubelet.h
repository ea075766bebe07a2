// A stand-in for the kubelet's pod-resources API (proto/k8s/podresources):
// List on a unix socket answers what the test set, or what a JSON file holds
// (the API's JSON mapping, read at every call, so a shell test rewrites it),
// or a gRPC error. NodeD's PodResourcesWatcher asks it as it asks the kubelet.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/grpcpp.h>

#include "k8s/podresources/v1/api.grpc.pb.h"

namespace clusterd::testing {

class FakeKubelet final : public ::v1::PodResourcesLister::CallbackService {
 public:
  // Serves on the unix socket `path` (removed first if it exists); null when
  // it cannot listen there.
  static std::unique_ptr<FakeKubelet> Start(const std::string& path);
  ~FakeKubelet() override;

  // What List answers from now on.
  void Answer(::v1::ListPodResourcesResponse response);
  void AnswerFromFile(std::string json_file);  // missing file: no pods
  void Fail(grpc::Status status);
  int calls() const { return calls_.load(); }

  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx, const ::v1::ListPodResourcesRequest* req,
                                 ::v1::ListPodResourcesResponse* resp) override;

 private:
  FakeKubelet() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string path_;
  std::mutex mu_;
  ::v1::ListPodResourcesResponse response_;
  std::string file_;
  grpc::Status status_;
  std::atomic<int> calls_{0};
};

}  // namespace clusterd::testing
