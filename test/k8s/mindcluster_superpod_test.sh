#!/usr/bin/env bash
# MindCluster NodeD's pingmesh with ClusterD (docs/mindcluster.md, "SuperPoD ConfigMaps for
# MindCluster NodeD's pingmesh"), against a REAL etcd + kube-apiserver on loopback
# (test/k8s/lib.sh), ClusterD with the "mindcluster" integration and
# --mindcluster-super-pod-cms:
#  A. Nodes annotated as the A3 device plugin annotates them (superPodID, serverIndex,
#     serverType, baseDeviceInfos): two SuperPoDs, a node in none, one with a bad superPodID
#     -> cluster-system/super-pod-1 and super-pod-2, label app=pingmesh, key superPodDevice
#     the reference's JSON; the bad node counted in ..._super_pod_nodes_skipped;
#  B. a node moved to the other SuperPoD -> both rewritten; the last node of SuperPoD 1
#     deleted -> super-pod-1 deleted;
#  C. kill -9 and a restart: super-pod-2 adopted, not rewritten (its resourceVersion kept);
#     a node added while ClusterD was down is published;
#  D. MindCluster NodeD's pingmesh finding (a public-fault ConfigMap
#     cluster-system/pingmesh-fault-<node> as its cmreporter writes it) -> a ClusterD fault of
#     reporter pubfault/pingmesh on that node's chip.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
source test/k8s/lib.sh  # and test/e2e/lib.sh

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_cleanup() { k8s_stop; }
on_failure() {
  echo "--- clusterd.log"; tail -40 "$WORK/clusterd.log"
  echo "--- super-pod ConfigMaps"
  k8s_api GET "/api/v1/namespaces/cluster-system/configmaps?labelSelector=app%3Dpingmesh" || true
}

k8s_start
k8s_create_namespace mindx-dl
k8s_create_namespace cluster-system
echo "-- API server ready at $K8S_API"

# node_json NAME SUPERPOD SERVER_INDEX FIRST_SDID: a Node as the A3 device plugin annotates it
# (baseDeviceInfos: json.Marshal of "Ascend910-<i>" -> {IP, SuperDeviceID}, 4 chips).
node_json() {
  python3 - "$@" <<'EOF'
import json, sys
name, sp, index, first = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
infos = {"Ascend910-%d" % i: {"IP": "29.%d.%d.1" % (first, i), "SuperDeviceID": first + i} for i in range(4)}
print(json.dumps({"apiVersion": "v1", "kind": "Node",
                  "metadata": {"name": name, "annotations": {
                      "superPodID": sp, "serverIndex": index, "serverType": "A3",
                      "baseDeviceInfos": json.dumps(infos, separators=(",", ":"), sort_keys=True)}}}))
EOF
}
put_node() {
  local body
  body=$(node_json "$@")
  if k8s_api GET "/api/v1/nodes/$1" >/dev/null 2>&1; then
    k8s_api PATCH "/api/v1/nodes/$1" "$(python3 -c 'import json,sys; print(json.dumps({"metadata": {"annotations": json.loads(sys.argv[1])["metadata"]["annotations"]}}))' "$body")" >/dev/null
  else
    k8s_api POST /api/v1/nodes "$body" >/dev/null
  fi
}
# members ID: the nodes super-pod-ID lists ("<absent>" without the ConfigMap), sorted.
members() {
  local cm
  cm=$(k8s_api GET "/api/v1/namespaces/cluster-system/configmaps/super-pod-$1" 2>/dev/null) || { echo "<absent>"; return; }
  python3 -c 'import json,sys; print(" ".join(sorted(json.loads(json.loads(sys.argv[1])["data"]["superPodDevice"])["NodeDeviceMap"])))' "$cm"
}
version_of() {
  k8s_api GET "/api/v1/namespaces/cluster-system/configmaps/super-pod-$1" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["resourceVersion"])'
}
metric() { curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v m="$1" '$1 == m {print $2}'; }
is() { [[ "$(eval "$1")" == "$2" ]]; }

put_node a3-n1 1 0 100
put_node a3-n2 1 1 104
put_node a3-n3 2 0 200
k8s_api POST /api/v1/nodes '{"apiVersion":"v1","kind":"Node","metadata":{"name":"cpu-n1"}}' >/dev/null
put_node a3-bad 007 0 300
CLUSTERD_FLAGS=(--kubeconfig "$K8S_KUBECONFIG" --integrations mindcluster --mindcluster-super-pod-cms true
  --mindcluster-public-fault-namespaces cluster-system --mindcluster-cluster-info-writes-per-second 50
  --log-level info)
start_clusterd "${CLUSTERD_FLAGS[@]}"

echo "-- A: super-pod-<id> ConfigMaps from the Nodes' annotations"
wait_until 30 is 'members 1' "a3-n1 a3-n2"
wait_until 30 is 'members 2' "a3-n3"
cm=$(k8s_api GET /api/v1/namespaces/cluster-system/configmaps/super-pod-1)
python3 - "$cm" <<'EOF' || fail "A: super-pod-1's label and value"
import json, sys
cm = json.loads(sys.argv[1])
assert cm["metadata"]["labels"] == {"app": "pingmesh"}, cm["metadata"]["labels"]
assert list(cm["data"]) == ["superPodDevice"], list(cm["data"])
v = cm["data"]["superPodDevice"]
want = {"Version": "A3", "SuperPodID": "1", "NodeDeviceMap": {
    "a3-n1": {"NodeName": "a3-n1", "ServerID": "0", "DeviceMap": {"0": "100", "1": "101", "2": "102", "3": "103"}},
    "a3-n2": {"NodeName": "a3-n2", "ServerID": "1", "DeviceMap": {"0": "104", "1": "105", "2": "106", "3": "107"}}}}
assert json.loads(v) == want, v
# Go's json.Marshal bytes: no spaces, keys in the struct's order, maps sorted.
assert v == json.dumps(want, separators=(",", ":")), v
EOF
[[ $(members 7) == "<absent>" ]] || fail "A: a ConfigMap for the bad node's SuperPoD"
wait_until 10 is 'metric clusterd_mindcluster_super_pod_nodes_skipped{reason=\"super_pod_id\"}' 1
grep -q "node a3-bad is left out" "$WORK/clusterd.log" || fail "A: the bad node's reason is not logged"
echo "   super-pod-1 (a3-n1, a3-n2) and super-pod-2 (a3-n3) in the reference's shape; a3-bad skipped and logged"

echo "-- B: a node moves; the last node of a SuperPoD goes and so does its ConfigMap"
put_node a3-n2 2 1 104
wait_until 30 is 'members 2' "a3-n2 a3-n3"
wait_until 30 is 'members 1' "a3-n1"
k8s_api DELETE /api/v1/nodes/a3-n1 >/dev/null
wait_until 30 is 'members 1' "<absent>"
echo "   a3-n2 moved to super-pod-2; super-pod-1 deleted with a3-n1"

echo "-- C: kill -9 and a restart adopt the ConfigMaps"
rv=$(version_of 2)
kill_wait "$CLUSTERD_PID"
put_node a3-n4 3 0 400
start_clusterd "${CLUSTERD_FLAGS[@]}"
wait_until 30 is 'members 3' "a3-n4"
[[ $(version_of 2) == "$rv" ]] || fail "C: super-pod-2 was rewritten after the restart"
[[ $(metric clusterd_mindcluster_super_pod_writes_total) == 1 ]] ||
  fail "C: $(metric clusterd_mindcluster_super_pod_writes_total) writes after the restart, want 1 (super-pod-3)"
echo "   super-pod-2 kept (resourceVersion $rv), super-pod-3 written for the node added meanwhile"

echo "-- D: MindCluster NodeD's pingmesh finding becomes a ClusterD fault on its chip"
start_sim_noded a3-n3
wait_ready "${NODED_PORT[a3-n3]}"
wait_until 30 bash -c "grpcurl -plaintext -d '{\"name\":\"a3-n3\"}' '$ADDR' clusterd.v1.ClusterService/GetNode >/dev/null 2>&1"
fault=$(python3 - <<'EOF'
import hashlib, json, time
now = int(time.time() * 1000)
req = {"id": "0e6f6c3a-4b1b-11f0-9d6b-0242ac110002", "timestamp": now, "version": "1.0", "resource": "pingmesh",
       "faults": [{"faultId": hashlib.sha256(b"a3-n3/5").hexdigest(), "faultType": "NPU", "faultCode": "220001001",
                   "faultTime": now, "assertion": "occur", "faultLocation": {},
                   "influence": [{"nodeName": "a3-n3", "nodeSN": "", "deviceIds": [5]}],
                   "description": "hccsping-mesh fault"}]}
print(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "pingmesh-fault-a3-n3", "namespace": "cluster-system",
                               "labels": {"mc-consumer-publicfault": "true"}},
                  "data": {"PublicFault": json.dumps(req, separators=(",", ":"))}}))
EOF
)
k8s_api POST /api/v1/namespaces/cluster-system/configmaps "$fault" >/dev/null
pingmesh_faults() {
  grpcurl -plaintext -d '{"page_size": 1000}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c 'import json,sys; print(" ".join(sorted("%s/%s/%s/%s" % (f["node"], f.get("device_id", 0), f["code"], f["level"]) for f in json.load(sys.stdin).get("faults", []) if f.get("reporter") == "pubfault/pingmesh" and f.get("state") == "FAULT_STATE_ACTIVE")))'
}
wait_until 30 is pingmesh_faults "a3-n3/5/220001001/FAULT_LEVEL_SEPARATE"
echo "   pingmesh-fault-a3-n3 -> a3-n3 chip 5, 220001001, SEPARATE"
echo "PASS mindcluster_superpod"
