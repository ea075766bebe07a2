// The body of NodeD's `POST /v1/sim/faults` (sim mode; the handler is in
// noded/server/noded_server.cc), sent to a real in-process NodedServer over
// HTTP, so the whole path runs: the HTTP server, the JSON handling, the sim
// backend and the agent that records what was injected. Anything must answer
// 200 or 400 with a JSON body, never crash, hang or 500; and 200 only for a
// body that names a device this node has (or none), a string code and a state
// of "raise" or "clear" (nothing silently truncated or guessed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/free_port.h"
#include "fuzz_util.h"
#include "noded/server/noded_server.h"

using namespace clusterd;
using namespace clusterd::noded;

namespace {

constexpr uint32_t kSimDevices = 8;

noded::NodedServer* server = nullptr;

// One keep-alive HTTP/1.1 connection to the server, reopened when it closes.
class Client {
 public:
  explicit Client(int port) : port_(port) {}

  // Status code and body of one POST; aborts on a hang or a malformed answer.
  std::pair<int, std::string> Post(const std::string& path, std::string_view body) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0) Connect();
      std::string req = "POST " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                        "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      req.append(body);
      if (!SendAll(req)) {
        Close();
        continue;
      }
      std::string head;
      if (!ReadUntil("\r\n\r\n", &head)) {
        Close();
        if (attempt == 0) continue;  // the server closed an idle keep-alive connection
        std::fprintf(stderr, "no HTTP response\n");
        std::abort();
      }
      int status = 0;
      FUZZ_CHECK(std::sscanf(head.c_str(), "HTTP/1.1 %d", &status) == 1);
      size_t length = 0;
      const auto at = head.find("Content-Length: ");
      FUZZ_CHECK(at != std::string::npos);
      length = std::stoul(head.substr(at + 16));
      std::string out = buf_.substr(0, std::min(length, buf_.size()));
      buf_.erase(0, out.size());
      while (out.size() < length) {
        char chunk[4096];
        const ssize_t n = ::recv(fd_, chunk, std::min(sizeof chunk, length - out.size()), 0);
        FUZZ_CHECK(n > 0);
        out.append(chunk, static_cast<size_t>(n));
      }
      if (head.find("Connection: close") != std::string::npos) Close();
      return {status, out};
    }
    std::fprintf(stderr, "cannot send to the HTTP server\n");
    std::abort();
  }

 private:
  void Connect() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd_ >= 0);
    timeval tv{.tv_sec = 10, .tv_usec = 0};  // a handler that hangs is a finding
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    buf_.clear();
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buf_.clear();
  }
  bool SendAll(std::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `delim`; *out gets everything up to and including it.
  bool ReadUntil(std::string_view delim, std::string* out) {
    for (;;) {
      const auto at = buf_.find(delim);
      if (at != std::string::npos) {
        *out = buf_.substr(0, at + delim.size());
        buf_.erase(0, at + delim.size());
        return true;
      }
      char chunk[4096];
      const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  int port_;
  int fd_ = -1;
  std::string buf_;
};

Client* client = nullptr;

// What the handler promises to accept (see the comment at the top).
bool Acceptable(std::string_view body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "device" && it.key() != "code" && it.key() != "state") return false;
  }
  if (!j.contains("code") || !j["code"].is_string()) return false;
  if (!j.contains("state") || !j["state"].is_string()) return false;
  if (j["state"] != "raise" && j["state"] != "clear") return false;
  if (j.contains("device") && !j["device"].is_null()) {
    if (!j["device"].is_number_unsigned() || j["device"].get<uint64_t>() >= kSimDevices) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  NodedConfig cfg;
  cfg.server = "127.0.0.1:" + std::to_string(FreeLoopbackPort());  // no clusterd: the stream keeps retrying
  cfg.node_name = "fuzz-node";
  cfg.http_listen = "127.0.0.1:0";
  cfg.state_dir = fuzz::TempDir() + "/noded";
  cfg.accelerator = "sim";
  cfg.sim_devices = kSimDevices;
  cfg.kmsg_path = "";
  cfg.log_level = "off";
  server = new NodedServer(cfg);
  Status st = server->Start();
  if (!st.ok()) {
    std::fprintf(stderr, "noded: %s\n", st.ToString().c_str());
    std::abort();
  }
  // Join its threads at exit, before static destructors run under them. The
  // object itself stays (reachable, so no leak report).
  std::atexit([] { server->Shutdown(); });
  client = new Client(server->http_port());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body = fuzz::AsView(data, size);
  auto [status, text] = client->Post("/v1/sim/faults", body);
  if (status != 200 && status != 400) {
    std::fprintf(stderr, "status %d: %s\n", status, text.c_str());
    std::abort();
  }
  nlohmann::json answer = nlohmann::json::parse(text, nullptr, false);
  FUZZ_CHECK(answer.is_object());
  if (status == 200) {
    if (!Acceptable(body)) std::fprintf(stderr, "accepted: %.*s\n", static_cast<int>(size), body.data());
    FUZZ_CHECK(Acceptable(body));
  } else {
    FUZZ_CHECK(answer.contains("error") && answer["error"].is_string());
  }
  return 0;
}
