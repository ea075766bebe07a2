// An in-process gRPC server over TLS for the client-side security tests: the
// throw-away PKI of test/security/make_certs.sh, client certificates
// requested and verified when sent (token-only clients allowed), and a
// ClusterService whose GetSummary records who called (bearer token, client
// certificate CN). No authorization: that is ClusterD's, tested elsewhere.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>

#include "clusterd/v1/cluster.grpc.pb.h"
#include "test/support/test_certs.h"

namespace clusterd::testing {

// What the server saw of one call.
struct SeenCaller {
  std::string authorization;  // the "authorization" metadata, "" if none
  std::string common_name;    // the verified client certificate's CN, "" if none
};

class RecordingClusterService final : public clusterd::v1::ClusterService::Service {
 public:
  static constexpr uint64_t kRevision = 4242;

  grpc::Status GetSummary(grpc::ServerContext* ctx, const clusterd::v1::GetSummaryRequest*,
                          clusterd::v1::GetSummaryResponse* resp) override {
    SeenCaller seen;
    const auto& md = ctx->client_metadata();
    if (auto it = md.find("authorization"); it != md.end())
      seen.authorization.assign(it->second.data(), it->second.size());
    for (const auto& cn : ctx->auth_context()->FindPropertyValues("x509_common_name")) {
      seen.common_name.assign(cn.data(), cn.size());
    }
    {
      std::lock_guard lock(mu_);
      calls_.push_back(std::move(seen));
    }
    resp->set_revision(kRevision);
    return grpc::Status::OK;
  }

  std::vector<SeenCaller> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }
  SeenCaller last() {
    std::lock_guard lock(mu_);
    return calls_.empty() ? SeenCaller{} : calls_.back();
  }

 private:
  std::mutex mu_;
  std::vector<SeenCaller> calls_;
};

class TlsTestServer {
 public:
  // TLS with the certificates in cert_dir (from MakeTestCerts); plaintext when
  // cert_dir is empty. Listens on 127.0.0.1, a port picked by the system.
  bool Start(const std::string& cert_dir) {
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (!cert_dir.empty()) {
      grpc::SslServerCredentialsOptions opts(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
      opts.pem_root_certs = ReadWholeFile(cert_dir + "/ca.crt");
      opts.pem_key_cert_pairs.push_back(
          {ReadWholeFile(cert_dir + "/server.key"), ReadWholeFile(cert_dir + "/server.crt")});
      creds = grpc::SslServerCredentials(opts);
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", creds, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    return server_ != nullptr && port_ > 0;
  }
  ~TlsTestServer() {
    if (server_) server_->Shutdown();
  }

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  RecordingClusterService& service() { return service_; }

 private:
  RecordingClusterService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace clusterd::testing
