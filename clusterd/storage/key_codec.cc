#include "clusterd/storage/key_codec.h"

#include "common/levels.h"

namespace clusterd::storage {

void AppendU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xFF));
}

void AppendU64(std::string* out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8) out->push_back(static_cast<char>((v >> shift) & 0xFF));
}

std::optional<uint64_t> DecodeU64(std::string_view in) {
  if (in.size() != 8) return std::nullopt;
  uint64_t v = 0;
  for (char c : in) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

std::string EventKey(uint64_t revision) {
  std::string key;
  AppendU64(&key, revision);
  return key;
}

std::string NodeKey(std::string_view node) { return std::string(node); }

std::string JobKey(std::string_view job_id) { return std::string(job_id); }

std::string RecoveryKey(std::string_view recovery_id) { return std::string(recovery_id); }

std::string NodePrefix(std::string_view node) {
  std::string key(node);
  key.push_back('\0');
  return key;
}

std::string NodePrefixEnd(std::string_view node) {
  std::string key(node);
  key.push_back('\x01');
  return key;
}

std::string DeviceKey(std::string_view node, uint32_t device_id) {
  std::string key = NodePrefix(node);
  AppendU32(&key, device_id);
  return key;
}

std::string FaultKey(std::string_view node, std::optional<uint32_t> device_id, ::clusterd::v1::FaultSource source,
                     std::string_view discriminator) {
  std::string key = NodePrefix(node);
  key.push_back(device_id ? '\x01' : '\x00');
  AppendU32(&key, device_id.value_or(0));
  key.push_back(static_cast<char>(static_cast<uint8_t>(source)));
  key.append(discriminator);
  return key;
}

std::string AgentDiscriminator(std::string_view code, std::string_view subject) {
  std::string d(code);
  if (!subject.empty()) {
    d += '@';
    d += subject;
  }
  return d;
}

namespace {
std::string Discriminator(const ::clusterd::v1::Fault& f) {
  return f.source() == ::clusterd::v1::FAULT_SOURCE_EXTERNAL ? f.reporter() + "/" + f.external_id()
                                                             : AgentDiscriminator(f.code(), f.subject());
}
std::optional<uint32_t> DeviceOf(const ::clusterd::v1::Fault& f) {
  return f.has_device_id() ? std::optional<uint32_t>(f.device_id()) : std::nullopt;
}
}  // namespace

std::string FaultKeyOf(const ::clusterd::v1::Fault& fault) {
  return FaultKey(fault.node(), DeviceOf(fault), fault.source(), Discriminator(fault));
}

std::string FaultIdOf(const ::clusterd::v1::Fault& fault) {
  std::string id = fault.node();
  id += '/';
  id += fault.has_device_id() ? std::to_string(fault.device_id()) : "-";
  id += '/';
  id += ShortSourceName(fault.source());
  id += '/';
  id += Discriminator(fault);
  return id;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 0xF]);
  }
  return out;
}

std::optional<std::string> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>((hi << 4) | lo));
  }
  return out;
}

}  // namespace clusterd::storage
