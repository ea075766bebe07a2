#include "common/token_file.h"

#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace clusterd {

std::string WatchedTokenFile::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return cached_;  // keep the last one while it is being replaced
  const auto mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (mtime != mtime_ || cached_.empty()) {
    std::ifstream in(path_);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string t = buf.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    if (!t.empty()) {
      cached_ = std::move(t);
      mtime_ = mtime;
    }
  }
  return cached_;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string_view BearerToken(std::string_view authorization) {
  constexpr std::string_view kBearer = "bearer ";
  if (authorization.size() <= kBearer.size()) return {};
  for (size_t i = 0; i < kBearer.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kBearer[i]) return {};
  }
  return authorization.substr(kBearer.size());
}

}  // namespace clusterd
