// The Kubernetes API client library (clusterd/k8s: client, informer,
// kubeconfig) on recorded API JSON and against an in-process HTTPS server on
// 127.0.0.1 (a self-signed certificate made here with the OpenSSL C API).
//
// The fake server runs one thread per connection and answers with raw HTTP
// bytes, so that tests choose exactly where chunk boundaries fall. Waits are
// on conditions with deadlines; the only short timeouts are the ones under
// test (request_timeout, idle_timeout), and nothing asserts elapsed time.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "clusterd/k8s/api/client.h"
#include "clusterd/k8s/api/informer.h"
#include "clusterd/k8s/api/kubeconfig.h"
#include "test/support/temp_dir.h"
#include "test/support/wait.h"

namespace clusterd::k8s {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace fs = std::filesystem;
using tcp = boost::asio::ip::tcp;
using nlohmann::json;
using namespace std::chrono_literals;

// Long enough never to fire on a loaded machine; only a broken test waits it.
constexpr auto kWait = 20s;

// --- Recorded API JSON (kube-apiserver 1.37) --------------------------------

constexpr char kPodJson[] = R"({
  "kind": "Pod",
  "apiVersion": "v1",
  "metadata": {
    "name": "llama-pretrain-worker-0",
    "generateName": "llama-pretrain-worker-",
    "namespace": "training",
    "uid": "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9",
    "resourceVersion": "48213",
    "creationTimestamp": "2026-03-02T09:14:07Z",
    "labels": {"app": "llama-pretrain", "volcano.sh/job-name": "llama-pretrain"},
    "annotations": {"scheduling.k8s.io/group-name": "llama-pretrain"},
    "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "llama-pretrain",
                         "uid": "5f0c3b8e-3c1a-4d2e-9b7a-1d2e3f4a5b6c", "controller": true,
                         "blockOwnerDeletion": true}],
    "managedFields": [{"manager": "vc-controller-manager", "operation": "Update", "apiVersion": "v1",
                       "time": "2026-03-02T09:14:07Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]
  },
  "spec": {
    "containers": [{"name": "trainer", "image": "registry.local/llama:2.1",
                    "resources": {"limits": {"huawei.com/Ascend910": "8"}}}],
    "nodeName": "node-a17",
    "schedulerName": "volcano"
  },
  "status": {"phase": "Running", "hostIP": "10.0.3.17", "podIP": "10.244.7.12",
             "startTime": "2026-03-02T09:14:09Z"}
})";

constexpr char kNodeJson[] = R"({
  "kind": "Node",
  "apiVersion": "v1",
  "metadata": {
    "name": "node-a17",
    "uid": "9e8d7c6b-5a49-4837-a261-504f3e2d1c0b",
    "resourceVersion": "51007",
    "creationTimestamp": "2026-01-11T22:40:51Z",
    "labels": {"kubernetes.io/hostname": "node-a17", "node.kubernetes.io/instance-type": "atlas-800t-a2"}
  },
  "spec": {"podCIDR": "10.244.7.0/24", "providerID": "baremetal://node-a17"},
  "status": {"capacity": {"huawei.com/Ascend910": "8"}, "allocatable": {"huawei.com/Ascend910": "8"}}
})";

// A pod as it appears in a list or watch: the recorded one, renamed.
json Pod(const std::string& name, const std::string& rv, const std::string& ns = "training") {
  json pod = json::parse(kPodJson);
  pod["metadata"]["name"] = name;
  pod["metadata"]["namespace"] = ns;
  pod["metadata"]["resourceVersion"] = rv;
  return pod;
}

std::string Event(const std::string& type, const json& object) {
  return json{{"type", type}, {"object", object}}.dump();
}

std::string Bookmark(const std::string& rv) {
  return R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":")" + rv +
         R"(","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}},)"
         R"("spec":{"containers":null},"status":{}}})";
}

constexpr char kGoneEvent[] =
    R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",)j"
    R"j("message":"too old resource version: 110 (4711)","reason":"Expired","code":410}})j";

std::string StatusBody(int code, const std::string& reason, const std::string& message) {
  return json{{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", json::object()},
              {"status", "Failure"}, {"message", message}, {"reason", reason},
              {"code", code}}
      .dump();
}

// --- Temp dirs, files, environment -----------------------------------------

using clusterd::testing::TempDir;

// Sets or unsets an environment variable for one scope, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

std::string Base64(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// --- A self-signed certificate ---------------------------------------------

struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

std::string BioText(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(n));
}

// An EC P-256 key and a certificate for it valid for IP 127.0.0.1 and DNS
// localhost, signed by itself (so it is its own CA bundle).
CertAndKey MakeSelfSigned(const std::string& common_name) {
  CertAndKey out;
  EVP_PKEY* pkey = EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
  if (pkey == nullptr) {
    ADD_FAILURE() << "EC key generation failed";
    return out;
  }
  X509* x = X509_new();
  X509_set_version(x, 2);
  static std::atomic<long> serial{1000};
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, pkey);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                             -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost"},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    EXPECT_NE(ext, nullptr);
    if (ext != nullptr) {
      X509_add_ext(x, ext, -1);
      X509_EXTENSION_free(ext);
    }
  }
  EXPECT_GT(X509_sign(x, pkey, EVP_sha256()), 0);
  BIO* cert_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, x);
  out.cert_pem = BioText(cert_bio);
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(key_bio, pkey, nullptr, nullptr, 0, nullptr, nullptr);
  out.key_pem = BioText(key_bio);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  X509_free(x);
  EVP_PKEY_free(pkey);
  return out;
}

const CertAndKey& ServerCert() {
  static const CertAndKey cert = MakeSelfSigned("fake-apiserver");
  return cert;
}

// --- The fake API server ----------------------------------------------------

struct Request {
  std::string method;
  std::string target;
  std::string body;
  std::string content_type;
  std::string authorization;
};

class FakeApiServer;

// One accepted connection, as the handler sees it. Writes are raw HTTP bytes.
class Conn {
 public:
  Conn(FakeApiServer* server, ssl::stream<tcp::socket>* stream) : server_(server), stream_(stream) {}

  void Write(std::string_view raw) {
    boost::system::error_code ec;
    net::write(*stream_, net::buffer(raw.data(), raw.size()), ec);
  }
  void Reply(int status, std::string_view body, std::string_view extra_headers = "") {
    std::string head = StatusLine(status) +
                       "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
                       std::string(extra_headers) + "\r\n";
    Write(head + std::string(body));
  }
  void StartChunked(int status = 200) {
    Write(StatusLine(status) + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  }
  void Chunk(std::string_view data) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    Write(std::string(size) + std::string(data) + "\r\n");
  }
  void EndChunked() { Write("0\r\n\r\n"); }
  // Blocks until the server stops (a server that never answers further).
  void HoldUntilStopped();

 private:
  static std::string StatusLine(int status) {
    auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
    return "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason.data(), reason.size()) + "\r\n";
  }

  FakeApiServer* server_;
  ssl::stream<tcp::socket>* stream_;
};

class FakeApiServer {
 public:
  using Handler = std::function<void(const Request&, Conn&)>;

  explicit FakeApiServer(Handler handler, const CertAndKey& cert = ServerCert())
      : handler_(std::move(handler)), ctx_(ssl::context::tls_server), acceptor_(ioc_) {
    ctx_.use_certificate_chain(net::buffer(cert.cert_pem));
    ctx_.use_private_key(net::buffer(cert.key_pem), ssl::context::pem);
    tcp::endpoint ep(net::ip::make_address("127.0.0.1"), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    acceptor_.bind(ep);
    acceptor_.listen();
    port_ = acceptor_.local_endpoint().port();
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeApiServer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      // Wakes connection threads blocked in a read.
      for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    cv_.notify_all();
    // Wakes the blocking accept with a connection of our own.
    {
      net::io_context ioc;
      tcp::socket s(ioc);
      boost::system::error_code ec;
      s.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), port_), ec);
    }
    accept_thread_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard lock(mu_);
      threads.swap(conn_threads_);
    }
    for (auto& t : threads) t.join();
  }

  std::string port() const { return std::to_string(port_); }

  std::vector<Request> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  // Waits until at least n requests arrived.
  bool WaitRequests(size_t n) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return requests_.size() >= n; });
  }

  void HoldUntilStopped() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stopping_; });
  }

 private:
  void AcceptLoop() {
    for (;;) {
      tcp::socket sock(ioc_);
      boost::system::error_code ec;
      acceptor_.accept(sock, ec);
      std::lock_guard lock(mu_);
      if (stopping_) return;
      if (ec) continue;
      conn_threads_.emplace_back([this, s = std::move(sock)]() mutable { Serve(std::move(s)); });
    }
  }

  void Serve(tcp::socket sock) {
    ssl::stream<tcp::socket> stream(std::move(sock), ctx_);
    const int fd = stream.next_layer().native_handle();
    {
      std::lock_guard lock(mu_);
      if (stopping_) return;
      open_fds_.insert(fd);
    }
    boost::system::error_code ec;
    stream.handshake(ssl::stream_base::server, ec);
    if (!ec) {
      beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(stream, buffer, req, ec);
      if (!ec) {
        Request r{std::string(req.method_string()), std::string(req.target()), req.body(),
                  std::string(req[http::field::content_type]), std::string(req[http::field::authorization])};
        {
          std::lock_guard lock(mu_);
          requests_.push_back(r);
        }
        cv_.notify_all();
        Conn conn(this, &stream);
        handler_(r, conn);
      }
    }
    {
      std::lock_guard lock(mu_);
      open_fds_.erase(fd);
    }
    stream.next_layer().shutdown(tcp::socket::shutdown_both, ec);
    stream.next_layer().close(ec);
  }

  const Handler handler_;
  ssl::context ctx_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  unsigned short port_ = 0;
  std::thread accept_thread_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ = false;                  // guarded by mu_
  std::set<int> open_fds_;                 // guarded by mu_
  std::vector<std::thread> conn_threads_;  // guarded by mu_
  std::vector<Request> requests_;          // guarded by mu_
};

void Conn::HoldUntilStopped() { server_->HoldUntilStopped(); }

ClientConfig ConfigFor(const FakeApiServer& server) {
  ClientConfig c;
  c.host = "127.0.0.1";
  c.port = server.port();
  c.ca_pem = ServerCert().cert_pem;
  c.token = "test-token";
  return c;
}

std::unique_ptr<Client> MustCreate(ClientConfig config) {
  auto client = Client::Create(std::move(config));
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(*client) : nullptr;
}

// ============================================================================
// 1. ParseWatchEvent
// ============================================================================

TEST(ParseWatchEventTest, AddedModifiedDeletedCarryTheObject) {
  const json pod = json::parse(kPodJson);
  for (auto [name, type] :
       {std::pair{"ADDED", WatchEvent::Type::kAdded}, std::pair{"MODIFIED", WatchEvent::Type::kModified},
        std::pair{"DELETED", WatchEvent::Type::kDeleted}}) {
    auto ev = ParseWatchEvent(Event(name, pod));
    ASSERT_TRUE(ev.ok()) << name << ": " << ev.status().ToString();
    EXPECT_EQ(ev->type, type) << name;
    EXPECT_EQ(ev->resource_version, "48213");
    EXPECT_EQ(ev->object, pod);
    EXPECT_EQ(ev->error_code, 0);
  }
}

TEST(ParseWatchEventTest, ClusterScopedObject) {
  auto ev = ParseWatchEvent(Event("MODIFIED", json::parse(kNodeJson)));
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->type, WatchEvent::Type::kModified);
  EXPECT_EQ(ev->resource_version, "51007");
  EXPECT_EQ(ObjectKey(ev->object), "node-a17");
}

TEST(ParseWatchEventTest, BookmarkHasOnlyAResourceVersion) {
  auto ev = ParseWatchEvent(Bookmark("110"));
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->type, WatchEvent::Type::kBookmark);
  EXPECT_EQ(ev->resource_version, "110");
  EXPECT_EQ(ObjectKey(ev->object), "");
}

TEST(ParseWatchEventTest, ErrorCarriesTheStatusCodeAndMessage) {
  auto ev = ParseWatchEvent(kGoneEvent);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->type, WatchEvent::Type::kError);
  EXPECT_EQ(ev->error_code, 410);
  EXPECT_EQ(ev->error_message, "too old resource version: 110 (4711)");
  EXPECT_EQ(ev->resource_version, "");
}

TEST(ParseWatchEventTest, ErrorWithHostileFieldsStillParses) {
  auto ev = ParseWatchEvent(R"({"type":"ERROR","object":{"code":"410","message":["x"]}})");
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->type, WatchEvent::Type::kError);
  EXPECT_EQ(ev->error_code, 0);  // a string is not a code
  EXPECT_EQ(ev->error_message, "");
}

TEST(ParseWatchEventTest, MalformedLinesAreInvalidArgument) {
  const std::string pod = json::parse(kPodJson).dump();
  const std::vector<std::string> lines = {
      "",
      "not json",
      R"({"type":"ADDED","object":)",  // cut off
      "[1,2,3]",
      R"("ADDED")",
      "{}",
      R"({"object":)" + pod + "}",                 // no type
      R"({"type":"ADDED"})",                       // no object
      R"({"type":"SYNC","object":)" + pod + "}",   // unknown type
      R"({"type":"added","object":)" + pod + "}",  // types are upper case
      R"({"type":"ADDED","object":{"metadata":{"namespace":"training","resourceVersion":"5"}}})",  // no name
      R"({"type":"DELETED","object":{"kind":"Pod"}})",                                             // no metadata
      // Hostile types.
      R"({"type":7,"object":)" + pod + "}",
      R"({"type":null,"object":)" + pod + "}",
      R"({"type":"ADDED","object":[1]})",
      R"({"type":"ADDED","object":"pod"})",
      R"({"type":"ADDED","object":{"metadata":"x"}})",
      R"({"type":"ADDED","object":{"metadata":{"name":17,"resourceVersion":"5"}}})",
      R"({"type":"ADDED","object":{"metadata":{"name":{"a":1}}}})",
      R"({"type":"ADDED","object":{"metadata":{"name":""}}})",
  };
  for (const auto& line : lines) {
    auto ev = ParseWatchEvent(line);
    EXPECT_FALSE(ev.ok()) << line;
    if (!ev.ok()) {
      EXPECT_EQ(ev.status().code(), StatusCode::kInvalidArgument) << line;
    }
  }
}

TEST(ParseWatchEventTest, AResourceVersionOfTheWrongTypeIsEmpty) {
  auto ev = ParseWatchEvent(R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":12}}})");
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->resource_version, "");
  EXPECT_EQ(ObjectKey(ev->object), "a");
}

// ============================================================================
// 2. ObjectKey / ResourceVersionOf
// ============================================================================

TEST(ObjectKeyTest, NamespacedAndClusterScoped) {
  EXPECT_EQ(ObjectKey(json::parse(kPodJson)), "training/llama-pretrain-worker-0");
  EXPECT_EQ(ResourceVersionOf(json::parse(kPodJson)), "48213");
  EXPECT_EQ(ObjectKey(json::parse(kNodeJson)), "node-a17");
  EXPECT_EQ(ResourceVersionOf(json::parse(kNodeJson)), "51007");
}

TEST(ObjectKeyTest, MissingOrHostileMetadata) {
  EXPECT_EQ(ObjectKey(json()), "");
  EXPECT_EQ(ObjectKey(json::array()), "");
  EXPECT_EQ(ObjectKey(json::parse(R"({"metadata":null})")), "");
  EXPECT_EQ(ObjectKey(json::parse(R"({"metadata":{"namespace":"training"}})")), "");
  EXPECT_EQ(ObjectKey(json::parse(R"({"metadata":{"name":"a","namespace":5}})")), "a");
  EXPECT_EQ(ObjectKey(json::parse(R"({"metadata":{"name":"a","namespace":""}})")), "a");
  EXPECT_EQ(ResourceVersionOf(json::parse(R"({"metadata":{"resourceVersion":7}})")), "");
  EXPECT_EQ(ResourceVersionOf(json("str")), "");
}

// ============================================================================
// 3. ObjectCache
// ============================================================================

TEST(ObjectCacheTest, UpsertIsIdempotentPerResourceVersion) {
  ObjectCache cache;
  EXPECT_EQ(cache.Upsert(Pod("a", "10")), ObjectCache::Change::kUpserted);
  EXPECT_EQ(cache.Upsert(Pod("a", "10")), ObjectCache::Change::kNone);
  EXPECT_EQ(cache.Upsert(Pod("a", "11")), ObjectCache::Change::kUpserted);
  EXPECT_EQ(cache.size(), 1u);
  ASSERT_TRUE(cache.Get("training/a").has_value());
  EXPECT_EQ(ResourceVersionOf(*cache.Get("training/a")), "11");
  // Same name, another namespace: another object.
  EXPECT_EQ(cache.Upsert(Pod("a", "11", "other")), ObjectCache::Change::kUpserted);
  EXPECT_EQ(cache.size(), 2u);
  // Nameless objects are not cached.
  EXPECT_EQ(cache.Upsert(json::parse(R"({"metadata":{"resourceVersion":"3"}})")), ObjectCache::Change::kNone);
  EXPECT_EQ(cache.size(), 2u);
  // Without a resourceVersion nothing proves it unchanged.
  json no_rv = Pod("b", "1");
  no_rv["metadata"].erase("resourceVersion");
  EXPECT_EQ(cache.Upsert(no_rv), ObjectCache::Change::kUpserted);
  EXPECT_EQ(cache.Upsert(no_rv), ObjectCache::Change::kUpserted);
}

TEST(ObjectCacheTest, Erase) {
  ObjectCache cache;
  ASSERT_EQ(cache.Upsert(Pod("a", "10")), ObjectCache::Change::kUpserted);
  EXPECT_EQ(cache.Erase(Pod("b", "10")), ObjectCache::Change::kNone);
  // A delete carries the object's last state, whatever its version.
  EXPECT_EQ(cache.Erase(Pod("a", "12")), ObjectCache::Change::kDeleted);
  EXPECT_EQ(cache.Erase(Pod("a", "12")), ObjectCache::Change::kNone);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.Get("training/a").has_value());
}

std::vector<std::string> Keys(const std::vector<json>& objects) {
  std::vector<std::string> out;
  for (const auto& o : objects) out.push_back(ObjectKey(o) + "@" + ResourceVersionOf(o));
  return out;
}

TEST(ObjectCacheTest, ReplaceReportsNewChangedAndVanished) {
  ObjectCache cache;
  std::vector<json> up, del;
  cache.Replace({Pod("a", "10"), Pod("b", "11"), Pod("c", "12"), json::parse(kNodeJson)}, &up, &del);
  EXPECT_EQ(Keys(up), (std::vector<std::string>{"training/a@10", "training/b@11", "training/c@12", "node-a17@51007"}));
  EXPECT_TRUE(del.empty());

  // Relist after a gap: b changed, c vanished, d is new, a and the node are
  // unchanged and must not be reported again.
  up.clear();
  cache.Replace({Pod("a", "10"), Pod("b", "20"), Pod("d", "21"), json::parse(kNodeJson)}, &up, &del);
  EXPECT_EQ(Keys(up), (std::vector<std::string>{"training/b@20", "training/d@21"}));
  EXPECT_EQ(Keys(del), (std::vector<std::string>{"training/c@12"}));
  EXPECT_EQ(cache.size(), 4u);
  EXPECT_FALSE(cache.Get("training/c").has_value());
  EXPECT_EQ(ResourceVersionOf(*cache.Get("training/b")), "20");

  // An empty list deletes everything; nameless items are ignored.
  up.clear();
  del.clear();
  cache.Replace({json::parse(R"({"metadata":{}})")}, &up, &del);
  EXPECT_TRUE(up.empty());
  EXPECT_EQ(del.size(), 4u);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_TRUE(cache.List().empty());
}

// ============================================================================
// 4. ApiStatus
// ============================================================================

TEST(ApiStatusTest, MapsHttpAnswers) {
  struct Case {
    int http;
    std::string reason;
    StatusCode want;
  };
  const std::vector<Case> cases = {
      {400, "BadRequest", StatusCode::kInvalidArgument},
      {401, "Unauthorized", StatusCode::kPermissionDenied},
      {403, "Forbidden", StatusCode::kPermissionDenied},
      {404, "NotFound", StatusCode::kNotFound},
      {409, "AlreadyExists", StatusCode::kAlreadyExists},
      {409, "Conflict", StatusCode::kAborted},
      {410, "Expired", StatusCode::kOutOfRange},
      {422, "Invalid", StatusCode::kInvalidArgument},
      {429, "TooManyRequests", StatusCode::kResourceExhausted},
      {500, "InternalError", StatusCode::kUnavailable},
      {503, "ServiceUnavailable", StatusCode::kUnavailable},
  };
  for (const auto& c : cases) {
    const std::string message = "pods \"llama-pretrain-worker-0\": api says " + c.reason;
    Status s = ApiStatus(Response{c.http, StatusBody(c.http, c.reason, message), ""});
    EXPECT_EQ(s.code(), c.want) << c.http << " " << c.reason;
    EXPECT_NE(s.message().find(message), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::to_string(c.http)), std::string::npos) << s.message();
  }
}

TEST(ApiStatusTest, SuccessAndOddBodies) {
  EXPECT_TRUE(ApiStatus(Response{200, kPodJson, ""}).ok());
  EXPECT_TRUE(ApiStatus(Response{201, kPodJson, ""}).ok());
  EXPECT_TRUE(ApiStatus(Response{204, "", ""}).ok());
  // A proxy's HTML page: the start of the body, control characters blanked.
  Status s = ApiStatus(Response{502, "<html>\n<body>Bad Gateway</body></html>", ""});
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("<html> <body>Bad Gateway"), std::string::npos) << s.message();
  // A 409 without a Status body is a conflict.
  EXPECT_EQ(ApiStatus(Response{409, "", ""}).code(), StatusCode::kAborted);
  // A reason of the wrong type is no reason.
  EXPECT_EQ(ApiStatus(Response{409, R"({"reason":1,"message":"m"})", ""}).code(), StatusCode::kAborted);
  EXPECT_EQ(ApiStatus(Response{302, "", ""}).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ApiStatus(Response{0, "", ""}).code(), StatusCode::kUnavailable);
}

TEST(UrlEncodeTest, EscapesReservedCharacters) {
  EXPECT_EQ(UrlEncode("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(UrlEncode("app=llama,tier!=web"), "app%3Dllama%2Ctier%21%3Dweb");
  EXPECT_EQ(UrlEncode("Az09-_.~"), "Az09-_.~");
}

// ============================================================================
// 5. LoadKubeconfig / InClusterConfig
// ============================================================================

constexpr char kCaPem[] = "-----BEGIN CERTIFICATE-----\nMIIBfake-ca\n-----END CERTIFICATE-----\n";
constexpr char kClientCertPem[] = "-----BEGIN CERTIFICATE-----\nMIIBfake-client\n-----END CERTIFICATE-----\n";
constexpr char kClientKeyPem[] = "-----BEGIN EC PRIVATE KEY-----\nMHcfake-key\n-----END EC PRIVATE KEY-----\n";

// A kubeconfig as kubeadm and kind write them, with three contexts.
std::string YamlKubeconfig() {
  return R"(apiVersion: v1
kind: Config
preferences: {}
current-context: admin@prod
clusters:
- name: prod
  cluster:
    certificate-authority: pki/ca.crt
    server: https://10.0.0.1:6443
- name: kind
  cluster:
    certificate-authority-data: )" +
         Base64(kCaPem) + R"(
    server: https://[::1]:6443
    tls-server-name: kubernetes.default.svc
- name: lab
  cluster:
    insecure-skip-tls-verify: true
    server: https://api.lab.example.com
contexts:
- name: admin@prod
  context:
    cluster: prod
    user: admin
    namespace: training
- name: kind-kind
  context:
    cluster: kind
    user: kind-kind
- name: lab
  context:
    cluster: lab
    user: lab-sa
users:
- name: admin
  user:
    token: eyJhbGciOiJSUzI1NiIsImtpZCI6ImFkbWluIn0.e30.sig
- name: kind-kind
  user:
    client-certificate-data: )" +
         Base64(kClientCertPem) + R"(
    client-key-data: )" +
         Base64(kClientKeyPem) + R"(
- name: lab-sa
  user:
    tokenFile: secrets/token
)";
}

TEST(KubeconfigTest, CurrentContextWithRelativeCaFileAndToken) {
  TempDir dir;
  dir.Write("pki/ca.crt", kCaPem);
  const std::string path = dir.Write("config", YamlKubeconfig());
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host, "10.0.0.1");
  EXPECT_EQ(c->port, "6443");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->token, "eyJhbGciOiJSUzI1NiIsImtpZCI6ImFkbWluIn0.e30.sig");
  EXPECT_EQ(c->token_file, "");
  EXPECT_EQ(c->client_cert_pem, "");
}

TEST(KubeconfigTest, ExplicitContextWithInlineDataAndIpv6) {
  TempDir dir;
  const std::string path = dir.Write("config", YamlKubeconfig());
  auto c = LoadKubeconfig(path, "kind-kind");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, "6443");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_EQ(c->tls_server_name, "kubernetes.default.svc");
  EXPECT_EQ(c->client_cert_pem, kClientCertPem);
  EXPECT_EQ(c->client_key_pem, kClientKeyPem);
  EXPECT_EQ(c->token, "");
}

TEST(KubeconfigTest, DnsServerWithoutPortInsecureAndTokenFile) {
  TempDir dir;
  const std::string path = dir.Write("config", YamlKubeconfig());
  auto c = LoadKubeconfig(path, "lab");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host, "api.lab.example.com");
  EXPECT_EQ(c->port, "443");
  EXPECT_TRUE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->token_file, dir.Sub("secrets/token"));
}

TEST(KubeconfigTest, JsonKubeconfig) {
  TempDir dir;
  const std::string token_path = dir.Write("abs/token", "abc\n");
  json config = {
      {"apiVersion", "v1"},
      {"kind", "Config"},
      {"current-context", "ci"},
      {"clusters",
       {{{"name", "ci"},
         {"cluster",
          {{"server", "https://k8s.ci.example.com:8443/"},
           {"certificate-authority-data", Base64(kCaPem)},
           {"insecure-skip-tls-verify", false}}}}}},
      {"contexts", {{{"name", "ci"}, {"context", {{"cluster", "ci"}, {"user", "bot"}}}}}},
      {"users", {{{"name", "bot"}, {"user", {{"tokenFile", token_path}}}}}},
  };
  const std::string path = dir.Write("config.json", config.dump(2));
  auto c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->host, "k8s.ci.example.com");
  EXPECT_EQ(c->port, "8443");
  EXPECT_EQ(c->ca_pem, kCaPem);
  EXPECT_FALSE(c->insecure_skip_tls_verify);
  EXPECT_EQ(c->token_file, token_path);  // absolute: kept as given

  config["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = true;
  dir.Write("config.json", config.dump());
  c = LoadKubeconfig(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->insecure_skip_tls_verify);
}

TEST(KubeconfigTest, Errors) {
  TempDir dir;
  const std::string good = dir.Write("config", YamlKubeconfig());
  auto code = [](const StatusOr<ClientConfig>& c) { return c.ok() ? StatusCode::kOk : c.status().code(); };

  EXPECT_EQ(code(LoadKubeconfig(dir.Sub("missing"))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(good, "nope")), StatusCode::kInvalidArgument);
  // The prod CA file is relative to the kubeconfig and absent here.
  EXPECT_EQ(code(LoadKubeconfig(good, "admin@prod")), StatusCode::kInvalidArgument);

  const std::string base = R"(apiVersion: v1
clusters:
- name: c
  cluster:
    server: SERVER
    insecure-skip-tls-verify: true
contexts:
- name: x
  context: {cluster: CLUSTER, user: u}
users:
- name: u
  user: USER
)";
  auto make = [&](std::string server, std::string cluster, std::string user, bool current) {
    std::string text = base;
    text.replace(text.find("SERVER"), 6, server);
    text.replace(text.find("CLUSTER"), 7, cluster);
    text.replace(text.find("USER"), 4, user);
    if (current) text += "current-context: x\n";
    return dir.Write("variant", text);
  };
  const std::string token_user = "{token: t}";
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:6443", "c", token_user, true))), StatusCode::kOk);
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:6443", "c", token_user, false))),
            StatusCode::kInvalidArgument);  // no current-context
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:6443", "gone", token_user, true))),
            StatusCode::kInvalidArgument);  // unknown cluster
  EXPECT_EQ(code(LoadKubeconfig(make("http://10.0.0.1:8080", "c", token_user, true))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(make("10.0.0.1:6443", "c", token_user, true))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(make("https://[::1:6443", "c", token_user, true))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(make("https://:6443", "c", token_user, true))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:", "c", token_user, true))), StatusCode::kInvalidArgument);
  const std::string exec_user =
      "\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n      args: [eks, "
      "get-token]";
  auto exec = LoadKubeconfig(make("https://10.0.0.1:6443", "c", exec_user, true));
  EXPECT_EQ(code(exec), StatusCode::kUnimplemented);
  const std::string auth_provider_user = "\n    auth-provider:\n      name: oidc";
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:6443", "c", auth_provider_user, true))),
            StatusCode::kUnimplemented);
  EXPECT_EQ(code(LoadKubeconfig(make("https://10.0.0.1:6443", "c", "{client-key-data: '!!!'}", true))),
            StatusCode::kInvalidArgument);  // not base64

  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad1", "clusters: [\n  - {name: a\n"))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad2", "key: \"unterminated\n"))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad3", "- a\n- b\n"))), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad4", ""))), StatusCode::kInvalidArgument);
  // Hostile shapes: lists that are maps, names that are maps.
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad5", "current-context: x\ncontexts: {x: 1}\n"))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad6", "current-context: x\ncontexts:\n- name: {a: b}\n"))),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LoadKubeconfig(dir.Write("bad7", "current-context: [x]\n"))), StatusCode::kInvalidArgument);
}

TEST(InClusterConfigTest, ServiceAccount) {
  TempDir dir;
  const std::string sa = dir.Sub("serviceaccount");
  dir.Write("serviceaccount/token", "eyJhbGciOiJSUzI1NiJ9.sa.sig\n");
  dir.Write("serviceaccount/ca.crt", kCaPem);
  dir.Write("serviceaccount/namespace", "clusterd-system");

  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    auto c = InClusterConfig(sa);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->host, "10.96.0.1");
    EXPECT_EQ(c->port, "443");
    EXPECT_EQ(c->ca_pem, kCaPem);
    EXPECT_EQ(c->token_file, sa + "/token");
    EXPECT_EQ(c->token, "");
    EXPECT_EQ(InClusterNamespace(sa), "clusterd-system");

    // No CA, no token: refused.
    EXPECT_FALSE(InClusterConfig(dir.Sub("nothing")).ok());
    fs::remove(sa + "/token");
    auto no_token = InClusterConfig(sa);
    ASSERT_FALSE(no_token.ok());
    EXPECT_EQ(no_token.status().code(), StatusCode::kFailedPrecondition);
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
    auto c = InClusterConfig(sa);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  }
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    ScopedEnv port("KUBERNETES_SERVICE_PORT", "");
    auto c = InClusterConfig(sa);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kFailedPrecondition);
  }
}

TEST(InClusterConfigTest, Namespace) {
  TempDir dir;
  EXPECT_EQ(InClusterNamespace(dir.Sub("none")), "default");
  dir.Write("sa/namespace", "team-a\n");
  EXPECT_EQ(InClusterNamespace(dir.Sub("sa")), "team-a");
  dir.Write("sa/namespace", "\n");
  EXPECT_EQ(InClusterNamespace(dir.Sub("sa")), "default");
}

// ============================================================================
// 6. Client against the fake HTTPS server
// ============================================================================

TEST(ClientTest, CreateChecksTlsMaterial) {
  ClientConfig c;
  EXPECT_FALSE(Client::Create(c).ok());  // no host
  c.host = "127.0.0.1";
  c.ca_pem = "not a certificate";
  EXPECT_FALSE(Client::Create(c).ok());
  c.ca_pem = ServerCert().cert_pem;
  EXPECT_TRUE(Client::Create(c).ok());
  const CertAndKey client_cert = MakeSelfSigned("system:admin");
  c.client_cert_pem = client_cert.cert_pem;
  c.client_key_pem = client_cert.key_pem;
  EXPECT_TRUE(Client::Create(c).ok());
  c.client_key_pem = "garbage";
  auto bad = Client::Create(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(ClientTest, GetSendsTheBearerTokenAndParsesJson) {
  FakeApiServer server([](const Request&, Conn& c) { c.Reply(200, kPodJson); });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  auto pod = client->Get("/api/v1/namespaces/training/pods/llama-pretrain-worker-0");
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_EQ(*pod, json::parse(kPodJson));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].method, "GET");
  EXPECT_EQ(reqs[0].target, "/api/v1/namespaces/training/pods/llama-pretrain-worker-0");
  EXPECT_EQ(reqs[0].authorization, "Bearer test-token");
}

TEST(ClientTest, TokenFileRewrittenBetweenRequestsSendsTheNewToken) {
  TempDir dir;
  const std::string token_path = dir.Write("token", "first-token\n");
  FakeApiServer server([](const Request&, Conn& c) { c.Reply(200, "{}"); });
  ClientConfig config = ConfigFor(server);
  config.token = "";
  config.token_file = token_path;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->Get("/api").ok());
  const auto before = fs::last_write_time(token_path);
  dir.Write("token", "second-token\n");
  // The kubelet rotates tokens long apart; make the rewrite visibly newer
  // even where file times are coarser than two fast writes.
  fs::last_write_time(token_path, before + 2s);
  ASSERT_TRUE(client->Get("/api").ok());
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  EXPECT_EQ(reqs[0].authorization, "Bearer first-token");
  EXPECT_EQ(reqs[1].authorization, "Bearer second-token");
}

TEST(ClientTest, VerbsAndContentTypes) {
  FakeApiServer server([](const Request& r, Conn& c) {
    if (r.method == "POST") {
      c.Reply(201, kPodJson);
    } else if (r.method == "DELETE") {
      c.Reply(200, R"({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",)"
                   R"("details":{"name":"llama-pretrain-worker-0","kind":"pods","uid":"0b1c2d3e"}})");
    } else {
      c.Reply(200, kPodJson);
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  const std::string target = "/api/v1/namespaces/training/pods/llama-pretrain-worker-0";
  const json merge = {{"metadata", {{"labels", {{"clusterd.io/quarantined", "true"}}}}}};
  const json jsonpatch = json::array({{{"op", "add"}, {"path", "/spec/unschedulable"}, {"value", true}}});
  ASSERT_TRUE(client->Patch(target, merge, PatchType::kMerge).ok());
  ASSERT_TRUE(client->Patch(target, merge, PatchType::kStrategicMerge).ok());
  ASSERT_TRUE(client->Patch(target, jsonpatch, PatchType::kJson).ok());
  auto created = client->Post("/api/v1/namespaces/training/pods", json::parse(kPodJson));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["name"], "llama-pretrain-worker-0");
  ASSERT_TRUE(client->Put(target, json::parse(kPodJson)).ok());
  const json eviction = {{"apiVersion", "policy/v1"}, {"kind", "DeleteOptions"}, {"gracePeriodSeconds", 30}};
  ASSERT_TRUE(client->Delete(target, eviction).ok());
  ASSERT_TRUE(client->Delete(target).ok());

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 7u);
  EXPECT_EQ(reqs[0].method, "PATCH");
  EXPECT_EQ(reqs[0].content_type, "application/merge-patch+json");
  EXPECT_EQ(json::parse(reqs[0].body), merge);
  EXPECT_EQ(reqs[1].content_type, "application/strategic-merge-patch+json");
  EXPECT_EQ(reqs[2].content_type, "application/json-patch+json");
  EXPECT_EQ(json::parse(reqs[2].body), jsonpatch);
  EXPECT_EQ(reqs[3].method, "POST");
  EXPECT_EQ(reqs[3].content_type, "application/json");
  EXPECT_EQ(json::parse(reqs[3].body), json::parse(kPodJson));
  EXPECT_EQ(reqs[4].method, "PUT");
  EXPECT_EQ(reqs[4].content_type, "application/json");
  EXPECT_EQ(reqs[5].method, "DELETE");
  EXPECT_EQ(reqs[5].content_type, "application/json");
  EXPECT_EQ(json::parse(reqs[5].body), eviction);
  EXPECT_EQ(reqs[6].method, "DELETE");
  EXPECT_EQ(reqs[6].body, "");
  EXPECT_EQ(reqs[6].content_type, "");
}

TEST(ClientTest, NonSuccessAnswersAreMapped) {
  FakeApiServer server([](const Request& r, Conn& c) {
    if (r.target.find("missing") != std::string::npos) {
      c.Reply(404, StatusBody(404, "NotFound", "pods \"missing\" not found"));
    } else if (r.target.find("busy") != std::string::npos) {
      c.Reply(429, StatusBody(429, "TooManyRequests", "too many requests, please try again later"),
              "Retry-After: 3\r\n");
    } else if (r.method == "POST") {
      c.Reply(409, StatusBody(409, "AlreadyExists", "pods \"llama-pretrain-worker-0\" already exists"));
    } else {
      c.Reply(200, "this is not json");
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  auto missing = client->Get("/api/v1/namespaces/training/pods/missing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("pods \"missing\" not found"), std::string::npos);

  auto exists = client->Post("/api/v1/namespaces/training/pods", json::parse(kPodJson));
  ASSERT_FALSE(exists.ok());
  EXPECT_EQ(exists.status().code(), StatusCode::kAlreadyExists);

  auto busy = client->Do("GET", "/api/v1/busy");
  ASSERT_TRUE(busy.ok()) << busy.status().ToString();
  EXPECT_EQ(busy->status, 429);
  EXPECT_EQ(busy->retry_after, "3");
  EXPECT_EQ(ApiStatus(*busy).code(), StatusCode::kResourceExhausted);

  auto garbage = client->Get("/api/v1/other");
  ASSERT_FALSE(garbage.ok());
  EXPECT_EQ(garbage.status().code(), StatusCode::kUnavailable);
}

TEST(ClientTest, AnswerOverTheSizeLimitIsResourceExhausted) {
  FakeApiServer server([](const Request&, Conn& c) { c.Reply(200, kPodJson); });
  ClientConfig config = ConfigFor(server);
  config.max_response_bytes = 100;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api/v1/pods");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST(ClientTest, HostileContentLengthIsResourceExhausted) {
  FakeApiServer server([](const Request&, Conn& c) {
    c.Write("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{\"kind\"");
    c.HoldUntilStopped();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api/v1/pods");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST(ClientTest, ChunkedAnswerOverTheSizeLimitIsResourceExhausted) {
  FakeApiServer server([](const Request&, Conn& c) {
    c.StartChunked();
    c.Chunk(std::string(kPodJson).substr(0, 80));
    c.Chunk(std::string(kPodJson).substr(80));
    c.EndChunked();
  });
  ClientConfig config = ConfigFor(server);
  config.max_response_bytes = 100;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api/v1/pods");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST(ClientTest, ServerThatNeverAnswersIsDeadlineExceeded) {
  FakeApiServer server([](const Request&, Conn& c) { c.HoldUntilStopped(); });
  ClientConfig config = ConfigFor(server);
  config.request_timeout = 500ms;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api/v1/pods");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
}

TEST(ClientTest, NobodyListeningIsUnavailable) {
  std::string port;
  {
    FakeApiServer server([](const Request&, Conn& c) { c.Reply(200, "{}"); });
    port = server.port();
  }
  ClientConfig config;
  config.host = "127.0.0.1";
  config.port = port;
  config.ca_pem = ServerCert().cert_pem;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
}

TEST(ClientTest, TlsVerification) {
  FakeApiServer server([](const Request&, Conn& c) { c.Reply(200, "{}"); });
  const CertAndKey other = MakeSelfSigned("some-other-ca");

  ClientConfig wrong_ca = ConfigFor(server);
  wrong_ca.ca_pem = other.cert_pem;
  auto client = MustCreate(wrong_ca);
  ASSERT_NE(client, nullptr);
  auto r = client->Get("/api");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();

  // The certificate chains to the CA but names neither this name...
  ClientConfig wrong_name = ConfigFor(server);
  wrong_name.tls_server_name = "kubernetes.default.svc";
  client = MustCreate(wrong_name);
  ASSERT_NE(client, nullptr);
  EXPECT_FALSE(client->Get("/api").ok());
  // ...but does name this one.
  ClientConfig dns_name = ConfigFor(server);
  dns_name.tls_server_name = "localhost";
  client = MustCreate(dns_name);
  ASSERT_NE(client, nullptr);
  auto ok_dns = client->Get("/api");
  EXPECT_TRUE(ok_dns.ok()) << ok_dns.status().ToString();

  ClientConfig insecure = wrong_ca;
  insecure.ca_pem = "";
  insecure.insecure_skip_tls_verify = true;
  client = MustCreate(insecure);
  ASSERT_NE(client, nullptr);
  auto ok = client->Get("/api");
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  // Only the two successful handshakes reached HTTP.
  EXPECT_EQ(server.requests().size(), 2u);
}

// Collects the lines of a Stream.
struct Lines {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> lines;

  std::function<bool(std::string_view)> Sink() {
    return [this](std::string_view line) {
      {
        std::lock_guard lock(mu);
        lines.emplace_back(line);
      }
      cv.notify_all();
      return true;
    };
  }
  bool WaitFor(size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kWait, [&] { return lines.size() >= n; });
  }
  std::vector<std::string> Get() {
    std::lock_guard lock(mu);
    return lines;
  }
};

TEST(ClientStreamTest, LinesSplitAcrossChunksArriveInOrder) {
  const std::string a = Event("ADDED", Pod("a", "101"));
  const std::string b = Event("MODIFIED", Pod("b", "102"));
  const std::string c = Bookmark("103");
  const std::string d = Event("DELETED", Pod("d", "104"));
  const std::string e = Event("ADDED", Pod("e", "105"));
  FakeApiServer server([&](const Request&, Conn& conn) {
    conn.StartChunked();
    // a over three chunks.
    conn.Chunk(a.substr(0, 10));
    conn.Chunk(a.substr(10, 50));
    conn.Chunk(a.substr(60) + "\n");
    // b, c and the start of d in one chunk; d ends in the next with e whole.
    conn.Chunk(b + "\n" + c + "\n" + d.substr(0, 7));
    conn.Chunk(d.substr(7) + "\n" + e + "\n");
    // An empty line (a keep-alive) is not a line.
    conn.Chunk("\n");
    conn.EndChunked();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(lines.Get(), (std::vector<std::string>{a, b, c, d, e}));
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(server.requests()[0].authorization, "Bearer test-token");
}

TEST(ClientStreamTest, ALastLineWithoutNewlineIsDelivered) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("7") + "\n" + Bookmark("8"));
    conn.EndChunked();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(lines.Get(), (std::vector<std::string>{Bookmark("7"), Bookmark("8")}));
}

TEST(ClientStreamTest, OnLineFalseEndsTheStream) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("1") + "\n" + Bookmark("2") + "\n");
    conn.HoldUntilStopped();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  int calls = 0;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, [&](std::string_view) { return ++calls < 1; });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(calls, 1);
}

TEST(ClientStreamTest, ConnectionBrokenMidStreamIsUnavailable) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("1") + "\n");
    // Returns: the server closes the connection without the last chunk.
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_EQ(lines.Get(), std::vector<std::string>{Bookmark("1")});
}

TEST(ClientStreamTest, LineOverTheLimitIsResourceExhausted) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("1") + "\n" + std::string(300, 'x'));
    conn.HoldUntilStopped();
  });
  ClientConfig config = ConfigFor(server);
  config.max_line_bytes = 256;
  auto client = MustCreate(config);
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.ToString();
  EXPECT_EQ(lines.Get(), std::vector<std::string>{Bookmark("1")});
}

TEST(ClientStreamTest, IdleStreamIsDeadlineExceeded) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("1") + "\n");
    conn.HoldUntilStopped();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 300ms, lines.Sink());
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.ToString();
  EXPECT_EQ(lines.Get(), std::vector<std::string>{Bookmark("1")});
}

TEST(ClientStreamTest, CancelFromAnotherThread) {
  FakeApiServer server([](const Request&, Conn& conn) {
    conn.StartChunked();
    conn.Chunk(Bookmark("1") + "\n");
    conn.HoldUntilStopped();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  StreamCancel cancel;
  Lines lines;
  // Idle timeout far beyond kWait: only the cancel can end this stream
  // before the future's wait below gives up.
  auto done =
      std::async(std::launch::async, [&] { return client->Stream("/api/v1/pods?watch=1", 1h, lines.Sink(), &cancel); });
  ASSERT_TRUE(lines.WaitFor(1));
  cancel.Cancel();
  ASSERT_EQ(done.wait_for(kWait), std::future_status::ready);
  Status s = done.get();
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();

  // Cancelled before it starts: returns at once; after Reset it streams again.
  s = client->Stream("/api/v1/pods?watch=1", 1h, lines.Sink(), &cancel);
  EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.ToString();
  cancel.Reset();
  EXPECT_FALSE(cancel.cancelled());
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(ClientStreamTest, GoneAnswerIsOutOfRange) {
  const std::string gone = StatusBody(410, "Expired", "too old resource version: 100 (4711)");
  FakeApiServer server([&](const Request&, Conn& conn) { conn.Reply(410, gone); });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1&resourceVersion=100", 30s, lines.Sink());
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
  EXPECT_NE(s.message().find("too old resource version"), std::string::npos) << s.message();
  EXPECT_TRUE(lines.Get().empty());
}

TEST(ClientStreamTest, HostileContentLengthIsRefused) {
  for (int status : {200, 403}) {
    FakeApiServer server([&](const Request&, Conn& c) {
      c.Write("HTTP/1.1 " + std::to_string(status) +
              " X\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{\"kind\"");
      c.HoldUntilStopped();
    });
    auto client = MustCreate(ConfigFor(server));
    ASSERT_NE(client, nullptr);
    Lines lines;
    Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << status << ": " << s.ToString();
    EXPECT_TRUE(lines.Get().empty());
  }
}

TEST(ClientStreamTest, ChunkedErrorAnswerIsNotDeliveredAsLines) {
  const std::string forbidden =
      StatusBody(403, "Forbidden",
                 "pods is forbidden: User \"system:serviceaccount:clusterd-system:clusterd\" cannot watch resource "
                 "\"pods\" in API group \"\" at the cluster scope");
  FakeApiServer server([&](const Request&, Conn& conn) {
    conn.StartChunked(403);
    conn.Chunk(forbidden.substr(0, 40));
    conn.Chunk(forbidden.substr(40) + "\n");
    conn.EndChunked();
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Lines lines;
  Status s = client->Stream("/api/v1/pods?watch=1", 30s, lines.Sink());
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_NE(s.message().find("cannot watch resource"), std::string::npos) << s.message();
  EXPECT_TRUE(lines.Get().empty());
}

// ============================================================================
// 7. Informer against a scripted API
// ============================================================================

// Records the handler calls of an informer, in order.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> calls;
  int synced = 0;

  Informer::Handlers Handlers() {
    Informer::Handlers h;
    h.on_upsert = [this](const json& o) { Add("upsert " + ObjectKey(o) + "@" + ResourceVersionOf(o)); };
    h.on_delete = [this](const json& o) { Add("delete " + ObjectKey(o) + "@" + ResourceVersionOf(o)); };
    h.on_synced = [this] {
      {
        std::lock_guard lock(mu);
        ++synced;
      }
      Add("synced");
    };
    return h;
  }
  void Add(std::string s) {
    {
      std::lock_guard lock(mu);
      calls.push_back(std::move(s));
    }
    cv.notify_all();
  }
  bool WaitSynced(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kWait, [&] { return synced >= n; });
  }
  std::vector<std::string> Get() {
    std::lock_guard lock(mu);
    return calls;
  }
};

json PodList(const std::string& rv, const std::string& cont, std::vector<json> items) {
  json meta = {{"resourceVersion", rv}};
  if (!cont.empty()) {
    meta["continue"] = cont;
    meta["remainingItemCount"] = 1;
  }
  for (auto& item : items) {
    item.erase("kind");  // list items carry no kind
    item.erase("apiVersion");
  }
  return {{"kind", "PodList"}, {"apiVersion", "v1"}, {"metadata", meta}, {"items", items}};
}

TEST(InformerTest, ListPagesWatchesAndRelistsAfterGone) {
  // A continue token as the API server makes them (base64url, no padding).
  const std::string cont = "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAwLCJzdGFydCI6InRyYWluaW5nL2JcdTAwMDAifQ";
  std::atomic<int> lists{0};
  std::atomic<int> watches{0};
  FakeApiServer server([&](const Request& r, Conn& c) {
    if (r.target.find("watch=1") != std::string::npos) {
      const int n = ++watches;
      c.StartChunked();
      if (n == 1) {
        c.Chunk(Event("ADDED", Pod("d", "101")) + "\n" + Event("MODIFIED", Pod("a", "102")) + "\n");
        // A MODIFIED at the version already cached is no change.
        c.Chunk(Event("MODIFIED", Pod("c", "12")) + "\n");
        c.Chunk(Event("DELETED", Pod("b", "103")) + "\n" + Bookmark("110") + "\n");
        c.EndChunked();
      } else if (n == 2) {
        c.Chunk(std::string(kGoneEvent) + "\n");
        c.EndChunked();
      } else {
        c.HoldUntilStopped();
      }
      return;
    }
    if (r.target.find("continue=") != std::string::npos) {
      c.Reply(200, PodList("100", "", {Pod("c", "12")}).dump());
    } else if (++lists == 1) {
      c.Reply(200, PodList("100", cont, {Pod("a", "10"), Pod("b", "11")}).dump());
    } else {
      // The relist: c vanished while the watch was down, d changed.
      c.Reply(200, PodList("200", "", {Pod("a", "102"), Pod("d", "150")}).dump());
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Recorder rec;
  InformerOptions opts;
  opts.name = "pods";
  opts.path = "/api/v1/pods";
  opts.label_selector = "volcano.sh/job-name";
  opts.page_size = 2;
  opts.watch_timeout = 60s;
  opts.backoff_initial = 10ms;
  opts.backoff_max = 50ms;
  Informer informer(client.get(), opts, rec.Handlers(), nullptr);
  EXPECT_FALSE(informer.synced());
  informer.Start();
  ASSERT_TRUE(informer.WaitSynced(kWait));
  ASSERT_TRUE(rec.WaitSynced(2));
  // The third watch is running: everything before it was applied.
  ASSERT_TRUE(server.WaitRequests(6));
  informer.Stop();

  EXPECT_EQ(rec.Get(), (std::vector<std::string>{
                           "upsert training/a@10",
                           "upsert training/b@11",
                           "upsert training/c@12",
                           "synced",
                           "upsert training/d@101",
                           "upsert training/a@102",
                           "delete training/b@103",
                           "delete training/c@12",
                           "upsert training/d@150",
                           "synced",
                       }));
  std::vector<std::string> keys;
  for (const auto& o : informer.List()) keys.push_back(ObjectKey(o) + "@" + ResourceVersionOf(o));
  EXPECT_EQ(keys, (std::vector<std::string>{"training/a@102", "training/d@150"}));
  ASSERT_TRUE(informer.Get("training/d").has_value());
  EXPECT_FALSE(informer.Get("training/c").has_value());

  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 6u);
  const std::string sel = "labelSelector=volcano.sh%2Fjob-name&";
  EXPECT_EQ(reqs[0].target, "/api/v1/pods?" + sel + "limit=2");
  EXPECT_EQ(reqs[1].target, "/api/v1/pods?" + sel + "limit=2&continue=" + cont);
  auto watch_of = [](const Request& r) {
    EXPECT_NE(r.target.find("watch=1&allowWatchBookmarks=true&timeoutSeconds="), std::string::npos) << r.target;
    size_t at = r.target.find("&resourceVersion=");
    return at == std::string::npos ? std::string() : r.target.substr(at + 17);
  };
  EXPECT_EQ(watch_of(reqs[2]), "100");  // from the list
  EXPECT_EQ(watch_of(reqs[3]), "110");  // from the bookmark
  EXPECT_EQ(reqs[4].target, "/api/v1/pods?" + sel + "limit=2");
  EXPECT_EQ(watch_of(reqs[5]), "200");  // from the relist
  for (const auto& r : reqs) EXPECT_EQ(r.authorization, "Bearer test-token");
}

// The API server answers a watch from a compacted resourceVersion with an
// HTTP 410 before the stream starts; that too must lead to a relist.
TEST(InformerTest, GoneAnswerToAWatchRelists) {
  std::atomic<int> lists{0};
  std::atomic<int> watches{0};
  FakeApiServer server([&](const Request& r, Conn& c) {
    if (r.target.find("watch=1") != std::string::npos) {
      if (++watches == 1) {
        c.Reply(410, StatusBody(410, "Expired", "too old resource version: 100 (4711)"));
      } else {
        c.StartChunked();
        c.HoldUntilStopped();
      }
      return;
    }
    if (++lists == 1) {
      c.Reply(200, PodList("100", "", {Pod("a", "10"), Pod("b", "11")}).dump());
    } else {
      c.Reply(200, PodList("4711", "", {Pod("b", "11")}).dump());
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Recorder rec;
  InformerOptions opts;
  opts.name = "pods";
  opts.path = "/api/v1/namespaces/training/pods";
  opts.backoff_initial = 10ms;
  opts.backoff_max = 50ms;
  Informer informer(client.get(), opts, rec.Handlers(), nullptr);
  informer.Start();
  ASSERT_TRUE(rec.WaitSynced(2));
  ASSERT_TRUE(server.WaitRequests(4));
  informer.Stop();
  EXPECT_EQ(rec.Get(), (std::vector<std::string>{"upsert training/a@10", "upsert training/b@11", "synced",
                                                 "delete training/a@10", "synced"}));
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_NE(reqs[3].target.find("resourceVersion=4711"), std::string::npos) << reqs[3].target;
}

TEST(InformerTest, RetriesAfterErrorsWithBackoffAndStopsPromptly) {
  std::atomic<int> calls{0};
  FakeApiServer server([&](const Request& r, Conn& c) {
    if (r.target.find("watch=1") != std::string::npos) {
      c.StartChunked();
      c.HoldUntilStopped();
      return;
    }
    if (++calls <= 2) {
      c.Reply(500, StatusBody(500, "InternalError", "etcdserver: request timed out"));
    } else {
      c.Reply(200, PodList("300", "", {json::parse(kNodeJson)}).dump());
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Recorder rec;
  InformerOptions opts;
  opts.name = "nodes";
  opts.path = "/api/v1/nodes";
  opts.backoff_initial = 5ms;
  opts.backoff_max = 20ms;
  MetricsRegistry metrics;
  Informer informer(client.get(), opts, rec.Handlers(), &metrics);
  informer.Start();
  ASSERT_TRUE(informer.WaitSynced(kWait));
  ASSERT_TRUE(server.WaitRequests(4));  // two failures, the list, the watch
  informer.Stop();
  EXPECT_EQ(rec.Get(), (std::vector<std::string>{"upsert node-a17@51007", "synced"}));
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("clusterd_k8s_informer_errors_total{resource=\"nodes\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("clusterd_k8s_lists_total{resource=\"nodes\"} 1"), std::string::npos) << text;
  auto reqs = server.requests();
  EXPECT_NE(reqs.back().target.find("resourceVersion=300"), std::string::npos) << reqs.back().target;
}

TEST(InformerTest, AResourceNotServedIsAbsentUntilItsCrdAppears) {
  // Volcano's PodGroups on a cluster without Volcano: the list answers 404
  // until the CRD is installed.
  std::atomic<bool> served{false};
  FakeApiServer server([&](const Request& r, Conn& c) {
    if (!served) {
      c.Reply(404, StatusBody(404, "NotFound", "the server could not find the requested resource"));
      return;
    }
    if (r.target.find("watch=1") != std::string::npos) {
      c.StartChunked();
      c.HoldUntilStopped();
      return;
    }
    c.Reply(200, PodList("300", "", {json::parse(kNodeJson)}).dump());
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Recorder rec;
  InformerOptions opts;
  opts.name = "podgroups";
  opts.path = "/apis/scheduling.volcano.sh/v1beta1/podgroups";
  opts.may_be_absent = true;
  opts.absent_recheck = 5ms;
  MetricsRegistry metrics;
  Informer informer(client.get(), opts, rec.Handlers(), &metrics);
  informer.Start();
  // Not served counts as synced with nothing, so that discovery goes on
  // without it; it is not an error, and it is looked for again.
  ASSERT_TRUE(informer.WaitSynced(kWait));
  EXPECT_FALSE(informer.served());
  EXPECT_TRUE(informer.List().empty());
  ASSERT_TRUE(server.WaitRequests(3));
  std::string text = metrics.Render();
  EXPECT_NE(text.find("clusterd_k8s_resource_served{resource=\"podgroups\"} 0"), std::string::npos) << text;
  EXPECT_NE(text.find("clusterd_k8s_informer_errors_total{resource=\"podgroups\"} 0"), std::string::npos) << text;
  // The CRD is installed: the next look lists it and watches.
  served = true;
  ASSERT_TRUE(testing::WaitFor([&] { return informer.served() && informer.List().size() == 1; }));
  informer.Stop();
  const auto calls = rec.Get();
  ASSERT_GE(calls.size(), 3u);
  EXPECT_EQ(calls.front(), "synced");
  EXPECT_EQ(calls[calls.size() - 2], "upsert node-a17@51007");
  EXPECT_EQ(calls.back(), "synced");
  text = metrics.Render();
  EXPECT_NE(text.find("clusterd_k8s_resource_served{resource=\"podgroups\"} 1"), std::string::npos) << text;
}

TEST(InformerTest, A404IsAnErrorForAResourceThatMustBeServed) {
  std::atomic<int> calls{0};
  FakeApiServer server([&](const Request& r, Conn& c) {
    if (r.target.find("watch=1") != std::string::npos) {
      c.StartChunked();
      c.HoldUntilStopped();
      return;
    }
    if (++calls <= 1) {
      c.Reply(404, StatusBody(404, "NotFound", "the server could not find the requested resource"));
    } else {
      c.Reply(200, PodList("300", "", {json::parse(kNodeJson)}).dump());
    }
  });
  auto client = MustCreate(ConfigFor(server));
  ASSERT_NE(client, nullptr);
  Recorder rec;
  InformerOptions opts;
  opts.name = "nodes";
  opts.path = "/api/v1/nodes";
  opts.backoff_initial = 5ms;
  MetricsRegistry metrics;
  Informer informer(client.get(), opts, rec.Handlers(), &metrics);
  informer.Start();
  ASSERT_TRUE(informer.WaitSynced(kWait));
  informer.Stop();
  // Synced only by the list that answered: the 404 was retried, not taken as "none".
  EXPECT_EQ(rec.Get(), (std::vector<std::string>{"upsert node-a17@51007", "synced"}));
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("clusterd_k8s_informer_errors_total{resource=\"nodes\"} 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("clusterd_k8s_resource_served"), std::string::npos) << text;
}

}  // namespace
}  // namespace clusterd::k8s
