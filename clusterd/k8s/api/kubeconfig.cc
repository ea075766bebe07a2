#include "clusterd/k8s/api/kubeconfig.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace clusterd::k8s {
namespace {

StatusOr<std::string> ReadWhole(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(what + ": cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Base64 as kubeconfig's *-data fields carry it.
StatusOr<std::string> DecodeBase64(const std::string& in, const std::string& what) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    int v = value(c);
    if (v < 0) return InvalidArgument(what + ": not base64");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

// The entry of list `list` (clusters, users, contexts) named `name`.
YAML::Node Named(const YAML::Node& root, const char* list, const std::string& name) {
  const YAML::Node items = root[list];
  if (!items || !items.IsSequence()) return YAML::Node();
  for (const auto& item : items) {
    if (item.IsMap() && item["name"] && item["name"].as<std::string>("") == name) return item;
  }
  return YAML::Node();
}

std::string Str(const YAML::Node& n, const char* key) {
  if (!n || !n.IsMap() || !n[key] || !n[key].IsScalar()) return {};
  return n[key].as<std::string>("");
}

std::string Resolve(const std::filesystem::path& base, const std::string& p) {
  if (p.empty() || std::filesystem::path(p).is_absolute()) return p;
  return (base / p).string();
}

// The file or the inline -data field; empty when neither is set.
StatusOr<std::string> Material(const YAML::Node& n, const char* file_key, const char* data_key,
                               const std::filesystem::path& base, const std::string& what) {
  if (std::string data = Str(n, data_key); !data.empty()) return DecodeBase64(data, what + " " + data_key);
  if (std::string file = Str(n, file_key); !file.empty()) return ReadWhole(Resolve(base, file), what);
  return std::string();
}

// "https://host:port/..." -> host, port.
Status ParseServer(const std::string& server, ClientConfig* c) {
  constexpr std::string_view kScheme = "https://";
  if (server.rfind(kScheme, 0) != 0) {
    return InvalidArgument("kubeconfig: server \"" + server + "\" is not an https:// URL");
  }
  std::string rest = server.substr(kScheme.size());
  if (size_t slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  if (!rest.empty() && rest[0] == '[') {  // [v6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return InvalidArgument("kubeconfig: server \"" + server + "\": bad address");
    c->host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') c->port = rest.substr(close + 2);
  } else if (size_t colon = rest.rfind(':'); colon != std::string::npos) {
    c->host = rest.substr(0, colon);
    c->port = rest.substr(colon + 1);
  } else {
    c->host = rest;
  }
  if (c->host.empty() || c->port.empty()) return InvalidArgument("kubeconfig: server \"" + server + "\": no host");
  return Status::Ok();
}

}  // namespace

StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  auto text = ReadWhole(path, "kubeconfig");
  if (!text.ok()) return text.status();
  YAML::Node root;
  try {
    root = YAML::Load(*text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubeconfig " + path + ": " + e.what());
  }
  try {
    if (!root.IsMap()) return InvalidArgument("kubeconfig " + path + ": not a mapping");
    std::string ctx_name = context.empty() ? Str(root, "current-context") : context;
    if (ctx_name.empty()) return InvalidArgument("kubeconfig " + path + ": no current-context and none given");
    YAML::Node ctx = Named(root, "contexts", ctx_name)["context"];
    if (!ctx) return InvalidArgument("kubeconfig " + path + ": no context \"" + ctx_name + "\"");
    const std::string cluster_name = Str(ctx, "cluster");
    const std::string user_name = Str(ctx, "user");
    YAML::Node cluster = Named(root, "clusters", cluster_name)["cluster"];
    if (!cluster) return InvalidArgument("kubeconfig " + path + ": no cluster \"" + cluster_name + "\"");
    YAML::Node user = Named(root, "users", user_name)["user"];
    const std::filesystem::path base = std::filesystem::path(path).parent_path();

    ClientConfig c;
    if (Status s = ParseServer(Str(cluster, "server"), &c); !s.ok()) return s;
    auto ca = Material(cluster, "certificate-authority", "certificate-authority-data", base, "kubeconfig CA");
    if (!ca.ok()) return ca.status();
    c.ca_pem = *ca;
    c.insecure_skip_tls_verify = Str(cluster, "insecure-skip-tls-verify") == "true";
    c.tls_server_name = Str(cluster, "tls-server-name");
    if (user) {
      if (user["exec"] || user["auth-provider"]) {
        return Status(StatusCode::kUnimplemented,
                      "kubeconfig " + path + ": user \"" + user_name +
                          "\" uses an exec or auth-provider plugin; give a token or a client certificate");
      }
      c.token = Str(user, "token");
      c.token_file = Resolve(base, Str(user, "tokenFile"));
      auto cert =
          Material(user, "client-certificate", "client-certificate-data", base, "kubeconfig client certificate");
      if (!cert.ok()) return cert.status();
      auto key = Material(user, "client-key", "client-key-data", base, "kubeconfig client key");
      if (!key.ok()) return key.status();
      c.client_cert_pem = *cert;
      c.client_key_pem = *key;
    }
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgument("kubeconfig " + path + ": " + e.what());
  }
}

StatusOr<ClientConfig> InClusterConfig(const std::string& sa_dir) {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || *host == '\0' || port == nullptr || *port == '\0') {
    return FailedPrecondition(
        "kubernetes: not in a pod (KUBERNETES_SERVICE_HOST/PORT unset); give --kubeconfig for an out-of-cluster run");
  }
  ClientConfig c;
  c.host = host;
  c.port = port;
  c.token_file = sa_dir + "/token";
  auto ca = ReadWhole(sa_dir + "/ca.crt", "kubernetes service account CA");
  if (!ca.ok()) return ca.status();
  c.ca_pem = *ca;
  if (!std::filesystem::exists(c.token_file)) {
    return FailedPrecondition("kubernetes: no service account token at " + c.token_file +
                              " (is automountServiceAccountToken off?)");
  }
  return c;
}

std::string InClusterNamespace(const std::string& sa_dir) {
  auto ns = ReadWhole(sa_dir + "/namespace", "namespace");
  if (!ns.ok() || ns->empty()) return "default";
  std::string s = *ns;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "default" : s;
}

}  // namespace clusterd::k8s
