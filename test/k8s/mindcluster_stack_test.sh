#!/usr/bin/env bash
# The "mindcluster" integration end to end, against a REAL etcd + kube-apiserver
# on loopback (test/k8s/lib.sh): ClusterD in the place of MindCluster's ClusterD,
# between the Ascend device plugin's ConfigMaps and what Volcano reads.
#  A. device-plugin ConfigMaps for three nodes (one chip already unhealthy; one
#     node without NodeD) -> mindx-dl/cluster-info-device-0 lists every node,
#     with label mx-consumer-volcano=true and one key equal to its name, and
#     cluster-info-node-cm exists; the plugin's fault is in ListFaults and Watch;
#  B. a NodeD (sim) fault on another chip -> that chip leaves the available list
#     and UpdateTime grows; cleared -> back, UpdateTime grows again;
#  C. a cordon through AdminService -> the node's chips all leave the list;
#  D. a malformed and a wrongly check-coded plugin ConfigMap change nothing;
#  E. MindCluster NodeD's mindx-dl-nodeinfo-<node> -> node faults, and the node
#     UnHealthy in cluster-info-node-cm; a public-fault ConfigMap -> public
#     faults on two chips, which leave the available list;
#  F. kill -9 of ClusterD and a restart: the ConfigMaps are never emptied,
#     nothing is raised twice, and a change made while it was down is applied;
#  G. the separation policy (2 counted faults here, no settle time): a chip
#     whose NodeD fault comes back is separated (ManuallySeparateNPU for
#     Volcano, DEVICE_SEPARATED in Watch, Device.separated), stays so across a
#     kill -9, and `clusterctl release` returns it;
#  H. the node without NodeD (n3) is ClusterD's from the plugin alone: registered
#     by the integration (Node.registered_by), its plugin faults raised there;
#     its A3 SwitchInfoCfg reaches Volcano in cluster-info-switch-0;
#  I. MindCluster's operators' ConfigMaps in cluster-system: an operator's policy in
#     clusterd-config-cm applies (its window and threshold: one fault separates); the
#     separated chip is listed in clusterd-manual-info-cm in the reference's shape, and
#     deleting it there (as kubectl edit) releases it: back in Volcano's list, DEVICE_RELEASED
#     by mindcluster/kubectl-edit; statistic-fault-info, current-job-statistic and
#     scheduling-exception-report appear in the reference's shape.
#  L. ClusterD restarted with Kubernetes discovery (integration kubernetes) too:
#     an AscendJob's PodGroup (label framework=pytorch) and two pods as
#     ascend-operator and the device plugin leave them (rank, chips, shared ToR
#     annotations, MASTER_ADDR) -> the job's summary arrives on a job.Job
#     subscription and in ops/job-summary-<job> with its servers, sharedTorIp
#     and masterAddr; the pods deleted -> told "delete" on both, and the
#     ConfigMap is gone after the delay.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; grep -v "D \[engine\]" "$WORK/clusterd.log" | tail -40
  echo "--- cluster-info-device-0"
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 || true
}

k8s_start
k8s_create_namespace mindx-dl
echo "-- API server ready at $K8S_API"

# plugin_cm NODE UNHEALTHY_CHIPS [CHECKCODE]: the device plugin's ConfigMap of NODE (8 chips
# Ascend910-0..7; the listed ones -Unhealthy with an 80E01801 -Fault entry), its CheckCode the
# SHA-256 of the Go-JSON of {DeviceList, UpdateTime} unless CHECKCODE is given. Created or
# replaced.
plugin_cm() {
  local body
  body=$(python3 - "$1" "$2" "${3-}" <<'EOF'
import hashlib, json, sys, time
import os
node, bad, check = sys.argv[1], [int(c) for c in sys.argv[2].split(",") if c], sys.argv[3]
code = os.environ.get("PLUGIN_CODE", "80E01801")
names = ["Ascend910-%d" % i for i in range(8)]
faults = [
    # DeviceFault's fields in the plugin's declaration order (Go marshals structs so).
    '{"fault_type":"CardUnhealthy","npu_name":"Ascend910-%d","large_model_fault_level":"SeparateNPU",'
    '"fault_level":"SeparateNPU","fault_handling":"SeparateNPU","fault_code":"%s",'
    '"fault_time_and_level_map":{"%s":{"fault_time":1700000000000,"fault_level":"SeparateNPU"}}}' % (c, code, code)
    for c in bad]
dl = {
    "huawei.com/Ascend910": ",".join(n for i, n in enumerate(names) if i not in bad),
    "huawei.com/Ascend910-Unhealthy": ",".join(names[c] for c in bad),
    "huawei.com/Ascend910-NetworkUnhealthy": "",
    "huawei.com/Ascend910-Recovering": "",
    "huawei.com/Ascend910-Fault": "[" + ",".join(faults) + "]" if faults else "[]",
}
inner = {"DeviceList": dl, "UpdateTime": int(time.time())}
# Go-JSON of the inner object: map keys sorted, no spaces (nothing here needs Go's escapes).
go = json.dumps(inner, sort_keys=True, separators=(",", ":"))
cfg = {"DeviceInfo": inner, "SuperPodID": -1, "ServerIndex": -1,
       "CheckCode": check or hashlib.sha256(go.encode()).hexdigest()}
print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "mindx-dl-deviceinfo-" + node, "namespace": "kube-system",
                               "labels": {"mx-consumer-cim": "true"}},
                  "data": {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")), "ManuallySeparateNPU": ""}}))
EOF
)
  k8s_api PUT "/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-$1" "$body" >/dev/null 2>&1 ||
    k8s_api POST /api/v1/namespaces/kube-system/configmaps "$body" >/dev/null
}
# info_field NODE PYEXPR: PYEXPR over e (NODE's entry in cluster-info-device-0) and cm.
info_field() {
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 2>/dev/null | python3 -c '
import json, sys
cm = json.load(sys.stdin)
v = cm["data"]["cluster-info-device-0"]
e = json.loads(v).get("mindx-dl-deviceinfo-" + sys.argv[1]) if v else None
print(eval(sys.argv[2]))' "$1" "$2"
}
lst() { info_field "$1" "e[\"DeviceList\"][\"huawei.com/Ascend910$2\"] if e else \"<none>\""; }
update_time() { info_field "$1" 'e["UpdateTime"] if e else 0'; }
is() { [[ "$(eval "$1")" == "$2" ]]; }
grows() { (($(update_time "$1") > $2)); }
connected() {
  [[ $(grpcurl -plaintext "$ADDR" clusterd.v1.ClusterService/GetSummary |
    python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == "$1" ]]
}
# plugin_faults: "node/device/code:state" of the device plugin's faults in ClusterD.
plugin_faults() {
  grpcurl -plaintext -d '{"page_size": 1000}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c 'import json,sys; print(" ".join(sorted("%s/%s/%s:%s:%s" % (f["node"], f.get("device_id",0), f["code"], f["state"], f.get("count",1)) for f in json.load(sys.stdin).get("faults",[]) if f.get("reporter")=="ascend-device-plugin")))'
}

plugin_cm n1 3
plugin_cm n2 ""
plugin_cm n3 ""  # a node without our NodeD
k8s_create_namespace ops
k8s_create_namespace cluster-system
CLUSTERD_FLAGS=(--kubeconfig "$K8S_KUBECONFIG" --integrations mindcluster,mindcluster-jobs
  --mindcluster-job-summary-delete-after 2s --mindcluster-public-fault-namespaces ops
  --separation-threshold 2 --separation-settle 0s --log-level info
  --mindcluster-separation-policy-cm true --mindcluster-manual-info-cm true --mindcluster-manual-info-interval 1s
  --mindcluster-statistics-cms true --mindcluster-scheduling-exception-cm true --mindcluster-statistics-interval 1s)
start_clusterd "${CLUSTERD_FLAGS[@]}"
for n in n1 n2; do start_sim_noded $n; done
wait_until 30 connected 2
echo "-- clusterd (integration mindcluster) and two sim agents up"

echo "-- A: every plugin node in cluster-info-device-0; the plugin's fault in ClusterD"
wait_until 30 is 'lst n1 -Unhealthy' "Ascend910-3"
cm=$(k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0)
python3 - "$cm" <<'EOF' || fail "A: the ConfigMap's labels and keys"
import json, sys
cm = json.loads(sys.argv[1])
assert cm["metadata"]["labels"] == {"mx-consumer-volcano": "true"}, cm["metadata"]["labels"]
assert list(cm["data"]) == ["cluster-info-device-0"], list(cm["data"])
v = json.loads(cm["data"]["cluster-info-device-0"])
assert sorted(v) == ["mindx-dl-deviceinfo-n1", "mindx-dl-deviceinfo-n2", "mindx-dl-deviceinfo-n3"], sorted(v)
for e in v.values():
    assert sorted(e["DeviceList"]) == sorted("huawei.com/Ascend910" + k for k in
        ["", "-Unhealthy", "-NetworkUnhealthy", "-Recovering", "-Fault"]), e["DeviceList"]
EOF
[[ $(lst n1 "") != *Ascend910-3* ]] || fail "A: n1's chip 3 is still available"
[[ $(lst n3 "") == Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7 ]] ||
  fail "A: n3 (no NodeD) is not listed whole: $(lst n3 "")"
k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-node-cm >/dev/null || fail "A: no cluster-info-node-cm"
wait_until 15 is plugin_faults "n1/3/80E01801:FAULT_STATE_ACTIVE:1"
watched=$(timeout 5 grpcurl -plaintext -max-time 3 -d '{"from_revision": 1, "nodes": ["n1"]}' "$ADDR" \
  clusterd.v1.ClusterService/Watch 2>/dev/null || true)
expect_contains "$watched" '"reporter": "ascend-device-plugin"' "A: the plugin's fault in Watch"
echo "   n1: $(lst n1 -Unhealthy) unhealthy; fault n1/3/80E01801 from ascend-device-plugin in ListFaults and Watch"

echo "-- B: a NodeD fault on n2 chip 5 takes the chip out; cleared, it comes back"
t0=$(update_time n2)
inject_sim_fault n2 5 80E18402  # SEPARATE in the catalog
wait_until 15 is 'lst n2 -Unhealthy' "Ascend910-5"
[[ $(lst n2 "") != *Ascend910-5* ]] || fail "B: chip 5 still available"
((t1 = $(update_time n2))) && ((t1 > t0)) || fail "B: UpdateTime did not grow ($t0 -> $t1)"
inject_sim_fault n2 5 80E18402 clear
wait_until 15 is 'lst n2 -Unhealthy' ""
wait_until 5 grows n2 "$t1" || fail "B: UpdateTime did not grow on the clear"
echo "   chip 5 out and back; UpdateTime $t0 -> $t1 -> $(update_time n2)"

echo "-- C: a cordon takes every chip of the node out"
grpcurl -plaintext -d '{"node": "n2", "actor": "ops", "reason": "maintenance"}' "$ADDR" clusterd.v1.AdminService/CordonNode >/dev/null
wait_until 15 is 'lst n2 ""' ""
[[ $(lst n2 -Unhealthy) == Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-3,Ascend910-4,Ascend910-5,Ascend910-6,Ascend910-7 ]] ||
  fail "C: n2 cordoned but $(lst n2 -Unhealthy) unhealthy"
grpcurl -plaintext -d '{"node": "n2", "actor": "ops"}' "$ADDR" clusterd.v1.AdminService/UncordonNode >/dev/null
wait_until 15 is 'lst n2 -Unhealthy' ""
echo "   n2 cordoned: 8 chips unhealthy; uncordoned: back"

echo "-- D: a malformed or wrongly check-coded plugin ConfigMap changes nothing"
before=$(info_field n1 'json.dumps(e, sort_keys=True)')
plugin_cm n1 "" "$(printf '0%.0s' {1..64})"
k8s_api PUT /api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-n3 \
  '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"mindx-dl-deviceinfo-n3","namespace":"kube-system","labels":{"mx-consumer-cim":"true"}},"data":{"DeviceInfoCfg":"{not json"}}' >/dev/null
wait_until 15 grep -q "mindx-dl-deviceinfo-n3.*refused" "$WORK/clusterd.log"
wait_until 15 grep -q "mindx-dl-deviceinfo-n1.*refused" "$WORK/clusterd.log"
[[ $(info_field n1 'json.dumps(e, sort_keys=True)') == "$before" ]] || fail "D: n1's entry changed"
[[ $(plugin_faults) == "n1/3/80E01801:FAULT_STATE_ACTIVE:1" ]] || fail "D: faults changed: $(plugin_faults)"
# Read whole, then grep: under pipefail, grep -q leaving early makes curl's write fail.
metrics=$(curl -s "http://127.0.0.1:$HTTP_PORT/metrics")
grep -q 'clusterd_mindcluster_deviceinfo_refused_total{reason="check_code"} 1' <<<"$metrics" ||
  fail "D: the refusal is not counted"
echo "   both refused, counted and logged; n1 keeps its last good view"

echo "-- E: MindCluster NodeD's ConfigMap and a public-fault ConfigMap"
# nodeinfo_cm NODE: MindCluster NodeD's ConfigMap for NODE (a CPU fault, SeparateNPU), CheckCode
# the SHA-256 of the Go-JSON of the inner NodeInfo.
nodeinfo_cm() {
  python3 - "$1" <<'EOF'
import hashlib, json, sys
inner = {"FaultDevList": [{"DeviceType": "CPU", "DeviceId": 0, "FaultCode": ["CPU0001"], "FaultLevel": "SeparateNPU"}],
         "NodeStatus": "UnHealthy"}
# Go-JSON of the inner NodeInfo: struct fields in declaration order (as written above), no spaces.
go = json.dumps(inner, separators=(",", ":"))
value = json.dumps({"NodeInfo": inner, "CheckCode": hashlib.sha256(go.encode()).hexdigest()}, separators=(",", ":"))
print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "mindx-dl-nodeinfo-" + sys.argv[1], "namespace": "mindx-dl",
                               "labels": {"mx-consumer-cim": "true"}},
                  "data": {"NodeInfo": value}}))
EOF
}
node_status() {
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-node-cm | python3 -c '
import json, sys
v = json.load(sys.stdin)["data"]["cluster-info-node-cm"]
print((json.loads(v) if v else {}).get("mindx-dl-nodeinfo-" + sys.argv[1], {}).get("NodeStatus", "-"))' "$1"
}
k8s_api POST /api/v1/namespaces/mindx-dl/configmaps "$(nodeinfo_cm n1)" >/dev/null
k8s_api POST /api/v1/namespaces/mindx-dl/configmaps "$(nodeinfo_cm n3)" >/dev/null
wait_until 15 is 'node_status n1' UnHealthy
# n3 has no NodeD of ours: ClusterD knows it from the device plugin's ConfigMap (H).
wait_until 15 is 'node_status n3' UnHealthy
pf='{"id":"req-00000001","timestamp":1700000000000,"version":"1.0","resource":"CCAE","faults":[{"faultId":"fault-0001","faultType":"NPU","faultCode":"220001001","faultTime":1700000000000,"assertion":"occur","influence":[{"nodeName":"n2","deviceIds":[1,2]}],"description":"storage path down"}]}'
k8s_api POST /api/v1/namespaces/ops/configmaps "$(python3 -c 'import json,sys; print(json.dumps({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pf","namespace":"ops","labels":{"mc-consumer-publicfault":"true"}},"data":{"PublicFault":sys.argv[1]}}))' "$pf")" >/dev/null
wait_until 15 is 'lst n2 -Unhealthy' "Ascend910-1,Ascend910-2"
[[ $(lst n2 -Fault) == *PublicFault* ]] || fail "E: no PublicFault entry: $(lst n2 -Fault)"
echo "   n1 and n3 UnHealthy in cluster-info-node-cm; n2 chips 1 and 2 out for public fault 220001001"
# MindCluster's NodeD deletes its ConfigMap once the node is healthy: the faults clear.
k8s_api DELETE /api/v1/namespaces/mindx-dl/configmaps/mindx-dl-nodeinfo-n1 >/dev/null
k8s_api DELETE /api/v1/namespaces/mindx-dl/configmaps/mindx-dl-nodeinfo-n3 >/dev/null
wait_until 15 is 'node_status n1' -
wait_until 15 is 'node_status n3' -
# The public fault recovers through the same ConfigMap.
k8s_api PUT /api/v1/namespaces/ops/configmaps/pf "$(python3 -c 'import json,sys; print(json.dumps({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pf","namespace":"ops","labels":{"mc-consumer-publicfault":"true"}},"data":{"PublicFault":sys.argv[1].replace("occur","recover").replace("req-00000001","req-00000002")}}))' "$pf")" >/dev/null
wait_until 30 is 'lst n2 -Unhealthy' ""
echo "   cleared: n1 gone from cluster-info-node-cm, n2's chips back"

echo "-- F: kill -9 and a restart: never emptied, nothing raised twice, changes applied"
plugin_cm n1 3  # a good one again
wait_until 15 is 'info_field n1 "json.dumps(e, sort_keys=True)"' "$before" || true
kill_wait "$CLUSTERD_PID"
rv=$(k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-device-0 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])')
plugin_cm n2 6  # while ClusterD is down
start_clusterd "${CLUSTERD_FLAGS[@]}"
# From the restart on, every version of the ConfigMap lists all three nodes.
watch_out="$WORK/cm-watch.json"
curl -sSN --max-time 20 --cacert "$K8S_CA" -H "Authorization: Bearer $K8S_ADMIN_TOKEN" \
  "$K8S_API/api/v1/namespaces/mindx-dl/configmaps?watch=1&fieldSelector=metadata.name%3Dcluster-info-device-0&resourceVersion=$rv" \
  >"$watch_out" 2>"$WORK/cm-watch.err" &
watch_pid=$!
wait_until 30 is 'lst n2 -Unhealthy' "Ascend910-6"
wait_until 15 is plugin_faults "n1/3/80E01801:FAULT_STATE_ACTIVE:1 n2/6/80E01801:FAULT_STATE_ACTIVE:1"
kill "$watch_pid" 2>/dev/null || true
wait "$watch_pid" 2>/dev/null || true
python3 - "$watch_out" <<'EOF' || fail "F: a version of the ConfigMap lost a node ($(head -c 600 "$watch_out") $(cat "$WORK/cm-watch.err"))"
import json, sys
seen = 0
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    ev = json.loads(line)
    v = ev["object"]["data"]["cluster-info-device-0"]
    nodes = sorted(json.loads(v)) if v else []
    assert nodes == ["mindx-dl-deviceinfo-n1", "mindx-dl-deviceinfo-n2", "mindx-dl-deviceinfo-n3"], (ev["type"], nodes)
    seen += 1
assert seen >= 1, "no version written after the restart"
print("   %d version(s) after the restart, each with all three nodes" % seen)
EOF

echo "-- G: a chip whose faults come back is separated, kept across kill -9, released by an operator"
# device_field NODE ID PYEXPR: PYEXPR over d (the device as GetNode answers it).
device_field() {
  grpcurl -plaintext -d "{\"name\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetNode | python3 -c '
import json, sys
d = next((d for d in json.load(sys.stdin).get("devices", []) if d.get("id", 0) == int(sys.argv[1])), {})
print(eval(sys.argv[2]))' "$2" "$3"
}
# chip4_entry: the -Fault entry for n2's chip 4 that ClusterD wrote, as "level:code".
chip4_entry() {
  info_field n2 '",".join(f["fault_level"] + ":" + f["fault_code"] for f in json.loads(e["DeviceList"]["huawei.com/Ascend910-Fault"]) if f["npu_name"] == "Ascend910-4")'
}
inject_sim_fault n2 4 80E18402
wait_until 15 is 'lst n2 -Unhealthy' "Ascend910-4,Ascend910-6"
inject_sim_fault n2 4 80E18402 clear
wait_until 15 is 'lst n2 -Unhealthy' "Ascend910-6"
[[ $(device_field n2 4 'len(d.get("separation_fault_times", []))') == 1 ]] || fail "G: the first fault is not counted"
inject_sim_fault n2 4 80E18402
wait_until 15 is 'device_field n2 4 "d.get(\"separated\", False)"' True
inject_sim_fault n2 4 80E18402 clear
wait_until 15 is chip4_entry "ManuallySeparateNPU:"
[[ $(lst n2 -Unhealthy) == "Ascend910-4,Ascend910-6" && $(lst n2 "") != *Ascend910-4* ]] ||
  fail "G: separated chip 4 is not out: available $(lst n2 "") unhealthy $(lst n2 -Unhealthy)"
watched=$(timeout 5 grpcurl -plaintext -max-time 3 -d '{"from_revision": 1, "nodes": ["n2"], "types": ["EVENT_TYPE_DEVICE_SEPARATED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true)
expect_contains "$watched" '"reason": "2 faults within 24h"' "G: DEVICE_SEPARATED in Watch"
kill_wait "$CLUSTERD_PID"
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 30 connected 2
[[ $(device_field n2 4 'd.get("separated", False)') == True ]] || fail "G: the separation did not survive kill -9"
[[ $(chip4_entry) == "ManuallySeparateNPU:" ]] || fail "G: chip 4 is not listed separated after the restart: $(chip4_entry)"
"$BIN/clusterctl" --server "$ADDR" release n2 4 --reason "card reseated" --actor ops >"$WORK/release.out" ||
  fail "G: clusterctl release: $(cat "$WORK/release.out")"
wait_until 15 is 'lst n2 -Unhealthy' "Ascend910-6"
[[ $(lst n2 "") == *Ascend910-4* ]] || fail "G: chip 4 not available again: $(lst n2 "")"
watched=$(timeout 5 grpcurl -plaintext -max-time 3 -d '{"from_revision": 1, "nodes": ["n2"], "types": ["EVENT_TYPE_DEVICE_RELEASED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true)
expect_contains "$watched" '"actor": "ops"' "G: DEVICE_RELEASED by ops in Watch"
echo "   chip 4 separated after 2 faults (ManuallySeparateNPU), kept across kill -9, released by clusterctl"

echo "-- H: the node without NodeD is ClusterD's from the plugin alone"
registered_by() {
  grpcurl -plaintext -d "{\"name\": \"$1\"}" "$ADDR" clusterd.v1.ClusterService/GetNode 2>/dev/null |
    python3 -c 'import json,sys; n = json.load(sys.stdin)["node"]; print(n.get("registered_by", ""), len(n.get("inventory", {}).get("devices", [])))'
}
[[ $(registered_by n3) == "mindcluster 8" ]] || fail "H: n3 is not registered by the integration: $(registered_by n3)"
[[ $(registered_by n1) == " 8" ]] || fail "H: n1 (with NodeD) is not its agent's: $(registered_by n1)"
plugin_cm n3 2
wait_until 15 is 'plugin_faults' "n1/3/80E01801:FAULT_STATE_ACTIVE:1 n2/6/80E01801:FAULT_STATE_ACTIVE:1 n3/2/80E01801:FAULT_STATE_ACTIVE:1"
wait_until 15 is 'lst n3 -Unhealthy' "Ascend910-2"
# An A3 switch fault in n3's plugin ConfigMap: Volcano's cluster-info-switch-0 says UnHealthy.
body=$(k8s_api GET /api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-n3 | python3 -c '
import json, sys
cm = json.load(sys.stdin)
fault = json.dumps({"EventType": 1, "AssembledFaultCode": "[0x00f1ff09,155913,L2,na]", "PeerPortDevice": 0,
                    "PeerPortId": 0, "SwitchChipId": 1, "SwitchPortId": 7, "Severity": 2, "Assertion": 1,
                    "AlarmRaisedTime": 1700000000000})
cm["data"]["SwitchInfoCfg"] = json.dumps({"FaultCode": [fault], "FaultLevel": "RestartBusiness", "UpdateTime": 1700000000,
                                          "NodeStatus": "UnHealthy", "FaultTimeAndLevelMap": {}})
print(json.dumps(cm))')
k8s_api PUT /api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-n3 "$body" >/dev/null
switch_status() {
  k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/cluster-info-switch-0 2>/dev/null | python3 -c '
import json, sys
cm = json.load(sys.stdin)
assert cm["metadata"]["labels"] == {"mx-consumer-volcano": "true"}, cm["metadata"]["labels"]
e = json.loads(cm["data"]["cluster-info-switch-0"]).get("mindx-dl-switchinfo-" + sys.argv[1], {})
print(e.get("NodeStatus", "-"), len(e.get("FaultCode", [])))' "$1"
}
wait_until 15 is 'switch_status n3' "UnHealthy 1"
echo "   n3 registered by mindcluster with 8 chips; its plugin fault n3/2/80E01801 raised in ClusterD;"
echo "   its switch fault in cluster-info-switch-0 (UnHealthy)"
echo "-- I: the plugin's level is the level: 81078603 (NOT_HANDLE in our catalog) written SeparateNPU"
# level_of NODE DEVICE CODE: level, reported_level, catalog_level and level_source of that plugin fault.
level_of() {
  grpcurl -plaintext -d "{\"node\": \"$1\", \"active_only\": true}" "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c 'import json,sys
fs = [f for f in json.load(sys.stdin).get("faults", []) if f.get("device_id", 0) == int(sys.argv[1]) and f["code"] == sys.argv[2]]
print(" ".join(fs[0].get(k, "-") for k in ("level", "reported_level", "catalog_level", "level_source")) if fs else "none")' "$2" "$3"
}
PLUGIN_CODE=81078603 plugin_cm n3 5
wait_until 15 is 'level_of n3 5 81078603' "FAULT_LEVEL_SEPARATE FAULT_LEVEL_SEPARATE FAULT_LEVEL_NOT_HANDLE reporter"
[[ $(grpcurl -plaintext -d '{"name": "n3"}' "$ADDR" clusterd.v1.ClusterService/GetNode |
  python3 -c 'import json,sys; print([d.get("health") for d in json.load(sys.stdin)["devices"] if d.get("id", 0) == 5][0])') == HEALTH_UNHEALTHY ]] ||
  fail "I: n3 chip 5 is not unhealthy in ClusterD"
echo "   n3/5/81078603 at SEPARATE as the plugin wrote it (the catalog's NOT_HANDLE shown beside it)"
echo "-- J: a job's job-summary ConfigMap in its namespace (mindcluster-jobs), deleted with the job after the delay"
grpcurl -plaintext -d '{"job": {"id": "uid-llm", "kind": "JOB_KIND_TRAINING", "labels": {"k8s.namespace": "ops",
    "k8s.name": "llm", "mindcluster/framework": "pytorch"}, "placement": [{"rank": 0, "node": "n1", "device_id": 0},
    {"rank": 1, "node": "n1", "device_id": 1}]}}' "$ADDR" clusterd.v1.JobService/CreateJob >/dev/null || fail "J: CreateJob"
# summary_cm: operator, job_id, job_status and the rank table's servers of ops/job-summary-llm ("none": absent).
summary_cm() {
  local body
  body=$(k8s_api GET /api/v1/namespaces/ops/configmaps/job-summary-llm 2>/dev/null) || { echo none; return; }
  python3 -c '
import json, sys
try:
    cm = json.load(sys.stdin)
except ValueError:
    print("none"); sys.exit()
if cm.get("kind") != "ConfigMap":
    print("none"); sys.exit()
d = cm["data"]
assert cm["metadata"]["labels"] == {"outside-job-info": "true"}, cm["metadata"]["labels"]
t = json.loads(d["hccl.json"])
print(d["operator"], d["job_id"], d["cm_index"] + "/" + d["total"], d["framework"],
      ",".join(s["server_name"] for s in t.get("server_list", [])))' <<<"$body"
}
wait_until 15 is summary_cm "add uid-llm 0/1 pytorch n1"
grpcurl -plaintext -d '{"id": "uid-llm"}' "$ADDR" clusterd.v1.JobService/DeleteJob >/dev/null || fail "J: DeleteJob"
wait_until 15 is summary_cm "delete uid-llm 0/1 pytorch "
wait_until 15 is summary_cm "none"
echo "   ops/job-summary-llm: add (rank table on n1), then delete, then gone 2 s later"
echo "-- K: the operators' ConfigMaps: policy, manual-info list and release, observability"
SYS=/api/v1/namespaces/cluster-system/configmaps
metric() { curl -s "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
k8s_api POST $SYS '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"clusterd-config-cm","namespace":"cluster-system"},"data":{"manually_separate_policy.conf":"enabled: true\nseparate:\n  fault_window_hours: 48\n  fault_threshold: 1\nrelease:\n  fault_free_hours: -1\n"}}' >/dev/null
wait_until 15 is 'metric clusterd_mindcluster_separation_policy_window_hours' 48
[[ $(metric clusterd_mindcluster_separation_policy_threshold) == 1 && $(metric clusterd_mindcluster_separation_policy_from_configmap) == 1 ]] ||
  fail "K: the ConfigMap's policy is not in force"
inject_sim_fault n2 7 80E18402  # one fault separates now
wait_until 15 is 'device_field n2 7 "d.get(\"separated\", False)"' True
expect_contains "$(timeout 5 grpcurl -plaintext -max-time 3 -d '{"from_revision": 1, "nodes": ["n2"], "types": ["EVENT_TYPE_DEVICE_SEPARATED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true)" '"reason": "1 fault within 48h"' "K: separated under the ConfigMap's policy"
inject_sim_fault n2 7 80E18402 clear
manual_total() { k8s_api GET $SYS/clusterd-manual-info-cm 2>/dev/null | python3 -c '
import json, sys
print(",".join(json.loads(json.load(sys.stdin)["data"].get(sys.argv[1], "{}")).get("Total") or []))' "$1"; }
wait_until 15 is 'manual_total n2' Ascend910-7
k8s_api GET $SYS/clusterd-manual-info-cm | python3 -c '
import json, sys
v = json.loads(json.load(sys.stdin)["data"]["n2"])
assert list(v) == ["Total", "Detail"], v
d = v["Detail"]["Ascend910-7"]
assert [sorted(e) for e in d] == [["FaultCode", "FaultLevel", "LastSeparateTime"]] * len(d) and d[0]["FaultLevel"] == "ManuallySeparateNPU", d
' || fail "K: clusterd-manual-info-cm is not in the reference's shape"
[[ $(lst n2 "") != *Ascend910-7* ]] || fail "K: separated chip 7 still available"
# The operator deletes the chip from the node's entry, as kubectl edit does (its field manager
# then owns the key it changed: a manager that only removes keys gets no managedFields entry).
k8s_api GET $SYS/clusterd-manual-info-cm | python3 -c '
import json, sys
cm = json.load(sys.stdin); v = json.loads(cm["data"]["n2"]); v["Total"].remove("Ascend910-7"); del v["Detail"]["Ascend910-7"]
cm["data"]["n2"] = json.dumps(v); cm["metadata"].pop("managedFields", None); print(json.dumps(cm))' >"$WORK/manual.json"
k8s_api PUT "$SYS/clusterd-manual-info-cm?fieldManager=kubectl-edit" "$(cat "$WORK/manual.json")" >/dev/null
wait_until 15 is 'device_field n2 7 "d.get(\"separated\", False)"' False
wait_until 15 is '[[ $(lst n2 "") == *Ascend910-7* ]] && echo yes' yes
watched=$(timeout 5 grpcurl -plaintext -max-time 3 -d '{"from_revision": 1, "nodes": ["n2"], "types": ["EVENT_TYPE_DEVICE_RELEASED"]}' \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>/dev/null || true)
expect_contains "$watched" '"actor": "mindcluster/kubectl-edit"' "K: DEVICE_RELEASED by the ConfigMap's editor"
expect_contains "$watched" 'deleted from cluster-system/clusterd-manual-info-cm by field manager kubectl-edit' "K: the release's reason"
# A public fault, for statistic-fault-info.
k8s_api PUT /api/v1/namespaces/ops/configmaps/pf "$(python3 -c 'import json,sys; print(json.dumps({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"pf","namespace":"ops","labels":{"mc-consumer-publicfault":"true"}},"data":{"PublicFault":sys.argv[1].replace("req-00000001","req-00000003")}}))' "$pf")" >/dev/null
stat_faults() { k8s_api GET $SYS/statistic-fault-info 2>/dev/null | python3 -c '
import json, sys
cm = json.load(sys.stdin)
assert cm["metadata"]["labels"] == {"mc-statistic-fault": "true"}, cm["metadata"]["labels"]
assert sorted(cm["data"]) == ["FaultNum", "PublicFaults"], sorted(cm["data"])
f = json.loads(cm["data"]["PublicFaults"]).get("n2", [])
print(json.loads(cm["data"]["FaultNum"])["publicFaultNum"], [(e["resource"], e["faultId"], e["devIds"], e["faultCode"], e["level"]) for e in f])'; }
wait_until 15 is stat_faults "1 [('CCAE', 'fault-0001', [1, 2], '220001001', 'SeparateNPU')]"
k8s_api GET /api/v1/namespaces/mindx-dl/configmaps/current-job-statistic | python3 -c '
import json, sys
d = json.load(sys.stdin)["data"]
assert sorted(d) == ["data", "totalJob"] and int(d["totalJob"]) == len(json.loads(d["data"])), d' ||
  fail "K: current-job-statistic is not in the reference's shape"
k8s_api GET $SYS/scheduling-exception-report >/dev/null || fail "K: no scheduling-exception-report"
echo "   policy from clusterd-config-cm (48h, 1 fault); chip 7 listed in clusterd-manual-info-cm and released"
echo "   by deleting it there (mindcluster/kubectl-edit); statistic-fault-info lists the public fault"
echo "-- L: a job discovered from an AscendJob's pods and PodGroup: its summary on job.Job and in job-summary-<job>"
k8s_apply_podgroup_crd
kill_wait "$CLUSTERD_PID"
start_clusterd "${CLUSTERD_FLAGS[@]/mindcluster,mindcluster-jobs/kubernetes,mindcluster,mindcluster-jobs}"
wait_until 30 connected 2
# faultdiag-online's subscription (the reference's job.proto, grpcurl for its client).
jobrpc() { grpcurl -plaintext -import-path proto -proto mindcluster/job.proto -d "$2" "$ADDR" "job.Job/$1"; }
CLIENT=$(jobrpc Register '{"role": "FdAgent"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["clientId"])')
jobrpc SubscribeJobSummarySignalList "{\"role\": \"FdAgent\", \"clientId\": \"$CLIENT\"}" >"$WORK/summaries.json" 2>&1 &
SUB_PID=$!
AJ_UID=$(python3 -c 'import uuid; print(uuid.uuid4())')
AJ_OWNER="[{\"apiVersion\":\"mindxdl.gitee.com/v1\",\"kind\":\"AscendJob\",\"name\":\"llm-pt\",\"uid\":\"$AJ_UID\",\"controller\":true}]"
k8s_api POST /apis/scheduling.volcano.sh/v1beta1/namespaces/ops/podgroups \
  "{\"apiVersion\":\"scheduling.volcano.sh/v1beta1\",\"kind\":\"PodGroup\",\"metadata\":{\"name\":\"llm-pt-${AJ_UID:0:8}\",
    \"ownerReferences\":$AJ_OWNER,\"labels\":{\"framework\":\"pytorch\"}},\"spec\":{\"minMember\":2}}" >/dev/null
aj_pod() {  # aj_pod NAME NODE RANK TOR_IP
  # The device plugin's record of the chips it gave the pod, with their
  # addresses on the accelerator network (192.168.RANK.10 and .11); key and
  # shape as in Ascend/mind-cluster component/ascend-common/api/default_name.go
  # (Pod910DeviceAnno) and component/clusterd/pkg/domain/pod/pod_util.go.
  local conf
  conf=$(python3 -c 'import json, sys; r = sys.argv[1]
print(json.dumps(json.dumps({"pod_name": "p", "devices": [{"device_id": "0", "device_ip": "192.168.%s.10" % r},
                                                          {"device_id": "1", "device_ip": "192.168.%s.11" % r}]})))' "$3")
  k8s_api POST /api/v1/namespaces/ops/pods "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",
    \"labels\":{\"app\":\"llm-pt\"},
    \"annotations\":{\"scheduling.k8s.io/group-name\":\"llm-pt-${AJ_UID:0:8}\",\"hccl/rankIndex\":\"$3\",
      \"huawei.com/AscendReal\":\"Ascend910-0,Ascend910-1\",\"isSharedTor\":\"1\",\"sharedTorIp\":\"$4\",
      \"ascend.kubectl.kubernetes.io/ascend-910-configuration\":$conf},
    \"ownerReferences\":$AJ_OWNER},
    \"spec\":{\"nodeName\":\"$2\",\"containers\":[{\"name\":\"ascend\",\"image\":\"train:1\",
      \"env\":[{\"name\":\"MASTER_ADDR\",\"value\":\"10.0.0.10\"}]}]}}" >/dev/null
  k8s_api PATCH "/api/v1/namespaces/ops/pods/$1/status" '{"status":{"phase":"Running"}}' >/dev/null
}
aj_pod llm-pt-worker-0 n1 0 10.1.0.1
aj_pod llm-pt-worker-1 n2 1 10.1.0.2
# told: "operator status framework sharedTorIp masterAddr servers" of the job's last summary on the stream.
told() {
  python3 - "$WORK/summaries.json" "$AJ_UID" <<'PY'
import json, sys
text, dec, i, last = open(sys.argv[1]).read(), json.JSONDecoder(), 0, None
while True:
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    try:
        obj, i = dec.raw_decode(text, i)
    except ValueError:
        break
    for s in obj.get("jobSummarySignals", []):
        if s.get("jobId") == sys.argv[2]: last = s
if last is None:
    print("none"); sys.exit()
h = json.loads(last.get("HcclJson") or "{}")
servers = ";".join(sv["server_name"] + ":" + ",".join(d["device_id"] + "/" + d["rank_id"] + "@" + d["device_ip"]
                                                     for d in sv["device"])
                   for sv in h.get("server_list", []))
print(last.get("operator"), last.get("jobStatus"), last.get("frameWork"), last.get("sharedTorIp"), last.get("masterAddr"),
      servers or "-")
PY
}
TOLD_RUNNING='add running pytorch ["10.1.0.1","10.1.0.2"] 10.0.0.10 n1:0/0@192.168.0.10,1/1@192.168.0.11;n2:0/2@192.168.1.10,1/3@192.168.1.11'
wait_until 30 is told "$TOLD_RUNNING" || fail "L: job.Job told $(told) (expected $TOLD_RUNNING)"
# ajob_cm: the same from ops/job-summary-llm-pt ("none": absent).
ajob_cm() {
  local body
  body=$(k8s_api GET /api/v1/namespaces/ops/configmaps/job-summary-llm-pt 2>/dev/null) || { echo none; return; }
  python3 -c '
import json, sys
cm = json.load(sys.stdin)
if cm.get("kind") != "ConfigMap":
    print("none"); sys.exit()
d = cm["data"]
t = json.loads(d["hccl.json"])
servers = ";".join(sv["server_name"] + ":" + ",".join(x["device_id"] + "/" + x["rank_id"] + "@" + x["device_ip"]
                                                     for x in sv["device"])
                   for sv in t.get("server_list", []))
print(d["operator"], d["job_status"], d["framework"], d.get("sharedTorIp"), d.get("masterAddr"), d["job_id"] == sys.argv[1],
      servers or "-")' "$AJ_UID" <<<"$body"
}
wait_until 15 is ajob_cm 'add running pytorch ["10.1.0.1","10.1.0.2"] 10.0.0.10 True n1:0/0@192.168.0.10,1/1@192.168.0.11;n2:0/2@192.168.1.10,1/3@192.168.1.11' ||
  fail "L: ops/job-summary-llm-pt says $(ajob_cm)"
echo "   job.Job and ops/job-summary-llm-pt: running, pytorch, sharedTorIp [10.1.0.1,10.1.0.2], masterAddr 10.0.0.10, n1 and n2 with their chips' device IPs"
# The job ends: its pods go (ascend-operator deletes them with the job).
for p in llm-pt-worker-0 llm-pt-worker-1; do k8s_api DELETE "/api/v1/namespaces/ops/pods/$p?gracePeriodSeconds=0" >/dev/null; done
wait_until 30 is 'told | cut -d" " -f1-2' "delete failed" || fail "L: job.Job told $(told) after the pods went"
wait_until 15 is 'ajob_cm | cut -d" " -f1-2' "delete failed" || wait_until 15 is ajob_cm none ||
  fail "L: ops/job-summary-llm-pt says $(ajob_cm) after the pods went"
wait_until 15 is ajob_cm none
kill "$SUB_PID" 2>/dev/null || true
echo "   the pods deleted: told delete (failed), the ConfigMap gone after the delay"
echo "PASS: mindcluster stack (device plugin in, Volcano's cluster-info out)"
