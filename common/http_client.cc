#include "common/http_client.h"

#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <openssl/ssl.h>

namespace clusterd {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
namespace ssl = asio::ssl;

}  // namespace

HttpClientAnswer HttpCall(const HttpClientRequest& req, std::chrono::steady_clock::time_point deadline,
                          std::size_t max_body) {
  HttpClientAnswer out;
  http::request<http::string_body> request{http::string_to_verb(req.method), req.target, 11};
  request.set(http::field::host, req.host_header.empty() ? req.host + ":" + req.port : req.host_header);
  request.set(http::field::user_agent, "clusterd");
  for (const auto& [name, value] : req.headers) request.set(name, value);
  request.keep_alive(false);
  request.body() = req.body;
  request.prepare_payload();

  asio::io_context ioc;
  tcp::resolver resolver(ioc);
  asio::steady_timer resolve_timer(ioc);
  beast::tcp_stream stream(ioc);
  std::optional<ssl::stream<beast::tcp_stream&>> tls;
  if (req.tls) {
    tls.emplace(stream, *req.tls);
    // SNI names a host, never an address (RFC 6066).
    boost::system::error_code not_an_address;
    asio::ip::make_address(req.host, not_an_address);
    if (not_an_address) SSL_set_tlsext_host_name(tls->native_handle(), req.host.c_str());
    if (!req.tls_verify_host.empty()) tls->set_verify_callback(ssl::host_name_verification(req.tls_verify_host));
  }
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(max_body);

  // Filled in by the last handler that runs.
  beast::error_code error;
  bool resolve_timed_out = false;
  const auto fail = [&](const char* stage, beast::error_code ec) {
    out.failed_at = stage;
    error = ec;
  };
  // Send the request and read the answer over `s` (the TCP stream or TLS over it).
  const auto exchange = [&](auto& s) {
    http::async_write(s, request, [&](beast::error_code ec, std::size_t) {
      if (ec) return fail("sending the request", ec);
      http::async_read(s, buffer, parser, [&](beast::error_code ec, std::size_t) {
        if (ec) fail("waiting for the answer", ec);
      });
    });
  };

  // The resolver has no timeout of its own; the stream's covers the rest.
  resolve_timer.expires_at(deadline);
  resolve_timer.async_wait([&](beast::error_code ec) {
    if (ec) return;  // cancelled: resolved in time
    resolve_timed_out = true;
    resolver.cancel();
  });
  resolver.async_resolve(req.host, req.port, [&](beast::error_code ec, const tcp::resolver::results_type& results) {
    resolve_timer.cancel();
    if (ec) return fail("resolving the host", resolve_timed_out ? beast::error::timeout : ec);
    stream.expires_at(deadline);
    stream.async_connect(results, [&](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return fail("connecting", ec);
      if (!tls) return exchange(stream);
      tls->async_handshake(ssl::stream_base::client, [&](beast::error_code ec) {
        if (ec) return fail("the TLS handshake", ec);
        exchange(*tls);
      });
    });
  });
  ioc.run();
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);

  // An answer too long to keep is still an answer: its start is kept.
  out.truncated = error == http::error::body_limit && parser.is_header_done();
  out.answered = !error || out.truncated;
  if (!out.answered) {
    out.timed_out = error == beast::error::timeout;
    out.error = error.message();
    return out;
  }
  auto& response = parser.get();
  out.status = static_cast<int>(response.result_int());
  out.reason = std::string(response.reason());
  if (out.reason.empty()) out.reason = std::string(http::obsolete_reason(response.result()));
  out.body = std::move(response.body());
  if (out.body.size() > max_body) out.body.resize(max_body);
  return out;
}

bool SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return false;
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.back() != ']') return false;
    h = h.substr(1, h.size() - 2);
  }
  const std::string p = address.substr(colon + 1);
  if (p.find_first_not_of("0123456789") != std::string::npos || p.size() > 5) return false;
  *host = h;
  *port = p;
  return !h.empty();
}

}  // namespace clusterd
