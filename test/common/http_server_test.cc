#include "common/http_server.h"

#include <atomic>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <gtest/gtest.h>

namespace clusterd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using Response = http::response<http::string_body>;

// A blocking HTTP/1.1 client on one TCP connection.
class Client {
 public:
  explicit Client(int port, const asio::ip::address& host = asio::ip::address_v4::loopback()) : socket_(ioc_) {
    socket_.connect(tcp::endpoint(host, static_cast<unsigned short>(port)));
  }

  Response Send(http::verb method, const std::string& target, const std::string& body = "",
                bool keep_alive = true) {
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
    server_->Handle("GET", "/throws", [](const HttpRequest&) -> HttpResponse {
      throw std::runtime_error("boom");
    });
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
  client.WriteRaw("POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: " + std::to_string(size) +
                  "\r\n\r\n" + std::string(size, 'x'));
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
