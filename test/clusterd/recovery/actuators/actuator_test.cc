#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/actuators/pooled.h"

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "common/http_server.h"
#include "common/tls_context.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"

namespace clusterd {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Collects `done` results; waits with a generous failure bound.
class Results {
 public:
  Actuator::Done Callback(std::string tag = "") {
    return [this, tag](ActionResult r) {
      std::lock_guard lock(mu_);
      results_.emplace_back(tag, std::move(r));
      cv_.notify_all();
    };
  }
  bool WaitFor(size_t n, std::chrono::seconds bound = 30s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return results_.size() >= n; });
  }
  std::vector<std::pair<std::string, ActionResult>> Get() {
    std::lock_guard lock(mu_);
    return results_;
  }
  ActionResult First() {
    std::lock_guard lock(mu_);
    return results_.at(0).second;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::string, ActionResult>> results_;
};

ActionRequest Request(std::string key = "train-1.1/2", TimePoint deadline = std::chrono::system_clock::now() + 60s) {
  ActionRequest req;
  req.idempotency_key = std::move(key);
  req.recovery_id = "train-1.1";
  req.job_id = "train-1";
  req.action = v1::CLUSTER_ACTION_ISOLATE_DEVICE;
  req.strategy = v1::RECOVERY_STRATEGY_POD_RESCHEDULE;
  req.node = "worker01";
  req.device = 3;
  req.ranks = {3};
  req.deadline = deadline;
  return req;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<Actuator> Exec(const std::string& command, int workers = 2) {
  auto a = MakeExecActuator({.command = command, .workers = workers});
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(*a) : nullptr;
}

// Runs one action to the end.
ActionResult RunOne(Actuator& actuator, ActionRequest req) {
  Results results;
  actuator.Execute(std::move(req), results.Callback());
  EXPECT_TRUE(results.WaitFor(1));
  return results.Get().empty() ? ActionResult{false, "no result"} : results.First();
}

TEST(ActionJsonTest, Golden) {
  ActionRequest req = Request();
  req.deadline = TimePoint(std::chrono::milliseconds(1'795'914'123'456));
  EXPECT_EQ(ActionJson(req), R"({"idempotency_key":"train-1.1/2","recovery_id":"train-1.1","job_id":"train-1",)"
                             R"("action":"isolate_device","strategy":"POD_RESCHEDULE","node":"worker01",)"
                             R"("device_id":3,"ranks":[3],"deadline":"2026-11-29T01:02:03.456Z"})");
}

TEST(ActionJsonTest, EscapesStringsAndOmitsUnsetDevice) {
  ActionRequest req;
  req.idempotency_key = "a\"b\\c\n\x01";
  req.recovery_id = "r";
  req.job_id = "j\xC3\xA9";
  req.action = v1::CLUSTER_ACTION_RESTART_JOB;
  req.strategy = v1::RECOVERY_STRATEGY_JOB_RESCHEDULE;
  req.ranks = {0, 1, 7};
  req.deadline = TimePoint(std::chrono::seconds(1'700'000'000));
  EXPECT_EQ(ActionJson(req), R"({"idempotency_key":"a\"b\\c\n\u0001","recovery_id":"r","job_id":"j)"
                             "\xC3\xA9"
                             R"(","action":"restart_job","strategy":"JOB_RESCHEDULE","node":"","ranks":[0,1,7],)"
                             R"("deadline":"2023-11-14T22:13:20.000Z"})");
}

TEST(ActionJsonTest, Names) {
  EXPECT_EQ(ActionName(v1::CLUSTER_ACTION_ISOLATE_DEVICE), "isolate_device");
  EXPECT_EQ(ActionName(v1::CLUSTER_ACTION_ISOLATE_NODE), "isolate_node");
  EXPECT_EQ(ActionName(v1::CLUSTER_ACTION_RESET_DEVICE), "reset_device");
  EXPECT_EQ(ActionName(v1::CLUSTER_ACTION_RESCHEDULE_PODS), "reschedule_pods");
  EXPECT_EQ(ActionName(v1::CLUSTER_ACTION_RESTART_JOB), "restart_job");
}

TEST(OneLineTest, SanitizesAndTruncates) {
  using actuator_internal::OneLine;
  EXPECT_EQ(OneLine("  a\tb\r\n", 100), "a b");
  EXPECT_EQ(OneLine("x\xFFy", 100), "x?y");
  EXPECT_EQ(OneLine("abcdef", 3), "abc");
  // Never cuts a UTF-8 sequence in half.
  EXPECT_EQ(OneLine("ab\xC3\xA9", 3), "ab");
}

TEST(NoneActuatorTest, FailsEveryAction) {
  auto a = MakeNoneActuator();
  EXPECT_EQ(a->kind(), "none");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "no actuator configured");
}

TEST(NoneActuatorTest, DoneNeverRunsInsideExecute) {
  auto a = MakeNoneActuator();
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  bool ran = false;
  std::thread::id ran_on;
  a->Execute(Request(), [&](ActionResult) {
    std::lock_guard lock(mu);
    ran = true;
    ran_on = std::this_thread::get_id();
    cv.notify_all();
  });
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 30s, [&] { return ran; }));
  EXPECT_NE(ran_on, caller);
}

TEST(ExecActuatorTest, RejectsBadOptions) {
  auto empty = MakeExecActuator({.command = "  "});
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto workers = MakeExecActuator({.command = "true", .workers = 0});
  ASSERT_FALSE(workers.ok());
  EXPECT_EQ(workers.status().code(), StatusCode::kInvalidArgument);
}

TEST(ExecActuatorTest, PassesJsonOnStdinAndEnvironment) {
  testing::TempDir dir;
  const std::string input = dir.Sub("input"), env = dir.Sub("env");
  auto a = Exec("cat >> " + input + "; echo \"$CLUSTERD_ACTION|$CLUSTERD_IDEMPOTENCY_KEY|$CLUSTERD_JOB_ID\" > " + env +
                "; echo first; echo last; echo");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kind(), "exec");
  const ActionRequest req = Request();
  const ActionResult r = RunOne(*a, req);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "last");
  EXPECT_EQ(ReadFile(input), ActionJson(req) + "\n");
  EXPECT_EQ(ReadFile(env), "isolate_device|train-1.1/2|train-1\n");
}

TEST(ExecActuatorTest, SuccessWithoutOutput) {
  auto a = Exec("true");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.message, "");
}

TEST(ExecActuatorTest, ExitStatusAndLastLine) {
  auto a = Exec("echo starting; echo 'no such device' >&2; exit 3");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "exit status 3: no such device");
}

TEST(ExecActuatorTest, LongLineTruncated) {
  auto a = Exec("head -c 5000 /dev/zero | tr '\\0' x; exit 1");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "exit status 1: " + std::string(512, 'x'));
}

TEST(ExecActuatorTest, KilledBySignal) {
  auto a = Exec("kill -KILL $$");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("signal 9"), std::string::npos) << r.message;
}

TEST(ExecActuatorTest, IgnoringStdinIsFine) {
  // The command exits without reading its stdin; the write must not kill us
  // (SIGPIPE) nor fail the action.
  auto a = Exec("exit 0");
  ActionRequest req = Request();
  req.ranks.assign(100'000, 7);  // more JSON than a pipe holds
  const ActionResult r = RunOne(*a, req);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(ExecActuatorTest, DeadlineTerminatesTheProcessGroup) {
  auto a = Exec("sleep 30 & wait");
  const ActionResult r = RunOne(*a, Request("k", std::chrono::system_clock::now() + 300ms));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("timed out"), std::string::npos) << r.message;
}

TEST(ExecActuatorTest, DeadlineKillsWhatIgnoresSigterm) {
  // A short grace after SIGTERM (2 s by default): the command is a real
  // process, killed in real time.
  auto made = MakeExecActuator({.command = "trap '' TERM; echo waiting; sleep 30", .kill_grace = 50ms});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto& a = *made;
  const ActionResult r = RunOne(*a, Request("k", std::chrono::system_clock::now() + 300ms));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("timed out"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("killed: SIGTERM was not enough"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("waiting"), std::string::npos) << r.message;
}

TEST(ExecActuatorTest, DeadlineAlreadyPassed) {
  testing::TempDir dir;
  auto a = Exec("touch " + dir.Sub("ran"));
  const ActionResult r = RunOne(*a, Request("k", std::chrono::system_clock::now() - 1s));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("timed out"), std::string::npos) << r.message;
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("ran")));
}

TEST(ExecActuatorTest, StopWaitsForRunningActionsAndRefusesNewOnes) {
  auto a = Exec("sleep 0.3; echo finished", 1);
  Results results;
  a->Execute(Request("a"), results.Callback("a"));
  a->Execute(Request("b"), results.Callback("b"));  // queued behind "a"
  a->Stop();
  {
    const auto got = results.Get();
    ASSERT_EQ(got.size(), 2u);
    for (const auto& [tag, r] : got) {
      EXPECT_TRUE(r.ok) << tag << ": " << r.message;
      EXPECT_EQ(r.message, "finished");
    }
  }
  a->Execute(Request("c"), results.Callback("c"));
  ASSERT_TRUE(results.WaitFor(3));
  const auto refused = results.Get().at(2);
  EXPECT_EQ(refused.first, "c");
  EXPECT_FALSE(refused.second.ok);
  EXPECT_NE(refused.second.message.find("stopped"), std::string::npos) << refused.second.message;
  a->Stop();  // again: harmless
}

TEST(ExecActuatorTest, ParallelActionsAllComplete) {
  auto a = Exec("cat > /dev/null; echo \"$CLUSTERD_IDEMPOTENCY_KEY\"", 4);
  Results results;
  constexpr int kActions = 16;
  for (int i = 0; i < kActions; ++i) {
    const std::string key = "r/" + std::to_string(i);
    a->Execute(Request(key), results.Callback(key));
  }
  ASSERT_TRUE(results.WaitFor(kActions));
  const auto got = results.Get();
  ASSERT_EQ(got.size(), static_cast<size_t>(kActions));
  for (const auto& [key, r] : got) {
    EXPECT_TRUE(r.ok) << key << ": " << r.message;
    EXPECT_EQ(r.message, key);
  }
}

// A tiny HTTP server for the webhook: answers every request with the
// configured status and body, and records what it got.
class FakeWebhook {
 public:
  struct Received {
    std::string method, target, content_type, idempotency_key, host, body;
  };

  FakeWebhook() : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    Accept();
    thread_ = std::thread([this] { ioc_.run(); });
  }
  ~FakeWebhook() {
    ioc_.stop();
    thread_.join();
  }

  int port() const { return acceptor_.local_endpoint().port(); }
  void Answer(http::status status, std::string body) {
    std::lock_guard lock(mu_);
    status_ = status;
    body_ = std::move(body);
  }
  std::vector<Received> received() {
    std::lock_guard lock(mu_);
    return received_;
  }

 private:
  void Accept() {
    acceptor_.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec) return;
      Serve(std::move(socket));  // blocking, on the server thread: fine for a test
      Accept();
    });
  }
  void Serve(tcp::socket socket) {
    beast::error_code ec;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::read(socket, buffer, req, ec);
    if (ec) return;
    http::response<http::string_body> res;
    {
      std::lock_guard lock(mu_);
      received_.push_back({std::string(req.method_string()), std::string(req.target()),
                           std::string(req[http::field::content_type]), std::string(req["Idempotency-Key"]),
                           std::string(req[http::field::host]), req.body()});
      res.result(status_);
      res.body() = body_;
    }
    res.version(11);
    res.keep_alive(false);
    res.prepare_payload();
    http::write(socket, res, ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
  }

  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::mutex mu_;
  http::status status_ = http::status::ok;
  std::string body_;
  std::vector<Received> received_;
};

std::unique_ptr<Actuator> Webhook(const std::string& url) {
  auto a = MakeWebhookActuator({.url = url});
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? std::move(*a) : nullptr;
}

TEST(WebhookActuatorTest, PostsJsonWithIdempotencyKey) {
  FakeWebhook server;
  server.Answer(http::status::accepted, "queued as op-17\nmore detail\n");
  const std::string host = "127.0.0.1:" + std::to_string(server.port());
  auto a = Webhook("http://" + host + "/hooks/clusterd?x=1");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->kind(), "webhook");
  const ActionRequest req = Request();
  const ActionResult r = RunOne(*a, req);
  EXPECT_TRUE(r.ok) << r.message;
  EXPECT_EQ(r.message, "queued as op-17");
  const auto got = server.received();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].method, "POST");
  EXPECT_EQ(got[0].target, "/hooks/clusterd?x=1");
  EXPECT_EQ(got[0].content_type, "application/json");
  EXPECT_EQ(got[0].idempotency_key, "train-1.1/2");
  EXPECT_EQ(got[0].host, host);
  EXPECT_EQ(got[0].body, ActionJson(req));
}

TEST(WebhookActuatorTest, ErrorStatusFails) {
  FakeWebhook server;
  server.Answer(http::status::internal_server_error, "node worker01 unknown\n");
  auto a = Webhook("http://127.0.0.1:" + std::to_string(server.port()));
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.message, "HTTP 500 Internal Server Error: node worker01 unknown");
  ASSERT_EQ(server.received().size(), 1u);
  EXPECT_EQ(server.received()[0].target, "/");
}

TEST(WebhookActuatorTest, ConnectionRefusedFails) {
  int port = 0;
  {
    asio::io_context ioc;
    tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = acceptor.local_endpoint().port();
  }
  auto a = Webhook("http://127.0.0.1:" + std::to_string(port) + "/x");
  const ActionResult r = RunOne(*a, Request());
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("refused"), std::string::npos) << r.message;
}

TEST(WebhookActuatorTest, NoAnswerBeforeTheDeadlineFails) {
  // Listening but never accepting: the connection completes in the backlog
  // and the request goes unanswered.
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  auto a = Webhook("http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) + "/x");
  const ActionResult r = RunOne(*a, Request("k", std::chrono::system_clock::now() + 300ms));
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("timed out"), std::string::npos) << r.message;
}

TEST(WebhookActuatorTest, RejectsBadUrls) {
  for (const std::string url :
       {"", "ftp://h/x", "http://", "http://:80/x", "http://host:99999/x", "http://host:/x", "http://user@host/x",
        "example.com/x", "http://ho st/x", "http://[::1/x", "http://host/x#frag"}) {
    auto a = MakeWebhookActuator({.url = url});
    ASSERT_FALSE(a.ok()) << url;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << url;
    EXPECT_NE(a.status().message().find(url), std::string::npos) << a.status().message();
  }
  EXPECT_TRUE(MakeWebhookActuator({.url = "http://actuator.example:8080"}).ok());
  EXPECT_TRUE(MakeWebhookActuator({.url = "HTTP://[::1]:8080/a/b"}).ok());
  EXPECT_TRUE(MakeWebhookActuator({.url = "http://10.0.0.1/hook"}).ok());
  EXPECT_TRUE(MakeWebhookActuator({.url = "https://example.com/x"}).ok()) << "the system's roots";
}

// A receiver over TLS that requires a client certificate signed by the test
// CA (common/http_server.h with a context from common/tls_context.h), on
// `address` ("127.0.0.1:0").
class TlsWebhook {
 public:
  explicit TlsWebhook(const std::string& address = "127.0.0.1:0") {
    const auto& certs = testing::TestCerts::Get();
    auto tls = ReloadingTlsContext::Create(
        {certs.Path("server.crt"), certs.Path("server.key"), certs.Path("ca.crt"), "require", 10s});
    EXPECT_TRUE(tls.ok()) << tls.status().ToString();
    HttpServer::Options options;
    options.tls = [src = *tls] { return src->Current(); };
    server_ = std::make_unique<HttpServer>(options);
    server_->Handle("POST", "/hook", [this](const HttpRequest& req) {
      std::lock_guard lock(mu_);
      client_cn_ = CertificateCommonName(req.client_certificate_pem);
      return HttpResponse{200, "text/plain", "done\n"};
    });
    EXPECT_TRUE(server_->Start(address).ok());
  }
  int port() const { return server_->port(); }
  std::string client_cn() {
    std::lock_guard lock(mu_);
    return client_cn_;
  }

 private:
  std::unique_ptr<HttpServer> server_;
  std::mutex mu_;
  std::string client_cn_;
};

// https:// URLs: the receiver's certificate verified against actuator_ca_file
// and for the URL's host, the client certificate presented.
TEST(WebhookActuatorTest, HttpsVerifiesTheReceiverAndPresentsTheClientCertificate) {
  const auto& certs = testing::TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  TlsWebhook server;
  const std::string url = "https://127.0.0.1:" + std::to_string(server.port()) + "/hook";
  const auto run = [](const WebhookActuatorOptions& o) {
    auto a = MakeWebhookActuator(o);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    return a.ok() ? RunOne(**a, Request()) : ActionResult{false, a.status().ToString()};
  };
  const ActionResult ok = run({.url = url,
                               .ca_file = certs.Path("ca.crt"),
                               .cert_file = certs.Path("operator.crt"),
                               .key_file = certs.Path("operator.key")});
  EXPECT_TRUE(ok.ok) << ok.message;
  EXPECT_EQ(ok.message, "done");
  EXPECT_EQ(server.client_cn(), "bob");

  // Another CA's bundle: the receiver is not trusted.
  const ActionResult other_ca = run({.url = url,
                                     .ca_file = certs.Path("other-ca.crt"),
                                     .cert_file = certs.Path("operator.crt"),
                                     .key_file = certs.Path("operator.key")});
  EXPECT_FALSE(other_ca.ok);
  EXPECT_NE(other_ca.message.find("certificate verify failed"), std::string::npos) << other_ca.message;
  // No client certificate: the receiver refuses the handshake.
  const ActionResult anonymous = run({.url = url, .ca_file = certs.Path("ca.crt")});
  EXPECT_FALSE(anonymous.ok) << anonymous.message;

  // The right CA but a name the certificate does not carry (it names
  // 127.0.0.1, localhost, ::1 and clusterd).
  TlsWebhook elsewhere("127.0.0.2:0");
  const ActionResult wrong_name = run({.url = "https://127.0.0.2:" + std::to_string(elsewhere.port()) + "/hook",
                                       .ca_file = certs.Path("ca.crt"),
                                       .cert_file = certs.Path("operator.crt"),
                                       .key_file = certs.Path("operator.key")});
  EXPECT_FALSE(wrong_name.ok);
  EXPECT_NE(wrong_name.message.find("certificate verify failed"), std::string::npos) << wrong_name.message;
  EXPECT_EQ(elsewhere.client_cn(), "") << "nothing reached the handler";
}

TEST(WebhookActuatorTest, TlsSettingsNeedAnHttpsUrlAndBothCertificateFiles) {
  const auto& certs = testing::TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  auto plain = MakeWebhookActuator({.url = "http://127.0.0.1:1/x", .ca_file = certs.Path("ca.crt")});
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plain.status().message().find("https://"), std::string::npos) << plain.status().ToString();
  auto half = MakeWebhookActuator({.url = "https://127.0.0.1:1/x", .cert_file = certs.Path("operator.crt")});
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  auto missing = MakeWebhookActuator({.url = "https://127.0.0.1:1/x", .ca_file = "/nonexistent/ca.crt"});
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("/nonexistent/ca.crt"), std::string::npos) << missing.status().ToString();
}

}  // namespace
}  // namespace clusterd
