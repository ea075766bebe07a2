#!/usr/bin/env python3
"""Records every change of every pod in the cluster, as the API server's watch
delivers it, one JSON line per change with the local time it arrived:

  {"t": 1733361234.123, "type": "MODIFIED", "ns": "s1", "name": "llm-1", "uid": "...",
   "index": "1", "node": "worker03", "phase": "Running", "deleting": false}

A test reads the file to assert what really happened in the cluster (which node
each pod was ever bound to, when a pod began terminating, when its replacement
was created, scheduled and Running) and to split a recovery's time between
ClusterD, the controllers, the scheduler and the kubelet.

  watch_pods.py API_URL CA_FILE TOKEN OUT_FILE

It lists first, then watches from the list's resourceVersion (nothing between
is lost) and re-lists after a 410 Gone. It runs until killed.
"""
import json
import ssl
import sys
import time
import urllib.request


def main():
    api, ca, token, out_path = sys.argv[1:5]
    ctx = ssl.create_default_context(cafile=ca)
    headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
    out = open(out_path, "a", buffering=1)

    def record(kind, pod):
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        # The pod's index in its StatefulSet or Indexed Job: a replacement has the index of
        # the pod it replaces (a Job's pods have new names).
        index = meta.get("labels", {}).get("apps.kubernetes.io/pod-index",
                                            meta.get("annotations", {}).get("batch.kubernetes.io/job-completion-index", ""))
        out.write(json.dumps({
            "t": time.time(), "type": kind, "ns": meta["namespace"], "name": meta["name"],
            "uid": meta["uid"], "index": index, "node": spec.get("nodeName", ""), "phase": status.get("phase", ""),
            "deleting": "deletionTimestamp" in meta}) + "\n")

    while True:
        req = urllib.request.Request(api + "/api/v1/pods", headers=headers)
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            listed = json.load(resp)
        for pod in listed["items"]:
            record("LISTED", pod)
        rv = listed["metadata"]["resourceVersion"]
        url = api + "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=" + rv
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), context=ctx,
                                        timeout=3600) as stream:
                for line in stream:
                    ev = json.loads(line)
                    if ev["type"] == "ERROR":
                        break  # 410 Gone: list again
                    if ev["type"] != "BOOKMARK":
                        record(ev["type"], ev["object"])
        except (OSError, ValueError):
            time.sleep(0.2)


if __name__ == "__main__":
    main()
