#!/usr/bin/env bash
# Fault domains and incidents end to end (docs/domains.md): sim nodeds in two
# SuperPoDs (their --labels carry MindCluster's SuperPoD label), a real
# clusterd over gRPC. Chip faults on three nodes of SuperPoD 1 become one
# incident (GetIncident, ListIncidents, a Watch event, clusterctl); a lone
# chip fault in SuperPoD 2 stays a chip fault; the incident survives a
# clusterd restart and closes when its faults clear.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
on_failure() { tail_logs 30 "$WORK/clusterd.log"; }
cluster() { grpcurl -plaintext -d "${2:-{\}}" "$ADDR" "clusterd.v1.ClusterService/$1"; }
ctl() { "$BIN/clusterctl" --server "$ADDR" "$@"; }
NODES=(a1 a2 a3 a4 b1 b2)
pod_of() { [[ $1 == a* ]] && echo 1 || echo 2; }

start_clusterd --incident-isolate-percent 0
for n in "${NODES[@]}"; do
  start_sim_noded "$n" --labels "huawei.com/topotree.superpodid=$(pod_of "$n")"
done
all_connected() {
  [[ $(cluster GetSummary | python3 -c 'import json,sys; print(json.load(sys.stdin).get("connected_agents", 0))') == 6 ]]
}
wait_until 60 all_connected

echo "-- every node knows its domain; ListDomains counts the members"
node=$(cluster GetNode '{"name": "a2"}')
expect_contains "$node" '"level": "superpod"' "GetNode domains"
expect_contains "$node" '"name": "1"' "GetNode domain name"
members=$(cluster ListNodes '{"domain": "superpod=2"}' | python3 -c 'import json,sys; print(" ".join(n["name"] for n in json.load(sys.stdin)["nodes"]))')
[[ $members == "b1 b2" ]] || fail "ListNodes domain=superpod=2: $members"
domains=$(ctl get domains)
expect_contains "$domains" "superpod=1" "get domains"
echo "$domains" | grep -E '^superpod=1 +4 +32 ' >/dev/null || fail "superpod=1 should have 4 nodes, 32 chips: $domains"

REV=$(cluster GetSummary | python3 -c 'import json,sys; print(json.load(sys.stdin).get("revision","0"))')
echo "-- a lone chip fault in SuperPoD 2 stays a chip fault"
inject_sim_fault b1 2 80E01801
b1_raised() { [[ -n $(active_faults b1 80E01801) ]]; }
wait_until 30 b1_raised

echo "-- chip faults on three nodes of SuperPoD 1 are one incident"
for n in a1 a2 a3; do inject_sim_fault "$n" 0 80E01801; done
one_incident() {
  [[ $(cluster ListIncidents | python3 -c 'import json,sys; print(json.load(sys.stdin).get("total_size", 0))') == 1 ]]
}
wait_until 30 one_incident
ID=$(cluster ListIncidents | python3 -c 'import json,sys; print(json.load(sys.stdin)["incidents"][0]["id"])')
inc=$(cluster GetIncident "{\"id\": \"$ID\"}")
expect_contains "$inc" '"state": "INCIDENT_STATE_OPEN"' "GetIncident state"
expect_contains "$inc" '"nodes_hit": 3' "GetIncident nodes hit"
expect_contains "$inc" '"kind": "INCIDENT_ROOT_KIND_DOMAIN"' "GetIncident root"
python3 - "$inc" <<'PY' || fail "the incident's members are not a1..a3"
import json, sys
inc = json.loads(sys.argv[1])
assert sorted(m["node"] for m in inc["incident"]["members"]) == ["a1", "a2", "a3"], inc
assert inc["incident"]["domain"] == {"level": "superpod", "name": "1"}, inc
PY
watch=$(grpcurl -plaintext -max-time 3 -d "{\"fromRevision\": \"$REV\", \"types\": [\"EVENT_TYPE_INCIDENT_OPENED\"]}" \
  "$ADDR" clusterd.v1.ClusterService/Watch 2>&1 || true)
expect_contains "$watch" "\"id\": \"$ID\"" "Watch INCIDENT_OPENED"
expect_contains "$(ctl get incidents)" "superpod=1" "clusterctl get incidents"
described=$(ctl describe incident "$ID")
expect_contains "$described" "Members hit (3)" "describe incident"
expect_contains "$described" "opened: 3 node(s)" "describe incident timeline"
expect_contains "$(ctl get domains --degraded)" "$ID" "get domains shows the open incident"

echo "-- the incident survives a clusterd restart"
kill_wait "$CLUSTERD_PID"
start_clusterd --incident-isolate-percent 0
wait_until 60 all_connected
expect_contains "$(cluster GetIncident "{\"id\": \"$ID\"}")" '"state": "INCIDENT_STATE_OPEN"' "after restart"

echo "-- it closes when its faults clear"
for n in a1 a2 a3; do inject_sim_fault "$n" 0 80E01801 clear; done
closed() { cluster GetIncident "{\"id\": \"$ID\"}" | grep -q '"state": "INCIDENT_STATE_CLOSED"'; }
wait_until 30 closed
[[ $(cluster ListIncidents | python3 -c 'import json,sys; print(json.load(sys.stdin).get("total_size", 0))') == 1 ]] ||
  fail "a second incident formed"
echo "PASS domains"
