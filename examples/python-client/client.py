#!/usr/bin/env python3
"""A small ClusterD client in Python with grpcio.

Prints the cluster summary, lists the faults, and follows Watch for N events.
The stubs are generated from the project's protos at start-up with grpcio-tools
into a temporary directory, so nothing generated is kept in the repository.

    pip install -r requirements.txt
    python3 client.py --server localhost:8899 --watch 5
"""

import argparse
import atexit
import importlib.resources
import os
import pathlib
import shutil
import sys
import tempfile

import grpc

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_PROTO_DIR = HERE.parent.parent / "proto"


def load_stubs(proto_dir):
    """Generates Python code for clusterd/v1/*.proto and imports it."""
    from grpc_tools import protoc

    proto_dir = pathlib.Path(proto_dir).resolve()
    files = sorted(str(p.relative_to(proto_dir)) for p in (proto_dir / "clusterd" / "v1").glob("*.proto"))
    if not files:
        sys.exit(f"client.py: no protos under {proto_dir}/clusterd/v1")
    out = tempfile.mkdtemp(prefix="clusterd-pystubs-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"-I{well_known}",
                      f"--python_out={out}", f"--grpc_python_out={out}", *files])
    if rc != 0:
        sys.exit(f"client.py: generating stubs from {proto_dir} failed (protoc exit {rc})")
    # Regular packages, first on the path, so that nothing else named
    # "clusterd" can shadow them.
    for pkg in ("clusterd", "clusterd/v1"):
        pathlib.Path(out, pkg, "__init__.py").touch()
    sys.path.insert(0, out)
    from clusterd.v1 import cluster_pb2, cluster_pb2_grpc, types_pb2  # noqa: E402
    return cluster_pb2, cluster_pb2_grpc, types_pb2


def short(enum_type, value, prefix):
    return enum_type.Name(value).removeprefix(prefix)


def print_summary(stub, pb):
    s = stub.GetSummary(pb.GetSummaryRequest(), timeout=10)
    print(f"revision {s.revision} (history compacted up to {s.compacted_revision}), "
          f"{s.connected_agents} agents connected")
    for what, c in (("nodes", s.nodes), ("devices", s.devices)):
        print(f"{what:8} total={c.total} healthy={c.healthy} sub_healthy={c.sub_healthy} "
              f"unhealthy={c.unhealthy} unknown={c.unknown}")
    levels = ", ".join(f"{k.removeprefix('FAULT_LEVEL_')}={v}" for k, v in sorted(s.active_faults_by_level.items()))
    print(f"active faults: {s.active_faults}" + (f" ({levels})" if levels else ""))
    return s


def list_faults(stub, pb, types, active_only):
    faults, token = [], ""
    while True:
        resp = stub.ListFaults(pb.ListFaultsRequest(page_size=500, page_token=token, active_only=active_only),
                               timeout=10)
        faults.extend(resp.faults)
        token = resp.next_page_token
        if not token:
            break
    print(f"faults ({len(faults)}{', active only' if active_only else ''}):")
    print(f"  {'ID':45} {'LEVEL':17} {'STATE':8} {'COUNT':>5} {'REVISION':>8}")
    for f in faults:
        print(f"  {f.id:45} {short(types.FaultLevel, f.level, 'FAULT_LEVEL_'):17} "
              f"{short(types.FaultState, f.state, 'FAULT_STATE_'):8} {f.count:>5} {f.revision:>8}")
    return faults


def watch(stub, pb, types, from_revision, count, timeout):
    """Prints the first `count` events after from_revision; returns how many arrived."""
    seen = 0
    stream = stub.Watch(pb.WatchRequest(from_revision=from_revision), timeout=timeout)
    try:
        for resp in stream:
            for ev in resp.events:
                kind = short(types.EventType, ev.type, "EVENT_TYPE_")
                line = f"revision={ev.revision} {kind} node={ev.node}"
                if ev.HasField("device_id"):
                    line += f" device={ev.device_id}"
                if ev.HasField("fault"):
                    line += (f" fault={ev.fault.id} level={short(types.FaultLevel, ev.fault.level, 'FAULT_LEVEL_')}"
                             f" state={short(types.FaultState, ev.fault.state, 'FAULT_STATE_')}")
                if kind.endswith("HEALTH_CHANGED"):
                    line += (f" health={short(types.Health, ev.previous_health, 'HEALTH_')}"
                             f"->{short(types.Health, ev.health, 'HEALTH_')}")
                print(line, flush=True)
                seen += 1
                if seen >= count:
                    return seen
    finally:
        stream.cancel()
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=os.environ.get("CLUSTERD_ADDR", "localhost:8899"),
                    help="ClusterD gRPC address (env CLUSTERD_ADDR; default localhost:8899)")
    ap.add_argument("--proto-dir", default=str(DEFAULT_PROTO_DIR), help="the project's proto/ directory")
    ap.add_argument("--active-only", action="store_true", help="list only active faults")
    ap.add_argument("--watch", type=int, default=0, metavar="N", help="then follow Watch for N events")
    ap.add_argument("--from-revision", type=int, default=0, help="Watch every event after this revision")
    ap.add_argument("--timeout", type=float, default=30, help="give up on Watch after this many seconds")
    args = ap.parse_args()

    pb, pb_grpc, types = load_stubs(args.proto_dir)
    with grpc.insecure_channel(args.server) as channel:
        stub = pb_grpc.ClusterServiceStub(channel)
        try:
            print_summary(stub, pb)
            list_faults(stub, pb, types, args.active_only)
            if args.watch > 0:
                print(f"watch from revision {args.from_revision}, {args.watch} events:")
                got = watch(stub, pb, types, args.from_revision, args.watch, args.timeout)
                if got < args.watch:
                    print(f"client.py: Watch ended after {got} of {args.watch} events", file=sys.stderr)
                    return 1
        except grpc.RpcError as e:
            # OUT_OF_RANGE names the oldest revision still available.
            print(f"client.py: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
