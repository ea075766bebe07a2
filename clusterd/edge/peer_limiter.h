// Per-peer admission: counts the open streams of each client IP address and
// refuses one beyond a limit, so that one host cannot take every slot of a
// server-wide limit (agent streams, Watch streams).
//
// Threading: thread-safe (one mutex around a small map).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace clusterd {

class PeerLimiter {
 public:
  explicit PeerLimiter(uint32_t max_per_peer) : max_per_peer_(max_per_peer) {}

  // Counts one more stream for `key` and returns true, or returns false (and
  // counts nothing) when the key already holds max_per_peer streams.
  bool TryAcquire(const std::string& key) {
    std::lock_guard lock(mu_);
    uint32_t& n = open_[key];
    if (n >= max_per_peer_) {
      if (n == 0) open_.erase(key);
      return false;
    }
    ++n;
    return true;
  }

  // Undoes one successful TryAcquire(key).
  void Release(const std::string& key) {
    std::lock_guard lock(mu_);
    auto it = open_.find(key);
    if (it == open_.end()) return;
    if (--it->second == 0) open_.erase(it);
  }

  uint32_t max_per_peer() const { return max_per_peer_; }

  // The address part of a gRPC peer string, without the port:
  // "ipv4:10.0.0.7:51234" -> "10.0.0.7", "ipv6:[::1]:51234" (or its
  // URI-escaped "ipv6:%5B::1%5D:51234") -> "::1". Anything else (unix
  // sockets, unknown forms) is kept whole.
  static std::string PeerKey(std::string_view peer) {
    const bool v4 = peer.substr(0, 5) == "ipv4:";
    const bool v6 = peer.substr(0, 5) == "ipv6:";
    if (!v4 && !v6) return std::string(peer);
    std::string_view rest = peer.substr(5);
    const size_t colon = rest.rfind(':');
    if (colon != std::string_view::npos) rest = rest.substr(0, colon);
    if (v6) {
      if (rest.size() >= 2 && rest.front() == '[' && rest.back() == ']') {
        rest = rest.substr(1, rest.size() - 2);
      } else if (rest.size() >= 6 && rest.substr(0, 3) == "%5B" && rest.substr(rest.size() - 3) == "%5D") {
        rest = rest.substr(3, rest.size() - 6);
      }
    }
    return std::string(rest);
  }

 private:
  const uint32_t max_per_peer_;
  std::mutex mu_;
  std::unordered_map<std::string, uint32_t> open_;
};

}  // namespace clusterd
