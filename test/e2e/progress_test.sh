#!/usr/bin/env bash
# Job progress end to end, without any change to ClusterD's API in the job:
# 64 ranks on 8 simulated nodes write their progress files with the example
# writer (examples/progress/clusterd_progress.py), each node's noded reads
# them and sends them on its stream. Rank 42 runs 40 % slow -> SLOW_RANK on
# its chip (worker06, device 2) and in GetJob; then every rank stops ->
# JOB_HANG and the policy's recovery (PROCESS_RESTART); the job's ETTR
# counts the hang's loss.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
source "$ROOT/test/e2e/lib.sh"

e2e_setup
clusterd_ports
declare -A NODED_PORT NODED_PID
NODES=8
on_failure() {
  tail_logs 20 "$WORK/clusterd.log" "$WORK/noded-worker06.log" "$WORK/writer.log"
  grpcurl -plaintext -d '{"id": "train-64"}' "$ADDR" clusterd.v1.JobService/GetJob |
    python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)["job"].get("progress"), indent=1))' || true
}

start_clusterd
for n in $(seq 1 $NODES); do
  node=worker0$n
  mkdir -p "$WORK/progress-$node"
  start_sim_noded "$node" --progress-dir "$WORK/progress-$node" --progress-interval 1s
done
for n in $(seq 1 $NODES); do wait_ready "${NODED_PORT[worker0$n]}"; done
connected() {
  [[ $(grpcurl -plaintext -d '{}' "$ADDR" clusterd.v1.ClusterService/ListNodes | grep -c '"connected": true') == "$NODES" ]]
}
wait_until 30 connected

echo "-- a job of 64 ranks, 8 on each node's chips, hang timeout 4 s"
python3 - "$NODES" >"$WORK/job.json" <<'PY'
import json, sys
nodes = int(sys.argv[1])
placement = [{"rank": r, "node": "worker0%d" % (r // 8 + 1), "deviceId": r % 8} for r in range(nodes * 8)]
print(json.dumps({"job": {"id": "train-64", "kind": "JOB_KIND_TRAINING", "placement": placement,
                          "policy": {"holdDown": "0s", "progress": {"hangTimeout": "4s"}}}}))
PY
grpcurl -plaintext -d @ "$ADDR" clusterd.v1.JobService/CreateJob <"$WORK/job.json" >/dev/null

echo "-- the ranks write their progress; rank 42 is 40 % slow"
cat >"$WORK/writer.py" <<'PY'
import os, sys, time
sys.path.insert(0, sys.argv[1])
from clusterd_progress import ProgressWriter
work, nodes = sys.argv[2], int(sys.argv[3])
writers = [ProgressWriter("train-64", r, directory="%s/progress-worker0%d" % (work, r // 8 + 1), interval=0)
           for r in range(nodes * 8)]
step = 0
# Until told to stop: then every rank stops at once (a hang in a collective).
while not os.path.exists(work + "/stop"):
    step += 1
    for w in writers:
        compute = 1.4 if w.rank == 42 else 1.0
        w.step(step, step_time=2.0, collective_time=2.0 - compute, samples=32)
    time.sleep(0.2)
print("stopped at step", step, flush=True)
PY
start_bg WRITER_PID "$WORK/writer.log" python3 "$WORK/writer.py" "$ROOT/examples/progress" "$WORK" "$NODES"
progress_faults() {
  grpcurl -plaintext -d '{"activeOnly": true, "pageSize": 1000}' "$ADDR" clusterd.v1.ClusterService/ListFaults |
    python3 -c '
import json, sys
for f in json.load(sys.stdin).get("faults", []):
    if f.get("reporter") == "progress" and f["code"] == sys.argv[1]:
        print(f["node"], f.get("device_id", "-"), f.get("level"))' "$1"
}
job() { grpcurl -plaintext -d '{"id": "train-64"}' "$ADDR" clusterd.v1.JobService/GetJob; }
slow_named() { [[ "$(progress_faults SLOW_RANK)" == "worker06 2 FAULT_LEVEL_SUB_HEALTH" ]]; }
wait_until 60 slow_named
job >"$WORK/job-slow.json"
python3 - "$WORK/job-slow.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["job"]["progress"]
assert p["ranks_reporting"] == 64, p
assert [s["rank"] for s in p["slow_ranks"]] == [42], p["slow_ranks"]
assert p["state"] == "PROGRESS_STATE_ADVANCING", p["state"]
print("   GetJob: rank 42 slow (%s a step, the job's median %s), %s ranks reporting" % (
    p["slow_ranks"][0]["step_time"], p["slow_ranks"][0]["job_median"], p["ranks_reporting"]))
PY

echo "-- every rank stops: JOB_HANG and the policy's recovery"
touch "$WORK/stop"
hung() { [[ -n "$(progress_faults JOB_HANG)" ]]; }
wait_until 60 hung
progress_faults JOB_HANG | grep -q "FAULT_LEVEL_RESTART_BUSINESS" || fail "JOB_HANG at $(progress_faults JOB_HANG)"
recovered() {
  grpcurl -plaintext -d '{"job": "train-64"}' "$ADDR" clusterd.v1.ClusterService/ListRecoveries |
    grep -q '"strategy": "RECOVERY_STRATEGY_PROCESS_RESTART"'
}
wait_until 30 recovered
job >"$WORK/job-hung.json"
python3 - "$WORK/job-hung.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["job"]["progress"]
assert p["state"] in ("PROGRESS_STATE_HUNG", "PROGRESS_STATE_STALLED"), p["state"]
assert p.get("ettr", 1) < 1, p
causes = [c["cause"] for c in p.get("lost_by_cause", [])]
assert causes and causes[0] == "JOB_HANG", causes
print("   GetJob: %s, ETTR %.3f, lost %s to %s" % (p["state"], p["ettr"], p["lost"], causes[0]))
PY
echo "PASS progress_test"
