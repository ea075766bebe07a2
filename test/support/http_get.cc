#include "test/support/http_get.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/http.hpp>
#include <openssl/pem.h>
#include <openssl/ssl.h>

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

HttpResult HttpsGet(int port, const std::string& target, const HttpTls& tls, const std::string& authorization) {
  namespace asio = boost::asio;
  namespace ssl = asio::ssl;
  namespace http = boost::beast::http;
  HttpResult out;
  try {
    ssl::context ctx(ssl::context::tls_client);
    ctx.load_verify_file(tls.ca_file);
    ctx.set_verify_mode(ssl::verify_peer);
    if (!tls.cert_file.empty()) {
      ctx.use_certificate_chain_file(tls.cert_file);
      ctx.use_private_key_file(tls.key_file, ssl::context::pem);
    }
    asio::io_context ioc;
    ssl::stream<asio::ip::tcp::socket> stream(ioc, ctx);
    stream.set_verify_callback(ssl::host_name_verification("127.0.0.1"));
    stream.next_layer().connect(
        asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), static_cast<unsigned short>(port)));
    boost::system::error_code ec;
    stream.handshake(ssl::stream_base::client, ec);
    if (ec) {
      out.tls_error = ec.message();
      return out;
    }
    if (X509* cert = SSL_get1_peer_certificate(stream.native_handle())) {
      BIO* bio = BIO_new(BIO_s_mem());
      PEM_write_bio_X509(bio, cert);
      char* data = nullptr;
      const long n = BIO_get_mem_data(bio, &data);
      out.server_certificate_pem.assign(data, static_cast<size_t>(n));
      BIO_free(bio);
      X509_free(cert);
    }
    http::request<http::string_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "localhost");
    if (!authorization.empty()) req.set(http::field::authorization, authorization);
    req.keep_alive(false);
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    http::read(stream, buffer, parser, ec);
    // A TLS 1.3 server may refuse a client certificate only after the
    // handshake: the read fails then.
    if (!parser.is_done()) {
      out.tls_error = ec ? ec.message() : "no whole answer";
      return out;
    }
    const http::response<http::string_body>& res = parser.get();
    out.status = res.result_int();
    out.body = res.body();
    out.content_type = std::string(res[http::field::content_type]);
  } catch (const std::exception& e) {
    out.status = 0;
    out.tls_error = e.what();
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
