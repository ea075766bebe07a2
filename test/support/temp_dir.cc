#include "test/support/temp_dir.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <gtest/gtest.h>

namespace clusterd::testing {
namespace {

std::string WriteFile(const std::string& root, const std::string& rel, const std::string& content,
                      std::ios::openmode mode) {
  const std::filesystem::path p = std::filesystem::path(root) / rel;
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  std::ofstream out(p, std::ios::binary | mode);
  out << content;
  out.close();
  EXPECT_TRUE(out.good()) << "cannot write " << p;
  return p.string();
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "clusterd-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror(("mkdtemp " + tmpl).c_str());
    std::abort();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::Write(const std::string& rel, const std::string& content) const {
  return WriteFile(path_, rel, content, std::ios::trunc);
}

std::string TempDir::Append(const std::string& rel, const std::string& content) const {
  return WriteFile(path_, rel, content, std::ios::app);
}

std::string TempDir::MakeDir(const std::string& rel) const {
  std::string p = Sub(rel);
  std::filesystem::create_directories(p);
  return p;
}

}  // namespace clusterd::testing
