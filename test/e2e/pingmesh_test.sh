#!/usr/bin/env bash
# The pingmesh end to end (docs/pingmesh.md): a real clusterd and five sim
# NodeDs, each in a network namespace of this test's own (veth pairs into a
# hub namespace's bridge, 10.201.0.0/24 only inside them), one fault domain
# (rack=r1: the node label rack, --domain-levels rack=rack). ClusterD plans
# the probes, the NodeDs connect to their peers and report, ClusterD judges
# by majority:
#   - a node whose probe port is blocked (nothing answers where it says it is
#     probed) is named (NODE_PINGMESH_UNREACHABLE), not its peers;
#   - one path cut between two nodes (blackhole routes both ways) is named as
#     that link (LINK_PINGMESH_LOSS on both ends), no node;
#   - a kill -9 of clusterd keeps the findings (stored faults) and both clear
#     once repaired;
#   - the device plane: each node has two NPU ports (an hccn.conf this test
#     writes) and a fake hccn_tool of this test's (a script that answers
#     unless the test marked the pinged port down; n5 has no tool at all and
#     says its device plane was not probed): a port marked down is named on
#     its device (NPU_PINGMESH_UNREACHABLE), and clears once up again.
# Needs root for ip netns; says SKIP and passes without it.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
if ! ip netns add "pm-probe-$$" 2>/dev/null; then
  echo "SKIP: ip netns is not permitted here (needs root / CAP_SYS_ADMIN)"
  exit 0
fi
ip netns del "pm-probe-$$"

HUB="pm-hub-$$"
BR="pmbr$$"
BR=${BR:0:15}
NODES=(n1 n2 n3 n4 n5)
declare -A NS IP NODED_PID
NETNS=()
on_cleanup() {
  local ns
  for ns in "${NETNS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}
on_failure() {
  tail_logs 30 "$WORK/clusterd.log" "$WORK"/noded-*.log
  grpcurl_hub -d '{"pageSize": 1000}' clusterd.v1.ClusterService/ListFaults 2>&1 | tail -40 || true
}

echo "-- namespaces: a hub with a bridge, one namespace per node"
ip netns add "$HUB"
NETNS+=("$HUB")
ip -n "$HUB" link set lo up
ip -n "$HUB" link add "$BR" type bridge
ip -n "$HUB" addr add 10.201.0.1/24 dev "$BR"
ip -n "$HUB" link set "$BR" up
i=0
for n in "${NODES[@]}"; do
  i=$((i + 1))
  NS[$n]="pm-$n-$$"
  IP[$n]="10.201.0.$((10 + i))"
  ip netns add "${NS[$n]}"
  NETNS+=("${NS[$n]}")
  host="pmh$i-$$" peer="pmp$i-$$"
  host=${host:0:15}
  peer=${peer:0:15}
  ip link add "$host" netns "$HUB" type veth peer name "$peer" netns "${NS[$n]}"
  ip -n "$HUB" link set "$host" master "$BR"
  ip -n "$HUB" link set "$host" up
  ip -n "${NS[$n]}" link set lo up
  ip -n "${NS[$n]}" addr add "${IP[$n]}/24" dev "$peer"
  ip -n "${NS[$n]}" link set "$peer" up
done

# The device plane's fake hccn_tool (argv: -i <dev> -ping -g address <ip> pkt <n>):
# every packet answered, unless $WORK/npu-down-<ip> exists.
FAKE_HCCN_TOOL="$WORK/hccn_tool"
cat >"$FAKE_HCCN_TOOL" <<EOF
#!/bin/sh
dev=\$2; ip=\$6; n=\$8
echo "device \$dev PING \$ip"
if [ -e "$WORK/npu-down-\$ip" ]; then echo "\$n packets transmitted, 0 received, 100.00% packet loss"; exit 0; fi
i=0; while [ \$i -lt \$n ]; do echo "recv seq=\$i,time=0.050000ms"; i=\$((i+1)); done
echo "\$n packets transmitted, \$n received, 0.00% packet loss"
EOF
chmod 0755 "$FAKE_HCCN_TOOL"
i=0
for n in "${NODES[@]}"; do
  i=$((i + 1))
  printf 'address_0=172.31.%d.10\nnetmask_0=255.255.255.0\naddress_1=172.31.%d.11\n' "$i" "$i" >"$WORK/hccn-$n.conf"
done

ADDR=10.201.0.1:8899
grpcurl_hub() {
  local method=${*: -1}
  ip netns exec "$HUB" grpcurl -plaintext "${@:1:$#-1}" "$ADDR" "$method"
}
hub_ready() { ip netns exec "$HUB" curl -sf http://10.201.0.1:11253/readyz; }
start_clusterd_hub() {
  start_bg CLUSTERD_PID "$WORK/clusterd.log" ip netns exec "$HUB" "$BIN/clusterd" --listen "$ADDR" --insecure \
    --http-listen 10.201.0.1:11253 --data-dir "$WORK/clusterd" --log-level warn \
    --pingmesh-interval 1s --pingmesh-window 2s --pingmesh-attempts 2 --pingmesh-probe-timeout 200ms \
    --pingmesh-raise-after 2 --pingmesh-clear-after 2 --domain-levels rack=rack
  wait_until 30 hub_ready
}
# start_node NODE [FLAG...]: a sim noded in the node's namespace, its HTTP
# (probe) port on the node's address.
start_node() {
  local n=$1
  shift
  start_bg "NODED_PID[$n]" "$WORK/noded-$n.log" ip netns exec "${NS[$n]}" "$BIN/noded" --server "$ADDR" \
    --node-name "$n" --http-listen "${IP[$n]}:11255" --state-dir "$WORK/noded-$n" --accelerator sim \
    --sim-devices 2 --kmsg-path "" --pod-resources-socket "" --poll-interval 200ms --heartbeat-interval 500ms \
    --labels rack=r1 --http-insecure true --log-level warn --hccn-conf "$WORK/hccn-$n.conf" \
    --hccn-tool "$([[ $n == n5 ]] && echo "$WORK/no-hccn_tool" || echo "$FAKE_HCCN_TOOL")" "$@"
}
# The active pingmesh faults: "<node> <code> <external id>", sorted.
pingmesh_faults() {
  grpcurl_hub -d '{"pageSize": 1000, "activeOnly": true}' clusterd.v1.ClusterService/ListFaults |
    python3 -c '
import json, sys
out = []
for f in json.load(sys.stdin).get("faults", []):
    if f.get("reporter") == "clusterd-pingmesh" and f.get("state") == "FAULT_STATE_ACTIVE":
        out.append("%s %s %s" % (f["node"], f["code"], f.get("external_id", "")))
print("\n".join(sorted(out)))'
}
faults_are() { [[ "$(pingmesh_faults)" == "$1" ]]; }
connected_count() {
  grpcurl_hub clusterd.v1.ClusterService/GetSummary | python3 -c '
import json, sys
print(json.load(sys.stdin).get("connected_agents", 0))'
}
all_connected() { [[ "$(connected_count)" == 5 ]]; }

start_clusterd_hub
for n in "${NODES[@]}"; do
  if [[ $n == n3 ]]; then
    # Peers probe n3 where nothing listens: its probe port is blocked.
    start_node n3 --probe-address "${IP[n3]}:11299"
  else
    start_node "$n"
  fi
done
wait_until 60 all_connected

echo "-- a node whose probe port is blocked is named, not its peers"
wait_until 60 faults_are "n3 NODE_PINGMESH_UNREACHABLE pingmesh/node"
# The peers that could not reach n3 carry no fault of their own.
faults_are "n3 NODE_PINGMESH_UNREACHABLE pingmesh/node" || fail "peers were blamed: $(pingmesh_faults)"

echo "-- one path cut between n1 and n4 is named as that link"
ip -n "${NS[n1]}" route add blackhole "${IP[n4]}/32"
ip -n "${NS[n4]}" route add blackhole "${IP[n1]}/32"
LINK=$'n1 LINK_PINGMESH_LOSS pingmesh/link/n4\nn3 NODE_PINGMESH_UNREACHABLE pingmesh/node\nn4 LINK_PINGMESH_LOSS pingmesh/link/n1'
wait_until 60 faults_are "$LINK"

echo "-- the loss matrix names them too: ListLinks, the JSON API, clusterctl get links"
# The lossy directions of the last window and what accounts for each.
lossy_links() {
  grpcurl_hub -d '{"lossyOnly": true, "pageSize": 1000}' clusterd.v1.ClusterService/ListLinks | python3 -c '
import json, sys
r = json.load(sys.stdin)
print(" ".join(sorted("%s>%s:%s" % (l["source"], l["target"], l.get("finding", "")) for l in r.get("links", []))))'
}
links_named() {
  local got
  got=$(lossy_links)
  [[ $got == *"n1>n4:link"* && $got == *"n4>n1:link"* && $got == *"n2>n3:node:n3"* ]]
}
wait_until 30 links_named
ip netns exec "$HUB" curl -sf "http://10.201.0.1:11253/api/v1/links?node=n1&lossy_only=true" | python3 -c '
import json, sys
r = json.load(sys.stdin)
kinds = sorted(f["kind"] for f in r["findings"] if f.get("active"))
assert kinds == ["link", "node"], r["findings"]
assert all("n1" in (l["source"], l["target"]) for l in r["links"]), r["links"]' || fail "GET /api/v1/links"
table=$(ip netns exec "$HUB" "$BIN/clusterctl" --server "$ADDR" get links --lossy --node n4)
grep -Eq '^n4 +n1 +[0-9]+ +[0-9]+ +100% +- +link' <<<"$table" || fail "clusterctl get links: $table"

echo "-- kill -9 of clusterd: the findings stay, then clear once repaired"
kill_wait "$CLUSTERD_PID"
start_clusterd_hub
wait_until 60 all_connected
faults_are "$LINK" || fail "after the restart: $(pingmesh_faults)"
ip -n "${NS[n1]}" route del blackhole "${IP[n4]}/32"
ip -n "${NS[n4]}" route del blackhole "${IP[n1]}/32"
kill_wait "${NODED_PID[n3]}"
start_node n3
wait_until 60 faults_are ""

echo "-- the device plane: a port nothing reaches is named on its device, then clears"
touch "$WORK/npu-down-172.31.2.11"
wait_until 60 faults_are "n2 NPU_PINGMESH_UNREACHABLE pingmesh/npu/1"
device_links() {
  grpcurl_hub -d '{"lossyOnly": true, "pageSize": 1000}' clusterd.v1.ClusterService/ListLinks | python3 -c '
import json, sys
r = json.load(sys.stdin)
print(" ".join(sorted("%s>%s:%s:%s" % (l["source"], l["target"], l.get("plane", ""), l.get("finding", "")) for l in r.get("links", []))))'
}
got=$(device_links)
[[ $got == *"n1#1>n2#1:device:node:n2#1"* ]] || fail "ListLinks device plane: $got"
[[ $got != *"n5#"*">"* ]] || fail "n5 has no tool but reported its ports: $got"
rm -f "$WORK/npu-down-172.31.2.11"
wait_until 60 faults_are ""
unprobed=$(ip netns exec "${NS[n5]}" curl -sf "http://${IP[n5]}:11255/metrics" |
  awk '/^noded_pingmesh_device_rounds_unprobed_total /{print $2}')
((unprobed > 0)) || fail "noded n5 (no tool) did not count its unprobed rounds"
dprobes=$(ip netns exec "${NS[n2]}" curl -sf "http://${IP[n2]}:11255/metrics" |
  awk '/^noded_pingmesh_device_probes_total /{print $2}')
((dprobes > 0)) || fail "noded n2 sent no device probes"

echo "-- the probes ran: NodeD counts them"
probes=$(ip netns exec "${NS[n2]}" curl -sf "http://${IP[n2]}:11255/metrics" | awk '/^noded_pingmesh_probes_total /{print $2}')
((probes > 0)) || fail "noded n2 sent no probes"
echo "PASS"
