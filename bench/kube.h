// A Kubernetes API server for scenario 13: etcd (one member, fsync on) and
// kube-apiserver on loopback with the flags the Kubernetes tests use
// (test/k8s/lib.sh), certificates from the openssl command, one admin token
// and a kubeconfig for clusterd; and KubeConn, one keep-alive HTTPS
// connection to it for the bench's own requests (the product's k8s::Client
// opens a connection per call, which would make a thousand writes a second
// a thousand TLS handshakes).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "common.h"

namespace clusterd::bench {

class KubeCluster {
 public:
  KubeCluster(std::string etcd_bin, std::string apiserver_bin, std::string dir);
  ~KubeCluster() { Stop(); }
  KubeCluster(const KubeCluster&) = delete;
  KubeCluster& operator=(const KubeCluster&) = delete;

  // Certificates, etcd, kube-apiserver (waits for /readyz), the kubeconfig.
  // "" or why not.
  std::string Start();
  void Stop();  // the API server first: without etcd its shutdown hangs

  int port() const { return api_port_; }
  const std::string& ca_file() const { return ca_file_; }
  const std::string& ca_pem() const { return ca_pem_; }
  const std::string& token() const { return token_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  pid_t apiserver_pid() const { return apiserver_.pid(); }
  pid_t etcd_pid() const { return etcd_.pid(); }

 private:
  std::string MakePki();
  std::string etcd_bin_, apiserver_bin_, dir_;
  ChildProcess etcd_, apiserver_;
  int api_port_ = 0;
  std::string ca_file_, ca_pem_, token_, kubeconfig_;
};

// One HTTPS connection to the cluster's API server, kept alive across
// requests (reopened when the server closes it). Not thread-safe: one per
// thread.
class KubeConn {
 public:
  KubeConn(const KubeCluster& cluster, double timeout_s = 30);
  ~KubeConn();
  KubeConn(const KubeConn&) = delete;
  KubeConn& operator=(const KubeConn&) = delete;

  struct Reply {
    int status = 0;
    std::string body;
  };
  // One request (JSON body when given); "" or why no answer came. Any HTTP
  // status is an answer.
  std::string Do(std::string_view method, const std::string& target, const std::string& body, Reply* reply);
  // PUT to collection/name, POST to collection on 404: "" or why neither
  // succeeded.
  std::string Upsert(const std::string& collection, const std::string& name, const std::string& body);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clusterd::bench
