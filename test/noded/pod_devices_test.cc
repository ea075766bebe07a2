// MapPodDevices: the kubelet's device ids onto the node's devices.
#include "noded/collectors/pod_devices.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace clusterd::noded {
namespace {

std::vector<DeviceInfo> Gpus(int n) {
  std::vector<DeviceInfo> out;
  for (int i = 0; i < n; ++i) {
    DeviceInfo d;
    d.id = i;
    d.vendor = "nvidia";
    d.kubelet_ids = {"GPU-aaaa-" + std::to_string(i)};
    out.push_back(d);
  }
  return out;
}

KubeletPod Pod(std::string ns, std::string name, std::string resource, std::vector<std::string> ids) {
  KubeletPod p;
  p.ns = std::move(ns);
  p.name = std::move(name);
  p.devices.push_back({std::move(resource), std::move(ids)});
  return p;
}

TEST(PodDevices, UuidsIndexesAndAscendNamesMapOntoDeviceIds) {
  const auto devices = Gpus(8);
  std::vector<KubeletPod> pods = {
      Pod("train", "llm-1", "nvidia.com/gpu", {"GPU-aaaa-7", "GPU-aaaa-5"}),
      Pod("train", "llm-0", "nvidia.com/gpu", {"2", "0"}),
      Pod("infer", "npu-0", "huawei.com/Ascend910", {"Ascend910-3", "Ascend910-4"}),
  };
  auto r = MapPodDevices(pods, devices);
  ASSERT_EQ(r.pods.size(), 3u);
  EXPECT_EQ(r.pods[0], (PodDevices{"infer", "npu-0", {3, 4}}));
  EXPECT_EQ(r.pods[1], (PodDevices{"train", "llm-0", {0, 2}}));
  EXPECT_EQ(r.pods[2], (PodDevices{"train", "llm-1", {5, 7}}));
  EXPECT_EQ(r.unmapped_ids, 0u);
  EXPECT_EQ(r.pods_left_out, 0u);
  EXPECT_TRUE(r.first_unmapped.empty());
}

TEST(PodDevices, ContainersAddUpAndOtherResourcesAreNotAccelerators) {
  const auto devices = Gpus(4);
  KubeletPod p = Pod("ns", "p", "nvidia.com/gpu", {"GPU-aaaa-1"});
  p.devices.push_back({"nvidia.com/gpu", {"GPU-aaaa-3"}});          // a second container
  p.devices.push_back({"example.com/fpga", {"fpga-0", "weird"}});   // not an accelerator: ignored
  p.devices.push_back({"nvidia.com/mig-1g.10gb", {"GPU-aaaa-1"}});  // prefix match; same GPU once
  auto r = MapPodDevices(std::vector<KubeletPod>{p, Pod("ns", "cpu-only", "example.com/fpga", {"fpga-1"})}, devices);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.pods[0].device_ids, (std::vector<uint32_t>{1, 3}));
  EXPECT_EQ(r.unmapped_ids, 0u);
}

TEST(PodDevices, AnIdNamingNoDeviceLeavesItsWholePodOut) {
  const auto devices = Gpus(8);
  std::vector<KubeletPod> pods = {
      Pod("train", "a", "nvidia.com/gpu", {"GPU-aaaa-1", "MIG-unknown-uuid"}),
      Pod("train", "b", "nvidia.com/gpu", {"8"}),                         // no device 8 on this node
      Pod("train", "c", "huawei.com/Ascend910", {"Ascend910-2c-100-0"}),  // a vNPU: not a chip id
      Pod("train", "d", "nvidia.com/gpu", {"-1", "", "99999999999999999999", "GPU-aaaa-1 "}),
      Pod("train", "e", "nvidia.com/gpu", {"GPU-aaaa-6"}),
  };
  auto r = MapPodDevices(pods, devices);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.pods[0], (PodDevices{"train", "e", {6}}));
  EXPECT_EQ(r.unmapped_ids, 7u);
  EXPECT_EQ(r.pods_left_out, 4u);
  EXPECT_EQ(r.first_unmapped, "nvidia.com/gpu MIG-unknown-uuid of pod train/a");
}

TEST(PodDevices, NamesClusterDWouldRefuseAndPodsListedTwiceAreLeftOut) {
  const auto devices = Gpus(4);
  std::vector<KubeletPod> pods = {
      Pod("train", "twice", "nvidia.com/gpu", {"0"}),
      Pod("train", "twice", "nvidia.com/gpu", {"1"}),
      Pod("train", "twice", "nvidia.com/gpu", {"2"}),
      Pod("bad ns", "p", "nvidia.com/gpu", {"3"}),
      Pod(std::string(64, 'n'), "p", "nvidia.com/gpu", {"3"}),
      Pod("train", std::string(254, 'p'), "nvidia.com/gpu", {"3"}),
      Pod("train", "ok", "nvidia.com/gpu", {"3"}),
  };
  auto r = MapPodDevices(pods, devices);
  ASSERT_EQ(r.pods.size(), 1u);
  EXPECT_EQ(r.pods[0].name, "ok");
  EXPECT_EQ(r.pods_left_out, 4u);
}

TEST(PodDevices, BoundedByClusterDsLimits) {
  const auto devices = Gpus(8);
  std::vector<KubeletPod> pods;
  for (int i = 0; i < 20; ++i) pods.push_back(Pod("ns", "p" + std::to_string(100 + i), "nvidia.com/gpu", {"0", "1"}));
  PodDevicesOptions o;
  o.max_pods = 5;
  auto r = MapPodDevices(pods, devices, o);
  EXPECT_EQ(r.pods.size(), 5u);
  EXPECT_EQ(r.pods_left_out, 15u);
  EXPECT_EQ(r.pods.front().name, "p100");
  o.max_pods = 100;
  o.max_ids = 7;
  r = MapPodDevices(pods, devices, o);
  EXPECT_EQ(r.pods.size(), 3u);
  EXPECT_EQ(r.pods_left_out, 17u);
}

TEST(PodDevices, NoDevicesMeansNothingMaps) {
  auto r = MapPodDevices(std::vector<KubeletPod>{Pod("ns", "p", "nvidia.com/gpu", {"0"})}, {});
  EXPECT_TRUE(r.pods.empty());
  EXPECT_EQ(r.unmapped_ids, 1u);
  EXPECT_EQ(r.pods_left_out, 1u);
}

}  // namespace
}  // namespace clusterd::noded
