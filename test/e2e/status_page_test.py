"""Drives ClusterD's status page in headless Chromium (run by status_page_test.sh).

Asserts through the page's test hook (window.clusterdStatus) and the DOM,
never on pixels: 16 cells; a fault injected on a sim device turns its cell
and shows in the faults panel and in the node's detail pane without a page
reload; the recovery it starts reaches SUCCEEDED in the recoveries panel;
a pause and a cordon (clusterctl) show as the banner and the cells' mark;
a click on a job's row shows its MindCluster view: the job.Job summary, the
hccl.json servers, the rank table and its NIC switch and stress test with
each step and the per-chip results; a chip held out of service
(clusterctl hold) shows as held in its node's detail pane; the domain view
shows the nodes' SuperPoD degraded by the fault, with no incident and
nothing kept out.
"""
import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By


def wait_for(what, cond, timeout=30.0):
    """Polls cond() until it returns something truthy or the deadline passes."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # the page may be between renders
            last = e
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def click_row(driver, selector):
    """Clicks a table row's first cell; the panel is redrawn as events come,
    so a row found a moment before may be gone: found again."""
    for _ in range(20):
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            continue
    raise AssertionError(f"{selector}: redrawn under every click")


def check_operations(js, job, click_job, detail_text):
    """The job's NIC switch and stress test in its MindCluster view: both,
    newest first, with the request, each step and every chip's result."""
    click_job(job)
    wait_for(f"{job}'s NIC switch and stress test", lambda: "NIC switches and stress tests (2)" in detail_text())
    ops = js("""return [...document.querySelectorAll('#detailBody .mc-op')].map((d) => ({
                  id: d.getAttribute('data-op'), stage: d.querySelector('.mc-stage').textContent,
                  steps: [...d.querySelectorAll('.mc-steps li')].map((li) => li.textContent),
                  chips: [...d.querySelectorAll('table.mc-chips tr')].slice(1).map((tr) => [...tr.cells].map((td) => td.textContent)),
                  text: d.innerText }))""")
    assert [o["id"] for o in ops] == [f"{job}/stress-test/2", f"{job}/nic-switch/1"], ops
    assert all(o["stage"] == "succeeded" for o in ops), ops
    assert ops[0]["steps"][-1] == "stress test finish", ops[0]
    assert sorted((c[0], c[1], c[2], c[3]) for c in ops[0]["chips"]) == [("worker02", "4", "AIC", "0"),
                                                                      ("worker02", "5", "AIC", "0")], ops[0]
    assert ops[1]["steps"][-1] == "switch nic finish", ops[1]
    assert "1 → backup" in ops[1]["text"], ops[1]["text"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--inject", required=True, help="the noded's sim fault URL")
    ap.add_argument("--node", required=True)
    ap.add_argument("--device", type=int, required=True)
    ap.add_argument("--code", required=True)
    ap.add_argument("--artifacts", required=True)
    ap.add_argument("--clusterctl", required=True)
    ap.add_argument("--server", required=True, help="clusterd's gRPC address")
    ap.add_argument("--om-job", help="a job with a NIC switch and a stress test done (else that part is skipped)")
    args = ap.parse_args()
    os.makedirs(args.artifacts, exist_ok=True)

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1400,1000", "--no-first-run", "--disable-extensions"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    js = driver.execute_script
    shot = lambda name: driver.save_screenshot(os.path.join(args.artifacts, name + ".png"))
    try:
        driver.get(args.url)
        wait_for("the page's first load", lambda: js("return !!(window.clusterdStatus && window.clusterdStatus.ready)"))
        # A marker that only survives if the page is never reloaded.
        js("window.__statusPageMarker = 'loaded-once'")
        wait_for("16 cells", lambda: js("return window.clusterdStatus.cellCount()") == 16)
        # The software chain panel: worker02's device plugin is not registered.
        wait_for("worker02's device_plugin BROKEN in the chain panel", lambda: {"node": "worker02",
                 "link": "device_plugin", "state": "BROKEN"} in js("return window.clusterdStatus.chainRows()"))
        broken = [row for row in driver.find_elements(By.CSS_SELECTOR, "#chain tr") if "device_plugin" in row.text]
        assert broken and "worker02" in broken[0].text, [r.text for r in broken]
        state_cell = broken[0].find_element(By.CSS_SELECTOR, "td.chain-state")
        assert "h-UNHEALTHY" in state_cell.get_attribute("class"), state_cell.get_attribute("class")
        assert "device plugin" in broken[0].text, broken[0].text  # the fix, in one line
        # The job's progress (its agent reports each rank's step): state, step and ETTR.
        job_row = lambda: driver.find_element(By.CSS_SELECTOR, '#jobs tr[data-job="train-a"]')
        wait_for("train-a's progress and ETTR in the jobs panel",
                 lambda: "ADVANCING step" in job_row().text and "100.0%" in job_row().text)
        assert job_row().find_elements(By.CSS_SELECTOR, "td.pg-ADVANCING"), job_row().text
        assert job_row().find_elements(By.CSS_SELECTOR, "td .ettr"), "no timeline: " + job_row().text
        health0 = js("return window.clusterdStatus.cellHealth(arguments[0], arguments[1])", args.node, args.device)
        assert health0 == "HEALTHY", f"cell {args.node}/{args.device} starts {health0}"
        rev0 = int(js("return window.clusterdStatus.revision()"))
        shot("1-loaded")
        print(f"page loaded: 16 cells, revision {rev0}")

        body = json.dumps({"device": args.device, "code": args.code, "state": "raise"}).encode()
        req = urllib.request.Request(args.inject, data=body, method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, f"inject: HTTP {r.status}"
        print(f"injected {args.code} on {args.node}/{args.device}")

        wait_for("the cell's health to change", lambda: js(
            "return window.clusterdStatus.cellHealth(arguments[0], arguments[1])", args.node, args.device) != "HEALTHY")
        wait_for("the fault in the faults panel", lambda: any(
            args.code in row.text and args.node in row.text for row in driver.find_elements(By.CSS_SELECTOR, "#faults tr")))
        assert int(js("return window.clusterdStatus.revision()")) > rev0, "revision did not move"
        # The domain view (docs/domains.md): SuperPoD 1 degraded by the one
        # fault, a chip fault and not an incident, so nothing is kept out.
        domain_row = lambda: driver.find_element(By.CSS_SELECTOR, '#domains tr[data-domain="superpod=1"]')
        domain_cells = lambda: [td.text for td in domain_row().find_elements(By.CSS_SELECTOR, "td")]
        wait_for("superpod=1 (2 nodes) with the faulted chip in the domain view",
                 lambda: domain_cells()[:2] == ["superpod=1", "2"] and int(domain_cells()[3]) >= 1)
        cells = domain_cells()
        assert int(cells[2]) >= 1, cells  # worker01 faulted
        assert cells[4] == "-" and cells[6] == "no", cells  # no incident, neither isolated nor avoided
        # The job's impacts (computed by ClusterD, read again after the fault event).
        wait_for("the fault's impact on train-a in the jobs panel", lambda: f"{args.node}/{args.device}" in
                 driver.find_element(By.CSS_SELECTOR, '#jobs tr[data-job="train-a"]').text)
        shot("2-fault")

        # Click the cell itself (coordinates from the hook), then the pane.
        rect = js("return window.clusterdStatus.cellRect(arguments[0], arguments[1])", args.node, args.device)
        assert rect, "no such cell"
        canvas = driver.find_element(By.ID, "map")
        cx = rect["x"] + rect["size"] / 2 - rect["width"] / 2
        cy = rect["y"] + rect["size"] / 2 - rect["height"] / 2
        ActionChains(driver).move_to_element_with_offset(canvas, int(cx), int(cy)).click().perform()
        wait_for("the detail pane with the fault", lambda: args.code in driver.find_element(By.ID, "detailBody").text)
        detail = driver.find_element(By.ID, "detail").text
        assert args.node in detail, detail
        assert "train-a" in detail, f"ranks of train-a not in the pane: {detail}"
        shot("3-detail")

        def recovery_succeeded():
            return any("SUCCEEDED" in td.text for td in driver.find_elements(By.CSS_SELECTOR, "#recoveries td.rec-state"))
        wait_for("the recovery SUCCEEDED in the recoveries panel", recovery_succeeded, timeout=60)
        shot("4-recovered")

        # Operator actions arrive as events too: the pause banner, the cordon mark.
        other = "worker02" if args.node != "worker02" else "worker01"
        assert js("return window.clusterdStatus.cellMarked(arguments[0], 0)", other) is False
        for cmd in (["pause", "--reason", "status page test"], ["cordon", other, "--reason", "status page test"]):
            subprocess.run([args.clusterctl, "--server", args.server] + cmd, check=True, stdout=subprocess.DEVNULL)
        wait_for("the paused banner", lambda: "PAUSED" in driver.find_element(By.ID, "bannerPaused").text)
        wait_for(f"{other}'s cells marked cordoned", lambda: all(
            js("return window.clusterdStatus.cellMarked(arguments[0], arguments[1])", other, d) for d in range(8)))
        shot("5-paused-cordoned")

        # worker02's detail pane: every link of its chain, coloured.
        js("window.clusterdStatus.openNode('worker02')")
        wait_for("worker02's chain in the detail pane", lambda: "Software chain" in driver.find_element(By.ID, "detailBody").text
                 and "device_plugin" in driver.find_element(By.ID, "detailBody").text)
        states = {td.text: td.get_attribute("class") for td in driver.find_elements(By.CSS_SELECTOR, "#detailBody td.chain-state")}
        assert "h-UNHEALTHY" in states.get("BROKEN", ""), states
        assert "h-HEALTHY" in states.get("ok", ""), states  # the driver and its device files
        shot("6-chain")

        # A job's MindCluster view, opened by a click on its row: train-a has
        # a summary, servers and rank table and no NIC switch or stress test.
        click_job = lambda job: click_row(driver, f'#jobs tr[data-job="{job}"] td')
        detail_text = lambda: js("return document.getElementById('detailBody').innerText")
        click_job("train-a")
        wait_for("train-a's MindCluster view", lambda: "NIC switches and stress tests (0)" in detail_text())
        text = detail_text()
        assert "MindCluster summary" in text and "hccl.json servers (2)" in text, text
        assert js("return document.getElementById('detailTitle').textContent") == "job train-a"
        rows = js("""return [...document.querySelectorAll('#detailBody table.mc-servers tr')].slice(1)
                     .map((tr) => [...tr.cells].map((td) => td.textContent))""")
        # (the recovery above may have moved a rank to a spare chip)
        assert sorted(r[5] for r in rows) == ["0", "1", "2", "3"], rows
        assert {r[0] for r in rows} == {"worker01", "worker02"}, rows
        table = json.loads(js("return document.querySelector('#detailBody pre.mc-ranktable').textContent"))
        assert table["status"] == "complete" and len(table["server_list"]) == 2, table
        # The job whose TaskD did a NIC switch and a stress test: both, newest
        # first, with the request, each step and every chip's result.
        if args.om_job:
            check_operations(js, args.om_job, click_job, detail_text)
            shot("7-mindcluster-job")

        # Return to service (docs/validation.md): a chip an operator holds out
        # shows its state in its node's detail pane, live.
        js("window.clusterdStatus.openNode('worker02')")
        subprocess.run([args.clusterctl, "--server", args.server, "hold", "worker02", "7", "--reason", "burn-in due"],
                       check=True, stdout=subprocess.DEVNULL)
        wait_for("worker02's chip 7 held in the detail pane",
                 lambda: "device 7 held: held by" in detail_text() and "burn-in due" in detail_text())
        shot("8-held")

        # All of it without a reload: the marker, one navigation, one state load.
        assert js("return window.__statusPageMarker") == "loaded-once", "the page was reloaded"
        assert js("return performance.getEntriesByType('navigation').length") == 1
        assert js("return window.clusterdStatus.loads") == 1, "the state was loaded again"
        print("fault followed live, detail pane, recovery SUCCEEDED; no reload")
    except Exception:
        shot("failure")
        with open(os.path.join(args.artifacts, "failure.html"), "w") as f:
            f.write(driver.page_source)
        # What the API said, next to what the page shows.
        for name, path in (("jobs", "api/v1/jobs"), ("faults", "api/v1/faults?active_only=true"),
                           ("recoveries", "api/v1/recoveries")):
            try:
                with urllib.request.urlopen(args.url + path, timeout=5) as r, \
                        open(os.path.join(args.artifacts, f"failure-{name}.json"), "wb") as f:
                    f.write(r.read())
            except OSError as e:
                print(f"cannot save {path}: {e}", file=sys.stderr)
        raise
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
