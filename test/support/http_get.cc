#include "test/support/http_get.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace clusterd::testing {

HttpResult HttpGet(int port, const std::string& target, const std::string& authorization) {
  namespace asio = boost::asio;
  namespace http = boost::beast::http;
  HttpResult out;
  try {
    asio::io_context ioc;
    asio::ip::tcp::socket socket(ioc);
    socket.connect(asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)));
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "localhost");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    req.keep_alive(false);
    http::write(socket, req);
    boost::beast::flat_buffer buffer;
    http::response<http::string_body> res;
    http::read(socket, buffer, res);
    out.status = res.result_int();
    out.body = res.body();
    out.content_type = std::string(res[http::field::content_type]);
  } catch (const std::exception&) {
    out.status = 0;
  }
  return out;
}

double MetricValue(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while ((pos = text.find(name + " ", pos)) != std::string::npos) {
    if (pos == 0 || text[pos - 1] == '\n') return std::stod(text.substr(pos + name.size() + 1));
    pos += name.size();
  }
  return -1;
}

}  // namespace clusterd::testing
