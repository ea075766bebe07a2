#!/usr/bin/env python3
"""High availability end to end (docs/ha.md), real processes on loopback.

Three etcd members, three clusterd replicas (--etcd-endpoints), two NodeD
agents (simulated devices) that reach the leader through an ipv4:a,b,c target,
an external reporter (FaultService.Report through grpcurl, every acknowledged
answer recorded) and a Watch client that follows whichever replica leads,
resuming from the last revision it saw. Under that load:

  1. kill -9 the leader, three times (the killed replica is restarted and
     rejoins as a standby);
  2. SIGSTOP the leader past its lease: another takes over; SIGCONT: the old
     one must not write (it is fenced) and rejoins as a standby;
  3. kill -9 an etcd follower, then the etcd leader (each restarted after);
     then SIGSTOP every etcd member past the lease, and the etcd leader alone
     (each continued after): every replica is back, leader or standby;

  4. kill -9 the leader while a recovery waits for the job's RESUME (the job
     agent killed too, then restarted): the new leader resumes it, and the exec
     actuator ran each action exactly once;
  5. wipe a standby's data dir once the log is trimmed past its start, and
     restart it: it rebuilds from a peer's checkpoint, then follows the log
     (the replicas keep only 20 entries behind the slowest, so a replica
     restarted in steps 1-4 may rebuild from a checkpoint as well);
  6. a takeover with --pool-agents simulated agents attached (one
     clusterd-bench --agent-pool process) whose nodes carry a job: kill -9 of
     the leader; every agent attaches to the new leader, and once a whole
     node grace has passed there (an agent that never comes back is declared
     lost: the control) no node of the pool is lost and no recovery started
     (issue 51 item 9: a new leader gives every agent the grace a restarted
     ClusterD does);

then checks: writes resumed after every failover; the watcher saw every
revision exactly once, in order, across all failovers; every replica's store
holds the same history (event by event) with no gap; every acknowledged
report is in it at the revision it was acknowledged with; every agent's
transitions were acknowledged and each replica's fault states match the
agents' last injected ones.

usage: ha_test.py --etcd PATH --bin DIR [--work DIR] [--pool-agents N]
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

LOG_FAILOVER = []
# How long every etcd member stays stopped in the etcd-stall step.
ETCD_STALL_SECONDS = 20.0


PORTS_GIVEN = set()


def free_port():
    """A loopback port that was free a moment ago and not handed out before: the kernel
    readily gives a just-released port out again."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in PORTS_GIVEN:
            PORTS_GIVEN.add(port)
            return port
    raise RuntimeError("free_port: no port that was not handed out already")


def wait_until(seconds, fn, what):
    deadline = time.monotonic() + seconds
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %ss waiting for %s" % (seconds, what))
        time.sleep(0.05)


def http_get(port, path, timeout=1.0):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def metric(port, name):
    status, body = http_get(port, "/metrics")
    if status != 200:
        return None
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def decode_stream(text):
    """JSON objects printed one after another (grpcurl's output)."""
    dec = json.JSONDecoder()
    out, pos = [], 0
    while True:
        while pos < len(text) and text[pos] in " \r\n\t":
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            return out, pos
        try:
            obj, end = dec.raw_decode(text, pos)
        except json.JSONDecodeError:
            return out, pos
        out.append(obj)
        pos = end


class Cluster:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = []
        self.etcd = []
        self.replicas = {}
        self.agents = {}
        # The exec actuator: logs every invocation; performs each idempotency key once.
        self.actuator = os.path.join(self.work, "actuator.sh")
        with open(self.actuator, "w") as f:
            f.write("#!/bin/sh\njson=$(cat)\necho \"$json\" >>%s/invocations.log\necho \"$CLUSTERD_ACTION done\"\n"
                    % self.work)
        os.chmod(self.actuator, 0o755)

    # -- etcd
    def start_etcd(self):
        for i in range(3):
            self.etcd.append({"name": "e%d" % i, "client": free_port(), "peer": free_port(), "proc": None})
        for i in range(3):
            self.spawn_etcd(i, "new")

    def spawn_etcd(self, i, state):
        m = self.etcd[i]
        cluster = ",".join("%s=http://127.0.0.1:%d" % (e["name"], e["peer"]) for e in self.etcd)
        client = "http://127.0.0.1:%d" % m["client"]
        peer = "http://127.0.0.1:%d" % m["peer"]
        m["proc"] = self.spawn(
            [self.args.etcd, "--name", m["name"], "--data-dir", os.path.join(self.work, m["name"]),
             "--listen-client-urls", client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
             "--initial-advertise-peer-urls", peer, "--initial-cluster", cluster, "--initial-cluster-state", state,
             "--max-request-bytes", "8388608", "--max-txn-ops", "1024", "--heartbeat-interval", "100",
             "--election-timeout", "1000", "--log-level", "warn"], m["name"])

    def etcd_endpoints(self):
        return ",".join("127.0.0.1:%d" % e["client"] for e in self.etcd)

    def etcd_leader(self):
        for i, e in enumerate(self.etcd):
            if metric(e["client"], "etcd_server_is_leader") == 1:
                return i
        return None

    # -- clusterd replicas
    def start_replica(self, rid):
        r = self.replicas.setdefault(rid, {"grpc": free_port(), "http": free_port(),
                                           "dir": os.path.join(self.work, "data-" + rid)})
        r["proc"] = self.spawn(
            [os.path.join(self.args.bin, "clusterd"), "--insecure", "--etcd-endpoints", self.etcd_endpoints(),
             "--ha-replica-id", rid, "--data-dir", r["dir"], "--listen", "127.0.0.1:%d" % r["grpc"],
             "--http-listen", "127.0.0.1:%d" % r["http"], "--ha-lease-ttl", "2s", "--node-grace", "30s",
             "--ha-log-retain-entries", "20",
             "--actuator", "exec", "--actuator-command", self.actuator, "--recovery-resume-grace", "5s"],
            "clusterd-" + rid)

    def leader(self, strict=True):
        """The one replica whose /readyz is 200 (None if none; two is a failure when strict)."""
        ready = [rid for rid, r in self.replicas.items() if http_get(r["http"], "/readyz")[0] == 200]
        if len(ready) > 1:
            if strict:
                raise AssertionError("two replicas ready (leading) at once: %s" % ready)
            return None
        return ready[0] if ready else None

    def target(self):
        return "ipv4:" + ",".join("127.0.0.1:%d" % r["grpc"] for r in self.replicas.values())

    def log_index(self, rid):
        return metric(self.replicas[rid]["http"], "clusterd_ha_log_index")

    # -- agents
    def start_agent(self, node):
        a = self.agents.setdefault(node, {"http": free_port(), "last": {}})
        a["proc"] = self.spawn(
            [os.path.join(self.args.bin, "noded"), "--server", self.target(), "--node-name", node,
             "--http-listen", "127.0.0.1:%d" % a["http"], "--state-dir", os.path.join(self.work, "noded-" + node),
             "--accelerator", "sim", "--sim-devices", "8", "--kmsg-path", "", "--poll-interval", "200ms",
             "--heartbeat-interval", "500ms", "--log-level", "info"], "noded-" + node)

    def inject(self, node, device, state, code="80E01801"):
        """Through the agent's sim API; a["last"] keeps the last state of each device's 80E01801."""
        a = self.agents[node]
        body = json.dumps({"device": device, "code": code, "state": state}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/sim/faults" % a["http"], data=body, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=2) as r:
                if r.status == 200:
                    if code == "80E01801":
                        a["last"][device] = state
                    return True
        except OSError:
            pass
        return False

    # -- processes
    def spawn(self, argv, name):
        log = open(os.path.join(self.work, name + ".log"), "ab")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def grpcurl(args, target, method, data, timeout=3):
    cmd = [args.grpcurl, "-plaintext", "-max-time", str(timeout), "-d", json.dumps(data), target, method]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class Reporter(threading.Thread):
    """External reporter: one new fault per call; records every acknowledged (id, revision)."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.c = cluster
        self.acked = {}
        self.ack_times = []
        self.stop = threading.Event()
        self.errors = 0

    def run(self):
        n = 0
        while not self.stop.is_set():
            started = time.monotonic()
            leader = self.c.leader(strict=False)
            if leader is None:
                time.sleep(0.05)
                continue
            fid = "ext-%d" % n
            rc, out, _ = grpcurl(self.c.args, "127.0.0.1:%d" % self.c.replicas[leader]["grpc"],
                                 "clusterd.v1.FaultService/Report",
                                 {"reporter": "hatest", "id": fid, "node": "worker02", "code": "ROCE_LINK_DOWN",
                                  "level": "FAULT_LEVEL_SUB_HEALTH", "action": "TRANSITION_ACTION_RAISE"})
            if rc == 0:
                resp = json.loads(out)
                # A resent report that an earlier, unanswered call stored: same fault, its revision.
                self.acked[fid] = int(resp["fault"]["revision"])
                self.ack_times.append((started, time.monotonic()))
                n += 1
            else:
                self.errors += 1
                time.sleep(0.05)

    def acks_after(self, t):
        """Reports sent after t and acknowledged."""
        return sum(1 for start, _ in self.ack_times if start > t)

    def first_ack_after(self, t):
        return min(end for start, end in self.ack_times if start > t) - t


class Injector(threading.Thread):
    """Raises and clears device faults on the agents (they journal and resend until acknowledged)."""

    def __init__(self, cluster):
        super().__init__(daemon=True)
        self.c = cluster
        self.stop = threading.Event()
        self.count = 0

    def run(self):
        rnd = random.Random(7)
        while not self.stop.is_set():
            node = "worker02"  # worker01 carries the job of the recovery phase
            device = rnd.randrange(8)
            state = "clear" if self.c.agents[node]["last"].get(device) == "raise" else "raise"
            if self.c.inject(node, device, state):
                self.count += 1
            time.sleep(0.05)


class Watcher(threading.Thread):
    """Watches the replica pick() names (by default whichever leads), resuming from the last revision seen."""

    def __init__(self, cluster, pick=None):
        super().__init__(daemon=True)
        self.c = cluster
        self.pick = pick or (lambda: cluster.leader(strict=False))
        self.last = 0
        self.events = 0
        self.reconnects = 0
        self.violations = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            rid = self.pick()
            if rid is None:
                time.sleep(0.05)
                continue
            self.reconnects += 1
            cmd = [self.c.args.grpcurl, "-plaintext", "-max-time", "5", "-d",
                   json.dumps({"from_revision": self.last}),
                   "127.0.0.1:%d" % self.c.replicas[rid]["grpc"], "clusterd.v1.ClusterService/Watch"]
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            buf = ""
            for line in p.stdout:
                buf += line
                # grpcurl prints each response as indented JSON closed by a "}" in column 0:
                # decode only then (decoding at every line costs O(lines^2) on a large batch,
                # enough to starve this thread on a busy machine).
                if not line.startswith("}"):
                    continue
                objs, used = decode_stream(buf)
                buf = buf[used:]
                for o in objs:
                    for ev in o.get("events", []):
                        rev = int(ev["revision"])
                        if rev != self.last + 1:
                            self.violations.append("revision %d after %d" % (rev, self.last))
                        self.last = max(self.last, rev)
                        self.events += 1
            if p.wait() != 0:
                time.sleep(0.1)  # the replica is down, or between roles


def standby_faults(args, cluster, rid):
    """The external faults a replica's ListFaults answers (the first 1000): {external id: revision}, or None."""
    rc, out, _ = grpcurl(args, "127.0.0.1:%d" % cluster.replicas[rid]["grpc"], "clusterd.v1.ClusterService/ListFaults",
                         {"page_size": 1000, "node": "worker02"})
    if rc != 0:
        return None
    return {f["external_id"]: int(f["revision"]) for f in json.loads(out or "{}").get("faults", [])
            if f.get("source") == "FAULT_SOURCE_EXTERNAL"}


def read_history(args, cluster, rid):
    """Every event of a replica's store: opened alone (no etcd), read with Watch from 0."""
    r = cluster.replicas[rid]
    grpc_port, http_port = free_port(), free_port()
    p = subprocess.Popen([os.path.join(args.bin, "clusterd"), "--insecure", "--data-dir", r["dir"],
                          "--listen", "127.0.0.1:%d" % grpc_port, "--http-listen", "127.0.0.1:%d" % http_port,
                          "--node-grace", "1h"],
                         stdout=open(os.path.join(args.work, "read-%s.log" % rid), "ab"), stderr=subprocess.STDOUT)
    try:
        wait_until(30, lambda: http_get(http_port, "/readyz")[0] == 200, "replica %s's store opened alone" % rid)
        _, summary, _ = grpcurl(args, "127.0.0.1:%d" % grpc_port, "clusterd.v1.ClusterService/GetSummary", {})
        head = int(json.loads(summary).get("revision", 0))
        # Watch from 0 up to the store's head: each grpcurl reads for at most 4 s (on a busy
        # machine that may end before the head), so read on from where the last one stopped.
        events, after = [], 0
        deadline = time.time() + 120
        while after < head:
            if time.time() > deadline:
                raise AssertionError("replica %s: Watch from 0 reached revision %d of %d in 120 s" % (rid, after, head))
            _, out, _ = grpcurl(args, "127.0.0.1:%d" % grpc_port, "clusterd.v1.ClusterService/Watch",
                                {"from_revision": after}, timeout=4)
            for o in decode_stream(out)[0]:
                events.extend(o.get("events", []))
                after = max(after, int(o.get("revision", 0)))
        # Every page: the external reporter's faults alone can be more than one page holds, and
        # the agents' faults may be on any of them.
        states, token = {}, ""
        while True:
            req = {"page_size": 1000}
            if token:
                req["page_token"] = token
            _, faults, _ = grpcurl(args, "127.0.0.1:%d" % grpc_port, "clusterd.v1.ClusterService/ListFaults", req)
            page = json.loads(faults or "{}")
            for f in page.get("faults", []):
                if f.get("code") == "80E01801":
                    states[(f["node"], int(f.get("device_id", 0)))] = f["state"]
            token = page.get("next_page_token", "")
            if not token:
                return events, states
    finally:
        p.terminate()
        p.wait(timeout=30)


def list_all(args, port, method, req, key):
    """Every item of a paged List call on one replica, or None if a call failed."""
    items, token = [], ""
    while True:
        r = dict(req, page_size=1000)
        if token:
            r["page_token"] = token
        rc, out, _ = grpcurl(args, "127.0.0.1:%d" % port, method, r)
        if rc != 0:
            return None
        page = json.loads(out or "{}")
        items.extend(page.get(key, []))
        token = page.get("next_page_token", "")
        if not token:
            return items


def summary(args, port):
    rc, out, _ = grpcurl(args, "127.0.0.1:%d" % port, "clusterd.v1.ClusterService/GetSummary", {})
    return json.loads(out) if rc == 0 else None


def attached(args, port):
    """GetSummary's connected_agents (proto3 JSON leaves a 0 out); -1 when the call fails."""
    s = summary(args, port)
    return -1 if s is None else int(s.get("connected_agents", 0))


class AgentPool:
    """clusterd-bench --agent-pool: n simulated agents (one stream each, heartbeats every second)
    attached to every replica's address, as NodeD is; stopped by SIGTERM."""

    def __init__(self, cluster, n, prefix):
        self.n, self.prefix = n, prefix
        self.log = os.path.join(cluster.work, "pool-%s.log" % prefix.rstrip("-"))
        self.proc = cluster.spawn([os.path.join(cluster.args.bin, "clusterd-bench"), "--agent-pool",
                                   cluster.target(), str(n), prefix], "pool-" + prefix.rstrip("-"))
        wait_until(120, lambda: "attached %d" % n in open(self.log, errors="replace").read() or
                   self.proc.poll() is not None, "%d agents of %s attached" % (n, prefix))
        if self.proc.poll() is not None:
            raise AssertionError("agent pool %s exited: see %s" % (prefix, self.log))

    def nodes(self):
        return ["%s%d" % (self.prefix, i) for i in range(self.n)]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def takeover_with_agents(c, args):
    """Step 6: kill -9 of the leader with --pool-agents agents attached; nothing lost, nothing recovered."""
    n = args.pool_agents
    leader = c.leader()
    port = c.replicas[leader]["grpc"]
    base = attached(args, port)
    if base < 0:
        raise AssertionError("GetSummary of the leader " + leader + " failed")
    pool = AgentPool(c, n, "ha-agent-")
    # The control: an agent that is gone when the leader dies never comes back to the new one,
    # which declares its node lost once the grace it gives every node has passed.
    gone = AgentPool(c, 1, "ha-gone-")
    wait_until(30, lambda: attached(args, port) >= base + n + 1, "the pool attached to " + leader)
    # A job on every pool node: a node declared lost would start its recovery.
    job = {"id": "ha-pool", "kind": "JOB_KIND_TRAINING",
           "placement": [{"rank": i, "node": node, "deviceId": 0} for i, node in enumerate(pool.nodes())]}
    rc, _, err = grpcurl(args, "127.0.0.1:%d" % port, "clusterd.v1.JobService/CreateJob", {"job": job}, timeout=10)
    if rc != 0:
        raise AssertionError("CreateJob ha-pool: " + err.strip())
    gone.stop()
    rev0 = int(summary(args, port)["revision"])
    t0 = time.monotonic()
    c.replicas[leader]["proc"].kill()
    new = wait_until(30, lambda: (lambda l: l if l and l != leader else None)(c.leader()), "a new leader")
    new_port = c.replicas[new]["grpc"]
    t_leader = time.monotonic() - t0
    wait_until(60, lambda: attached(args, new_port) >= base + n,
               "every agent attached to the new leader %s" % new)
    t_back = time.monotonic() - t0

    def lost_since():
        faults = list_all(args, new_port, "clusterd.v1.ClusterService/ListFaults", {"since_revision": rev0}, "faults")
        return None if faults is None else sorted(f["node"] for f in faults if f.get("code") == "HEARTBEAT_LOST")

    # Until the control is lost, a whole grace has not passed on the new leader.
    lost = wait_until(120, lambda: (lambda l: l if l and "ha-gone-0" in l else None)(lost_since()),
                      "the agent that is gone declared lost by the new leader")
    t_lost = time.monotonic() - t0
    if lost != ["ha-gone-0"]:
        raise AssertionError("nodes declared lost after the takeover: %s" % lost[:10])
    recoveries = list_all(args, new_port, "clusterd.v1.ClusterService/ListRecoveries", {"job": "ha-pool"},
                          "recoveries")
    if recoveries is None or recoveries:
        raise AssertionError("recoveries of job ha-pool after the takeover: %s" % recoveries)
    # Still every agent attached (none lost its stream meanwhile).
    if attached(args, new_port) < base + n:
        raise AssertionError("agents detached after the takeover")
    grpcurl(args, "127.0.0.1:%d" % new_port, "clusterd.v1.JobService/DeleteJob", {"id": "ha-pool"})
    pool.stop()
    c.replicas[leader]["proc"].wait()
    c.start_replica(leader)
    wait_until(30, lambda: http_get(c.replicas[leader]["http"], "/readyz")[0] == 503, leader + " back as a standby")
    print("-- kill -9 of the leader with %d agents attached (%s -> %s): new leader in %.2f s, every agent back "
          "%.2f s after the kill; a whole grace later (the gone agent's node lost at %.2f s) no node of theirs "
          "lost, no recovery of their job" % (n, leader, new, t_leader, t_back, t_lost), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--etcd", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--grpcurl", default="grpcurl")
    ap.add_argument("--work")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--pool-agents", type=int, default=300,
                    help="simulated agents attached for the takeover of step 6 (0: skip it)")
    args = ap.parse_args()
    own_work = not args.work  # a directory of its own goes once the run passed (~400 MiB)
    args.work = args.work or tempfile.mkdtemp(prefix="clusterd-ha-")
    os.makedirs(args.work, exist_ok=True)
    print("work dir:", args.work, flush=True)
    c = Cluster(args)
    try:
        run(c, args)
    except AssertionError as e:
        print("FAIL:", e, file=sys.stderr)
        print("logs in", args.work, file=sys.stderr)
        c.stop_all()
        sys.exit(1)
    c.stop_all()
    if own_work:
        shutil.rmtree(args.work, ignore_errors=True)
    print("PASS: high availability end to end")


def run(c, args):
    c.start_etcd()
    wait_until(30, lambda: c.etcd_leader() is not None, "an etcd leader")
    for rid in ("r1", "r2", "r3"):
        c.replicas[rid] = {"grpc": free_port(), "http": free_port(), "dir": os.path.join(args.work, "data-" + rid)}
    for rid in ("r1", "r2", "r3"):
        c.start_replica(rid)
    leader = wait_until(30, c.leader, "a leader")
    print("-- leader:", leader, flush=True)
    for node in ("worker01", "worker02"):
        c.start_agent(node)
    wait_until(30, lambda: all(metric(a["http"], "noded_stream_connected") == 1 for a in c.agents.values()),
               "agents connected")
    # One watcher follows the leader; another stays on one replica, a standby
    # now, whatever becomes of it (led, killed, restarted, wiped).
    watched = next(r for r in ("r1", "r2", "r3") if r != leader)
    reporter, injector, watcher = Reporter(c), Injector(c), Watcher(c)
    standby_watcher = Watcher(c, pick=lambda: watched)
    for t in (reporter, injector, watcher, standby_watcher):
        t.start()
    wait_until(30, lambda: len(reporter.acked) >= 10, "reports acknowledged")
    # A standby answers queries and refuses writes, naming the leader.
    rc, _, err = grpcurl(args, "127.0.0.1:%d" % c.replicas[watched]["grpc"], "clusterd.v1.FaultService/Report",
                         {"reporter": "hatest", "id": "to-a-standby", "node": "worker02", "code": "ROCE_LINK_DOWN",
                          "level": "FAULT_LEVEL_SUB_HEALTH", "action": "TRANSITION_ACTION_RAISE"})
    if rc == 0 or "Unavailable" not in err or "standby " + watched not in err or leader not in err:
        raise AssertionError("a write to standby %s: rc %d, %s" % (watched, rc, err.strip()))
    acked = dict(reporter.acked)
    wait_until(30, lambda: (lambda got: got is not None and all(got.get(f) == r for f, r in acked.items()))(
        standby_faults(args, c, watched)), "standby %s listing the %d faults acknowledged" % (watched, len(acked)))
    print("-- standby %s: a write refused, naming the leader; queries answer as the leader's" % watched, flush=True)

    def failover(what, action, after=None):
        old = c.leader()
        t0 = time.monotonic()
        action(old)
        new = wait_until(30, lambda: (lambda l: l if l and l != old else None)(c.leader()), "a new leader")
        t_ready = time.monotonic() - t0
        wait_until(30, lambda: reporter.acks_after(t0) >= 3, "writes acknowledged after " + what)
        first_ack = reporter.first_ack_after(t0)
        if after:
            after(old)
        print("-- %s: %s -> %s, new leader ready in %.2f s, first write acknowledged %.2f s after" %
              (what, old, new, t_ready, first_ack), flush=True)
        LOG_FAILOVER.append((what, t_ready, first_ack))
        return old, new

    for k in range(args.kills):
        def kill(old):
            c.replicas[old]["proc"].kill()
        old, _ = failover("kill -9 of the leader (%d)" % (k + 1), kill)
        c.replicas[old]["proc"].wait()
        c.start_replica(old)  # rejoins as a standby
        wait_until(30, lambda: http_get(c.replicas[old]["http"], "/readyz")[0] == 503, old + " back as a standby")

    stopped = {}

    def stop(old):
        stopped["rid"] = old
        stopped["pid"] = c.replicas[old]["proc"].pid
        c.replicas[old]["proc"].send_signal(signal.SIGSTOP)

    old, new = failover("SIGSTOP of the leader past its lease", stop)
    acked_before = len(reporter.acked)
    c.replicas[old]["proc"].send_signal(signal.SIGCONT)
    log_path = os.path.join(args.work, "clusterd-%s.log" % old)
    wait_until(30, lambda: "restarting as a standby" in open(log_path, errors="replace").read(),
               old + " stepping down after SIGCONT")
    wait_until(30, lambda: http_get(c.replicas[old]["http"], "/readyz")[0] == 503, old + " back as a standby")
    if c.leader() != new:
        raise AssertionError("the leader changed after the stopped one continued: %s" % c.leader())
    wait_until(30, lambda: len(reporter.acked) >= acked_before + 3, "writes after SIGCONT")
    print("-- %s continued: fenced, back as a standby; %s still leads" % (old, new), flush=True)

    # A recovery in flight at failover resumes on the new leader without
    # repeating a side effect: the device isolation and the reschedule ran on
    # the old leader; RESUME is outstanding (the job agent ignores it).
    def start_job_agent(*extra):
        return c.spawn([os.path.join(args.bin, "job-agent"), "--server", c.target(), "--job", "train-d",
                        "--hold-down", "500ms", "--step-ms", "50", "--log", os.path.join(args.work, "agent-train-d.log")]
                       + list(extra), "job-agent")
    agent_log = os.path.join(args.work, "agent-train-d.log")
    job_agent = start_job_agent("--placement", "0=worker01:4,1=worker01:5", "--spares", "worker01:6",
                                "--ignore", "RESUME")
    wait_until(30, lambda: os.path.exists(agent_log) and "attached: job train-d" in open(agent_log).read(),
               "the job agent attached")

    def recovery_steps():
        l = c.leader(strict=False)
        if l is None:
            return None
        rc, out, _ = grpcurl(args, "127.0.0.1:%d" % c.replicas[l]["grpc"], "clusterd.v1.ClusterService/GetRecovery",
                             {"id": "train-d.1"})
        if rc != 0:
            return None
        r = json.loads(out)["recovery"]
        return r["state"], [st["state"] for st in r.get("steps", [])]

    if not c.inject("worker01", 4, "raise", code="4C4BA00C"):
        raise AssertionError("inject 4C4BA00C on worker01")
    wait_until(30, lambda: (recovery_steps() or ("", []))[1] ==
               ["STEP_STATE_SUCCEEDED", "STEP_STATE_SUCCEEDED", "STEP_STATE_SUCCEEDED", "STEP_STATE_RUNNING"],
               "the recovery waiting for RESUME")
    old = c.leader()
    c.replicas[old]["proc"].kill()
    job_agent.kill()
    job_agent.wait()
    new = wait_until(30, lambda: (lambda l: l if l and l != old else None)(c.leader()), "a new leader")
    c.replicas[old]["proc"].wait()
    c.start_replica(old)
    start_job_agent("--no-register", "--spares", "worker01:6")
    wait_until(60, lambda: (recovery_steps() or ("",))[0] == "RECOVERY_STATE_SUCCEEDED",
               "the recovery resumed on the new leader")
    keys = [json.loads(l)["idempotency_key"] for l in open(os.path.join(args.work, "invocations.log"))]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated or "train-d.1/1" not in keys or "train-d.1/2" not in keys:
        raise AssertionError("actuator invocations %s (repeated: %s)" % (keys, repeated))
    print("-- kill -9 of the leader mid-recovery (%s -> %s): resumed, each action ran once: %s" %
          (old, new, ", ".join(sorted(set(keys)))), flush=True)

    for which in ("follower", "leader"):
        lead = c.etcd_leader()
        victim = next(i for i in range(3) if i != lead) if which == "follower" else lead
        t0 = time.monotonic()
        c.etcd[victim]["proc"].kill()
        c.etcd[victim]["proc"].wait()
        wait_until(30, lambda: reporter.acks_after(t0) >= 5, "writes with the etcd %s down" % which)
        print("-- etcd %s %s killed: writes went on (%d acknowledged since)" %
              (which, c.etcd[victim]["name"], reporter.acks_after(t0)), flush=True)
        c.spawn_etcd(victim, "existing")
        wait_until(30, lambda: metric(c.etcd[victim]["client"], "etcd_server_has_leader") == 1,
                   "etcd member back")

    # An etcd stall (SIGSTOP past the lease, then SIGCONT): of every member, then
    # of the etcd leader alone. While the whole of etcd is stopped nothing is
    # acknowledged; once it answers again one replica leads and every other one
    # is back as a standby (a deposed leader whose gRPC channel to etcd broke
    # while etcd was stopped used to stay out for good: issue 36).
    for what, members in (("every etcd member", list(range(3))), ("the etcd leader", [c.etcd_leader()])):
        old = c.leader()
        t_stop = time.monotonic()
        for i in members:
            c.etcd[i]["proc"].send_signal(signal.SIGSTOP)
        if len(members) == 3:
            # Past the lease: the leader steps down, restarts as a standby and
            # fails to get a lease from the stopped etcd, three times.
            log_path = os.path.join(args.work, "clusterd-%s.log" % old)
            seen = os.path.getsize(log_path)

            def lease_refused():
                with open(log_path, errors="replace") as f:
                    f.seek(seen)
                    text = f.read()
                return "restarting as a standby" in text and text.count("cannot get a lease") >= 3

            wait_until(30, lease_refused, "%s stepping down and asking the stopped etcd for a lease" % old)
            if c.leader(strict=False) is not None:
                raise AssertionError("a replica is ready (leading) while every etcd member is stopped")
            # The fault's length, not a wait for anything: a stall of 10-20 s is
            # what left the deposed leader's channels broken (5 s did not).
            time.sleep(max(0.0, ETCD_STALL_SECONDS - (time.monotonic() - t_stop)))
            t_cont = time.monotonic()
            during = [s for s, e in reporter.ack_times if s > t_stop and e < t_cont]
            if during:
                raise AssertionError("%d writes acknowledged while every etcd member was stopped" % len(during))
        else:
            wait_until(30, lambda: reporter.acks_after(t_stop) >= 5, "writes with the etcd leader stopped")
            t_cont = time.monotonic()
        for i in members:
            c.etcd[i]["proc"].send_signal(signal.SIGCONT)
        new = wait_until(30, lambda: c.leader(strict=False), "a leader after etcd continued")
        wait_until(30, lambda: reporter.acks_after(t_cont) >= 3, "writes after etcd continued")
        # Every replica back: the leader, and each other one a standby (503).
        wait_until(30, lambda: all(http_get(r["http"], "/readyz")[0] == (200 if rid == new else 503)
                                   for rid, r in c.replicas.items()), "every replica back after the etcd stall")
        print("-- SIGSTOP of %s for %.1f s (leader %s -> %s): every replica back %.1f s after SIGCONT" %
              (what, t_cont - t_stop, old, new, time.monotonic() - t_cont), flush=True)

    # A standby whose data dir is wiped once the log no longer reaches back to
    # its start rebuilds its store from a peer's checkpoint.
    leader = c.leader()
    wait_until(60, lambda: (metric(c.replicas[leader]["http"], "clusterd_ha_log_truncated_index") or 0) > 0,
               "the log trimmed past its first entry")
    wiped = next(r for r in c.replicas if r != leader)
    c.replicas[wiped]["proc"].terminate()
    c.replicas[wiped]["proc"].wait(timeout=60)
    shutil.rmtree(c.replicas[wiped]["dir"])
    c.start_replica(wiped)
    # Where the log was when it came back (writes go on meanwhile).
    target = wait_until(30, lambda: c.log_index(leader), "the leader's log index")
    wait_until(60, lambda: (c.log_index(wiped) or 0) >= target, wiped + " rebuilt from a checkpoint")
    restores = metric(c.replicas[wiped]["http"], "clusterd_ha_checkpoint_restores_total") or 0
    if restores < 1:
        raise AssertionError("%s caught up without a checkpoint, but the log was trimmed past its start" % wiped)
    # The checkpoint endpoint wants the peer's token.
    code, _ = http_get(c.replicas[leader]["http"], "/ha/v1/checkpoint")
    if code != 401:
        raise AssertionError("GET /ha/v1/checkpoint without the token answered %d, not 401" % code)
    print("-- standby %s wiped and restarted: rebuilt from a checkpoint, followed the log to index %d" %
          (wiped, c.log_index(wiped)), flush=True)

    if args.pool_agents > 0:
        takeover_with_agents(c, args)

    injector.stop.set()
    injector.join()
    reporter.stop.set()
    reporter.join()
    # Everything the agents raised or cleared is acknowledged.
    wait_until(60, lambda: all(metric(a["http"], "noded_outbox_pending") == 0 for a in c.agents.values()),
               "agents' outboxes empty")
    leader = c.leader()
    # Every replica applies the whole log.
    wait_until(60, lambda: len({c.log_index(r) for r in c.replicas}) == 1, "replicas at the same log index")
    top = c.log_index(leader)
    _, summary, _ = grpcurl(args, "127.0.0.1:%d" % c.replicas[leader]["grpc"],
                            "clusterd.v1.ClusterService/GetSummary", {})
    head = int(json.loads(summary)["revision"])
    for w, what in ((watcher, "the watcher"), (standby_watcher, "the watcher of %s" % watched)):
        try:
            wait_until(60, lambda: w.last >= head, "%s at revision %d" % (what, head))
        except AssertionError as e:
            raise AssertionError("%s (it is at %d after %d streams; %s)" %
                                 (e, w.last, w.reconnects, "; ".join(w.violations[:5]) or "no violation"))
    watcher.stop.set()
    standby_watcher.stop.set()
    # Every standby's queries catch up with the leader's answers.
    for rid in c.replicas:
        if rid != leader:
            wait_until(30, lambda: standby_faults(args, c, rid) == standby_faults(args, c, leader),
                       "standby %s's ListFaults as the leader's" % rid)
    print("-- quiesced: log index %d on every replica; %d reports and %d agent transitions acknowledged" %
          (top, len(reporter.acked), injector.count), flush=True)

    for rid, r in c.replicas.items():
        r["proc"].send_signal(signal.SIGTERM)
    for rid, r in c.replicas.items():
        r["proc"].wait(timeout=60)
    for a in c.agents.values():
        a["proc"].terminate()

    histories = {}
    expected_states = {}
    for node, a in c.agents.items():
        for dev, st in a["last"].items():
            expected_states[(node, dev)] = "FAULT_STATE_ACTIVE" if st == "raise" else "FAULT_STATE_CLEARED"
    for rid in c.replicas:
        events, states = read_history(args, c, rid)
        revs = [int(e["revision"]) for e in events]
        if not revs:
            raise AssertionError("replica %s has no history" % rid)
        if revs != list(range(revs[0], revs[0] + len(revs))):
            raise AssertionError("replica %s: history has a gap or a repeat" % rid)
        histories[rid] = events
        by_rev = {int(e["revision"]): e for e in events}
        for fid, rev in reporter.acked.items():
            e = by_rev.get(rev)
            if not e or e.get("fault", {}).get("external_id") != fid:
                raise AssertionError("replica %s: acknowledged report %s (revision %d) is not in its history" %
                                     (rid, fid, rev))
        for key, want in expected_states.items():
            got = states.get(key)
            if want == "FAULT_STATE_ACTIVE" and got != want:
                raise AssertionError("replica %s: %s device %d should be active, is %s" % (rid, key[0], key[1], got))
            if want == "FAULT_STATE_CLEARED" and got == "FAULT_STATE_ACTIVE":
                raise AssertionError("replica %s: %s device %d should be cleared" % (rid, key[0], key[1]))
        print("-- replica %s: %d events, revisions %d..%d contiguous, every acknowledged report present" %
              (rid, len(events), revs[0], revs[-1]), flush=True)
    first = next(iter(histories.values()))
    for rid, h in histories.items():
        if h != first:
            raise AssertionError("replica %s's history differs from the others" % rid)
    if watcher.violations:
        raise AssertionError("watcher: " + "; ".join(watcher.violations[:5]))
    if watcher.last == 0:
        raise AssertionError("watcher saw nothing")
    print("-- watcher followed %d leaders' streams: %d events, revisions contiguous up to %d" %
          (watcher.reconnects, watcher.events, watcher.last), flush=True)
    if standby_watcher.violations:
        raise AssertionError("watcher of %s: %s" % (watched, "; ".join(standby_watcher.violations[:5])))
    print("-- watcher of %s (standby, leader, killed, restarted, wiped) over %d streams: %d events, revisions "
          "contiguous up to %d" % (watched, standby_watcher.reconnects, standby_watcher.events, standby_watcher.last),
          flush=True)
    for what, ready, ack in LOG_FAILOVER:
        print("   %-45s leader ready %.2f s, first ack %.2f s" % (what, ready, ack))


if __name__ == "__main__":
    main()
