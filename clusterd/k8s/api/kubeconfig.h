// Where ClientConfig comes from: a kubeconfig file (out-of-cluster runs,
// tests) or the pod's own service account (in-cluster).
#pragma once

#include <string>

#include "clusterd/k8s/api/client.h"
#include "common/status.h"

namespace clusterd::k8s {

// Reads a kubeconfig file (YAML or JSON): the context `context` (default:
// current-context), its cluster (server https://host:port,
// certificate-authority[-data], insecure-skip-tls-verify, tls-server-name)
// and its user (token, tokenFile, client-certificate[-data],
// client-key[-data]). Relative file paths are relative to the kubeconfig's
// directory. Exec and auth-provider plugins are refused with
// Unimplemented: use a token or a certificate. InvalidArgument names what is
// missing or malformed.
StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// The in-cluster service account: KUBERNETES_SERVICE_HOST/PORT, the token
// file (read again whenever it is rotated) and the CA bundle under
// `sa_dir` (default /var/run/secrets/kubernetes.io/serviceaccount).
// FailedPrecondition when not running in a pod.
StatusOr<ClientConfig> InClusterConfig(const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// The namespace the pod runs in (the service account's namespace file), or
// "default".
std::string InClusterNamespace(const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

}  // namespace clusterd::k8s
