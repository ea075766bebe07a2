// fake_kubelet SOCKET JSON_FILE: the kubelet's pod-resources API on SOCKET,
// answering List with JSON_FILE as it is at each call (the API's JSON
// mapping: {"podResources": [{"namespace": ..., "name": ..., "containers":
// [{"name": ..., "devices": [{"resourceName": ..., "deviceIds": [...]}]}]}]}).
// Runs until SIGTERM or SIGINT. For the end-to-end tests (test/e2e/lib.sh).
#include <csignal>
#include <cstdio>

#include "fake_kubelet/fake_kubelet.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fake_kubelet SOCKET JSON_FILE\n");
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  auto kubelet = clusterd::testing::FakeKubelet::Start(argv[1]);
  if (!kubelet) {
    std::fprintf(stderr, "fake_kubelet: cannot listen on %s\n", argv[1]);
    return 1;
  }
  kubelet->AnswerFromFile(argv[2]);
  std::fprintf(stderr, "fake_kubelet: serving %s from %s\n", argv[1], argv[2]);
  int sig = 0;
  sigwait(&set, &sig);
  return 0;
}
