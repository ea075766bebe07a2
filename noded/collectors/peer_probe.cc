#include "noded/collectors/peer_probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace clusterd::noded {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The target as a socket address; false when the text is no IP literal.
bool ToSockaddr(const ProbeTarget& t, sockaddr_storage* out, socklen_t* len) {
  std::memset(out, 0, sizeof *out);
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  if (inet_pton(AF_INET, t.address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(t.port);
    *len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET6, t.address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(t.port);
    *len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

struct Attempt {
  int fd = -1;
  bool done = false;
  bool replied = false;
  SteadyClock::time_point start;
  std::chrono::microseconds rtt{0};
};

void Finish(Attempt& a, bool replied) {
  a.done = true;
  a.replied = replied;
  if (replied) a.rtt = std::chrono::duration_cast<std::chrono::microseconds>(SteadyClock::now() - a.start);
  if (a.fd >= 0) ::close(a.fd);
  a.fd = -1;
}

// One connect to every target at once; each attempt's answer.
std::vector<Attempt> ConnectAll(const std::vector<ProbeTarget>& targets, std::chrono::milliseconds timeout) {
  std::vector<Attempt> attempts(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    Attempt& a = attempts[i];
    sockaddr_storage addr;
    socklen_t len = 0;
    if (!ToSockaddr(targets[i], &addr, &len)) {
      Finish(a, false);
      continue;
    }
    a.fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a.fd < 0) {
      Finish(a, false);
      continue;
    }
    a.start = SteadyClock::now();
    if (::connect(a.fd, reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      Finish(a, true);
    } else if (errno != EINPROGRESS) {
      Finish(a, false);
    }
  }
  const auto deadline = SteadyClock::now() + timeout;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> index;
    for (size_t i = 0; i < attempts.size(); ++i) {
      if (attempts[i].done) continue;
      fds.push_back({attempts[i].fd, POLLOUT, 0});
      index.push_back(i);
    }
    if (fds.empty()) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Attempt& a = attempts[index[k]];
      int err = 0;
      socklen_t err_len = sizeof err;
      const bool ok = ::getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0 &&
                      (fds[k].revents & (POLLERR | POLLHUP)) == 0;
      Finish(a, ok);
    }
  }
  for (auto& a : attempts) {
    if (!a.done) Finish(a, false);  // timed out
  }
  return attempts;
}

}  // namespace

Status ValidateProbe(const std::vector<ProbeTarget>& targets, const PeerProbeOptions& options) {
  if (options.attempts < 1 || options.attempts > 10) return InvalidArgument("probe attempts must be 1..10");
  if (options.timeout < std::chrono::milliseconds(10) || options.timeout > std::chrono::seconds(10)) {
    return InvalidArgument("probe timeout must be 10 ms..10 s");
  }
  if (targets.size() > kMaxProbeTargets) {
    return InvalidArgument("at most " + std::to_string(kMaxProbeTargets) + " probe targets, not " +
                           std::to_string(targets.size()));
  }
  for (const auto& t : targets) {
    if (t.node.empty()) return InvalidArgument("probe target without a node name");
    if (t.port == 0) return InvalidArgument("probe target " + t.node + " without a port");
    sockaddr_storage addr;
    socklen_t len = 0;
    if (!ToSockaddr(t, &addr, &len)) {
      return InvalidArgument("probe target " + t.node + ": address is no IP literal: " + t.address);
    }
  }
  return Status::Ok();
}

std::vector<ProbeOutcome> ProbePeers(const std::vector<ProbeTarget>& targets, const PeerProbeOptions& options) {
  std::vector<ProbeOutcome> out(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) out[i].node = targets[i].node;
  for (uint32_t round = 0; round < options.attempts; ++round) {
    const auto attempts = ConnectAll(targets, options.timeout);
    for (size_t i = 0; i < targets.size(); ++i) {
      ProbeOutcome& o = out[i];
      ++o.sent;
      if (!attempts[i].replied) {
        ++o.lost;
        continue;
      }
      const auto rtt = attempts[i].rtt;
      o.rtt_min = (o.sent - o.lost == 1) ? rtt : std::min(o.rtt_min, rtt);
      o.rtt_max = std::max(o.rtt_max, rtt);
      o.rtt_sum += rtt;
    }
  }
  return out;
}

}  // namespace clusterd::noded
