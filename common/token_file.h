// A bearer token kept in a file that is replaced in place (a projected
// service-account token the kubelet rotates, a mounted Secret): read again
// whenever the file's modification time changes, the last good token kept
// while the file is missing or empty (it is being replaced). And the
// constant-time comparison a server checks a presented token with.
//
// Thread contract: WatchedTokenFile::Current() is thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

namespace clusterd {

class WatchedTokenFile {
 public:
  explicit WatchedTokenFile(std::string path) : path_(std::move(path)) {}

  // The file's contents without trailing spaces and line ends; "" when it
  // has never been read with a token in it.
  std::string Current() const;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
  mutable std::mutex mu_;
  mutable std::string cached_;  // guarded by mu_
  mutable int64_t mtime_ = -1;  // guarded by mu_
};

// a == b, in time that depends only on their lengths (a presented secret is
// compared with the expected one without telling by timing how much matched).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The token of an "Authorization: Bearer <token>" header (the scheme
// case-insensitive, RFC 7235); "" when the header is not one.
std::string_view BearerToken(std::string_view authorization);

}  // namespace clusterd
