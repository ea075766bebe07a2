#include "common/http_server.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

#include "common/fd_limit.h"
#include "common/metrics.h"
#include "common/tls_context.h"
#include "test/support/http_get.h"
#include "test/support/temp_dir.h"
#include "test/support/test_certs.h"
#include "test/support/wait.h"

namespace clusterd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using Response = http::response<http::string_body>;
using testing::WaitFor;

// A blocking HTTP/1.1 client on one TCP connection.
class Client {
 public:
  explicit Client(int port, const asio::ip::address& host = asio::ip::address_v4::loopback()) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(host, static_cast<unsigned short>(port)));
  }
  // From the given local address (another peer to the server): on Linux all
  // of 127.0.0.0/8 is loopback, so 127.0.0.2 reaches a server on 127.0.0.1.
  Client(int port, const asio::ip::address& host, const asio::ip::address& source) : socket_(ioc_) {
    socket_.open(host.is_v4() ? tcp::v4() : tcp::v6());
    socket_.bind(tcp::endpoint(source, 0));
    socket_.connect(tcp::endpoint(host, static_cast<unsigned short>(port)));
  }

  Response Send(http::verb method, const std::string& target, const std::string& body = "", bool keep_alive = true) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "localhost");
    req.keep_alive(keep_alive);
    if (!body.empty() || method == http::verb::post) {
      req.body() = body;
      req.prepare_payload();
    }
    http::write(socket_, req);
    return Read();
  }

  // Writes raw bytes, ignoring a failure: the server may refuse to read the
  // rest of them, and the test is about the response it sent.
  void WriteRaw(const std::string& bytes) {
    boost::system::error_code ec;
    asio::write(socket_, asio::buffer(bytes), ec);
  }

  Response Read() {
    Response res;
    http::read(socket_, buffer_, res);
    return res;
  }

  // True when the server closes the connection (after sending nothing more)
  // within `bound`, a failure bound for a test that expects it to close on
  // its own: false when it is still open then.
  bool ServerClosedWithin(std::chrono::milliseconds bound) {
    pollfd pfd{socket_.native_handle(), POLLIN, 0};
    return poll(&pfd, 1, static_cast<int>(bound.count())) == 1 && ServerClosed();
  }

  // True when the server sends something (or closes) within `bound`: a
  // failure bound before a blocking Read() where the server's own timeout
  // is long.
  bool SentWithin(std::chrono::milliseconds bound) {
    if (buffer_.size() > 0) return true;
    pollfd pfd{socket_.native_handle(), POLLIN, 0};
    return poll(&pfd, 1, static_cast<int>(bound.count())) == 1;
  }

  // True once the server has closed the connection (EOF or reset).
  bool ServerClosed() {
    char c;
    boost::system::error_code ec;
    socket_.read_some(asio::buffer(&c, 1), ec);
    return ec == asio::error::eof || ec == asio::error::connection_reset;
  }

 private:
  asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
};

HttpResponse Text(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServer::Options options = {}) {
    server_ = std::make_unique<HttpServer>(options);
    server_->Handle("GET", "/hello", [this](const HttpRequest& req) {
      last_target_ = req.target;
      HttpResponse r;
      r.content_type = "application/x-test";
      r.body = "hello";
      return r;
    });
    server_->Handle("POST", "/echo", [this](const HttpRequest& req) {
      echo_calls_++;
      return Text(req.method + ":" + req.body);
    });
    server_->Handle("GET", "/throws", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); });
    server_->Handle("GET", "/healthz", [](const HttpRequest&) { return Text("ok"); });
    server_->Handle("GET", "/teapot", [](const HttpRequest&) {
      HttpResponse r;
      r.status = 418;
      r.body = "short and stout";
      return r;
    });
    Status st = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_GT(server_->port(), 0);
  }

  std::unique_ptr<HttpServer> server_;
  std::string last_target_;  // written on the server thread before the reply
  std::atomic<int> echo_calls_{0};
};

TEST_F(HttpServerTest, AnswersRegisteredGet) {
  StartServer();
  Client client(server_->port());
  Response res = client.Send(http::verb::get, "/hello");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "hello");
  EXPECT_EQ(res[http::field::content_type], "application/x-test");
  EXPECT_EQ(res[http::field::content_length], "5");
}

TEST_F(HttpServerTest, RoutesOnPathWithoutQueryString) {
  StartServer();
  Client client(server_->port());
  Response res = client.Send(http::verb::get, "/hello?verbose=1&x=y");
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "hello");
  // The handler ran before the response was written, so this read is ordered.
  EXPECT_EQ(last_target_, "/hello?verbose=1&x=y");
}

TEST_F(HttpServerTest, HandlerStatusIsPassedThrough) {
  StartServer();
  Client client(server_->port());
  Response res = client.Send(http::verb::get, "/teapot");
  EXPECT_EQ(res.result_int(), 418);
  EXPECT_EQ(res.body(), "short and stout");
  EXPECT_EQ(res[http::field::content_type], "text/plain; charset=utf-8");
}

TEST_F(HttpServerTest, UnknownPathIs404) {
  StartServer();
  Client client(server_->port());
  EXPECT_EQ(client.Send(http::verb::get, "/nope").result_int(), 404);
  EXPECT_EQ(client.Send(http::verb::get, "/hello/").result_int(), 404);  // exact match only
}

TEST_F(HttpServerTest, KnownPathWithOtherMethodIs405) {
  StartServer();
  Client client(server_->port());
  Response res = client.Send(http::verb::post, "/hello", "x");
  EXPECT_EQ(res.result_int(), 405);
  EXPECT_EQ(res[http::field::allow], "GET");
  EXPECT_EQ(client.Send(http::verb::get, "/echo").result_int(), 405);
}

TEST_F(HttpServerTest, PostBodyIsDeliveredToHandler) {
  StartServer();
  Client client(server_->port());
  const std::string body = std::string("line one\nline two\0three", 23);
  Response res = client.Send(http::verb::post, "/echo", body);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "POST:" + body);
}

TEST_F(HttpServerTest, BodyAtLimitIsAcceptedAndOverLimitIs413) {
  HttpServer::Options options;
  options.max_body_bytes = 1024;
  StartServer(options);
  {
    Client client(server_->port());
    Response res = client.Send(http::verb::post, "/echo", std::string(1024, 'a'));
    EXPECT_EQ(res.result_int(), 200);
    EXPECT_EQ(res.body().size(), 5u + 1024u);
  }
  Client client(server_->port());
  Response res = client.Send(http::verb::post, "/echo", std::string(1025, 'a'));
  EXPECT_EQ(res.result_int(), 413);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(client.ServerClosed());
  EXPECT_EQ(echo_calls_.load(), 1);
}

TEST_F(HttpServerTest, OversizedBodyWithDefaultLimitIs413) {
  StartServer();
  Client client(server_->port());
  const std::size_t size = (1 << 20) + 1;
  // Send the whole body before reading, as a naive client would: the server
  // must answer 413 and still let the client finish writing.
  client.WriteRaw("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(size) + "\r\n\r\n" +
                  std::string(size, 'x'));
  Response res = client.Read();
  EXPECT_EQ(res.result_int(), 413);
  EXPECT_EQ(echo_calls_.load(), 0);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer();
  Client client(server_->port());
  Response first = client.Send(http::verb::get, "/hello");
  EXPECT_EQ(first.result_int(), 200);
  EXPECT_TRUE(first.keep_alive());
  Response second = client.Send(http::verb::post, "/echo", "again");
  EXPECT_EQ(second.result_int(), 200);
  EXPECT_EQ(second.body(), "POST:again");
  Response third = client.Send(http::verb::get, "/missing");
  EXPECT_EQ(third.result_int(), 404);
  EXPECT_TRUE(third.keep_alive());
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  Client client(server_->port());
  client.WriteRaw(
      "GET /hello HTTP/1.1\r\nHost: a\r\n\r\n"
      "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi");
  EXPECT_EQ(client.Read().body(), "hello");
  EXPECT_EQ(client.Read().body(), "POST:hi");
}

TEST_F(HttpServerTest, ConnectionCloseIsHonoured) {
  StartServer();
  Client client(server_->port());
  Response res = client.Send(http::verb::get, "/hello", "", /*keep_alive=*/false);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_FALSE(res.keep_alive());
  EXPECT_TRUE(client.ServerClosed());
}

TEST_F(HttpServerTest, MalformedRequestIs400) {
  StartServer();
  Client client(server_->port());
  client.WriteRaw("THIS IS NOT HTTP\r\n\r\n");
  Response res = client.Read();
  EXPECT_EQ(res.result_int(), 400);
  EXPECT_TRUE(client.ServerClosed());
}

TEST_F(HttpServerTest, ThrowingHandlerIs500AndServerKeepsServing) {
  StartServer();
  Client client(server_->port());
  EXPECT_EQ(client.Send(http::verb::get, "/throws").result_int(), 500);
  EXPECT_EQ(client.Send(http::verb::get, "/hello").result_int(), 200);
}

TEST_F(HttpServerTest, StartOnPortInUseFails) {
  StartServer();
  const std::string address = "127.0.0.1:" + std::to_string(server_->port());
  HttpServer second;
  Status st = second.Start(address);
  EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find(address), std::string::npos) << st.message();
  EXPECT_EQ(second.port(), 0);
  second.Stop();  // harmless after a failed Start
  // The first server is unaffected.
  Client client(server_->port());
  EXPECT_EQ(client.Send(http::verb::get, "/hello").result_int(), 200);
}

TEST(HttpServerAddressTest, MalformedAddressesAreInvalidArgument) {
  for (const char* address : {"", "nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:-1",
                              "127.0.0.1:80x", ":80", "localhost:80", "::1:80", "[::1]", "300.1.1.1:80"}) {
    HttpServer server;
    Status st = server.Start(address);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << address << " -> " << st.ToString();
    EXPECT_NE(st.message().find(std::string("'") + address + "'"), std::string::npos) << st.message();
  }
}

TEST(HttpServerAddressTest, ServesOnIpv6Loopback) {
  HttpServer server;
  server.Handle("GET", "/v6", [](const HttpRequest&) { return Text("six"); });
  Status st = server.Start("[::1]:0");
  if (st.code() == StatusCode::kUnavailable) GTEST_SKIP() << "no IPv6 loopback here: " << st.ToString();
  ASSERT_TRUE(st.ok()) << st.ToString();
  Client client(server.port(), asio::ip::address_v6::loopback());
  EXPECT_EQ(client.Send(http::verb::get, "/v6").body(), "six");
}

TEST_F(HttpServerTest, StartTwiceFails) {
  StartServer();
  EXPECT_EQ(server_->Start("127.0.0.1:0").code(), StatusCode::kFailedPrecondition);
}

TEST_F(HttpServerTest, StopIsIdempotentAndClosesListener) {
  StartServer();
  const int port = server_->port();
  server_->Stop();
  server_->Stop();
  EXPECT_THROW(Client client(port), boost::system::system_error);  // connection refused
  EXPECT_EQ(server_->Start("127.0.0.1:0").code(), StatusCode::kFailedPrecondition);
  server_.reset();  // destructor calls Stop() a third time
}

TEST(HttpServerLifecycleTest, StopWithoutStartIsHarmless) {
  HttpServer server;
  server.Stop();
  server.Stop();
}

TEST_F(HttpServerTest, StopClosesIdleKeepAliveConnections) {
  StartServer();
  Client client(server_->port());
  EXPECT_EQ(client.Send(http::verb::get, "/hello").result_int(), 200);
  // The connection is now idle in a keep-alive read with a 30 s timeout;
  // Stop() must close it rather than wait for the timeout.
  server_->Stop();
  EXPECT_TRUE(client.ServerClosed());
}

// Every connection costs the server a descriptor, shared with everything
// else in the process (clusterd's gRPC server): beyond max_connections a
// connection is answered 503 and closed without reading it.
TEST_F(HttpServerTest, ConnectionsBeyondTheLimitAreRefusedAtOnce) {
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.max_connections = 3;
  options.metrics = &metrics;
  options.metrics_prefix = "test";
  StartServer(options);
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<Client>(server_->port()));
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 3; }));

  Client over(server_->port());
  Response refused = over.Read();
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(refused.body(), "too many HTTP connections; try later\r\n");
  EXPECT_TRUE(over.ServerClosed());
  EXPECT_EQ(server_->rejected_connections(), 1u);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("test_http_connections_rejected_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_http_connections 3\n"), std::string::npos) << text;

  // The open connections still work, and a closed one frees its place.
  EXPECT_EQ(idle[0]->Send(http::verb::get, "/hello").result_int(), 200);
  idle.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));
  Client next(server_->port());
  EXPECT_EQ(next.Send(http::verb::get, "/hello").result_int(), 200);
}

asio::ip::address Loopback(const char* text) { return asio::ip::make_address(text); }

// One client cannot take every slot: beyond max_connections_per_peer its
// connections are refused at once, while another address is still served,
// and a closed connection gives the peer its place back.
TEST_F(HttpServerTest, ConnectionsBeyondThePerPeerLimitAreRefusedAtOnce) {
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.max_connections = 10;
  options.max_connections_per_peer = 2;
  options.metrics = &metrics;
  options.metrics_prefix = "test";
  StartServer(options);
  const auto host = asio::ip::address_v4::loopback();
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 2; ++i) held.push_back(std::make_unique<Client>(server_->port(), host, Loopback("127.0.0.1")));
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));

  Client over(server_->port(), host, Loopback("127.0.0.1"));
  Response refused = over.Read();
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(refused.body(), "too many HTTP connections from 127.0.0.1; close some and try later\r\n");
  EXPECT_TRUE(over.ServerClosed());
  EXPECT_EQ(server_->peer_rejected_connections(), 1u);
  EXPECT_EQ(server_->rejected_connections(), 0u);

  // Another address has places of its own.
  Client other(server_->port(), host, Loopback("127.0.0.2"));
  EXPECT_EQ(other.Send(http::verb::get, "/hello").result_int(), 200);
  Client other2(server_->port(), host, Loopback("127.0.0.2"));
  EXPECT_EQ(other2.Send(http::verb::get, "/hello").result_int(), 200);
  Client other3(server_->port(), host, Loopback("127.0.0.2"));
  EXPECT_EQ(other3.Read().result_int(), 503);
  EXPECT_EQ(server_->peer_rejected_connections(), 2u);
  // The held connections still work.
  EXPECT_EQ(held[0]->Send(http::verb::get, "/hello").result_int(), 200);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("test_http_peer_connections_rejected_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_http_connections_rejected_total 0\n"), std::string::npos) << text;

  // Once its connections close, the peer is served again, to its limit.
  held.clear();
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));  // other, other2
  Client again(server_->port(), host, Loopback("127.0.0.1"));
  EXPECT_EQ(again.Send(http::verb::get, "/hello").result_int(), 200);
  Client again2(server_->port(), host, Loopback("127.0.0.1"));
  EXPECT_EQ(again2.Send(http::verb::get, "/hello").result_int(), 200);
  EXPECT_EQ(server_->peer_rejected_connections(), 2u);
}

// With every slot of the API's share held, the probe paths still answer
// over the reserved slots, other paths are refused over them, and beyond
// max_connections the usual refusal stays.
TEST_F(HttpServerTest, ProbePathsKeepAReservedShare) {
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.max_connections = 4;
  options.reserved_paths = {"/healthz", "/readyz"};
  options.reserved_connections = 2;
  // Long timeouts: no connection goes by itself while the test looks.
  options.io_timeout = std::chrono::hours(1);
  options.reserved_io_timeout = std::chrono::hours(1);
  options.metrics = &metrics;
  options.metrics_prefix = "test";
  StartServer(options);
  std::vector<std::unique_ptr<Client>> api;
  for (int i = 0; i < 2; ++i) {
    api.push_back(std::make_unique<Client>(server_->port()));
    EXPECT_EQ(api.back()->Send(http::verb::get, "/hello").result_int(), 200);
  }
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));

  {
    Client late_api(server_->port());
    Response refused = late_api.Send(http::verb::get, "/hello");
    EXPECT_EQ(refused.result_int(), 503);
    EXPECT_EQ(refused.body(), "HTTP connections are all in use; only /healthz, /readyz answer now\n");
    EXPECT_TRUE(late_api.ServerClosedWithin(std::chrono::seconds(20)));
  }
  EXPECT_EQ(server_->reserved_refused_requests(), 1u);
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 2; }));

  auto probe = std::make_unique<Client>(server_->port());
  EXPECT_EQ(probe->Send(http::verb::get, "/healthz").result_int(), 200);
  EXPECT_EQ(probe->Send(http::verb::get, "/healthz?verbose=1").result_int(), 200);  // keep-alive
  auto probe2 = std::make_unique<Client>(server_->port());
  EXPECT_EQ(probe2->Send(http::verb::get, "/healthz").result_int(), 200);
  // Every slot taken now: the plain refusal.
  Client over(server_->port());
  ASSERT_TRUE(over.SentWithin(std::chrono::seconds(20)));
  Response full = over.Read();
  EXPECT_EQ(full.result_int(), 503);
  EXPECT_EQ(full.body(), "too many HTTP connections; try later\r\n");
  EXPECT_EQ(server_->rejected_connections(), 1u);
  // A reserved connection that asks for another path is refused and closed.
  EXPECT_EQ(probe2->Send(http::verb::get, "/hello").result_int(), 503);
  EXPECT_TRUE(probe2->ServerClosedWithin(std::chrono::seconds(20)));
  EXPECT_EQ(server_->reserved_refused_requests(), 2u);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("test_http_reserved_requests_refused_total 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("test_http_connections_rejected_total 1\n"), std::string::npos) << text;

  // An API slot freed is an API slot again.
  probe.reset();
  probe2.reset();
  api.pop_back();
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 1; }));
  Client next(server_->port());
  EXPECT_EQ(next.Send(http::verb::get, "/hello").result_int(), 200);
  EXPECT_EQ(server_->reserved_refused_requests(), 2u);
}

// Slow loris on the reserved share: one address may hold only
// reserved_connections_per_peer of its slots.
TEST_F(HttpServerTest, OnePeerCannotHoldTheReservedShare) {
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.max_connections = 6;
  options.reserved_paths = {"/healthz"};
  options.reserved_connections = 3;
  options.reserved_connections_per_peer = 1;
  options.io_timeout = std::chrono::hours(1);
  options.reserved_io_timeout = std::chrono::hours(1);
  options.metrics = &metrics;
  options.metrics_prefix = "test";
  StartServer(options);
  const auto host = asio::ip::address_v4::loopback();
  std::vector<std::unique_ptr<Client>> api;
  for (int i = 0; i < 3; ++i) api.push_back(std::make_unique<Client>(server_->port(), host, Loopback("127.0.0.2")));
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 3; }));

  Client slow(server_->port(), host, Loopback("127.0.0.1"));
  slow.WriteRaw("GET /healthz HTTP/1.1\r\nHost: x\r\n");  // never finished
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 4; }));
  Client slow2(server_->port(), host, Loopback("127.0.0.1"));
  ASSERT_TRUE(slow2.SentWithin(std::chrono::seconds(20)));
  Response refused = slow2.Read();
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(refused.body(), "too many HTTP connections from 127.0.0.1; close some and try later\r\n");
  EXPECT_EQ(server_->peer_rejected_connections(), 1u);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("test_http_peer_connections_rejected_total 1\n"), std::string::npos) << text;

  // Another address still gets its probe answered.
  Client probe(server_->port(), host, Loopback("127.0.0.3"));
  EXPECT_EQ(probe.Send(http::verb::get, "/healthz").result_int(), 200);
}

// A probe from an address that holds its whole per-peer cap (the kubelet's,
// shared with a host-network pod that holds slow connections) is still
// answered: the address's oldest connection waiting for a request is closed
// to make room, and the newer one may ask only for the probe paths. The
// address never holds more than its cap; other addresses are served as
// before.
TEST_F(HttpServerTest, AProbeFromAnAddressAtItsCapIsStillAnswered) {
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.max_connections = 20;
  options.max_connections_per_peer = 3;
  options.reserved_paths = {"/healthz"};
  options.reserved_connections = 4;
  options.reserved_connections_per_peer = 1;
  options.io_timeout = std::chrono::hours(1);
  options.reserved_io_timeout = std::chrono::hours(1);
  options.metrics = &metrics;
  options.metrics_prefix = "test";
  StartServer(options);
  const auto host = asio::ip::address_v4::loopback();
  std::vector<std::unique_ptr<Client>> slow;
  for (int i = 0; i < 3; ++i) {
    slow.push_back(std::make_unique<Client>(server_->port(), host, Loopback("127.0.0.1")));
    slow.back()->WriteRaw("GET /hello HTTP/1.1\r\nHost: x\r\n");  // never finished
    ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == static_cast<size_t>(i + 1); }));
  }

  auto probe = std::make_unique<Client>(server_->port(), host, Loopback("127.0.0.1"));
  EXPECT_EQ(probe->Send(http::verb::get, "/healthz").result_int(), 200);
  EXPECT_EQ(probe->Send(http::verb::get, "/healthz").result_int(), 200);  // keep-alive
  // The oldest slow connection made room: closed without an answer.
  EXPECT_TRUE(slow[0]->ServerClosedWithin(std::chrono::seconds(20)));
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 3; }));
  EXPECT_EQ(server_->peer_replaced_connections(), 1u);
  EXPECT_EQ(server_->peer_rejected_connections(), 0u);
  // Over such a connection, another path is refused and the connection closed.
  Client api(server_->port(), host, Loopback("127.0.0.1"));
  Response refused = api.Send(http::verb::get, "/hello");
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(refused.body(), "too many HTTP connections from 127.0.0.1; only /healthz answer over more\n");
  EXPECT_TRUE(slow[1]->ServerClosedWithin(std::chrono::seconds(20)));
  EXPECT_EQ(server_->reserved_refused_requests(), 1u);
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("test_http_peer_connections_replaced_total 2\n"), std::string::npos) << text;
  // Another address is served as before, the API included.
  Client other(server_->port(), host, Loopback("127.0.0.2"));
  EXPECT_EQ(other.Send(http::verb::get, "/hello").result_int(), 200);
  // Without a reserved share, an address at its cap is refused as before
  // (ConnectionsBeyondThePerPeerLimitAreRefusedAtOnce).
}

// A reserved connection waits for a request only reserved_io_timeout: a slow
// client is cut off long before io_timeout (an hour here), which the API
// connections keep.
TEST_F(HttpServerTest, ReservedConnectionHasAShortTimeout) {
  HttpServer::Options options;
  options.max_connections = 2;
  options.reserved_paths = {"/healthz"};
  options.reserved_connections = 1;
  options.io_timeout = std::chrono::hours(1);
  options.reserved_io_timeout = std::chrono::milliseconds(50);
  StartServer(options);
  Client api(server_->port());
  ASSERT_TRUE(WaitFor([&] { return server_->open_connections() == 1; }));
  Client slow(server_->port());
  slow.WriteRaw("GET /healthz HTTP/1.1\r\nHost: x\r\n");  // never finished
  EXPECT_TRUE(slow.ServerClosedWithin(std::chrono::seconds(20)));
  EXPECT_EQ(api.Send(http::verb::get, "/hello").result_int(), 200);
}

// A slow-loris client that never finishes its request is cut off at the
// timeout: it cannot hold a connection slot for longer.
TEST_F(HttpServerTest, UnfinishedRequestIsClosedAtTheTimeout) {
  HttpServer::Options options;
  options.io_timeout = std::chrono::milliseconds(200);
  StartServer(options);
  Client slow(server_->port());
  slow.WriteRaw("GET /hello HTTP/1.1\r\nHost: x\r\n");  // no final empty line, ever
  EXPECT_TRUE(slow.ServerClosed());
  EXPECT_TRUE(WaitFor([&] { return server_->open_connections() == 0; }));
}

// Out of descriptors, accept() fails with EMFILE; the listener must retry
// and serve the waiting connection once descriptors are free again.
TEST_F(HttpServerTest, AcceptRecoversFromEmfile) {
  StartServer();
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  const auto open_now = CountOpenFds();
  ASSERT_TRUE(open_now.has_value());
  rlimit low = saved;
  low.rlim_cur = *open_now + 32;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int fd; (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) fillers.push_back(fd);
  // One free slot, taken by the client's socket: the server has none left.
  close(fillers.back());
  fillers.pop_back();
  const int client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const bool failed = WaitFor([&] { return server_->accept_errors() >= 2; });  // failed, and retried
  for (int fd : fillers) close(fd);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(failed);

  const std::string request = "GET /hello HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(write(client, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[1024];
  for (ssize_t n; (n = read(client, buf, sizeof(buf))) > 0;) response.append(buf, static_cast<size_t>(n));
  close(client);
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK", 0), 0u) << response;
  // New connections are served as usual.
  Client later(server_->port());
  EXPECT_EQ(later.Send(http::verb::get, "/hello").result_int(), 200);
}

// TLS (Options::tls): no plaintext; a verified client certificate reaches
// the handler with the peer's address; one from another CA or expired fails
// the handshake; a context from ReloadingTlsContext follows its files.
TEST(HttpServerTlsTest, ServesTlsOnlyAndPassesTheClientCertificate) {
  const auto& certs = testing::TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  testing::TempDir dir;
  std::filesystem::copy_file(certs.Path("server.crt"), dir.Sub("tls.crt"));
  std::filesystem::copy_file(certs.Path("server.key"), dir.Sub("tls.key"));
  TlsServerFiles files{dir.Sub("tls.crt"), dir.Sub("tls.key"), certs.Path("ca.crt"), "request",
                       std::chrono::nanoseconds(0)};  // looked at on every connection
  auto source = ReloadingTlsContext::Create(files);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  MetricsRegistry metrics;
  HttpServer::Options options;
  options.metrics = &metrics;
  options.tls = [src = *source] { return src->Current(); };
  HttpServer server(options);
  std::mutex mu;
  HttpRequest seen;
  server.Handle("GET", "/who", [&](const HttpRequest& req) {
    std::lock_guard lock(mu);
    seen = req;
    return HttpResponse{200, "text/plain", "ok"};
  });
  ASSERT_TRUE(server.Start("127.0.0.1:0").ok());
  const auto get = [&](const std::string& cert) {
    testing::HttpTls tls{certs.Path("ca.crt"), cert.empty() ? "" : certs.Path(cert + ".crt"),
                         cert.empty() ? "" : certs.Path(cert + ".key")};
    return testing::HttpsGet(server.port(), "/who", tls);
  };

  EXPECT_EQ(testing::HttpGet(server.port(), "/who").status, 0);
  EXPECT_TRUE(WaitFor([&] { return server.tls_handshake_failures() == 1; }, std::chrono::seconds(10)));
  auto anonymous = get("");
  ASSERT_EQ(anonymous.status, 200) << anonymous.tls_error;
  {
    std::lock_guard lock(mu);
    EXPECT_TRUE(seen.client_certificate_pem.empty());
    EXPECT_EQ(seen.peer.rfind("127.0.0.1:", 0), 0u) << seen.peer;
  }
  ASSERT_EQ(get("viewer").status, 200);
  {
    std::lock_guard lock(mu);
    EXPECT_EQ(seen.client_certificate_pem, testing::ReadWholeFile(certs.Path("viewer.crt")));
  }
  EXPECT_EQ(get("wrongca").status, 0);
  EXPECT_EQ(get("expired").status, 0);
  EXPECT_TRUE(WaitFor([&] { return server.tls_handshake_failures() == 3; }, std::chrono::seconds(10)));
  EXPECT_NE(metrics.Render().find("http_tls_handshake_failures_total 3"), std::string::npos);

  // Rotation: a new pair is used from the next connection; a broken one is not.
  EXPECT_EQ(anonymous.server_certificate_pem, testing::ReadWholeFile(certs.Path("server.crt")));
  std::filesystem::copy_file(certs.Path("server2.crt"), dir.Sub("tls.crt"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(get("").server_certificate_pem, testing::ReadWholeFile(certs.Path("server.crt")))
      << "a certificate without its key is not used";
  EXPECT_EQ((*source)->reload_failures(), 1u);
  std::filesystem::copy_file(certs.Path("server2.key"), dir.Sub("tls.key"),
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(get("").server_certificate_pem, testing::ReadWholeFile(certs.Path("server2.crt")));
  EXPECT_EQ((*source)->reloads(), 1u);
}

TEST(HttpServerTlsTest, BadFilesAreAClearError) {
  const auto& certs = testing::TestCerts::Get();
  ASSERT_TRUE(certs.ok());
  const auto create = [](std::string cert, std::string key, std::string ca) {
    TlsServerFiles files;
    files.cert_file = std::move(cert);
    files.key_file = std::move(key);
    files.client_ca_file = std::move(ca);
    return ReloadingTlsContext::Create(files).status();
  };
  Status missing = create("/nonexistent.crt", certs.Path("server.key"), "");
  EXPECT_NE(missing.message().find("tls_cert_file"), std::string::npos) << missing.ToString();
  Status mismatch = create(certs.Path("server.crt"), certs.Path("server2.key"), "");
  EXPECT_NE(mismatch.message().find("is not the key of"), std::string::npos) << mismatch.ToString();
  Status no_ca = create(certs.Path("server.crt"), certs.Path("server.key"), certs.Path("server.key"));
  EXPECT_NE(no_ca.message().find("tls_client_ca_file"), std::string::npos) << no_ca.ToString();
}

TEST(HttpServerDeathTest, HandleAfterStartAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        HttpServer server;
        if (!server.Start("127.0.0.1:0").ok()) std::abort();
        server.Handle("GET", "/late", [](const HttpRequest&) { return Text(""); });
      },
      "called after Start");
}

}  // namespace
}  // namespace clusterd
