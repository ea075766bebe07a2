// TokenReview (authentication.k8s.io/v1): the gRPC edge's TokenReviewer
// (auth/token_review.h) on the Kubernetes API, for bearer tokens of service
// accounts and pods (docs/security.md).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "clusterd/auth/token_review.h"
#include "clusterd/config/config.h"
#include "common/status.h"

namespace clusterd {

// Reviews against the API server of cfg's kubeconfig (or the pod's service
// account), for the audience cfg.auth.token_audience, with `timeout` per call.
StatusOr<std::unique_ptr<TokenReviewer>> MakeKubernetesTokenReviewer(
    const ClusterdConfig& cfg, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// The TokenReview request body and the reading of its answer (pure; tested
// on their own).
std::string TokenReviewRequestBody(const std::string& token, const std::string& audience);
StatusOr<TokenReviewResult> ParseTokenReview(const std::string& body);

}  // namespace clusterd
