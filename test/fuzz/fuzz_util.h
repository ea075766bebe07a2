// Helpers shared by the libFuzzer targets (docs/testing.md).
//
// A target defines LLVMFuzzerTestOneInput and checks, besides "no crash and no
// sanitizer report", the properties the parser promises (FUZZ_CHECK): an error
// is a Status, never an exception; what parses round-trips; and so on.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "common/logging.h"

// Aborts (a crash libFuzzer reports with the input) when cond is false.
#define FUZZ_CHECK(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "FUZZ_CHECK failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace clusterd::fuzz {

// Product code logs a warning for most malformed inputs: at thousands of
// inputs a second that drowns libFuzzer's own output and slows it down.
// Protobuf logs every string field with invalid UTF-8 it parses (the outbox
// target parses many), so its log handler goes too.
inline void QuietLogs() {
  SetLogLevel("off");
  google::protobuf::SetLogHandler(nullptr);
}

// A fresh private directory under $TMPDIR (or /dev/shm when there is one, so
// the targets that write files do not wear a disk), removed at exit.
inline const std::string& TempDir() {
  // A leaked heap string: the atexit handler below reads it after static
  // destructors may have run.
  static const std::string* const dir = [] {
    std::string base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "";
    if (base.empty()) base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string templ = base + "/clusterd-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    return new std::string(templ);
  }();
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*dir, ec);
    });
    return true;
  }();
  (void)cleanup;
  return *dir;
}

inline void WriteFile(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string_view AsView(const uint8_t* data, size_t size) { return {reinterpret_cast<const char*>(data), size}; }

}  // namespace clusterd::fuzz
