// NodeD's outbox log reader (noded/outbox.h, Outbox::Open -> Replay): the bytes
// of a state dir's outbox.log after a crash, a full disk or a bad disk. Anything
// must open (a torn tail truncated away) or fail with DataLoss, never crash; and
// whatever an Open accepted, a second Open must read back the same (pending
// transitions and active faults), one epoch later.
//
// Input: byte 0 is flags, byte 1..8 an epoch, the rest the log.
//   flags bit 0: the rest is the whole file, as is (raw; seeds are real logs).
//                Otherwise it is a list of records, each
//                type:u8 len:u8 payload[len], written after the magic with valid
//                checksums, so that the fuzzer reaches the payload parsers.
//   flags bit 1: write the epoch file (the decimal of bytes 1..8).
#include <array>
#include <cstring>
#include <filesystem>

#include "fuzz_util.h"
#include "noded/outbox.h"

using namespace clusterd;
using namespace clusterd::noded;

namespace {

uint32_t Crc32c(const void* data, size_t n) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

// magic + records with valid checksums (the format in outbox.h).
std::string Structured(std::string_view in) {
  std::string log = "NDOUTBX1";
  size_t i = 0;
  while (i + 2 <= in.size()) {
    const uint8_t type = static_cast<uint8_t>(in[i]) % 5;  // 1..3 are known; 0 and 4 are not
    const size_t len = std::min<size_t>(static_cast<uint8_t>(in[i + 1]), in.size() - i - 2);
    const std::string_view payload = in.substr(i + 2, len);
    std::string header;
    PutU32(&header, static_cast<uint32_t>(len));
    header.push_back(static_cast<char>(type));
    header.append(3, '\0');
    PutU32(&header, Crc32c(header.data(), 8));
    PutU32(&header, Crc32c(payload.data(), payload.size()));
    log += header;
    log += payload;
    i += 2 + len;
  }
  return log;
}

struct Seen {
  std::vector<std::string> pending, active;
  bool operator==(const Seen&) const = default;
};

Seen Read(const Outbox& box) {
  Seen s;
  const Outbox::Snapshot snap = box.Take();
  for (const auto& p : snap.pending) {
    FUZZ_CHECK(p.transition.id().epoch() == p.epoch && p.transition.id().seq() == p.seq);
    s.pending.push_back(p.transition.SerializeAsString());
  }
  for (const auto& f : snap.active) s.active.push_back(f.SerializeAsString());
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  static const std::string dir = fuzz::TempDir() + "/state";
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  // A fixed incarnation: Open would otherwise make a random one every run.
  fuzz::WriteFile(dir + "/instance", "0123456789abcdef0123456789abcdef\n");
  const uint8_t flags = data[0];
  if (flags & 2) {
    uint64_t epoch;
    std::memcpy(&epoch, data + 1, 8);
    fuzz::WriteFile(dir + "/epoch", std::to_string(epoch) + "\n");
  }
  const std::string_view rest = fuzz::AsView(data + 9, size - 9);
  fuzz::WriteFile(dir + "/outbox.log", (flags & 1) ? std::string(rest) : Structured(rest));

  Outbox::Options options;
  options.compact_after_records = 8;  // let small inputs reach compaction too
  Seen first;
  uint64_t epoch = 0;
  {
    auto box = Outbox::Open(dir, options);
    if (!box.ok()) {
      FUZZ_CHECK(box.status().code() == StatusCode::kDataLoss);
      return 0;
    }
    first = Read(**box);
    epoch = (*box)->epoch();
  }
  auto again = Outbox::Open(dir, options);
  if (epoch == UINT64_MAX) {  // the last epoch there is: the next start must refuse
    FUZZ_CHECK(!again.ok() && again.status().code() == StatusCode::kDataLoss);
    return 0;
  }
  if (!again.ok()) {
    std::fprintf(stderr, "second Open failed: %s\n", again.status().ToString().c_str());
    FUZZ_CHECK(again.ok());
  }
  FUZZ_CHECK((*again)->epoch() == epoch + 1);
  FUZZ_CHECK(Read(**again) == first);
  return 0;
}
