#!/usr/bin/env bash
# Fault domains and incidents end to end (docs/domains.md): sim nodeds in two
# SuperPoDs (their --labels carry MindCluster's SuperPoD label), a real
# clusterd over gRPC. Chip faults on three nodes of SuperPoD 1 become one
# incident (GetIncident, ListIncidents, a Watch event, clusterctl); a lone
# chip fault in SuperPoD 2 stays a chip fault; an evidence bundle is
# collected from each member (its kernel log from a file in /dev/kmsg's
# format, the readout, a vendor tool) and read back per member
# (GetIncidentEvidence, clusterctl describe incident --bundle); the incident
# survives a clusterd restart, its bundles expire by size under a smaller
# total cap, and it closes when its faults clear.
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

start_clusterd --incident-isolate-percent 0 --evidence-max-bundle-bytes 8192
# Each node's kernel log: a file in /dev/kmsg's format, its records stamped
# on the monotonic clock (as the kernel's are): one long before the faults
# (left out of the bundle), then enough recent ones to fill a bundle's half.
cat >"$WORK/evidence-commands.json" <<'JSON'
{"commands": [{"name": "vendor-tool", "argv": ["/bin/sh", "-c", "echo vendor-tool-output"], "timeout_seconds": 5}]}
JSON
for n in "${NODES[@]}"; do
  python3 - "$WORK/kmsg-$n" "$n" <<'PY'
import sys, time
now_us = int(time.monotonic() * 1e6)
with open(sys.argv[1], "w") as f:
    f.write("6,1,%d,-;evidence-too-old-%s\n" % (max(1, now_us - 3600 * 10**6), sys.argv[2]))
    for i in range(200):
        f.write("6,%d,%d,-;evidence-marker-%s line %d\n" % (i + 2, now_us - 20 * 10**6 + i, sys.argv[2], i))
PY
  start_sim_noded "$n" --labels "huawei.com/topotree.superpodid=$(pod_of "$n")" --kmsg-path "$WORK/kmsg-$n" \
    --evidence-commands-file "$WORK/evidence-commands.json"
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
# Under the isolation share (0 here: never), the incident keeps placement
# out of SuperPoD 1 only: avoid-domain, recorded, and Domain.avoided.
expect_contains "$inc" '"action": "avoid-domain"' "GetIncident avoid-domain decision"
expect_contains "$inc" '"avoid": true' "GetIncident avoid"
avoided_domains() {
  cluster ListDomains | python3 -c 'import json,sys; print(sorted(d["ref"]["name"] for d in json.load(sys.stdin)["domains"] if d.get("avoided")))'
}
[[ $(avoided_domains) == "['1']" ]] || fail "only superpod=1 should be avoided: $(avoided_domains)"
# Both SuperPoDs are degraded: 1 by the incident, 2 by b1's lone chip fault.
expect_contains "$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics")" 'clusterd_domains_degraded{level="superpod"} 2' \
  "domains degraded per level"

echo "-- a bundle is collected from each member and read back per member"
evidence() { cluster GetIncidentEvidence "{\"id\": \"$ID\"${1:+, \"node\": \"$1\"}}"; }
member_states() {
  evidence | python3 -c 'import json,sys; print(" ".join(m["node"] + "=" + m["state"].replace("EVIDENCE_STATE_", "") for m in json.load(sys.stdin).get("members", [])))'
}
all_stored() { [[ $(member_states) == "a1=STORED a2=STORED a3=STORED" ]]; }
wait_until 60 all_stored || fail "evidence: $(member_states)"
for n in a1 a2 a3; do
  python3 - "$(evidence "$n")" "$n" <<'PY' || fail "the bundle of $n"
import json, sys
b = json.loads(sys.argv[1])["bundle"]
node = sys.argv[2]
assert b["node"] == node and int(b["size_bytes"]) <= 8192, b.get("size_bytes")
sections = {s["name"]: s for s in b["sections"]}
log = sections["kernel-log"]["content"]
assert "evidence-marker-%s line 199" % node in log, log[-300:]
assert "evidence-too-old" not in log
assert "device 0" in sections["accelerator"]["content"], sections["accelerator"]
assert "vendor-tool-output" in sections["command/vendor-tool"]["content"], sections["command/vendor-tool"]
assert "chain" in sections and "metrics" in sections
PY
done
bundle=$(ctl describe incident "$ID" --bundle)
expect_contains "$bundle" "a2  STORED" "describe incident --bundle members"
expect_contains "$bundle" "=== a3" "describe incident --bundle pages every member"
expect_contains "$bundle" "--- command/vendor-tool" "describe incident --bundle sections"
expect_contains "$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics")" "clusterd_evidence_bundles_stored_total 3" \
  "evidence metric"
echo "-- a bundle from a node that was not asked is refused and ends its stream"
hostile=$(printf '%s\n' '{"hello": {"nodeName": "x9", "bootId": "b", "epoch": "1"}}' \
  "{\"evidence\": {\"incidentId\": \"$ID\", \"node\": \"a1\", \"sections\": [{\"name\": \"kernel-log\", \"content\": \"forged\"}]}}" |
  grpcurl -plaintext -max-time 10 -d @ "$ADDR" clusterd.v1.NodeAgentService/Connect 2>&1 || true)
expect_contains "$hostile" "PermissionDenied" "hostile bundle refused"
expect_contains "$hostile" "x9 was not asked for evidence of incident \"$ID\"" "hostile bundle refusal names it"
[[ $(evidence a1 | grep -c forged) == 0 ]] || fail "a forged bundle was stored"

echo "-- the incident survives a clusterd restart; its bundles expire by size under a smaller total cap"
kill_wait "$CLUSTERD_PID"
start_clusterd --incident-isolate-percent 0 --evidence-max-bundle-bytes 8192 --evidence-max-total-bytes 8192
wait_until 60 all_connected
expect_contains "$(cluster GetIncident "{\"id\": \"$ID\"}")" '"state": "INCIDENT_STATE_OPEN"' "after restart"
[[ $(avoided_domains) == "['1']" ]] || fail "superpod=1 should stay avoided across the restart: $(avoided_domains)"
expired_by_size() {
  curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | grep -Eq '^clusterd_evidence_bundles_expired_total\{reason="size"\} [1-9]'
}
wait_until 30 expired_by_size || fail "no bundle expired by size: $(member_states)"
states=$(member_states)
[[ $(grep -o '=STORED' <<<"$states" | wc -l) == 1 ]] || fail "8192 bytes in all should keep the newest bundle only: $states"
[[ $(grep -o '=EXPIRED' <<<"$states" | wc -l) == 2 ]] || fail "two bundles should have expired: $states"
total=$(curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk '$1 == "clusterd_evidence_bytes" {print $2}')
python3 -c "import sys; sys.exit(0 if 0 < float('$total') <= 8192 else 1)" || fail "clusterd_evidence_bytes $total"
expect_contains "$(evidence | python3 -c 'import json,sys; print([m.get("detail","") for m in json.load(sys.stdin)["members"]])')" \
  "evidence_max_total_bytes" "expired member's detail"

echo "-- it closes when its faults clear"
for n in a1 a2 a3; do inject_sim_fault "$n" 0 80E01801 clear; done
closed() { cluster GetIncident "{\"id\": \"$ID\"}" | grep -q '"state": "INCIDENT_STATE_CLOSED"'; }
wait_until 30 closed
expect_contains "$(cluster GetIncident "{\"id\": \"$ID\"}")" '"action": "avoid-domain-lifted"' "the hint lifted"
[[ $(avoided_domains) == "[]" ]] || fail "no domain should be avoided after the close: $(avoided_domains)"
[[ $(cluster ListIncidents | python3 -c 'import json,sys; print(json.load(sys.stdin).get("total_size", 0))') == 1 ]] ||
  fail "a second incident formed"
echo "PASS domains"
