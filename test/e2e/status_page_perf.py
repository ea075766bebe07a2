"""Load time and JS heap of the status page at scale (docs/operate.md#status-page).

Not a pass/fail test: it serves the page source (clusterd/server/status_page/index.html)
and a fake /api/v1/ with generated JSON (NODES nodes x 8 devices, faults on 2% of the
devices, jobs of 64 ranks on every device, recoveries) from a local http.server, loads it
in headless Chromium and prints the figures:

  /usr/bin/python3 test/e2e/status_page_perf.py [--nodes 2000] [--runs 3] [--screenshot FILE.png]
"""
import argparse
import json
import os
import random
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LEVELS = ["FAULT_LEVEL_SUB_HEALTH", "FAULT_LEVEL_RESTART_BUSINESS", "FAULT_LEVEL_SEPARATE"]


def generate(n_nodes, devices=8):
    rnd = random.Random(1)
    nodes = [{"name": f"node{i:05d}", "labels": {"rack": f"rack{i // 32:03d}", "zone": f"z{i % 4}"},
              "inventory": {"cpuCount": 192, "devices": [{"id": d, "vendor": "sim", "model": "sim-npu"}
                                                          for d in range(devices)]},
              "health": "HEALTH_HEALTHY", "connected": True, "revision": str(i + 1)} for i in range(n_nodes)]
    faults = []
    for k in range(n_nodes * devices // 50):
        n, d, level = rnd.randrange(n_nodes), rnd.randrange(devices), rnd.choice(LEVELS)
        faults.append({"id": f"node{n:05d}/{d}/accelerator/C{k:05d}", "node": f"node{n:05d}", "deviceId": d,
                       "source": "FAULT_SOURCE_ACCELERATOR", "code": f"C{k:05d}", "level": level,
                       "state": "FAULT_STATE_ACTIVE", "message": "generated", "count": "1",
                       "firstSeen": "2026-01-01T00:00:00Z", "revision": str(100000 + k)})
    jobs, rank_nodes = [], [(f"node{i:05d}", d) for i in range(n_nodes) for d in range(devices)]
    for j in range(len(rank_nodes) // 64):
        placement = [{"rank": r, "node": rank_nodes[j * 64 + r][0], "deviceId": rank_nodes[j * 64 + r][1]}
                     for r in range(64)]
        jobs.append({"id": f"job{j:04d}", "kind": "JOB_KIND_TRAINING", "placement": placement,
                     "state": "JOB_STATE_RUNNING", "revision": str(200000 + j)})
    recoveries = [{"id": f"job{j:04d}.1", "jobId": f"job{j:04d}", "state": "RECOVERY_STATE_SUCCEEDED",
                   "strategy": "RECOVERY_STRATEGY_PROCESS_RESTART", "level": "FAULT_LEVEL_RESTART_BUSINESS",
                   "steps": [{"index": 0, "command": "JOB_COMMAND_RESTART_PROCESSES", "ranks": [1],
                              "state": "STEP_STATE_SUCCEEDED", "message": "done"}],
                   "createRevision": str(300000 + j)} for j in range(min(len(jobs), 200))]
    return {"nodes": nodes, "faults": faults, "jobs": jobs, "recoveries": recoveries}


def serve(data, page):
    def paged(key, query):
        items = data[key]
        size = int(query.get("page_size", ["100"])[0])
        start = int(query.get("page_token", ["0"])[0] or 0)
        out = {key: items[start:start + size], "totalSize": len(items)}
        if start + size < len(items):
            out["nextPageToken"] = str(start + size)
        return out

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            u = urlparse(self.path)
            q = parse_qs(u.query)
            if u.path in ("/", "/index.html"):
                return self.reply(page, "text/html; charset=utf-8")
            if u.path == "/api/v1/summary":
                body = {"revision": "400000"}
            elif u.path == "/api/v1/admin":
                body = {}
            elif u.path == "/api/v1/nodes":
                body = paged("nodes", q)
            elif u.path == "/api/v1/faults":
                body = paged("faults", q)
            elif u.path == "/api/v1/jobs":
                body = paged("jobs", q)
            elif u.path == "/api/v1/recoveries":
                body = paged("recoveries", q)
            elif u.path == "/api/v1/events":
                body = {"events": [], "nextFromRevision": q["from_revision"][0], "headRevision": "400000"}
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.reply(json.dumps(body).encode(), "application/json")

        def reply(self, body, ctype):
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--screenshot", help="save the first run's page here (PNG)")
    args = ap.parse_args()
    data = generate(args.nodes)
    with open(os.path.join(ROOT, "clusterd/server/status_page/index.html"), "rb") as f:
        page = f.read()
    srv = serve(data, page)
    url = f"http://127.0.0.1:{srv.server_address[1]}/"
    sizes = {k: len(json.dumps(v)) for k, v in data.items()}
    print(f"{args.nodes} nodes x 8 devices; {len(data['faults'])} active faults, {len(data['jobs'])} jobs "
          f"(64 ranks), {len(data['recoveries'])} recoveries; JSON bytes {sizes}")

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
              "--enable-precise-memory-info", "--js-flags=--expose-gc"):
        opts.add_argument(a)
    results = []
    for _ in range(args.runs):
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        try:
            driver.get(url)
            deadline = time.monotonic() + 120
            while not driver.execute_script("return !!(window.clusterdStatus && window.clusterdStatus.ready)"):
                assert time.monotonic() < deadline, "the page never got ready"
                time.sleep(0.05)
            st = driver.execute_script("return {ready: clusterdStatus.readyMs, cells: clusterdStatus.cellCount()}")
            assert st["cells"] == args.nodes * 8, st
            redraw = [driver.execute_script("return clusterdStatus.redraw()") for _ in range(5)]
            driver.execute_script("window.gc && window.gc()")
            heap = driver.execute_script("return performance.memory.usedJSHeapSize")
            driver.execute_cdp_cmd("Performance.enable", {})
            metrics = {m["name"]: m["value"] for m in driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
            driver.execute_cdp_cmd("Performance.disable", {})
            results.append({"ready_ms": st["ready"], "redraw_ms": statistics.median(redraw),
                            "heap_mb": heap / 2**20, "cdp_heap_mb": metrics.get("JSHeapUsedSize", 0) / 2**20,
                            "dom_nodes": metrics.get("Nodes", 0)})
            if args.screenshot and len(results) == 1:
                driver.save_screenshot(args.screenshot)
            print("run:", {k: round(v, 1) for k, v in results[-1].items()})
        finally:
            driver.quit()
    med = {k: round(statistics.median(r[k] for r in results), 1) for k in results[0]}
    print("median:", med)
    srv.shutdown()


if __name__ == "__main__":
    main()
