#include "test/support/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace clusterd::testing {

bool MakeTestCerts(const std::string& dir) {
  const std::string cmd = std::string("bash '") + CLUSTERD_MAKE_CERTS + "' '" + dir + "'";
  return std::system(cmd.c_str()) == 0;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

const TestCerts& TestCerts::Get() {
  // Made on first use; the directory goes at exit.
  static const TestCerts certs;
  return certs;
}

TestCerts::TestCerts() { ok_ = MakeTestCerts(dir_.path()); }

std::string TestCerts::Token(const std::string& who) const {
  std::ifstream in(Path("token-" + who));
  std::string t;
  std::getline(in, t);
  return t;
}

}  // namespace clusterd::testing
