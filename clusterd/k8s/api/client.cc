#include "clusterd/k8s/api/client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <fstream>
#include <limits>
#include <sstream>

namespace clusterd::k8s {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

bool IsIpAddress(const std::string& host) {
  boost::system::error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

std::string ReadFile(const std::string& path, int64_t* mtime) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  if (mtime != nullptr) *mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  return s.substr(i);
}

// The message of a Kubernetes Status object, or the start of the body.
std::string BodyMessage(const std::string& body) {
  auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("message") && parsed["message"].is_string()) {
    return parsed["message"].get<std::string>();
  }
  std::string start = body.substr(0, 200);
  for (char& c : start) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return start;
}

std::string BodyReason(const std::string& body) {
  auto parsed = nlohmann::json::parse(body, nullptr, false);
  if (parsed.is_object() && parsed.contains("reason") && parsed["reason"].is_string()) {
    return parsed["reason"].get<std::string>();
  }
  return {};
}

Status FromSystemError(const boost::system::error_code& ec, std::string_view what) {
  if (ec == beast::error::timeout) return {StatusCode::kDeadlineExceeded, std::string(what) + ": timed out"};
  if (ec == net::error::operation_aborted) return {StatusCode::kCancelled, std::string(what) + ": cancelled"};
  return Unavailable(std::string(what) + ": " + ec.message());
}

// Runs one asynchronous operation to its end on `ioc`, on the calling thread,
// and throws its error as boost::system::system_error. Asynchronous because
// Beast's tcp_stream deadlines (expires_at) and a cancel posted from another
// thread only act on asynchronous operations; plain callbacks rather than
// C++20 coroutines because clang 14 (clang-tidy, the fuzz build) cannot
// compile Asio's coroutines against libstdc++ 12.
template <typename Start>
void RunOp(net::io_context& ioc, Start start) {
  boost::system::error_code result = net::error::operation_aborted;
  start([&result](boost::system::error_code ec, auto&&...) { result = ec; });
  ioc.restart();
  ioc.run();
  if (result) throw boost::system::system_error(result);
}

}  // namespace

struct Client::Tls {
  ssl::context ctx{ssl::context::tls_client};
};

void StreamCancel::Cancel() {
  cancelled_ = true;
  std::lock_guard lock(mu_);
  if (cancel_) cancel_();
}

void StreamCancel::Attach(std::function<void()> cancel) {
  std::lock_guard lock(mu_);
  cancel_ = std::move(cancel);
}

void StreamCancel::Detach() {
  std::lock_guard lock(mu_);
  cancel_ = nullptr;
}

Status ApiStatus(const Response& r) {
  if (r.status >= 200 && r.status < 300) return Status::Ok();
  std::string msg = "HTTP " + std::to_string(r.status) + ": " + BodyMessage(r.body);
  switch (r.status) {
    case 400:
    case 422: return InvalidArgument(msg);
    case 401:
    case 403: return {StatusCode::kPermissionDenied, msg};
    case 404: return NotFound(msg);
    case 409:
      if (BodyReason(r.body) == "AlreadyExists") return {StatusCode::kAlreadyExists, msg};
      return {StatusCode::kAborted, msg};
    case 410: return OutOfRange(msg);
    case 429: return ResourceExhausted(msg);
    default: return Unavailable(msg);
  }
}

Client::Client(ClientConfig config) : config_(std::move(config)), tls_(std::make_unique<Tls>()) {}
Client::~Client() = default;

StatusOr<std::unique_ptr<Client>> Client::Create(ClientConfig config) {
  if (config.host.empty()) return InvalidArgument("kubernetes: no API server host");
  std::unique_ptr<Client> client(new Client(std::move(config)));
  auto& ctx = client->tls_->ctx;
  boost::system::error_code ec;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  const ClientConfig& c = client->config_;
  if (c.insecure_skip_tls_verify) {
    ctx.set_verify_mode(ssl::verify_none);
  } else {
    ctx.set_verify_mode(ssl::verify_peer);
    if (c.ca_pem.empty()) {
      ctx.set_default_verify_paths(ec);
    } else {
      ctx.add_certificate_authority(net::buffer(c.ca_pem), ec);
    }
    if (ec) return InvalidArgument("kubernetes: CA bundle: " + ec.message());
  }
  if (!c.client_cert_pem.empty() || !c.client_key_pem.empty()) {
    ctx.use_certificate_chain(net::buffer(c.client_cert_pem), ec);
    if (ec) return InvalidArgument("kubernetes: client certificate: " + ec.message());
    ctx.use_private_key(net::buffer(c.client_key_pem), ssl::context::pem, ec);
    if (ec) return InvalidArgument("kubernetes: client key: " + ec.message());
  }
  return client;
}

std::string Client::Token() const {
  if (config_.token_file.empty()) return config_.token;
  std::lock_guard lock(token_mu_);
  // A stat per request is cheap next to a TLS handshake; a rotated token is
  // picked up by the next request.
  struct stat st {};
  int64_t mtime = -1;
  if (::stat(config_.token_file.c_str(), &st) == 0) {
    mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  if (mtime != token_mtime_ || token_cache_.empty()) {
    std::string fresh = Trim(ReadFile(config_.token_file, nullptr));
    if (!fresh.empty()) token_cache_ = std::move(fresh);
    token_mtime_ = mtime;
  }
  return token_cache_;
}

namespace {

// One connection's lifetime: resolve, connect, TLS handshake with the
// verification the config asks for, then the caller's exchange.
class Exchange {
 public:
  Exchange(const ClientConfig& config, ssl::context& ctx) : config_(config), stream_(net::make_strand(ioc_), ctx) {}

  net::io_context& ioc() { return ioc_; }
  TlsStream& stream() { return stream_; }
  beast::flat_buffer& buffer() { return buffer_; }

  Status Prepare() {
    const std::string& name = config_.tls_server_name.empty() ? config_.host : config_.tls_server_name;
    SSL* ssl = stream_.native_handle();
    if (!IsIpAddress(name)) {
      if (!SSL_set_tlsext_host_name(ssl, name.c_str())) return Internal("kubernetes: SNI");
    }
    if (!config_.insecure_skip_tls_verify) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      int ok = IsIpAddress(name) ? X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str())
                                 : X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
      if (ok != 1) return Internal("kubernetes: cannot verify server name " + name);
    }
    return Status::Ok();
  }

  // Throws boost::system::system_error.
  void Connect(std::chrono::steady_clock::time_point deadline) {
    tcp::resolver resolver(ioc_);
    auto& lowest = beast::get_lowest_layer(stream_);
    tcp::resolver::results_type results;
    // The resolver has no deadline of its own: a timer cancels it.
    net::steady_timer timer(ioc_, deadline);
    timer.async_wait([&resolver](boost::system::error_code ec) {
      if (!ec) resolver.cancel();
    });
    RunOp(ioc_, [&](auto done) {
      resolver.async_resolve(
          config_.host, config_.port,
          [&results, &timer, done](boost::system::error_code ec, tcp::resolver::results_type r) mutable {
            timer.cancel();
            results = std::move(r);
            done(ec);
          });
    });
    lowest.expires_at(deadline);
    RunOp(ioc_, [&](auto done) { lowest.async_connect(results, done); });
    lowest.expires_at(deadline);
    RunOp(ioc_, [&](auto done) { stream_.async_handshake(ssl::stream_base::client, done); });
  }

  void Close() {
    boost::system::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
  }

 private:
  const ClientConfig& config_;
  net::io_context ioc_;
  TlsStream stream_;
  beast::flat_buffer buffer_;
};

http::request<http::string_body> MakeRequest(const ClientConfig& config, const std::string& token,
                                             std::string_view method, std::string_view target, std::string_view body,
                                             std::string_view content_type) {
  http::request<http::string_body> req;
  req.method_string(beast::string_view(method.data(), method.size()));
  req.target(beast::string_view(target.data(), target.size()));
  req.version(11);
  req.set(http::field::host, config.host);
  req.set(http::field::user_agent, config.user_agent);
  req.set(http::field::accept, "application/json");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req.set(http::field::content_type,
            content_type.empty() ? "application/json" : beast::string_view(content_type.data(), content_type.size()));
    req.body() = std::string(body);
  }
  req.prepare_payload();
  return req;
}

}  // namespace

StatusOr<Response> Client::Do(std::string_view method, std::string_view target, std::string_view body,
                              std::string_view content_type) const {
  Exchange ex(config_, tls_->ctx);
  if (Status s = ex.Prepare(); !s.ok()) return s;
  auto req = MakeRequest(config_, Token(), method, target, body, content_type);
  const auto deadline = std::chrono::steady_clock::now() + config_.request_timeout;
  Status status = Unavailable("kubernetes: request did not run");
  Response response;
  const size_t limit = config_.max_response_bytes;
  auto run = [&]() {
    try {
      ex.Connect(deadline);
      beast::get_lowest_layer(ex.stream()).expires_at(deadline);
      RunOp(ex.ioc(), [&](auto done) { http::async_write(ex.stream(), req, done); });
      http::response_parser<http::string_body> parser;
      parser.body_limit(limit);
      parser.header_limit(size_t{64} * 1024);
      // The header on its own first: Boost 1.74's eager read (async_read)
      // drops the body_limit error of a Content-Length that arrives together
      // with the body, and would then buffer the whole answer.
      RunOp(ex.ioc(), [&](auto done) { http::async_read_header(ex.stream(), ex.buffer(), parser, done); });
      RunOp(ex.ioc(), [&](auto done) { http::async_read(ex.stream(), ex.buffer(), parser, done); });
      response.status = static_cast<int>(parser.get().result_int());
      response.retry_after = std::string(parser.get()[http::field::retry_after]);
      response.body = std::move(parser.get().body());
      status = Status::Ok();
    } catch (const boost::system::system_error& e) {
      if (e.code() == http::error::body_limit) {
        status = ResourceExhausted("kubernetes: answer to " + std::string(target) + " is over " +
                                   std::to_string(limit) + " bytes");
      } else {
        status = FromSystemError(e.code(), "kubernetes: " + std::string(method) + " " + std::string(target));
      }
    }
    ex.Close();
  };
  run();
  if (!status.ok()) return status;
  return response;
}

namespace {

StatusOr<nlohmann::json> JsonAnswer(StatusOr<Response> r) {
  if (!r.ok()) return r.status();
  if (Status s = ApiStatus(*r); !s.ok()) return s;
  if (r->body.empty()) return nlohmann::json::object();
  auto parsed = nlohmann::json::parse(r->body, nullptr, false);
  if (parsed.is_discarded()) return Unavailable("kubernetes: answer is not JSON: " + BodyMessage(r->body));
  return parsed;
}

}  // namespace

StatusOr<nlohmann::json> ApiClient::Get(std::string_view target) const { return JsonAnswer(Do("GET", target, {}, {})); }

StatusOr<nlohmann::json> ApiClient::Post(std::string_view target, const nlohmann::json& body) const {
  return JsonAnswer(Do("POST", target, JsonText(body), {}));
}

StatusOr<nlohmann::json> ApiClient::Put(std::string_view target, const nlohmann::json& body) const {
  return JsonAnswer(Do("PUT", target, JsonText(body), {}));
}

StatusOr<nlohmann::json> ApiClient::Patch(std::string_view target, const nlohmann::json& body, PatchType type) const {
  std::string_view content_type = type == PatchType::kMerge            ? "application/merge-patch+json"
                                  : type == PatchType::kStrategicMerge ? "application/strategic-merge-patch+json"
                                                                       : "application/json-patch+json";
  return JsonAnswer(Do("PATCH", target, JsonText(body), content_type));
}

StatusOr<nlohmann::json> ApiClient::Delete(std::string_view target, const nlohmann::json& body) const {
  std::string text = body.is_null() ? "" : JsonText(body);
  return JsonAnswer(Do("DELETE", target, text, text.empty() ? "" : "application/json"));
}

Status Client::Stream(std::string_view target, std::chrono::milliseconds idle_timeout, const LineSink& on_line,
                      StreamCancel* cancel) const {
  Exchange ex(config_, tls_->ctx);
  if (Status s = ex.Prepare(); !s.ok()) return s;
  auto req = MakeRequest(config_, Token(), "GET", target, {}, {});
  Status status = Status::Ok();
  bool stop = false;
  std::string line;
  const size_t max_line = config_.max_line_bytes;
  http::response_parser<http::string_body> parser;
  // No limit, but not boost::none: Boost 1.74 compares any Content-Length
  // as over an empty limit, which turned every error answer (403, 410 Gone)
  // into "body limit exceeded". Error bodies are bounded below.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  // Chunked answers (every watch) go through this callback, piece by piece;
  // an error answer with a Content-Length lands in the string body.
  auto on_chunk = [&](uint64_t /*remain*/, beast::string_view piece, beast::error_code& /*ec*/) -> size_t {
    size_t taken = piece.size();
    if (stop) return taken;
    if (parser.get().result_int() != 200) {
      // A chunked error answer is one Status object, not lines for on_line.
      const size_t room = line.size() < size_t{64} * 1024 ? size_t{64} * 1024 - line.size() : 0;
      line.append(piece.data(), std::min(piece.size(), room));
      return taken;
    }
    size_t start = 0;
    while (start < piece.size()) {
      size_t nl = piece.find('\n', start);
      if (nl == beast::string_view::npos) {
        line.append(piece.data() + start, piece.size() - start);
        break;
      }
      line.append(piece.data() + start, nl - start);
      start = nl + 1;
      if (!line.empty() && !on_line(line)) {
        stop = true;
        return taken;
      }
      line.clear();
    }
    if (line.size() > max_line) {
      status = ResourceExhausted("kubernetes: a line of " + std::string(target) + " is over " +
                                 std::to_string(max_line) + " bytes");
      stop = true;
    }
    return taken;
  };
  parser.on_chunk_body(on_chunk);
  if (cancel != nullptr) {
    cancel->Attach([&ex]() { net::post(ex.ioc(), [&ex]() { ex.Close(); }); });
    if (cancel->cancelled()) {
      cancel->Detach();
      return {StatusCode::kCancelled, "kubernetes: watch cancelled"};
    }
  }
  auto run = [&]() {
    try {
      ex.Connect(std::chrono::steady_clock::now() + config_.request_timeout);
      // A Cancel() that came while connecting closed nothing (the socket was
      // not open yet): honour it here rather than waiting out the watch.
      if (cancel != nullptr && cancel->cancelled()) {
        status = {StatusCode::kCancelled, "kubernetes: watch cancelled"};
        ex.Close();
        return;
      }
      auto& lowest = beast::get_lowest_layer(ex.stream());
      lowest.expires_after(config_.request_timeout);
      RunOp(ex.ioc(), [&](auto done) { http::async_write(ex.stream(), req, done); });
      lowest.expires_after(config_.request_timeout);
      RunOp(ex.ioc(), [&](auto done) { http::async_read_header(ex.stream(), ex.buffer(), parser, done); });
      const bool ok_status = parser.get().result_int() == 200;
      // The string body reserves a Content-Length up front: bound it.
      if (parser.content_length().value_or(0) > (ok_status ? max_line : size_t{64} * 1024)) {
        throw boost::system::system_error(http::error::body_limit);
      }
      while (!parser.is_done() && !stop) {
        lowest.expires_after(ok_status ? idle_timeout : config_.request_timeout);
        RunOp(ex.ioc(), [&](auto done) { http::async_read_some(ex.stream(), ex.buffer(), parser, done); });
        if (!ok_status && parser.get().body().size() > size_t{64} * 1024) break;
      }
      if (!ok_status) {
        Response r;
        r.status = static_cast<int>(parser.get().result_int());
        r.body = parser.get().body();
        // A chunked error answer went to the line buffer.
        if (r.body.empty()) r.body = line;
        status = ApiStatus(r);
        if (status.ok()) status = Unavailable("kubernetes: watch answered " + std::to_string(r.status));
      } else if (status.ok() && !stop && !line.empty()) {
        on_line(line);  // a last line without its newline
      }
    } catch (const boost::system::system_error& e) {
      if (status.ok()) {
        if (cancel != nullptr && cancel->cancelled()) {
          status = {StatusCode::kCancelled, "kubernetes: watch cancelled"};
        } else if (e.code() == http::error::end_of_stream || e.code() == net::error::eof ||
                   e.code() == ssl::error::stream_truncated) {
          status = Unavailable("kubernetes: watch of " + std::string(target) + " ended without its last chunk");
        } else {
          status = FromSystemError(e.code(), "kubernetes: watch " + std::string(target));
        }
      }
    }
    ex.Close();
  };
  run();
  if (cancel != nullptr) cancel->Detach();
  if (status.ok() && cancel != nullptr && cancel->cancelled()) {
    return {StatusCode::kCancelled, "kubernetes: watch cancelled"};
  }
  return status;
}

std::string UrlEncode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string JsonText(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view header) {
  while (!header.empty() && header.front() == ' ') header.remove_prefix(1);
  while (!header.empty() && header.back() == ' ') header.remove_suffix(1);
  if (header.empty() || header.size() > 5) return std::nullopt;
  int64_t seconds = 0;
  for (char c : header) {
    if (c < '0' || c > '9') return std::nullopt;
    seconds = seconds * 10 + (c - '0');
  }
  if (seconds > 86'400) return std::nullopt;
  return std::chrono::seconds(seconds);
}

}  // namespace clusterd::k8s
