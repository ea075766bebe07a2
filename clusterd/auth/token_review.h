// Checking a bearer token with a token-review service: the interface the
// gRPC edge's authenticator uses (edge/auth.h). The implementation on the
// Kubernetes TokenReview API (authentication.k8s.io/v1) is the Kubernetes
// room's (MakeKubernetesTokenReviewer).
#pragma once

#include <memory>
#include <string>
#include <vector>

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

}  // namespace clusterd
