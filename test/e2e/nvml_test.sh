#!/usr/bin/env bash
# NVIDIA GPUs end to end with real processes: noded --accelerator nvml on the
# fake libnvidia-ml.so.1 the tests build (8 H100s, scripted through its control
# file: FAKE_NVML_CONTROL), clusterd with the exec actuator, an example job agent
# holding a job of 4 ranks on gpu01's GPUs 0-3 and spares on gpu02.
#  A. the GPUs, their driver/CUDA versions in the chain, healthy;
#  B. Xid 79 on GPU 3 (an NVML event) -> XID_79 at the catalog's SEPARATE on
#     gpu01 device 3 -> the job's recovery isolates the GPU and moves rank 3
#     (POD_RESCHEDULE); the fault and the recovery are in Watch;
#  C. Xid 48 on GPU 1 from the kernel log and from NVML -> one XID_48 fault
#     (RESTART_NPU); a row-remap failure on GPU 5 -> GPU_ROW_REMAP_FAILURE;
#  D. GPU 6 lost (NVML_ERROR_GPU_IS_LOST) -> GPU_LOST at SEPARATE.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_failure() {
  tail_logs 30 "$WORK/clusterd.log" "$WORK/noded-gpu01.log"
  tail_logs 15 "$WORK/agent.log"
  echo "--- actuator"; cat "$WORK/actions.log" 2>/dev/null || true
}
cat >"$WORK/actuator.sh" <<EOF
#!/bin/sh
cat >>"$WORK/actions.log"
echo >>"$WORK/actions.log"
EOF
chmod +x "$WORK/actuator.sh"

start_clusterd --actuator exec --actuator-command "$WORK/actuator.sh"
start_nvml_noded gpu01
start_nvml_noded gpu02
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 2 ]]
}
wait_until 30 connected

echo "-- A: 8 H100s on each node, the driver and CUDA versions in the chain"
grpcurl -plaintext -d '{"name": "gpu01"}' "$ADDR" clusterd.v1.ClusterService/GetNode >"$WORK/gpu01.json"
python3 - "$WORK/gpu01.json" <<'PY'
import json, sys
n = json.load(open(sys.argv[1]))
inv = n["node"]["inventory"]
assert len(inv["devices"]) == 8, inv["devices"]
d3 = [d for d in inv["devices"] if d.get("id", 0) == 3][0]
assert d3["vendor"] == "nvidia" and d3["model"] == "NVIDIA H100 80GB HBM3", d3
chain = {l["name"]: l for l in inv["chain"]}
assert chain["driver"]["state"] == "CHAIN_LINK_STATE_OK" and chain["driver"]["version"] == "550.54.15", chain["driver"]
assert chain["cuda"]["version"] == "12.4", chain.get("cuda")
assert n["node"]["health"] == "HEALTH_HEALTHY", n["node"]["health"]
PY

echo "-- A: NodeD's /metrics has each GPU's temperature, power, health (as for NPUs)"
gauge() { curl -sf "http://127.0.0.1:${NODED_PORT[gpu01]}/metrics" | grep "^$1{device=\"$2\"" | sed 's/.* //'; }
gauge_is() { [[ "$(gauge "$1" "$2")" == "$3" ]]; }
wait_until 15 gauge_is noded_accelerator_temperature_celsius 3 40
curl -sf "http://127.0.0.1:${NODED_PORT[gpu01]}/metrics" >"$WORK/metrics.txt"
expect_contains "$(cat "$WORK/metrics.txt")" 'noded_accelerator_power_watts{device="3",vendor="nvidia",model="NVIDIA H100 80GB HBM3"} 120' \
  "A: power"
[[ $(gauge noded_accelerator_healthy 3) == 1 ]] || fail "A: GPU 3 not healthy in /metrics"

start_bg AGENT_PID "$WORK/agent.out" "$BIN/job-agent" --server "$ADDR" --job llm-gpu --hold-down 500ms --step-ms 50 \
  --log "$WORK/agent.log" --placement 0=gpu01:0,1=gpu01:1,2=gpu01:2,3=gpu01:3 --spares gpu02:0,gpu02:1
wait_until 30 grep -q "attached: job llm-gpu" "$WORK/agent.log"

echo "-- B: Xid 79 on GPU 3 -> SEPARATE, the GPU isolated, rank 3 moved"
echo "xid 3 79" >>"$WORK/nvml-gpu01"
fault_of() { active_faults "$@" | cut -d"|" -f1 | sed "s/ *$//"; }
xid79() { [[ "$(fault_of gpu01 XID_79)" == "3 FAULT_LEVEL_SEPARATE" ]]; }
wait_until 30 xid79
wait_until 15 gauge_is noded_accelerator_active_codes 3 1
[[ $(gauge noded_accelerator_healthy 3) == 0 ]] || fail "B: GPU 3 healthy in /metrics with XID_79"
recovery() {
  grpcurl -plaintext -d "{\"id\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetRecovery 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["recovery"]; print(eval(sys.argv[1]))' "$2"
}
recovered() { [[ "$(recovery llm-gpu.1 'r["state"]')" == RECOVERY_STATE_SUCCEEDED ]]; }
wait_until 30 recovered
[[ $(recovery llm-gpu.1 'r["strategy"]') == RECOVERY_STRATEGY_POD_RESCHEDULE ]] ||
  fail "B: strategy $(recovery llm-gpu.1 'r["strategy"]')"
expect_contains "$(recovery llm-gpu.1 'r["trigger_fault_ids"]')" "XID_79" "B: the trigger"
grep -q '"action":"isolate_device".*"node":"gpu01","device_id":3' "$WORK/actions.log" || fail "B: no isolate_device"
placement=$(grpcurl -plaintext -d '{"id": "llm-gpu"}' "$ADDR" clusterd.v1.JobService/GetJob |
  python3 -c 'import json,sys; print([(p.get("rank",0), p["node"], p.get("device_id",0)) for p in json.load(sys.stdin)["job"]["placement"]])')
expect_contains "$placement" "(3, 'gpu02', 0)" "B: rank 3 moved to the spare"
events=$(grpcurl -plaintext -max-time 3 -d '{"fromRevision": "0", "nodes": ["gpu01"], "types": ["EVENT_TYPE_FAULT_RAISED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$events" '"code": "XID_79"' "B: the fault in Watch"

echo "-- C: Xid 48 from the kernel log and from NVML is one fault; a row-remap failure"
echo "3,500,123456,-;NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error" \
  >>"$WORK/kmsg-gpu01"
xid48() { [[ "$(fault_of gpu01 XID_48)" == "1 FAULT_LEVEL_RESTART_NPU" ]]; }
wait_until 30 xid48
echo "xid 1 48" >>"$WORK/nvml-gpu01"
echo "set 5 remap_failure 1" >>"$WORK/nvml-gpu01"
remap() { [[ "$(fault_of gpu01 GPU_ROW_REMAP_FAILURE)" == "5 FAULT_LEVEL_SEPARATE" ]]; }
wait_until 30 remap
[[ $(fault_of gpu01 XID_48 | wc -l) == 1 ]] || fail "C: XID_48 twice: $(fault_of gpu01 XID_48)"

echo "-- D: GPU 6 falls off the bus (NVML answers GPU_IS_LOST) -> GPU_LOST at SEPARATE"
echo "fail nvmlDeviceGetTemperature 6 15" >>"$WORK/nvml-gpu01"
lost() { [[ "$(fault_of gpu01 GPU_LOST)" == "6 FAULT_LEVEL_SEPARATE" ]]; }
wait_until 30 lost
grep -q "control line skipped" "$WORK/noded-gpu01.log" && fail "a control line was not understood"

echo "-- E: noded --probe prints what the backend sees, as an operator checks a GPU node"
probe=$(FAKE_NVML_DEVICES=2 FAKE_NVML_CONTROL="$WORK/nvml-probe" "$BIN/noded" --node-name probe --accelerator nvml \
  --nvml-path "$ROOT/build/test-lib/fake_nvml/libnvidia-ml.so.1" --probe --log-level error) || fail "E: noded --probe failed"
got=$(echo "$probe" | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j["backend"], len(j["devices"]), j["devices"][1]["kubelet_ids"][0], j["versions"]["driver"],
      all(h["healthy"] for h in j["health"]), j["node_faults"])')
expect_contains "$got" "nvml 2 GPU-00000000-0000-0000-0000-000000000001 550.54.15 True []" "E: the probe's answer"
nodriver=$("$BIN/noded" --node-name probe --accelerator nvml --nvml-path /nonexistent/libnvidia-ml.so.1 --probe \
  --log-level error) || fail "E: no driver is not a failure of the probe"
expect_contains "$nodriver" "NVML_DRIVER_NOT_LOADED" "E: no driver"
echo "nvml e2e: OK"
