// Key encoding for the store. Integers are fixed-width big-endian so that the
// byte order of keys is their numeric order; strings that lead a key end with
// a 0x00 byte (node names are validated never to contain one), so a node's
// devices and faults are one contiguous prefix range.
// Golden-byte tests (test/clusterd/storage/key_codec_test.cc) pin the format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "clusterd/v1/types.pb.h"

namespace clusterd::storage {

void AppendU32(std::string* out, uint32_t v);
void AppendU64(std::string* out, uint64_t v);
std::optional<uint64_t> DecodeU64(std::string_view in);

// events: 8 bytes, the revision.
std::string EventKey(uint64_t revision);
// nodes: the name itself.
std::string NodeKey(std::string_view node);
// devices: node 0x00 id(u32).
std::string DeviceKey(std::string_view node, uint32_t device_id);
// jobs: the job id itself.
std::string JobKey(std::string_view job_id);
// Recoveries CF: the recovery id ("<job id>.<n>").
std::string RecoveryKey(std::string_view recovery_id);
// Prefix of every device and fault key of a node: node 0x00.
std::string NodePrefix(std::string_view node);
// The first key after every key that starts with NodePrefix(node): node 0x01.
std::string NodePrefixEnd(std::string_view node);

// faults: node 0x00 | scope u8 (0 node-level, 1 device) | device id u32 (0
// when node-level) | source u8 | discriminator. The discriminator is the code
// for agent faults ("code@subject" when there is a subject) and
// "reporter/external_id" for external ones.
std::string FaultKey(std::string_view node, std::optional<uint32_t> device_id, ::clusterd::v1::FaultSource source,
                     std::string_view discriminator);
// Discriminator of an agent fault: the code, or "code@subject".
std::string AgentDiscriminator(std::string_view code, std::string_view subject);
// The same key for a stored fault record.
std::string FaultKeyOf(const ::clusterd::v1::Fault& fault);

// Readable stable id of a fault: "node/device-or-dash/source/discriminator".
std::string FaultIdOf(const ::clusterd::v1::Fault& fault);

// Lowercase hex, for opaque page tokens.
std::string HexEncode(std::string_view bytes);
std::optional<std::string> HexDecode(std::string_view hex);

}  // namespace clusterd::storage
