// Checking a bearer token with the Kubernetes TokenReview API
// (authentication.k8s.io/v1): the interface the gRPC edge's authenticator
// uses (server/auth.h), and its implementation on the Kubernetes client.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "clusterd/config.h"
#include "common/status.h"

namespace clusterd {

// What the API server said about a token.
struct TokenReviewResult {
  bool authenticated = false;
  std::string user;
  std::vector<std::string> groups;
  // extra["authentication.kubernetes.io/node-name"] of a pod-bound token:
  // the node the pod runs on (NodeD's identity).
  std::string node_name;
  std::string error;  // why it was not authenticated, when the API says
};

// Thread-safe; blocking, with its own deadline. Answers are cached by the
// caller.
class TokenReviewer {
 public:
  virtual ~TokenReviewer() = default;
  // An error: the API could not answer (unreachable, refused the review).
  virtual StatusOr<TokenReviewResult> Review(const std::string& token) = 0;
};

// Reviews against the API server of cfg's kubeconfig (or the pod's service
// account), for the audience cfg.auth.token_audience, with `timeout` per call.
StatusOr<std::unique_ptr<TokenReviewer>> MakeKubernetesTokenReviewer(
    const ClusterdConfig& cfg, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// The TokenReview request body and the reading of its answer (pure; tested
// on their own).
std::string TokenReviewRequestBody(const std::string& token, const std::string& audience);
StatusOr<TokenReviewResult> ParseTokenReview(const std::string& body);

}  // namespace clusterd
