// The pingmesh's device plane on NodeD (noded/collectors/device_probe.h,
// noded/pingmesh.h): /etc/hccn.conf and hccn_tool's ping output parsed from
// sample text in the tool's format, and the probe run with a fake hccn_tool
// that this test writes (a shell script answering by the address it is
// given: never a real network).
#include <sys/stat.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>

#include <gtest/gtest.h>

#include "noded/collectors/device_probe.h"
#include "noded/pingmesh.h"
#include "test_util.h"

namespace clusterd::noded {
namespace {

using testing::TempDir;

// hccn.conf as hccn_tool writes it: per device its address, netmask,
// detection address, gateway; only address_<id> names the port.
constexpr char kHccnConf[] = R"(address_0=29.1.110.1
netmask_0=255.255.0.0
netdetect_0=29.1.1.1
gateway_0=29.1.1.1
send_arp_status_0=1
# device 1
address_1 = 29.1.110.2
netmask_1=255.255.0.0
address_10=29.1.110.11
)";

TEST(HccnConf, AddressLinesAreThePortsSortedByDevice) {
  auto ports = ParseHccnConf(kHccnConf);
  ASSERT_TRUE(ports.ok()) << ports.status().ToString();
  EXPECT_EQ(*ports, (std::vector<DevicePort>{{0, "29.1.110.1"}, {1, "29.1.110.2"}, {10, "29.1.110.11"}}));
  auto empty = ParseHccnConf("netmask_0=255.255.0.0\n\n");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(HccnConf, BadLinesAreRefusedNamingTheLine) {
  for (const char* text : {"address_0=29.1.110.1\naddress_0=29.1.110.2\n", "address_x=29.1.110.1\n",
                           "address_0=host.example\n", "address_0=fe80::1\n", "address_70000=29.1.110.1\n"}) {
    auto ports = ParseHccnConf(text);
    ASSERT_FALSE(ports.ok()) << text;
    EXPECT_EQ(ports.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(ports.status().message().find("line "), std::string::npos) << ports.status().message();
  }
  std::string many;
  for (int i = 0; i <= static_cast<int>(kMaxDevicePorts); ++i) many += "address_" + std::to_string(i) + "=10.0.0.1\n";
  EXPECT_FALSE(ParseHccnConf(many).ok()) << "more than kMaxDevicePorts ports";
  EXPECT_FALSE(ParseHccnConf(std::string(kMaxHccnConfBytes + 1, '#')).ok());
  EXPECT_EQ(ReadHccnConf("/nonexistent/hccn.conf").status().code(), StatusCode::kNotFound);
}

TEST(HccnPing, TheSummaryGivesSentAndReceivedTheReplyLinesTheRoundTrips) {
  // hccn_tool -i 0 -ping -g address 29.1.110.2 pkt 3: every reply back.
  auto all = ParseHccnPing(
      "device 0 PING 29.1.110.2\n"
      "recv seq=0,time=0.079000ms\n"
      "recv seq=1,time=0.052000ms\n"
      "recv seq=2,time=0.049000ms\n"
      "3 packets transmitted, 3 received, 0.00% packet loss\n");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_EQ(all->sent, 3u);
  EXPECT_EQ(all->received, 3u);
  EXPECT_EQ(all->rtt_count, 3u);
  EXPECT_EQ(all->rtt_max.count(), 79);
  EXPECT_EQ(all->rtt_sum.count(), 79 + 52 + 49);
  // A port that answers nothing: no reply lines, all lost.
  auto none = ParseHccnPing("device 3 PING 29.1.110.4\r\n3 packets transmitted, 0 received, 100.00% packet loss\r\n");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(none->sent, 3u);
  EXPECT_EQ(none->received, 0u);
  EXPECT_EQ(none->rtt_count, 0u);
}

TEST(HccnPing, OutputWithoutASummaryOrWithBadNumbersIsRefused) {
  for (const char* text : {"", "device 0 PING 29.1.110.2\nrecv seq=0,time=0.079000ms\n",
                           "recv seq=0,time=abcms\n3 packets transmitted, 3 received, 0.00% packet loss\n",
                           "x packets transmitted, 3 received, 0.00% packet loss\n",
                           "3 packets transmitted, 4 received, 0.00% packet loss\n"}) {
    auto ping = ParseHccnPing(text);
    EXPECT_FALSE(ping.ok()) << text;
  }
}

// A fake hccn_tool: logs its arguments, then answers by the address it is
// asked to ping (argv: -i <dev> -ping -g address <ip> pkt <n>).
std::string WriteFakeTool(const TempDir& dir) {
  const std::string log = dir.Sub("calls.log");
  const std::string path =
      dir.Write("hccn_tool",
                "#!/bin/sh\n"
                "echo \"$*\" >> '" +
                    log +
                    "'\n"
                    "dev=$2; ip=$6; n=$8\n"
                    "case \"$ip\" in\n"
                    "  10.9.9.9) exec sleep 60 ;;\n"
                    "  10.6.6.6) echo 'ping failed: device busy'; exit 1 ;;\n"
                    "  10.0.0.2) echo \"device $dev PING $ip\";\n"
                    "    echo \"$n packets transmitted, 0 received, 100.00% packet loss\" ;;\n"
                    "  *) echo \"device $dev PING $ip\"; i=0;\n"
                    "    while [ $i -lt $n ]; do echo \"recv seq=$i,time=0.050000ms\"; i=$((i+1)); done;\n"
                    "    echo \"$n packets transmitted, $n received, 0.00% packet loss\" ;;\n"
                    "esac\n");
  EXPECT_EQ(::chmod(path.c_str(), 0755), 0);
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(DeviceProbe, TheToolRunsPerPortPairAndItsAnswersAreCounted) {
  TempDir dir;
  DeviceProbeOptions options;
  options.tool = WriteFakeTool(dir);
  options.packets = 4;
  options.timeout = std::chrono::milliseconds(300);  // the hanging port's run is killed after it
  ASSERT_TRUE(DeviceToolUsable(options.tool));
  const std::vector<DeviceProbeTarget> targets = {
      {"up", 0, 0, "10.0.0.1"}, {"cut", 1, 1, "10.0.0.2"}, {"hung", 2, 2, "10.9.9.9"}, {"broken", 3, 3, "10.6.6.6"}};
  const auto out = ProbeDevices(targets, options);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].ran);
  EXPECT_EQ(out[0].target.node, "up");
  EXPECT_EQ(out[0].sent, 4u);
  EXPECT_EQ(out[0].lost, 0u);
  EXPECT_EQ(out[0].rtt_max.count(), 50);
  EXPECT_EQ(out[0].rtt_sum.count(), 200);
  EXPECT_TRUE(out[1].ran);
  EXPECT_EQ(out[1].lost, 4u);
  EXPECT_TRUE(out[2].ran) << "a run past its timeout lost every packet";
  EXPECT_EQ(out[2].sent, 4u);
  EXPECT_EQ(out[2].lost, 4u);
  EXPECT_FALSE(out[3].ran) << "output without a summary is no result";
  EXPECT_NE(out[3].error.find("summary"), std::string::npos) << out[3].error;
  const std::string calls = ReadAll(dir.Sub("calls.log"));
  EXPECT_NE(calls.find("-i 0 -ping -g address 10.0.0.1 pkt 4"), std::string::npos) << calls;
  EXPECT_NE(calls.find("-i 1 -ping -g address 10.0.0.2 pkt 4"), std::string::npos) << calls;
  EXPECT_FALSE(DeviceToolUsable(dir.Sub("missing")));
}

// The worker: a plan with the peers' ports runs the tool beside the TCP
// probe and reports per port pair; without the tool the report says the
// device plane was not probed, and no port result is made up.
class PingmeshWorkerDevices : public ::testing::Test {
 protected:
  std::optional<v1::ProbeReport> RunPlan(DevicePlaneOptions device) {
    std::mutex mu;
    std::condition_variable cv;
    bool ready = false;
    PingmeshWorker worker(
        [&] {
          std::lock_guard lock(mu);
          ready = true;
          cv.notify_all();
        },
        nullptr, std::move(device));
    worker.Start();
    v1::ProbePlan plan;
    plan.set_round(7);
    plan.set_attempts(2);
    plan.mutable_timeout()->set_nanos(100'000'000);
    v1::ProbeTarget* t = plan.add_targets();
    t->set_node("peer");
    t->set_address("127.0.0.1");
    t->set_port(1);  // nothing listens: the TCP plane loses, whatever the device plane does
    for (auto [id, ip] : {std::pair<uint32_t, const char*>{0, "10.0.0.1"}, {1, "10.0.0.2"}, {5, "10.0.0.5"}}) {
      v1::DeviceAddress* d = t->add_devices();
      d->set_device_id(id);
      d->set_address(ip);
    }
    EXPECT_TRUE(worker.Submit(plan).ok());
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return ready; }));
    lock.unlock();
    auto report = worker.TakeReady();
    worker.Stop();
    return report;
  }
  TempDir dir_;
};

TEST_F(PingmeshWorkerDevices, EachLocalPortProbesThePeersPortOfTheSameId) {
  DevicePlaneOptions device;
  device.ports = {{0, "10.1.0.1"}, {1, "10.1.0.2"}};  // no device 5 here: the peer's port 5 is not probed
  device.tool = WriteFakeTool(dir_);
  auto report = RunPlan(device);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->round(), 7u);
  EXPECT_EQ(report->device_plane(), v1::DEVICE_PLANE_STATE_PROBED);
  ASSERT_EQ(report->peers_size(), 1);
  const auto& peer = report->peers(0);
  EXPECT_EQ(peer.lost(), peer.sent()) << "the TCP plane is its own";
  ASSERT_EQ(peer.devices_size(), 2);
  EXPECT_EQ(peer.devices(0).device_id(), 0u);
  EXPECT_EQ(peer.devices(0).peer_device_id(), 0u);
  EXPECT_EQ(peer.devices(0).sent(), 2u);
  EXPECT_EQ(peer.devices(0).lost(), 0u);
  EXPECT_TRUE(peer.devices(0).has_rtt_mean());
  EXPECT_EQ(peer.devices(1).device_id(), 1u);
  EXPECT_EQ(peer.devices(1).lost(), 2u);
}

TEST_F(PingmeshWorkerDevices, WithoutTheToolTheDevicePlaneIsNotProbed) {
  DevicePlaneOptions device;
  device.ports = {{0, "10.1.0.1"}};
  device.tool = dir_.Sub("no-such-hccn_tool");
  auto report = RunPlan(device);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->device_plane(), v1::DEVICE_PLANE_STATE_NO_TOOL);
  EXPECT_NE(report->device_plane_detail().find("no-such-hccn_tool"), std::string::npos);
  ASSERT_EQ(report->peers_size(), 1);
  EXPECT_EQ(report->peers(0).devices_size(), 0) << "not probed is never healthy: no result is made up";
}

TEST_F(PingmeshWorkerDevices, APlanWithABadPortAddressIsRefused) {
  PingmeshWorker worker(nullptr, nullptr);
  v1::ProbePlan plan;
  plan.set_attempts(1);
  plan.mutable_timeout()->set_nanos(100'000'000);
  v1::ProbeTarget* t = plan.add_targets();
  t->set_node("peer");
  t->set_address("127.0.0.1");
  t->set_port(1);
  t->add_devices()->set_address("not-an-ip");
  EXPECT_EQ(worker.Submit(plan).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace clusterd::noded
