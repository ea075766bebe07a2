#include "clusterd/storage/key_codec.h"

#include <gtest/gtest.h>

namespace clusterd::storage {
namespace {

std::string Bytes(std::initializer_list<int> bytes) {
  std::string out;
  for (int b : bytes) out.push_back(static_cast<char>(b));
  return out;
}

TEST(KeyCodec, EventKeyIsBigEndianRevision) {
  EXPECT_EQ(EventKey(1), Bytes({0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(EventKey(0x0102030405060708ULL), Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_LT(EventKey(255), EventKey(256));  // byte order is numeric order
  EXPECT_EQ(DecodeU64(EventKey(0xDEADBEEFULL)), 0xDEADBEEFULL);
  EXPECT_FALSE(DecodeU64("short").has_value());
}

TEST(KeyCodec, DeviceKeyGolden) {
  EXPECT_EQ(DeviceKey("n1", 3), Bytes({'n', '1', 0, 0, 0, 0, 3}));
  EXPECT_EQ(DeviceKey("n1", 0x01020304), Bytes({'n', '1', 0, 1, 2, 3, 4}));
  EXPECT_LT(DeviceKey("n1", 9), DeviceKey("n1", 10));
}

TEST(KeyCodec, FaultKeyGolden) {
  EXPECT_EQ(FaultKey("w", 3, ::clusterd::v1::FAULT_SOURCE_ACCELERATOR, "80E01801"),
            Bytes({'w', 0, 1, 0, 0, 0, 3, 5, '8', '0', 'E', '0', '1', '8', '0', '1'}));
  EXPECT_EQ(FaultKey("w", std::nullopt, ::clusterd::v1::FAULT_SOURCE_HEARTBEAT, "X"),
            Bytes({'w', 0, 0, 0, 0, 0, 0, 7, 'X'}));
  // Node-level faults sort before device faults; a node's keys share its prefix
  // and do not interleave with a node whose name extends it.
  EXPECT_LT(FaultKey("w", std::nullopt, ::clusterd::v1::FAULT_SOURCE_DISK, "Z"),
            FaultKey("w", 0, ::clusterd::v1::FAULT_SOURCE_CPU, "A"));
  EXPECT_LT(FaultKey("w", 65535, ::clusterd::v1::FAULT_SOURCE_CPU, "A"),
            FaultKey("w0", std::nullopt, ::clusterd::v1::FAULT_SOURCE_CPU, "A"));
  EXPECT_EQ(FaultKey("w", 1, ::clusterd::v1::FAULT_SOURCE_CPU, "A").rfind(NodePrefix("w"), 0), 0u);
}

TEST(KeyCodec, FaultKeyOfRecordMatchesFaultKey) {
  ::clusterd::v1::Fault f;
  f.set_node("worker01");
  f.set_device_id(3);
  f.set_source(::clusterd::v1::FAULT_SOURCE_EXTERNAL);
  f.set_code("LINK_DOWN");
  f.set_reporter("netprobe");
  f.set_external_id("x1");
  EXPECT_EQ(FaultKeyOf(f), FaultKey("worker01", 3, ::clusterd::v1::FAULT_SOURCE_EXTERNAL, "netprobe/x1"));
  EXPECT_EQ(FaultIdOf(f), "worker01/3/external/netprobe/x1");
  f.clear_device_id();
  f.set_source(::clusterd::v1::FAULT_SOURCE_DISK);
  EXPECT_EQ(FaultIdOf(f), "worker01/-/disk/LINK_DOWN");
  f.set_subject("/data");
  EXPECT_EQ(FaultIdOf(f), "worker01/-/disk/LINK_DOWN@/data");
  EXPECT_EQ(FaultKeyOf(f), FaultKey("worker01", std::nullopt, ::clusterd::v1::FAULT_SOURCE_DISK, "LINK_DOWN@/data"));
}

TEST(KeyCodec, HexRoundTrip) {
  std::string raw = Bytes({0, 1, 0xAB, 0xFF, 'z'});
  EXPECT_EQ(HexEncode(raw), "0001abff7a");
  EXPECT_EQ(HexDecode("0001abff7a"), raw);
  EXPECT_FALSE(HexDecode("abc").has_value());
  EXPECT_FALSE(HexDecode("zz").has_value());
}

}  // namespace
}  // namespace clusterd::storage
