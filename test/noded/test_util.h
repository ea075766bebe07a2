// Helpers for NodeD tests: the fixtures directory, the shared temporary
// directory (test/support/temp_dir.h) under the name the suites use, and the
// fake vendor libraries' handles.
#pragma once

#include <dlfcn.h>

#include <string>

#include <gtest/gtest.h>

#include "test/support/temp_dir.h"

namespace clusterd::noded::testing {

inline std::string FixtureDir(const std::string& name) { return std::string(NODED_FIXTURES_DIR) + "/" + name; }

using clusterd::testing::TempDir;

// A fake vendor library (test/noded/fake_dcmi, fake_nvml) loaded as the
// backend loads it: dlopen of one path returns one shared object, so the
// scripting functions resolved here share the backend's state.
// `close_at_end`: dlclose it when done (not where a backend's threads may
// still be on their way out of it).
class FakeLibrary {
 public:
  FakeLibrary(const char* path, bool close_at_end) : close_(close_at_end) {
    handle_ = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) ADD_FAILURE() << "cannot load the fake " << path << ": " << dlerror();
  }
  ~FakeLibrary() {
    if (handle_ != nullptr && close_) dlclose(handle_);
  }
  FakeLibrary(const FakeLibrary&) = delete;
  FakeLibrary& operator=(const FakeLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  // The function `name` (null, and a test failure, when it is missing).
  template <typename F>
  F Sym(const char* name) const {
    if (handle_ == nullptr) return nullptr;
    auto f = reinterpret_cast<F>(dlsym(handle_, name));
    if (f == nullptr) ADD_FAILURE() << "fake lacks " << name;
    return f;
  }

 private:
  void* handle_ = nullptr;
  bool close_;
};

}  // namespace clusterd::noded::testing
