// Helpers for NodeD tests: a unique temporary directory per test and file writing.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace clusterd::noded::testing {

inline std::string FixtureDir(const std::string& name) { return std::string(NODED_FIXTURES_DIR) + "/" + name; }

// A fresh directory under $TMPDIR, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/noded-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

  // Writes (or replaces) root-relative `rel` with `content`, creating directories.
  void Write(const std::string& rel, const std::string& content, bool append = false) const {
    std::filesystem::path p = std::filesystem::path(path_) / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, append ? std::ios::app : std::ios::trunc);
    out << content;
  }
  void Append(const std::string& rel, const std::string& content) const { Write(rel, content, true); }
  void MakeDir(const std::string& rel) const {
    std::filesystem::create_directories(std::filesystem::path(path_) / rel);
  }

 private:
  std::string path_;
};

}  // namespace clusterd::noded::testing
