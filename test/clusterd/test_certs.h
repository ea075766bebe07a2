// The throw-away CA, certificates and token file of the tests that need
// identities (docs/security.md), made once per test binary by
// test/security/make_certs.sh with openssl: its target defines
// CLUSTERD_MAKE_CERTS (the script's path).
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

#include "test_util.h"

namespace clusterd::testing {

class TestCerts {
 public:
  static const TestCerts& Get() {
    static TestCerts* certs = new TestCerts();
    return *certs;
  }
  std::string Path(const std::string& name) const { return dir_.Sub(name); }
  // The bearer token of make_certs.sh's NAME ("viewer" is user alice,
  // "operator" bob, ...).
  std::string Token(const std::string& who) const {
    std::ifstream in(Path("token-" + who));
    std::string t;
    std::getline(in, t);
    return t;
  }
  bool ok() const { return ok_; }

 private:
  TestCerts() { ok_ = std::system(("bash '" CLUSTERD_MAKE_CERTS "' '" + dir_.path() + "'").c_str()) == 0; }
  TempDir dir_;
  bool ok_ = false;
};

}  // namespace clusterd::testing
