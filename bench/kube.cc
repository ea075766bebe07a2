#include "kube.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "common/free_port.h"

extern char** environ;

namespace clusterd::bench {

namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// Runs a command to its end (output to log_path); its exit status, or -1.
int RunToEnd(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  argv.reserve(copy.size() + 1);
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  return static_cast<bool>(out) && ::chmod(path.c_str(), 0600) == 0;
}

std::string RandomHex(size_t bytes) {
  std::random_device rd;
  std::string out;
  char b[3];
  for (size_t i = 0; i < bytes; ++i) {
    std::snprintf(b, sizeof(b), "%02x", static_cast<unsigned>(rd() & 0xff));
    out += b;
  }
  return out;
}

std::string Tail(const std::string& path, size_t bytes = 1500) {
  std::string text = ReadFile(path);
  return text.size() > bytes ? text.substr(text.size() - bytes) : text;
}

}  // namespace

// ---------------------------------------------------------------- KubeCluster

KubeCluster::KubeCluster(std::string etcd_bin, std::string apiserver_bin, std::string dir)
    : etcd_bin_(std::move(etcd_bin)), apiserver_bin_(std::move(apiserver_bin)), dir_(std::move(dir)) {}

std::string KubeCluster::MakePki() {
  // The commands of test/k8s/lib.sh (k8s_gen_certs): a CA, a serving
  // certificate for 127.0.0.1 signed by it, a service-account key.
  const std::string log = dir_ + "/openssl.log", d = dir_ + "/";
  if (!WriteFile(d + "apiserver.ext",
                 "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                 "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n")) {
    return "cannot write " + d + "apiserver.ext";
  }
  const std::vector<std::vector<std::string>> steps = {
      {"openssl",  "req",
       "-x509",    "-new",
       "-nodes",   "-newkey",
       "rsa:2048", "-sha256",
       "-days",    "2",
       "-keyout",  d + "ca.key",
       "-out",     d + "ca.crt",
       "-subj",    "/CN=clusterd-bench-ca",
       "-addext",  "basicConstraints=critical,CA:TRUE",
       "-addext",  "keyUsage=critical,keyCertSign,cRLSign"},
      {"openssl", "req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", d + "apiserver.key", "-out",
       d + "apiserver.csr", "-subj", "/CN=kube-apiserver"},
      {"openssl", "x509", "-req", "-sha256", "-days", "2", "-in", d + "apiserver.csr", "-CA", d + "ca.crt", "-CAkey",
       d + "ca.key", "-CAcreateserial", "-extfile", d + "apiserver.ext", "-out", d + "apiserver.crt"},
      {"openssl", "genrsa", "-out", d + "sa.key", "2048"},
  };
  for (const auto& step : steps) {
    if (RunToEnd(step, log) != 0) return "openssl " + step[1] + " failed: " + Tail(log);
  }
  token_ = RandomHex(32);
  if (!WriteFile(d + "tokens.csv", token_ + ",admin,admin-uid,\"system:masters\"\n")) {
    return "cannot write " + d + "tokens.csv";
  }
  ca_file_ = d + "ca.crt";
  ca_pem_ = ReadFile(ca_file_);
  return ca_pem_.empty() ? "no CA certificate in " + ca_file_ : "";
}

std::string KubeCluster::Start() {
  ::mkdir(dir_.c_str(), 0700);
  if (auto err = MakePki(); !err.empty()) return err;

  const int etcd_port = FreeLoopbackPort();
  const std::string etcd_url = "http://127.0.0.1:" + std::to_string(etcd_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(FreeLoopbackPort());
  // fsync on (etcd's default), as on a real control plane; a quota large
  // enough for the 800 KiB ConfigMaps' history between the API server's
  // compactions.
  if (auto err = etcd_.Spawn({etcd_bin_, "--name", "bench", "--data-dir", dir_ + "/etcd", "--listen-client-urls",
                              etcd_url, "--advertise-client-urls", etcd_url, "--listen-peer-urls", peer,
                              "--initial-advertise-peer-urls", peer, "--initial-cluster", "bench=" + peer,
                              "--quota-backend-bytes", std::to_string(8LL << 30), "--log-level", "warn"},
                             dir_ + "/etcd.log");
      !err.empty()) {
    return "etcd: " + err;
  }
  int64_t deadline = NowNs() + static_cast<int64_t>(30e9);
  while (HttpGet(etcd_port, "/health").find("\"health\":\"true\"") == std::string::npos) {
    if (etcd_.Exited()) return "etcd exited during start: " + Tail(dir_ + "/etcd.log");
    if (NowNs() > deadline) return "etcd not healthy within 30 s: " + Tail(dir_ + "/etcd.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  api_port_ = FreeLoopbackPort();
  // test/k8s/lib.sh's flags (see the pitfalls named there).
  if (auto err = apiserver_.Spawn({apiserver_bin_,
                                   "--etcd-servers",
                                   etcd_url,
                                   "--bind-address",
                                   "127.0.0.1",
                                   "--advertise-address",
                                   "127.0.0.1",
                                   "--secure-port",
                                   std::to_string(api_port_),
                                   "--cert-dir",
                                   dir_ + "/certs",
                                   "--tls-cert-file",
                                   dir_ + "/apiserver.crt",
                                   "--tls-private-key-file",
                                   dir_ + "/apiserver.key",
                                   "--client-ca-file",
                                   ca_file_,
                                   "--token-auth-file",
                                   dir_ + "/tokens.csv",
                                   "--service-account-issuer",
                                   "https://kubernetes.default.svc",
                                   "--service-account-key-file",
                                   dir_ + "/sa.key",
                                   "--service-account-signing-key-file",
                                   dir_ + "/sa.key",
                                   "--service-cluster-ip-range",
                                   "10.0.0.0/24",
                                   "--endpoint-reconciler-type",
                                   "none",
                                   "--authorization-mode",
                                   "Node,RBAC",
                                   "--enable-priority-and-fairness=false",
                                   "--disable-admission-plugins",
                                   "ServiceAccount",
                                   "--profiling=false"},
                                  dir_ + "/kube-apiserver.log");
      !err.empty()) {
    return "kube-apiserver: " + err;
  }
  KubeConn conn(*this, 2);
  deadline = NowNs() + static_cast<int64_t>(90e9);
  for (;;) {
    KubeConn::Reply r;
    if (conn.Do("GET", "/readyz", "", &r).empty() && r.status == 200) break;
    if (apiserver_.Exited()) return "kube-apiserver exited during start: " + Tail(dir_ + "/kube-apiserver.log");
    if (NowNs() > deadline) return "kube-apiserver not ready within 90 s: " + Tail(dir_ + "/kube-apiserver.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  kubeconfig_ = dir_ + "/kubeconfig";
  const std::string server = "https://127.0.0.1:" + std::to_string(api_port_);
  if (!WriteFile(kubeconfig_, "apiVersion: v1\nkind: Config\nclusters:\n  - name: bench\n    cluster:\n      server: " +
                                  server + "\n      certificate-authority: " + ca_file_ +
                                  "\nusers:\n  - name: admin\n    user:\n      token: " + token_ +
                                  "\ncontexts:\n  - name: admin@bench\n    context:\n      cluster: bench\n      "
                                  "user: admin\ncurrent-context: admin@bench\n")) {
    return "cannot write " + kubeconfig_;
  }
  return "";
}

void KubeCluster::Stop() {
  apiserver_.Stop();
  etcd_.Stop();
}

// ---------------------------------------------------------------- KubeConn

struct KubeConn::Impl {
  Impl(int port, const std::string& ca_file, std::string token, double timeout_s)
      : port(port), token(std::move(token)), timeout(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1e3))) {
    ctx.set_verify_mode(ssl::verify_peer);
    beast::error_code ec;
    ctx.load_verify_file(ca_file, ec);
    ca_error = ec ? "CA " + ca_file + ": " + ec.message() : "";
  }

  std::string Connect() {
    if (!ca_error.empty()) return ca_error;
    stream = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ioc, ctx);
    // The serving certificate names 127.0.0.1 as an IP SAN.
    X509_VERIFY_PARAM* param = SSL_get0_param(stream->native_handle());
    X509_VERIFY_PARAM_set1_ip_asc(param, "127.0.0.1");
    auto& lowest = beast::get_lowest_layer(*stream);
    lowest.expires_after(timeout);
    beast::error_code ec;
    lowest.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)), ec);
    if (!ec) stream->handshake(ssl::stream_base::client, ec);
    if (ec) {
      stream.reset();
      return "connect to the API server: " + ec.message();
    }
    return "";
  }

  std::string Once(std::string_view method, const std::string& target, const std::string& body,
                   KubeConn::Reply* reply) {
    if (!stream) {
      if (auto err = Connect(); !err.empty()) return err;
    }
    http::request<http::string_body> req;
    req.method_string(beast::string_view(method.data(), method.size()));
    req.target(target);
    req.version(11);
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::authorization, "Bearer " + token);
    req.set(http::field::accept, "application/json");
    req.set(http::field::user_agent, "clusterd-bench");
    req.keep_alive(true);
    if (!body.empty()) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
    }
    req.prepare_payload();
    beast::get_lowest_layer(*stream).expires_after(timeout);
    beast::error_code ec;
    http::write(*stream, req, ec);
    http::response_parser<http::string_body> parser;
    parser.body_limit(64u << 20);
    if (!ec) http::read(*stream, buffer, parser, ec);
    if (ec) {
      stream.reset();
      buffer.clear();
      return std::string(method) + " " + target + ": " + ec.message();
    }
    auto& res = parser.get();
    reply->status = static_cast<int>(res.result_int());
    reply->body = std::move(res.body());
    if (!res.keep_alive()) stream.reset();
    return "";
  }

  const int port;
  const std::string token;
  const std::chrono::milliseconds timeout;
  net::io_context ioc;
  ssl::context ctx{ssl::context::tls_client};
  std::string ca_error;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> stream;
  beast::flat_buffer buffer;
};

KubeConn::KubeConn(const KubeCluster& cluster, double timeout_s)
    : impl_(std::make_unique<Impl>(cluster.port(), cluster.ca_file(), cluster.token(), timeout_s)) {}

KubeConn::~KubeConn() = default;

std::string KubeConn::Do(std::string_view method, const std::string& target, const std::string& body, Reply* reply) {
  // A connection the server closed while idle fails on first use: once more
  // on a fresh one.
  const bool reused = impl_->stream != nullptr;
  std::string err = impl_->Once(method, target, body, reply);
  if (!err.empty() && reused) err = impl_->Once(method, target, body, reply);
  return err;
}

std::string KubeConn::Upsert(const std::string& collection, const std::string& name, const std::string& body) {
  Reply r;
  if (auto err = Do("PUT", collection + "/" + name, body, &r); !err.empty()) return err;
  std::string what = "PUT " + collection + "/" + name;
  if (r.status == 404) {
    if (auto err = Do("POST", collection, body, &r); !err.empty()) return err;
    what = "POST " + collection;
  }
  if (r.status == 200 || r.status == 201) return "";
  return what + ": HTTP " + std::to_string(r.status) + " " + r.body.substr(0, 300);
}

}  // namespace clusterd::bench
