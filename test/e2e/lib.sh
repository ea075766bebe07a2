# Helpers for the shell end-to-end tests and the demo: free ports, starting
# and stopping daemons, waiting on conditions with a deadline.

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# wait_until DEADLINE_SECONDS CMD...: runs CMD until it succeeds or the deadline passes.
wait_until() {
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) >= deadline )); then echo "timed out waiting for: $*" >&2; return 1; fi
    sleep 0.1
  done
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_contains HAYSTACK NEEDLE DESCRIPTION
expect_contains() {
  grep -qF -- "$2" <<<"$1" || { echo "$1" >&2; fail "$3: expected to find '$2'"; }
}
