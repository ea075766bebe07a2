// The throw-away CA, certificates and token file of the tests that need
// identities (docs/security.md), made by test/security/make_certs.sh with
// openssl at test time (nothing is committed).
#pragma once

#include <string>

#include "test/support/temp_dir.h"

namespace clusterd::testing {

// Writes the PKI (ca.crt, server.crt, viewer.crt/.key, other-ca.crt,
// token-viewer, ...) into dir. False when the script failed.
bool MakeTestCerts(const std::string& dir);

// The whole content of a file ("" if it cannot be read).
std::string ReadWholeFile(const std::string& path);

// The PKI made once per test binary, on first use, in a directory of its own.
class TestCerts {
 public:
  static const TestCerts& Get();

  // The path of one of make_certs.sh's files ("ca.crt", "viewer.key", ...).
  std::string Path(const std::string& name) const { return dir_.Sub(name); }
  const std::string& dir() const { return dir_.path(); }
  // The bearer token of make_certs.sh's NAME ("viewer" is user alice,
  // "operator" bob, ...).
  std::string Token(const std::string& who) const;
  // False when make_certs.sh failed: assert it before using the files.
  bool ok() const { return ok_; }

 private:
  TestCerts();
  TempDir dir_;
  bool ok_ = false;
};

}  // namespace clusterd::testing
