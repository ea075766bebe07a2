// The software-chain probes on trees built per test: each broken link
// alone, all healthy, not an Ascend node, and hostile trees (an oversized
// config, binary garbage, a symlink loop); RKE2, plain containerd and Docker.
#include "noded/collectors/chain.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace clusterd::noded {
namespace {

class ChainTest : public ::testing::Test {
 protected:
  // A healthy Ascend node of 8 chips: driver, device files, CANN, containerd
  // configured for the Ascend Docker Runtime, the device plugin registered.
  void Healthy() {
    dir_.Write("usr/local/Ascend/driver/version.info", "Version=24.1.rc3\nascendhal_version=7.35.23\n");
    dir_.Write("usr/local/Ascend/firmware/version.info", "Version=7.5.0.3.220\n");
    dir_.Write("dev/null", "");
    dir_.Write("dev/davinci_manager", "");
    for (int i = 0; i < 8; ++i) dir_.Write("dev/davinci" + std::to_string(i), "");
    dir_.Write("dev/davinci_manager_docker", "");  // not a chip
    dir_.Write("usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
               "package_name=Ascend-cann-toolkit\nversion=8.0.RC3\narch=aarch64\n");
    dir_.Write("etc/containerd/config.toml",
               "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.ascend.options]\n"
               "  BinaryName = \"/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime\"\n");
    dir_.Write("var/lib/kubelet/device-plugins/kubelet.sock", "");
    dir_.Write("var/lib/kubelet/device-plugins/Ascend910.sock", "");
    dir_.Write("proc/sys/kernel/osrelease", "5.10.0-182.0.0.95.oe2203sp3.aarch64\n");
  }

  ChainReading Collect(bool ascend_node = true, uint32_t backend_chips = 8) {
    ChainOptions o;
    o.root = dir_.path();
    return ChainCollector(o).Collect(backend_chips, ascend_node);
  }

  static LinkState StateOf(const ChainReading& r, const std::string& link) {
    const ChainLink* l = r.Find(link);
    EXPECT_NE(l, nullptr) << link;
    return l ? l->state : LinkState::kUnknown;
  }
  static std::vector<std::string> Codes(const ChainReading& r) {
    std::vector<std::string> out;
    for (const auto& l : r.links) {
      if (l.state == LinkState::kBroken) out.push_back(l.code);
    }
    return out;
  }

  testing::TempDir dir_;
};

TEST_F(ChainTest, AHealthyNodeHasEveryLinkOkAndItsVersions) {
  Healthy();
  ChainReading r = Collect();
  ASSERT_EQ(r.links.size(), 8u);
  for (const auto& l : r.links) {
    if (l.name != "cann") {
      EXPECT_EQ(l.state, LinkState::kOk) << l.name << ": " << l.evidence;
    }
    EXPECT_TRUE(l.code.empty()) << l.name;
  }
  EXPECT_EQ(r.Find("driver")->version, "24.1.rc3");
  EXPECT_EQ(r.Find("firmware")->version, "7.5.0.3.220");
  EXPECT_EQ(r.Find("cann")->state, LinkState::kOk);
  EXPECT_EQ(r.Find("cann")->version, "8.0.RC3");
  EXPECT_EQ(r.Find("kernel")->version, "5.10.0-182.0.0.95.oe2203sp3.aarch64");
  EXPECT_NE(r.Find("chips")->evidence.find("8 of 8"), std::string::npos) << r.Find("chips")->evidence;
  EXPECT_NE(r.Find("device_plugin")->evidence.find("Ascend910.sock"), std::string::npos);
}

// The firmware package is read, never judged on the node: missing or
// without a version it is unknown and raises nothing (ClusterD judges the
// driver/firmware pair against its catalog).
TEST_F(ChainTest, FirmwareIsUnknownWhenMissingAndNeverBroken) {
  Healthy();
  std::filesystem::remove(dir_.Sub("usr/local/Ascend/firmware/version.info"));
  ChainReading r = Collect();
  EXPECT_EQ(StateOf(r, "firmware"), LinkState::kUnknown);
  EXPECT_NE(r.Find("firmware")->evidence.find("no "), std::string::npos) << r.Find("firmware")->evidence;
  EXPECT_TRUE(Codes(r).empty());
  dir_.Write("usr/local/Ascend/firmware/version.info", "firmware package\n");
  r = Collect();
  EXPECT_EQ(StateOf(r, "firmware"), LinkState::kUnknown);
  EXPECT_NE(r.Find("firmware")->evidence.find("no Version= line"), std::string::npos);
  EXPECT_TRUE(Codes(r).empty());
}

TEST_F(ChainTest, EachBrokenLinkAloneRaisesItsOwnCode) {
  struct Case {
    std::string name;
    std::function<void(const testing::TempDir&)> breaks;
    std::string link, code;
  };
  const std::vector<Case> cases = {
      {"driver not installed",
       [](const auto& d) { std::filesystem::remove(d.Sub("usr/local/Ascend/driver/version.info")); }, "driver",
       kChainDriverMissing},
      {"driver not loaded", [](const auto& d) { std::filesystem::remove(d.Sub("dev/davinci_manager")); },
       "device_files", kChainDriverNotLoaded},
      {"a chip gone", [](const auto& d) { std::filesystem::remove(d.Sub("dev/davinci5")); }, "chips",
       kChainChipsMissing},
      {"runtime not configured", [](const auto& d) { d.Write("etc/containerd/config.toml", "version = 2\n"); },
       "runtime", kChainRuntimeNotConfigured},
      {"plugin not registered",
       [](const auto& d) { std::filesystem::remove(d.Sub("var/lib/kubelet/device-plugins/Ascend910.sock")); },
       "device_plugin", kChainDevicePluginNotRegistered},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::filesystem::remove_all(dir_.path());
    std::filesystem::create_directories(dir_.path());
    Healthy();
    c.breaks(dir_);
    ChainReading r = Collect();
    EXPECT_EQ(StateOf(r, c.link), LinkState::kBroken) << r.Find(c.link)->evidence;
    // A missing driver also leaves the chips undecided; nothing else breaks.
    EXPECT_EQ(Codes(r), std::vector<std::string>{c.code});
  }
}

TEST_F(ChainTest, WithoutAscendNothingIsAFault) {
  // A CPU node (the backend is not Ascend's, no driver): every link unknown
  // or ok, no code, whatever else is there.
  dir_.Write("dev/null", "");
  dir_.Write("etc/containerd/config.toml", "version = 2\n");
  dir_.Write("var/lib/kubelet/device-plugins/kubelet.sock", "");
  ChainReading r = Collect(/*ascend_node=*/false, /*backend_chips=*/0);
  EXPECT_TRUE(Codes(r).empty());
  EXPECT_EQ(StateOf(r, "driver"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "runtime"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "device_plugin"), LinkState::kUnknown);
  // The same node with the Ascend backend configured: its driver is missing.
  r = Collect(/*ascend_node=*/true, 0);
  EXPECT_EQ(Codes(r), (std::vector<std::string>{kChainDriverMissing, kChainDriverNotLoaded, kChainRuntimeNotConfigured,
                                                kChainDevicePluginNotRegistered}));
}

TEST_F(ChainTest, WhatNodeDCannotSeeIsUnknownNotBroken) {
  Healthy();
  // /dev not mounted into the container (no null), no kubelet directory, no
  // runtime configuration: unknown, not "driver not loaded".
  std::filesystem::remove_all(dir_.Sub("dev"));
  std::filesystem::create_directories(dir_.Sub("dev"));
  std::filesystem::remove_all(dir_.Sub("var/lib/kubelet"));
  std::filesystem::remove_all(dir_.Sub("etc"));
  ChainReading r = Collect();
  EXPECT_TRUE(Codes(r).empty());
  EXPECT_EQ(StateOf(r, "device_files"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "chips"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "runtime"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "device_plugin"), LinkState::kUnknown);
}

TEST_F(ChainTest, RuntimeLayoutsOfRke2ContainerdDropInsAndDocker) {
  Healthy();
  std::filesystem::remove(dir_.Sub("etc/containerd/config.toml"));
  // RKE2: its generated config without the runtime, a v3 drop-in with it.
  dir_.Write("var/lib/rancher/rke2/agent/etc/containerd/config.toml", "version = 3\n");
  dir_.Write("var/lib/rancher/rke2/agent/etc/containerd/config-v3.toml.d/ascend.toml",
             "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.ascend.options]\n"
             "BinaryName = '/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime'\n");
  ChainReading r = Collect();
  EXPECT_EQ(StateOf(r, "runtime"), LinkState::kOk);
  EXPECT_NE(r.Find("runtime")->evidence.find("config-v3.toml.d/ascend.toml"), std::string::npos);
  // Docker alone.
  std::filesystem::remove_all(dir_.Sub("var/lib/rancher"));
  dir_.Write("etc/docker/daemon.json",
             R"({"runtimes": {"ascend": {"path": "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime"}}})");
  EXPECT_EQ(StateOf(Collect(), "runtime"), LinkState::kOk);
  dir_.Write("etc/docker/daemon.json", R"({"runtimes": {}})");
  EXPECT_EQ(StateOf(Collect(), "runtime"), LinkState::kBroken);
}

TEST_F(ChainTest, CannVersionsFromEveryLayout) {
  Healthy();
  dir_.Write("usr/local/Ascend/ascend-toolkit/8.0.RC2/x86_64-linux/ascend_toolkit_install.info", "version=8.0.RC2\n");
  dir_.Write("usr/local/Ascend/cann-8.5.0/aarch64-linux/ascend_toolkit_install.info", "version=8.5.0\n");
  dir_.Write("usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info", "version=\"8.5.0\"\n");
  ChainReading r = Collect();
  EXPECT_EQ(r.Find("cann")->version, "8.0.RC2,8.0.RC3,8.5.0");
}

TEST_F(ChainTest, HostileFilesAreUnknownAndBounded) {
  Healthy();
  // A 1 GiB config.toml (sparse: it costs nothing to make) is not read: the
  // runtime cannot be decided from it, so it is unknown, not broken.
  const std::string big = dir_.Sub("etc/containerd/config.toml");
  ASSERT_EQ(truncate(big.c_str(), 1LL << 30), 0);
  ChainReading r = Collect();
  EXPECT_EQ(StateOf(r, "runtime"), LinkState::kUnknown);
  EXPECT_NE(r.Find("runtime")->evidence.find("not read"), std::string::npos) << r.Find("runtime")->evidence;
  // Binary garbage and a symlink loop where version files are: no version,
  // no fault, nothing but printable text sent.
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) garbage[i] = static_cast<char>((i * 131 + 7) % 256);
  dir_.Write("usr/local/Ascend/driver/version.info", "Version=\x01\xff\xfe" + garbage);
  dir_.Write("usr/local/Ascend/firmware/version.info", garbage + "\nVersion=" + garbage);
  std::filesystem::remove(dir_.Sub("usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"));
  std::filesystem::create_symlink("loop", dir_.Sub("usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/loop"));
  std::filesystem::create_symlink(
      "loop", dir_.Sub("usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"));
  dir_.Write("etc/containerd/config.toml", garbage + "ascend-docker-runtime");
  r = Collect();
  for (const auto& l : r.links) {
    EXPECT_LE(l.version.size(), 128u) << l.name;
    EXPECT_LE(l.evidence.size(), 400u) << l.name;
    for (char c : l.version + l.evidence) EXPECT_FALSE(c >= 0 && c < 0x20) << l.name;
  }
  EXPECT_EQ(StateOf(r, "cann"), LinkState::kUnknown);
  EXPECT_EQ(StateOf(r, "runtime"), LinkState::kOk);  // it does name the runtime
}

}  // namespace
}  // namespace clusterd::noded
