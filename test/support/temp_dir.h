// A fresh directory per test, removed with everything in it when the object
// goes away (never a fixed path: tests run in parallel).
#pragma once

#include <string>

namespace clusterd::testing {

class TempDir {
 public:
  // Makes $TMPDIR/clusterd-test-XXXXXX (mkdtemp; /tmp without TMPDIR). Aborts
  // the test binary if it cannot: nothing a test does could work without it.
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/rel; nothing is created.
  std::string Sub(const std::string& rel) const { return path_ + "/" + rel; }

  // Writes (replaces) path()/rel with `content`, creating the directories on
  // the way; a non-fatal failure if it cannot. Returns the file's path.
  std::string Write(const std::string& rel, const std::string& content) const;
  // Appends to path()/rel (created if missing), as Write does.
  std::string Append(const std::string& rel, const std::string& content) const;
  // Creates path()/rel and its parents; returns its path.
  std::string MakeDir(const std::string& rel) const;

 private:
  std::string path_;
};

}  // namespace clusterd::testing
