#!/usr/bin/env bash
# The API with the real tools of its ecosystem:
#   - buf lint on proto/, and buf breaking against the previous commit's protos;
#   - the Go operator example (examples/operator-go) built from the protos with
#     protoc-gen-go and protoc-gen-go-grpc, against a live clusterd: it reacts to
#     fault events, persists its cursor, and after a restart resumes exactly
#     where it left off (no duplicate, no gap), also across a clusterd kill -9,
#     and refuses to skip compacted history unless told to;
#   - the Python client example (examples/python-client) with grpcio;
#   - /metrics of a live clusterd and a live noded through promtool check
#     metrics, and the chart's PrometheusRule through promtool check rules.
# Tools are installed on first use (pinned) into $HOME/go/bin and a venv under
# $HOME/.cache; later runs reuse them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

BUF_VERSION=v1.75.0
PROMTOOL_VERSION=v0.316.0            # the Go module version of Prometheus 3.x's promtool
PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.1
PYYAML_VERSION=6.0.3                 # only to pull the rule groups out of the rendered chart

TOOLS_BIN="$HOME/go/bin"  # go_tool installs there
export PATH="$TOOLS_BIN:$PATH"
require_cmd go protoc grpcurl
require_built clusterd noded

go_tool buf github.com/bufbuild/buf/cmd/buf "$BUF_VERSION"
# remove_all_sd leaves out Prometheus' service-discovery plugins (cloud SDKs),
# which check metrics/rules never use: half the packages to build.
go_tool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION" -tags remove_all_sd
go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

# The Python venv, keyed by what goes into it.
REQS="$ROOT/examples/python-client/requirements.txt"
VENV_KEY=$( (cat "$REQS"; echo "pyyaml==$PYYAML_VERSION"; python3 --version) | sha256sum | cut -c1-12)
VENV="$HOME/.cache/clusterd-api-tools/venv-$VENV_KEY"
if [[ ! -f $VENV/.complete ]]; then
  echo "-- creating the Python venv $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" || fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQS" "pyyaml==$PYYAML_VERSION" ||
    fail "pip install -r $REQS"
  touch "$VENV/.complete"
fi
PY="$VENV/bin/python"

e2e_setup
clusterd_ports
NODED_PORT=$(free_port)
on_failure() { tail_logs 20 "$WORK"/*.log; }

echo "== buf"
(cd "$ROOT/proto" && buf lint) || fail "buf lint found the problems above"
echo "-- buf lint: ok"
if ! git -C "$ROOT" rev-parse -q --verify 'HEAD~1^{commit}' >/dev/null 2>&1; then
  echo "-- buf breaking: skipped (no previous commit)"
elif ! git -C "$ROOT" cat-file -e 'HEAD~1:proto' 2>/dev/null; then
  echo "-- buf breaking: skipped (the previous commit has no proto/ directory)"
else
  if [[ -d $ROOT/.git ]]; then
    against="$ROOT/.git#ref=HEAD~1,subdir=proto"
  else
    # A worktree or a submodule (.git is a file): hand buf the old tree as files.
    mkdir -p "$WORK/prev"
    git -C "$ROOT" archive 'HEAD~1' proto | tar -x -C "$WORK/prev"
    against="$WORK/prev/proto"
  fi
  (cd "$ROOT/proto" && buf breaking --against "$against") ||
    fail "buf breaking: the protos changed incompatibly since the previous commit (above)"
  echo "-- buf breaking against HEAD~1: ok"
fi

echo "== build the Go operator"
OPDIR="$ROOT/examples/operator-go"
bash "$OPDIR/generate.sh" >/dev/null || fail "examples/operator-go/generate.sh"
(cd "$OPDIR" && go vet ./... && go build -buildvcs=false -o "$WORK/operator" .) || fail "building examples/operator-go"

echo "== a live clusterd"
start_clusterd --node-grace 1h

# register ADDR NODE: an agent stream (as in the README) that registers NODE
# and raises an accelerator fault on its device 3.
register() {
  grpcurl -plaintext -d @ "$1" clusterd.v1.NodeAgentService/Connect >/dev/null <<JSON
{"hello": {"nodeName": "$2", "bootId": "b1", "agentVersion": "grpcurl", "epoch": "1",
           "inventory": {"devices": [{"id": 0, "vendor": "huawei", "model": "910B3"},
                                     {"id": 3, "vendor": "huawei", "model": "910B3"}]}}}
{"transition": {"id": {"epoch": "1", "seq": "1"}, "action": "TRANSITION_ACTION_RAISE",
                "fault": {"deviceId": 3, "source": "FAULT_SOURCE_ACCELERATOR", "code": "80E01801"}}}
JSON
}
# report ADDR ID ACTION: an external fault (FaultService.Report) on worker01.
report() {
  grpcurl -plaintext -d "{\"reporter\": \"netprobe\", \"id\": \"$2\", \"node\": \"worker01\", \"code\": \"NET_LINK_DOWN\",
    \"level\": \"FAULT_LEVEL_RESTART_REQUEST\", \"action\": \"TRANSITION_ACTION_$3\"}" \
    "$1" clusterd.v1.FaultService/Report >/dev/null
}
# fault_revisions: the revisions of every fault event in the history, per grpcurl.
fault_revisions() {
  { grpcurl -plaintext -max-time 2 -d '{"types": ["EVENT_TYPE_FAULT_RAISED", "EVENT_TYPE_FAULT_UPDATED",
      "EVENT_TYPE_FAULT_CLEARED"]}' "$ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true; } |
    python3 -c '
import json, sys
text, dec, pos = sys.stdin.read(), json.JSONDecoder(), 0
while True:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos >= len(text):
        break
    msg, pos = dec.raw_decode(text, pos)
    for ev in msg.get("events", []):
        print(ev["revision"])'
}
revisions_of() { sed -n 's/^revision=\([0-9]*\) .*/\1/p' "$1"; }

echo "== the Go operator: react, persist the cursor, resume exactly"
CURSOR="$WORK/operator.cursor"
register "$ADDR" worker01
report "$ADDR" link-a RAISE
report "$ADDR" link-b RAISE
# Three fault events, served in one batch; stop after two of them.
"$WORK/operator" -server "$ADDR" -cursor-file "$CURSOR" -max-events 2 >"$WORK/run1.out" 2>"$WORK/run1.log" ||
  fail "operator run 1 exited $?: $(cat "$WORK/run1.log")"
[[ $(wc -l <"$WORK/run1.out") == 2 ]] || fail "run 1 printed $(wc -l <"$WORK/run1.out") lines, not 2: $(cat "$WORK/run1.out")"
expect_contains "$(cat "$WORK/run1.out")" "FAULT_RAISED id=worker01/3/accelerator/80E01801 node=worker01 device=3" "run 1"
[[ $(cat "$CURSOR") == "$(revisions_of "$WORK/run1.out" | tail -1)" ]] ||
  fail "the cursor ($(cat "$CURSOR")) is not the last processed revision"

report "$ADDR" link-a CLEAR
report "$ADDR" link-c RAISE
report "$ADDR" link-d RAISE
# Resume: the third event of the first batch, then the three new ones, each
# through the -on-fault hook.
HOOK_OUT="$WORK/hook.jsonl" "$WORK/operator" -server "$ADDR" -cursor-file "$CURSOR" -max-events 4 \
  -on-fault 'cat >>"$HOOK_OUT"; echo "$EVENT_REVISION $EVENT_TYPE $FAULT_NODE $FAULT_LEVEL" >>"$HOOK_OUT.env"' \
  >"$WORK/run2.out" 2>"$WORK/run2.log" </dev/null ||
  fail "operator run 2 exited $?: $(cat "$WORK/run2.log")"
expect_contains "$(cat "$WORK/run2.log")" "resuming after revision $(revisions_of "$WORK/run1.out" | tail -1)" "run 2 log"
expect_contains "$(cat "$WORK/run2.out")" "FAULT_CLEARED id=worker01/-/external/netprobe/link-a" "run 2"
expect_contains "$(cat "$WORK/run2.out")" "FAULT_RAISED id=worker01/-/external/netprobe/link-d" "run 2"
expected=$(fault_revisions)
got=$(cat "$WORK/run1.out" "$WORK/run2.out" | sed -n 's/^revision=\([0-9]*\) .*/\1/p')
[[ $(wc -l <<<"$expected") == 6 ]] || fail "expected 6 fault events in the history, got: $expected"
[[ $got == "$expected" ]] || fail "operator runs saw revisions [$(echo $got)], the history has [$(echo $expected)]"
[[ $(wc -l <"$WORK/hook.jsonl") == 4 ]] || fail "-on-fault ran $(wc -l <"$WORK/hook.jsonl") times, not 4"
hook_revs=$(python3 -c 'import json,sys; [print(json.loads(l)["revision"]) for l in open(sys.argv[1])]' "$WORK/hook.jsonl")
[[ $hook_revs == "$(revisions_of "$WORK/run2.out")" ]] || fail "-on-fault got revisions [$(echo $hook_revs)]"
expect_contains "$(cat "$WORK/hook.jsonl.env")" "FAULT_CLEARED worker01 RESTART_REQUEST" "-on-fault environment"
echo "-- two runs saw revisions $(echo $got): each fault event once, none missing"

# Nothing new: it waits, and SIGTERM ends it cleanly with nothing printed.
# metric_at_least URL NAME MIN / metric_below URL NAME MAX: the sample NAME
# (labels included, as printed) on URL's /metrics is >= MIN / < MAX. The page
# is read whole first (pipefail).
metric_at_least() {
  local page
  page=$(curl -sf "$1") || return 1
  awk -v n="$2" -v min="$3" '$1 == n && $2 + 0 >= min + 0 { found = 1 } END { exit !found }' <<<"$page"
}
metric_below() {
  local page
  page=$(curl -sf "$1") || return 1
  awk -v n="$2" -v max="$3" '$1 == n && $2 + 0 < max + 0 { found = 1 } END { exit !found }' <<<"$page"
}
# ClusterD's own subscribers count among its watchers: the operator's Watch
# is one more than there are with no operator running.
METRICS="http://127.0.0.1:$HTTP_PORT/metrics"
WATCHERS=$(curl -sf "$METRICS" | awk '$1 == "clusterd_watchers" { print $2 }')
[[ $WATCHERS =~ ^[0-9]+$ ]] || fail "no clusterd_watchers gauge on $METRICS"
"$WORK/operator" -server "$ADDR" -cursor-file "$CURSOR" >"$WORK/run3.out" 2>"$WORK/run3.log" &
OP_PID=$!
PIDS+=("$OP_PID")
# Its Watch is open (ClusterD counts it): nothing more is coming.
wait_until 30 metric_at_least "$METRICS" clusterd_watchers $((WATCHERS + 1)) ||
  fail "the operator's Watch never opened: $(cat "$WORK/run3.log")"
rc=0; term_wait "$OP_PID" || rc=$?
[[ $rc == 0 ]] || fail "operator exit $rc on SIGTERM: $(cat "$WORK/run3.log")"
[[ ! -s $WORK/run3.out ]] || fail "operator repeated events: $(cat "$WORK/run3.out")"

echo "-- clusterd kill -9 under a running operator: it reconnects and goes on"
wait_until 30 metric_below "$METRICS" clusterd_watchers $((WATCHERS + 1)) || fail "the last Watch stays open"
"$WORK/operator" -server "$ADDR" -cursor-file "$CURSOR" -max-events 1 -max-backoff 500ms \
  >"$WORK/run4.out" 2>"$WORK/run4.log" &
OP_PID=$!
PIDS+=("$OP_PID")
wait_until 30 metric_at_least "$METRICS" clusterd_watchers $((WATCHERS + 1)) ||
  fail "the operator's Watch never opened: $(cat "$WORK/run4.log")"
kill_wait "$CLUSTERD_PID"
# It saw its stream end and backs off before ClusterD is back.
wait_until 30 grep -q reconnecting "$WORK/run4.log" || fail "the operator did not notice the kill: $(cat "$WORK/run4.log")"
start_clusterd --node-grace 1h
report "$ADDR" link-e RAISE
rc=0; timeout 30 tail --pid="$OP_PID" -f /dev/null || rc=$?
[[ $rc == 0 ]] || fail "operator did not exit after the event: $(cat "$WORK/run4.log")"
rc=0; wait "$OP_PID" || rc=$?; e2e_forget "$OP_PID"
[[ $rc == 0 ]] || fail "operator exit $rc: $(cat "$WORK/run4.log")"
expect_contains "$(cat "$WORK/run4.log")" "reconnecting" "operator log after the kill"
expect_contains "$(cat "$WORK/run4.out")" "FAULT_RAISED id=worker01/-/external/netprobe/link-e" "operator after reconnect"
[[ $(wc -l <"$WORK/run4.out") == 1 ]] || fail "after reconnect: $(cat "$WORK/run4.out")"

echo "-- compacted history: OUT_OF_RANGE names the oldest revision; -reset-on-compaction skips loudly"
SMALL_GRPC=$(free_port)
SMALL_HTTP=$(free_port)
SMALL=127.0.0.1:$SMALL_GRPC
start_bg SMALL_PID "$WORK/small.log" "$BIN/clusterd" --listen "$SMALL" --insecure --http-listen "127.0.0.1:$SMALL_HTTP" \
  --data-dir "$WORK/small" --node-grace 1h --retention-events 1000 --retention-interval 100ms --log-level warn
wait_ready "$SMALL_HTTP"
# One agent stream that raises and clears a fault 400 times: over 1000 events,
# so retention compacts the oldest ones.
python3 -c '
import json
print(json.dumps({"hello": {"nodeName": "worker01", "bootId": "b1", "epoch": "1",
                            "inventory": {"devices": [{"id": 3, "vendor": "huawei", "model": "910B3"}]}}}))
for seq in range(1, 801):
    print(json.dumps({"transition": {"id": {"epoch": "1", "seq": str(seq)},
        "action": "TRANSITION_ACTION_RAISE" if seq % 2 else "TRANSITION_ACTION_CLEAR",
        "fault": {"deviceId": 3, "source": "FAULT_SOURCE_ACCELERATOR", "code": "80E01801"}}}))
' | grpcurl -plaintext -d @ "$SMALL" clusterd.v1.NodeAgentService/Connect >/dev/null
compacted() {
  grpcurl -plaintext "$SMALL" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(int(s.get("compactedRevision", s.get("compacted_revision", "0"))) < 10)'
}
wait_until 30 compacted
echo 1 >"$WORK/old.cursor"
rc=0; "$WORK/operator" -server "$SMALL" -cursor-file "$WORK/old.cursor" -max-events 1 >"$WORK/run5.out" 2>"$WORK/run5.log" || rc=$?
[[ $rc == 3 ]] || fail "operator on compacted history exited $rc, not 3: $(cat "$WORK/run5.log")"
expect_contains "$(cat "$WORK/run5.log")" "oldest available revision:" "OUT_OF_RANGE report"
[[ $(cat "$WORK/old.cursor") == 1 ]] || fail "the cursor moved without -reset-on-compaction"
[[ ! -s $WORK/run5.out ]] || fail "operator printed events from compacted history: $(cat "$WORK/run5.out")"
rc=0; "$WORK/operator" -server "$SMALL" -cursor-file "$WORK/old.cursor" -max-events 1 -reset-on-compaction \
  >"$WORK/run6.out" 2>"$WORK/run6.log" || rc=$?
[[ $rc == 0 ]] || fail "operator with -reset-on-compaction exit $rc: $(cat "$WORK/run6.log")"
expect_contains "$(cat "$WORK/run6.log")" "SKIPPING events 2.." "reset-on-compaction log"
expect_contains "$(cat "$WORK/run6.out")" "worker01/3/accelerator/80E01801" "operator after the reset"
oldest=$(sed -n 's/.*oldest available revision: \([0-9]*\).*/\1/p' "$WORK/run5.log")
first=$(revisions_of "$WORK/run6.out")
(( first >= oldest )) || fail "after the reset the operator printed revision $first, older than $oldest"
term_wait "$SMALL_PID" || fail "small clusterd exit $?"

echo "== the Python client"
out=$("$PY" "$ROOT/examples/python-client/client.py" --server "$ADDR" --watch 5 --timeout 20 2>&1) ||
  fail "client.py: $out"
expect_contains "$out" "nodes    total=1" "client.py summary"
expect_contains "$out" "active faults: 5 (RESTART_BUSINESS=1, RESTART_REQUEST=4)" "client.py summary levels"
expect_contains "$out" "worker01/-/external/netprobe/link-e" "client.py faults"
expect_contains "$out" "revision=1 NODE_REGISTERED node=worker01" "client.py watch"
[[ $(grep -c '^revision=' <<<"$out") == 5 ]] || fail "client.py printed not 5 events: $out"
echo "-- client.py: ok"

echo "== promtool check metrics on both daemons"
start_bg NODED_PID "$WORK/noded.log" "$BIN/noded" --server "$ADDR" --node-name worker02 \
  --http-listen "127.0.0.1:$NODED_PORT" --state-dir "$WORK/noded" --accelerator sim --sim-devices 4 --kmsg-path "" \
  --poll-interval 200ms --heartbeat-interval 500ms --metrics-interval 1s --log-level warn
wait_ready "$NODED_PORT"
connected() { grpcurl -plaintext -d '{"name": "worker02"}' "$ADDR" clusterd.v1.ClusterService/GetNode | grep -q '"connected": true'; }
wait_until 30 connected
curl -sf -o /dev/null -X POST "http://127.0.0.1:$NODED_PORT/v1/sim/faults" -d '{"device": 1, "code": "80E01801", "state": "raise"}' ||
  fail "sim fault injection"
stored() { grpcurl -plaintext -d '{"node": "worker02"}' "$ADDR" clusterd.v1.ClusterService/ListFaults | grep -q 80E01801; }
wait_until 30 stored
# A metric snapshot and a few heartbeats in, so the pages carry samples.
wait_until 30 metric_at_least "http://127.0.0.1:$HTTP_PORT/metrics" 'clusterd_agent_messages_total{type="heartbeat"}' 2 ||
  fail "no heartbeats counted"
wait_until 30 metric_at_least "http://127.0.0.1:$NODED_PORT/metrics" noded_polls_total 2 || fail "noded did not poll"
promtool_check() { # NAME URL
  curl -sf "$2" >"$WORK/$1.metrics" || fail "scraping $2"
  [[ -s $WORK/$1.metrics ]] || fail "$1: empty /metrics"
  local out rc=0
  out=$(promtool check metrics <"$WORK/$1.metrics" 2>&1) || rc=$?
  if [[ $rc != 0 ]]; then
    echo "$out" >&2
    fail "promtool check metrics on $1's /metrics (exit $rc; problems above)"
  fi
  echo "-- $1 /metrics ($(grep -c '^# TYPE' "$WORK/$1.metrics") metric families): promtool check metrics ok"
}
promtool_check clusterd "http://127.0.0.1:$HTTP_PORT/metrics"
promtool_check noded "http://127.0.0.1:$NODED_PORT/metrics"

echo "== promtool check rules on the chart's PrometheusRule"
CHART="$ROOT/charts/clusterd"
RULE_TEMPLATE=$(grep -l 'kind: *PrometheusRule' "$CHART"/templates/*.yaml 2>/dev/null | head -1 || true)
if [[ -z $RULE_TEMPLATE ]]; then
  echo "-- skipped: the chart has no PrometheusRule"
else
  rendered=""
  if command -v helm >/dev/null; then
    # Turn on whatever values key enables the rule: monitoring.prometheusRule.enabled today.
    key=$(sed -n 's/.*\.Values\.\([A-Za-z0-9_.]*[pP]rometheusRule\)\b.*/\1/p' "$RULE_TEMPLATE" | head -1)
    helm template api-tools "$CHART" --namespace clusterd --kube-version 1.30.0 ${key:+--set "$key.enabled=true"} >"$WORK/chart.yaml" ||
      fail "helm template $CHART"
    rendered="$WORK/chart.yaml"
  elif ! grep -q '{{' "$RULE_TEMPLATE"; then
    rendered="$RULE_TEMPLATE"
  fi
  if [[ -z $rendered ]]; then
    echo "-- skipped: helm is not installed and $RULE_TEMPLATE is a template, not plain YAML"
  else
    "$PY" - "$rendered" "$WORK/rules.yaml" <<'PY' || fail "no PrometheusRule groups in the rendered chart"
import sys, yaml
groups = []
for doc in yaml.safe_load_all(open(sys.argv[1])):
    if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
        groups += (doc.get("spec") or {}).get("groups") or []
if not groups:
    sys.exit("no rule groups found")
yaml.safe_dump({"groups": groups}, open(sys.argv[2], "w"), sort_keys=False)
print(f"-- {len(groups)} rule groups, {sum(len(g.get('rules') or []) for g in groups)} rules")
PY
    out=$(promtool check rules "$WORK/rules.yaml" 2>&1) || { echo "$out" >&2; fail "promtool check rules (above)"; }
    echo "-- promtool check rules: ok"
    # Behaviour of the critical ClusterdIngestStalled alert (promtool's rule unit tests): a quiet
    # cluster (agents connected, nothing queued, nothing applied: heartbeats bypass the writer)
    # must not fire it; changes queued while the writer applies nothing must.
    rule_annotation() { # ALERT KEY: that annotation of the rendered rule
      "$PY" - "$WORK/rules.yaml" "$1" "$2" <<'PY'
import sys, yaml
for g in yaml.safe_load(open(sys.argv[1]))["groups"]:
    for r in g.get("rules") or []:
        if r.get("alert") == sys.argv[2]:
            print(r["annotations"][sys.argv[3]].replace('"', '\\"'))
PY
    }
    if grep -q 'alert: ClusterdIngestStalled' "$WORK/rules.yaml"; then
      sel='job="api-tools-clusterd",namespace="clusterd"'
      cat >"$WORK/rules_test.yaml" <<YAML
rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'clusterd_agent_streams{$sel}'
        values: '100x20'
      - series: 'clusterd_ingest_queue_depth{$sel}'
        values: '0x20'
      - series: 'clusterd_ingest_changes_total{$sel}'
        values: '500x20'
    alert_rule_test:
      - eval_time: 15m
        alertname: ClusterdIngestStalled
        exp_alerts: []
  - interval: 1m
    input_series:
      - series: 'clusterd_agent_streams{$sel}'
        values: '100x20'
      - series: 'clusterd_ingest_queue_depth{$sel}'
        values: '0 0 0 0 0 40x15'
      - series: 'clusterd_ingest_changes_total{$sel}'
        values: '500x20'
    alert_rule_test:
      - eval_time: 15m
        alertname: ClusterdIngestStalled
        exp_alerts:
          - exp_labels: {severity: critical, namespace: clusterd}
            exp_annotations:
              summary: "$(rule_annotation ClusterdIngestStalled summary)"
              description: "$(rule_annotation ClusterdIngestStalled description)"
YAML
      out=$(cd "$WORK" && promtool test rules rules_test.yaml 2>&1) || { echo "$out" >&2; fail "promtool test rules: ClusterdIngestStalled (above)"; }
      echo "-- promtool test rules: ClusterdIngestStalled quiet cluster silent, stuck writer fires: ok"
    fi
  fi
fi

echo "-- SIGTERM stops both cleanly"
term_wait "$NODED_PID" || fail "noded exit $?"
term_wait "$CLUSTERD_PID" || fail "clusterd exit $?"
echo "e2e api tools: ok"
