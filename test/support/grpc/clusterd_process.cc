#include "test/support/grpc/clusterd_process.h"

#include <chrono>

#include <gtest/gtest.h>

#include "common/free_port.h"
#include "test/support/grpc/agent_client.h"
#include "test/support/http_get.h"
#include "test/support/wait.h"

namespace clusterd::testing {

void ClusterdProcess::Start() {
  grpc_port_ = FreeLoopbackPort();
  http_port_ = FreeLoopbackPort();
  const std::string bin = BinaryPath("clusterd");
  std::vector<std::string> argv;
  if (!options_.ulimit.empty()) {
    // $0 and $@ are the binary and its flags: exec keeps the pid.
    argv = {"/bin/sh", "-c", "ulimit " + options_.ulimit + " && exec \"$0\" \"$@\""};
  }
  argv.insert(argv.end(), {bin, "--listen=127.0.0.1:" + std::to_string(grpc_port_), "--insecure",
                           "--http-listen=127.0.0.1:" + std::to_string(http_port_), "--data-dir=" + options_.data_dir,
                           "--log-level=warn", "--shutdown-grace=0s"});
  argv.insert(argv.end(), options_.flags.begin(), options_.flags.end());
  ASSERT_TRUE(process_.Start(argv)) << process_.error();
  channel_ = Dial(grpc_port_);
  ASSERT_TRUE(channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30)))
      << "clusterd did not come up on " << options_.data_dir;
  if (options_.wait_ready) {
    ASSERT_TRUE(WaitFor([&] { return HttpGet(http_port_, "/readyz").status == 200; }));
  }
}

}  // namespace clusterd::testing
