#!/usr/bin/env python3
"""A small ClusterD client in Python with grpcio.

Prints the cluster summary, lists the faults, and follows Watch for N events.
The stubs are generated from the project's protos at start-up with grpcio-tools
into a temporary directory, so nothing generated is kept in the repository.

    pip install -r requirements.txt
    python3 client.py --server localhost:8899 --watch 5
    python3 client.py --server clusterd:8899 --ca ca.crt --token-file token --watch 5

Transport security, as every ClusterD client: --ca, --cert, --key, --token,
--token-file, --server-name (or CLUSTERD_CA, CLUSTERD_CERT, CLUSTERD_KEY,
CLUSTERD_TOKEN, CLUSTERD_TOKEN_FILE, CLUSTERD_SERVER_NAME; a flag wins). TLS
when any of --ca, --cert, --key is given, else plaintext; a bearer token is
only ever sent over TLS.
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


SECURITY_FLAGS = (  # (flag, attribute, environment variable, help)
    ("--ca", "ca", "CLUSTERD_CA", "CA bundle of ClusterD's certificate; turns TLS on"),
    ("--cert", "cert", "CLUSTERD_CERT", "client certificate for mutual TLS"),
    ("--key", "key", "CLUSTERD_KEY", "its private key"),
    ("--token", "token", "CLUSTERD_TOKEN", "bearer token, sent over TLS only"),
    ("--token-file", "token_file", "CLUSTERD_TOKEN_FILE", "bearer token read from a file, re-read when it changes"),
    ("--server-name", "server_name", "CLUSTERD_SERVER_NAME", "name to verify ClusterD's certificate against"),
)


def add_security_flags(ap):
    for flag, dest, env, text in SECURITY_FLAGS:
        # No default from the environment here (argparse would print a token
        # in --help); apply_security_env fills what the flags left unset.
        metavar = {"token": "TOKEN", "server_name": "NAME"}.get(dest, "FILE")
        ap.add_argument(flag, dest=dest, default=None, metavar=metavar, help=f"{text} (env {env})")


def apply_security_env(args, environ=os.environ):
    """Fills unset flags from CLUSTERD_*. The token and the token file are one
    setting: the environment's is used only when neither flag was given."""
    token_given = args.token is not None or args.token_file is not None
    for _, dest, env, _ in SECURITY_FLAGS:
        if dest in ("token", "token_file") and token_given:
            continue
        if getattr(args, dest) is None:
            setattr(args, dest, environ.get(env) or None)


def check_security(args):
    """The checks of the C++ clients' ValidateClientSecurity; the error names the flag."""
    tls = bool(args.ca or args.cert or args.key)
    if bool(args.cert) != bool(args.key):
        return "--cert: needs --key" if args.cert else "--key: needs --cert"
    if args.token and args.token_file:
        return "--token and --token-file: give one"
    if (args.token or args.token_file) and not tls:
        return f"{'--token' if args.token else '--token-file'}: a bearer token is only sent over TLS (give --ca)"
    if args.server_name and not tls:
        return "--server-name: needs TLS (give --ca)"
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key),
                       ("--token-file", args.token_file)):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                return f"{flag}: cannot read {path}: {e.strerror}"
    return None


class _TokenFile(grpc.AuthMetadataPlugin):
    """Sends the token in a file, re-read when the file changes (a rotated
    service-account token); keeps the last one while it is being replaced."""

    def __init__(self, path):
        self._path, self._stamp, self._token = path, None, ""

    def __call__(self, context, callback):
        try:
            st = os.stat(self._path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp or not self._token:
                with open(self._path, encoding="utf-8") as f:
                    token = f.read().strip()
                if token:
                    self._token, self._stamp = token, stamp
        except OSError:
            pass
        if self._token:
            callback((("authorization", "Bearer " + self._token),), None)
        else:
            callback((), RuntimeError(f"no bearer token in {self._path}"))


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def open_channel(args):
    """A channel with the transport security of args (checked by check_security)."""
    if not (args.ca or args.cert or args.key):
        return grpc.insecure_channel(args.server)
    creds = grpc.ssl_channel_credentials(
        root_certificates=read_bytes(args.ca) if args.ca else None,  # None: the system's roots
        private_key=read_bytes(args.key) if args.key else None,
        certificate_chain=read_bytes(args.cert) if args.cert else None)
    # Call credentials are only ever attached to a secure channel: grpc
    # refuses to compose them with insecure ones.
    if args.token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(args.token))
    elif args.token_file:
        creds = grpc.composite_channel_credentials(creds, grpc.metadata_call_credentials(_TokenFile(args.token_file)))
    options = [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
    return grpc.secure_channel(args.server, creds, options=options)


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
    add_security_flags(ap)
    args = ap.parse_args()
    apply_security_env(args)
    if (problem := check_security(args)) is not None:
        print(f"client.py: {problem}", file=sys.stderr)
        return 2

    pb, pb_grpc, types = load_stubs(args.proto_dir)
    with open_channel(args) as channel:
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
