// The webhook actuator: each action is one HTTP/1.1 POST of its JSON, on a
// connection of its own, that must be answered before the action's deadline.
#include "clusterd/actuator.h"
#include "clusterd/actuator_internal.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/duration.h"

namespace clusterd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using actuator_internal::OneLine;
using std::chrono::system_clock;

constexpr size_t kMaxMessageBytes = 512;
// Larger answers are cut off here; only their start is reported.
constexpr std::uint64_t kMaxBodyBytes = 64 << 10;

struct Url {
  std::string text;         // as configured, for messages
  std::string host;         // name or address, without brackets
  std::string port;         // "80" when not given
  std::string host_header;  // host[:port] as written
  std::string target;       // path and query, at least "/"
};

// http://host[:port][/path][?query]; host a name, an IPv4 address or a
// bracketed IPv6 address.
StatusOr<Url> ParseUrl(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgument("webhook actuator: bad url '" + text + "': " + why);
  };
  if (text.empty()) return bad("empty");
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u == 0x7F) return bad("spaces and control characters are not allowed");
  }
  const size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return bad("expected http://host:port/path");
  std::string scheme = text.substr(0, scheme_end);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "http") return bad("only http:// is supported (put a TLS proxy in front for https)");

  Url url;
  url.text = text;
  const std::string rest = text.substr(scheme_end + 3);
  const size_t authority_end = rest.find_first_of("/?#");
  url.host_header = rest.substr(0, authority_end);
  url.target = authority_end == std::string::npos ? "" : rest.substr(authority_end);
  if (url.target.find('#') != std::string::npos) return bad("a fragment (#...) is not allowed");
  if (url.target.empty() || url.target.front() == '?') url.target.insert(0, "/");

  const std::string& authority = url.host_header;
  if (authority.find('@') != std::string::npos) return bad("user info (user@) is not supported");
  std::string port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) return bad("unterminated [ in the host");
    url.host = authority.substr(1, close - 1);
    const std::string after = authority.substr(close + 1);
    if (!after.empty() && after.front() != ':') return bad("expected :port after ]");
    if (!after.empty()) port_text = after.substr(1);
    boost::system::error_code ec;
    asio::ip::make_address_v6(url.host, ec);
    if (ec) return bad("'" + url.host + "' is not an IPv6 address");
  } else {
    const size_t colon = authority.find(':');
    url.host = authority.substr(0, colon);
    if (colon != std::string::npos) port_text = authority.substr(colon + 1);
    const bool name_chars = std::all_of(url.host.begin(), url.host.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '-' || c == '.' || c == '_';
    });
    if (!name_chars) return bad("the host must be a name or an IP address");
  }
  if (url.host.empty()) return bad("no host");
  if (authority.back() == ':') return bad("empty port");
  url.port = "80";
  if (!port_text.empty()) {
    unsigned port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size() || port < 1 || port > 65535) {
      return bad("the port must be a number in 1..65535");
    }
    url.port = std::to_string(port);
  }
  return url;
}

ActionResult Post(const Url& url, const ActionRequest& req) {
  const auto start = system_clock::now();
  if (start >= req.deadline) return {false, "timed out: the deadline passed before the request was sent"};
  // The deadline is wall-clock; the timers count on the steady clock.
  const auto expiry = std::chrono::steady_clock::now() + (req.deadline - start);

  http::request<http::string_body> request{http::verb::post, url.target, 11};
  request.set(http::field::host, url.host_header);
  request.set(http::field::user_agent, "clusterd");
  request.set(http::field::content_type, "application/json");
  request.set("Idempotency-Key", req.idempotency_key);
  request.keep_alive(false);
  request.body() = ActionJson(req);
  request.prepare_payload();

  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  asio::steady_timer resolve_timer(ioc);
  beast::tcp_stream stream(ioc);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(kMaxBodyBytes);

  // Filled in by the last handler that runs.
  beast::error_code error;
  const char* failed_at = "";
  bool resolve_timed_out = false;
  const auto fail = [&](const char* stage, beast::error_code ec) {
    failed_at = stage;
    error = ec;
  };

  // The resolver has no timeout of its own; the stream's covers the rest.
  resolve_timer.expires_at(expiry);
  resolve_timer.async_wait([&](beast::error_code ec) {
    if (ec) return;  // cancelled: resolved in time
    resolve_timed_out = true;
    resolver.cancel();
  });
  resolver.async_resolve(url.host, url.port, [&](beast::error_code ec, const tcp::resolver::results_type& results) {
    resolve_timer.cancel();
    if (ec) return fail("resolving the host", resolve_timed_out ? beast::error::timeout : ec);
    stream.expires_at(expiry);
    stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail("connecting", ec);
      http::async_write(stream, request, [&](beast::error_code ec, std::size_t) {
        if (ec) return fail("sending the request", ec);
        http::async_read(stream, buffer, parser, [&](beast::error_code ec, std::size_t) {
          if (ec) fail("waiting for the answer", ec);
        });
      });
    });
  });
  ioc.run();
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);

  // An answer too long to keep is still an answer: report its start.
  const bool answered = !error || (error == http::error::body_limit && parser.is_header_done());
  if (!answered) {
    const std::string why =
        error == beast::error::timeout
            ? "timed out after " + FormatDuration(std::chrono::round<std::chrono::milliseconds>(req.deadline - start)) +
                  " " + failed_at
            : failed_at + (": " + error.message());
    return {false, OneLine("POST " + url.text + ": " + why, 2 * kMaxMessageBytes)};
  }
  const auto& response = parser.get();
  const std::string_view body(response.body().data(), std::min(response.body().size(), 4 * kMaxMessageBytes));
  const unsigned code = response.result_int();
  if (code >= 200 && code < 300) {
    return {true, OneLine(body.substr(0, body.find('\n')), kMaxMessageBytes)};
  }
  std::string reason(response.reason());
  if (reason.empty()) reason = std::string(http::obsolete_reason(response.result()));
  std::string message = "HTTP " + std::to_string(code) + " " + reason;
  if (const std::string start_of_body = OneLine(body, kMaxMessageBytes); !start_of_body.empty()) {
    message += ": " + start_of_body;
  }
  return {false, OneLine(message, 2 * kMaxMessageBytes)};
}

}  // namespace

StatusOr<std::unique_ptr<Actuator>> MakeWebhookActuator(const WebhookActuatorOptions& options) {
  auto url = ParseUrl(options.url);
  if (!url.ok()) return url.status();
  if (options.workers < 1) {
    return InvalidArgument("webhook actuator: workers must be at least 1, got " + std::to_string(options.workers));
  }
  return actuator_internal::MakePooledActuator(
      "webhook", options.workers, [url = std::move(*url)](const ActionRequest& req) { return Post(url, req); });
}

}  // namespace clusterd
