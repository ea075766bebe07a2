// Reads /proc and /sys style files under a configurable root directory, so the
// same collector code runs against the host ("/"), a host mount inside a
// container ("/host") or a fixture tree in tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace clusterd::noded {

// Immutable after construction; safe to share between threads.
class FsRoot {
 public:
  // /proc files are small; a cap keeps a pathological file from costing memory.
  static constexpr size_t kMaxFileBytes = 8 << 20;

  explicit FsRoot(std::string root);

  // `abs` is the path as seen on the host ("/proc/stat"); returns it under the root.
  std::string Path(std::string_view abs) const;

  // Whole file (at most max_bytes: ResourceExhausted past it). NotFound when
  // it does not exist.
  StatusOr<std::string> Read(std::string_view abs, size_t max_bytes = kMaxFileBytes) const;
  // First line of the file without surrounding whitespace; nullopt when unreadable.
  std::optional<std::string> ReadLine(std::string_view abs) const;
  // File holding one unsigned number (decimal, or hex with 0x as sysfs sometimes writes).
  std::optional<uint64_t> ReadUint(std::string_view abs) const;
  // Entry names of a directory, sorted; empty when it does not exist.
  std::vector<std::string> List(std::string_view abs) const;
  bool Exists(std::string_view abs) const;

 private:
  std::string root_;  // without a trailing slash; "" for "/"
};

// Splits on runs of whitespace.
std::vector<std::string_view> SplitWhitespace(std::string_view s);
std::string_view Trim(std::string_view s);
// Parses an unsigned decimal (or 0x hex) number; nullopt on junk.
std::optional<uint64_t> ParseUint(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);
// Decodes the octal escapes (\040 for space ...) used in /proc/mounts and fstab.
std::string UnescapeOctal(std::string_view s);

}  // namespace clusterd::noded
