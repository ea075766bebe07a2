#include "clusterd/k8s/token_reviewer.h"

#include <nlohmann/json.hpp>

#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/kubeconfig.h"

namespace clusterd {

std::string TokenReviewRequestBody(const std::string& token, const std::string& audience) {
  nlohmann::json body = {
      {"apiVersion", "authentication.k8s.io/v1"}, {"kind", "TokenReview"}, {"spec", {{"token", token}}}};
  if (!audience.empty()) body["spec"]["audiences"] = nlohmann::json::array({audience});
  return body.dump();
}

StatusOr<TokenReviewResult> ParseTokenReview(const std::string& text) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  if (!doc.is_object()) return Unavailable("TokenReview answer is not a JSON object");
  TokenReviewResult r;
  const auto status = doc.value("status", nlohmann::json::object());
  if (!status.is_object()) return Unavailable("TokenReview answer has no status object");
  r.authenticated = status.value("authenticated", false) == true;
  if (status.contains("error") && status["error"].is_string()) r.error = status["error"].get<std::string>();
  const auto user = status.value("user", nlohmann::json::object());
  if (user.is_object()) {
    if (user.contains("username") && user["username"].is_string()) r.user = user["username"].get<std::string>();
    if (user.contains("groups") && user["groups"].is_array()) {
      for (const auto& g : user["groups"]) {
        if (g.is_string()) r.groups.push_back(g.get<std::string>());
      }
    }
    if (user.contains("extra") && user["extra"].is_object()) {
      auto it = user["extra"].find("authentication.kubernetes.io/node-name");
      if (it != user["extra"].end() && it->is_array() && !it->empty() && it->front().is_string()) {
        r.node_name = it->front().get<std::string>();
      }
    }
  }
  if (r.authenticated && r.user.empty()) return Unavailable("TokenReview authenticated a token without a username");
  return r;
}

namespace {

class KubernetesTokenReviewer final : public TokenReviewer {
 public:
  KubernetesTokenReviewer(std::unique_ptr<k8s::Client> client, std::string audience)
      : client_(std::move(client)), audience_(std::move(audience)) {}

  StatusOr<TokenReviewResult> Review(const std::string& token) override {
    auto resp = client_->Do("POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                            TokenReviewRequestBody(token, audience_), "application/json");
    if (!resp.ok()) return resp.status();
    if (Status st = k8s::ApiStatus(*resp); !st.ok()) return Unavailable("TokenReview: " + st.message());
    return ParseTokenReview(resp->body);
  }

 private:
  std::unique_ptr<k8s::Client> client_;
  const std::string audience_;
};

}  // namespace

StatusOr<std::unique_ptr<TokenReviewer>> MakeKubernetesTokenReviewer(const ClusterdConfig& cfg,
                                                                     std::chrono::milliseconds timeout) {
  const auto& k = cfg.k8s;
  auto config = k.kubeconfig.empty() ? k8s::InClusterConfig() : k8s::LoadKubeconfig(k.kubeconfig, k.kube_context);
  if (!config.ok()) return Status(config.status().code(), "auth_token_review: " + config.status().message());
  // Its own client, with a short deadline: a review runs while a caller waits.
  config->request_timeout = timeout;
  config->max_response_bytes = 1u << 20;
  auto client = k8s::Client::Create(std::move(*config));
  if (!client.ok()) return client.status();
  return std::unique_ptr<TokenReviewer>(new KubernetesTokenReviewer(std::move(*client), cfg.auth.token_audience));
}

}  // namespace clusterd
