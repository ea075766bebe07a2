// The store's key codec (clusterd/storage/key_codec.h): the decoders get bytes
// from clients (page tokens are hex of keys) and from the disk; the encoders
// get names and codes that clients chose. Checks the properties the store
// relies on: decoders accept exactly what the encoders produce and round-trip,
// integers keep their order as bytes, and a node's device and fault keys stay
// inside [NodePrefix, NodePrefixEnd) for any node name without a 0x00 byte.
#include <cstring>

#include "clusterd/storage/key_codec.h"
#include "fuzz_util.h"

using namespace clusterd;
using namespace clusterd::storage;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

namespace {
uint64_t U64At(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in = fuzz::AsView(data, size);

  // Decoders of client and disk bytes.
  if (auto bytes = HexDecode(in)) {
    FUZZ_CHECK(bytes->size() * 2 == in.size());
    FUZZ_CHECK(HexEncode(*bytes) == in);  // only lowercase hex is accepted
  }
  FUZZ_CHECK(HexDecode(HexEncode(in)) == std::string(in));
  if (auto v = DecodeU64(in)) {
    FUZZ_CHECK(EventKey(*v) == in);
  } else {
    FUZZ_CHECK(in.size() != 8);
  }

  // Integer order is byte order.
  if (size >= 16) {
    const uint64_t a = U64At(data), b = U64At(data + 8);
    FUZZ_CHECK((a < b) == (EventKey(a) < EventKey(b)));
    FUZZ_CHECK(DecodeU64(EventKey(a)) == a);
    std::string ka, kb;
    AppendU32(&ka, static_cast<uint32_t>(a));
    AppendU32(&kb, static_cast<uint32_t>(b));
    FUZZ_CHECK((static_cast<uint32_t>(a) < static_cast<uint32_t>(b)) == (ka < kb));
  }

  // Encoders over client-chosen strings: node | 0x00 | rest.
  if (size >= 6) {
    const uint8_t node_len = data[0] % 32;
    const uint32_t device = static_cast<uint32_t>(data[1]) << 8 | data[2];
    const bool has_device = data[3] & 1;
    const auto source = static_cast<v1::FaultSource>(data[4] % 12);  // known and unknown values
    std::string_view rest = in.substr(5);
    std::string node(rest.substr(0, std::min<size_t>(node_len, rest.size())));
    const std::string_view disc = rest.substr(node.size());
    if (node.find('\0') == std::string::npos) {
      const std::string prefix = NodePrefix(node), end = NodePrefixEnd(node);
      FUZZ_CHECK(prefix < end);
      const std::string dk = DeviceKey(node, device);
      FUZZ_CHECK(dk.compare(0, prefix.size(), prefix) == 0 && dk < end);
      const std::string fk = FaultKey(node, has_device ? std::optional<uint32_t>(device) : std::nullopt, source, disc);
      FUZZ_CHECK(fk.compare(0, prefix.size(), prefix) == 0 && fk < end);
      v1::Fault f;
      f.set_node(node);
      if (has_device) f.set_device_id(device);
      f.set_source(source);
      f.set_code(std::string(disc));
      f.set_reporter(std::string(disc));
      f.set_external_id(node);
      const std::string key = FaultKeyOf(f);
      FUZZ_CHECK(key.compare(0, prefix.size(), prefix) == 0 && key < end);
      const std::string id = FaultIdOf(f);
      FUZZ_CHECK(id.compare(0, node.size() + 1, node + "/") == 0);
    }
  }
  return 0;
}
