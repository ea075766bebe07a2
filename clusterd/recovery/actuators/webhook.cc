// The webhook actuator: each action is one HTTP/1.1 POST of its JSON, on a
// connection of its own, that must be answered before the action's deadline.
#include "clusterd/recovery/actuators/actuator.h"
#include "clusterd/recovery/actuators/pooled.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <utility>

#include <boost/asio/ip/address_v6.hpp>

#include "common/duration.h"
#include "common/http_client.h"
#include "common/tls_context.h"

namespace clusterd {
namespace {

namespace asio = boost::asio;
using actuator_internal::kMaxMessageBytes;
using actuator_internal::OneLine;
using std::chrono::system_clock;

// Larger answers are cut off here; only their start is reported.
constexpr std::uint64_t kMaxBodyBytes = 64 << 10;

struct Url {
  std::string text;  // as configured, for messages
  bool https = false;
  std::string host;         // name or address, without brackets
  std::string port;         // "80" ("443" for https) when not given
  std::string host_header;  // host[:port] as written
  std::string target;       // path and query, at least "/"
};

// http[s]://host[:port][/path][?query]; host a name, an IPv4 address or a
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
  if (scheme_end == std::string::npos) return bad("expected http://host:port/path or https://host:port/path");
  std::string scheme = text.substr(0, scheme_end);
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "http" && scheme != "https") return bad("only http:// and https:// are supported");

  Url url;
  url.text = text;
  url.https = scheme == "https";
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
  url.port = url.https ? "443" : "80";
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

// tls: the client context of an https URL (null for http).
ActionResult Post(const Url& url, const std::shared_ptr<asio::ssl::context>& tls, const ActionRequest& req) {
  const auto start = system_clock::now();
  if (start >= req.deadline) return {false, "timed out: the deadline passed before the request was sent"};
  // The deadline is wall-clock; the call counts on the steady clock.
  const auto expiry = std::chrono::steady_clock::now() + (req.deadline - start);

  HttpClientRequest request;
  request.method = "POST";
  request.host = url.host;
  request.port = url.port;
  request.host_header = url.host_header;
  request.target = url.target;
  request.headers = {{"Content-Type", "application/json"}, {"Idempotency-Key", req.idempotency_key}};
  request.body = ActionJson(req);
  request.tls = tls;
  if (tls) request.tls_verify_host = url.host;
  const HttpClientAnswer answer = HttpCall(request, expiry, kMaxBodyBytes);
  if (!answer.answered) {
    const std::string why =
        answer.timed_out
            ? "timed out after " + FormatDuration(std::chrono::round<std::chrono::milliseconds>(req.deadline - start)) +
                  " " + answer.failed_at
            : answer.failed_at + (": " + answer.error);
    return {false, OneLine("POST " + url.text + ": " + why, 2 * kMaxMessageBytes)};
  }
  const std::string_view body(answer.body.data(), std::min(answer.body.size(), 4 * kMaxMessageBytes));
  if (answer.status >= 200 && answer.status < 300) {
    return {true, OneLine(body.substr(0, body.find('\n')), kMaxMessageBytes)};
  }
  std::string message = "HTTP " + std::to_string(answer.status) + " " + answer.reason;
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
  if (options.cert_file.empty() != options.key_file.empty()) {
    return InvalidArgument(
        "webhook actuator: a client certificate needs both actuator_cert_file and actuator_key_file");
  }
  std::shared_ptr<asio::ssl::context> tls;
  if (url->https) {
    auto ctx = MakeVerifyingTlsClientContext(options.ca_file, options.cert_file, options.key_file);
    if (!ctx.ok()) return InvalidArgument("webhook actuator: " + ctx.status().message());
    tls = std::move(*ctx);
  } else if (!options.ca_file.empty() || !options.cert_file.empty()) {
    return InvalidArgument("webhook actuator: actuator_ca_file and actuator_cert_file need an https:// url, not " +
                           options.url);
  }
  return actuator_internal::MakePooledActuator(
      "webhook", options.workers,
      [url = std::move(*url), tls = std::move(tls)](const ActionRequest& req) { return Post(url, tls, req); });
}

}  // namespace clusterd
