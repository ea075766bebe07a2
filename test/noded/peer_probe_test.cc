// The pingmesh's TCP probe (noded/collectors/peer_probe.h) on loopback: a
// listening peer answers every attempt, a closed port loses every one, and
// bad targets are refused before anything is sent.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "noded/collectors/peer_probe.h"

namespace clusterd::noded {
namespace {

// A loopback socket on a free port; listening or only bound (nothing accepts).
class LoopbackPort {
 public:
  explicit LoopbackPort(bool listen) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    socklen_t len = sizeof addr;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
    if (listen) {
      EXPECT_EQ(::listen(fd_, 64), 0);
    }
  }
  ~LoopbackPort() { ::close(fd_); }
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(PeerProbe, AListeningPeerAnswersAClosedPortLosesEveryAttempt) {
  LoopbackPort up(/*listen=*/true);
  LoopbackPort down(/*listen=*/false);  // bound, not listening: refused
  const std::vector<ProbeTarget> targets = {{"up", "127.0.0.1", up.port()}, {"down", "127.0.0.1", down.port()}};
  PeerProbeOptions options;
  options.attempts = 4;
  ASSERT_TRUE(ValidateProbe(targets, options).ok());
  const auto outcomes = ProbePeers(targets, options);
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[0].node, "up");
  EXPECT_EQ(outcomes[0].sent, 4u);
  EXPECT_EQ(outcomes[0].lost, 0u);
  EXPECT_LE(outcomes[0].rtt_min, outcomes[0].rtt_max);
  EXPECT_GE(outcomes[0].rtt_sum, outcomes[0].rtt_max);
  EXPECT_EQ(outcomes[1].node, "down");
  EXPECT_EQ(outcomes[1].sent, 4u);
  EXPECT_EQ(outcomes[1].lost, 4u);
  EXPECT_EQ(outcomes[1].rtt_sum.count(), 0);
}

TEST(PeerProbe, IPv6LoopbackIsProbedToo) {
  const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 addr{};
  addr.sin6_family = AF_INET6;
  addr.sin6_addr = in6addr_loopback;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    GTEST_SKIP() << "no IPv6 loopback here";
  }
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(::listen(fd, 8), 0);
  const auto outcomes = ProbePeers({{"v6", "::1", ntohs(addr.sin6_port)}}, PeerProbeOptions{});
  ::close(fd);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].lost, 0u);
}

TEST(PeerProbe, BadTargetsAndOptionsAreRefused) {
  PeerProbeOptions options;
  EXPECT_FALSE(ValidateProbe({{"n", "node-7.example", 11255}}, options).ok());  // no DNS
  EXPECT_FALSE(ValidateProbe({{"n", "127.0.0.1", 0}}, options).ok());
  EXPECT_FALSE(ValidateProbe({{"", "127.0.0.1", 1}}, options).ok());
  std::vector<ProbeTarget> many(kMaxProbeTargets + 1, ProbeTarget{"n", "127.0.0.1", 1});
  const Status too_many = ValidateProbe(many, options);
  EXPECT_FALSE(too_many.ok());
  EXPECT_NE(too_many.message().find("at most"), std::string::npos) << too_many.message();
  options.attempts = 0;
  EXPECT_FALSE(ValidateProbe({}, options).ok());
  options = PeerProbeOptions{};
  options.timeout = std::chrono::milliseconds(1);
  EXPECT_FALSE(ValidateProbe({}, options).ok());
  EXPECT_TRUE(ValidateProbe({{"n", "::1", 1}}, PeerProbeOptions{}).ok());
}

}  // namespace
}  // namespace clusterd::noded
