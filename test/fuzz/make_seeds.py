#!/usr/bin/env python3
"""Writes the binary seed inputs of test/fuzz/corpus (outbox, key_codec,
page_token); the text seeds are plain files there. Run from anywhere:

    python3 test/fuzz/make_seeds.py

Outbox logs follow the format in noded/outbox.h; the protobuf payloads are
encoded from text format with protoc --encode.
"""
import os
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def encode(message: str, text: str) -> bytes:
    return subprocess.run(
        ["protoc", "--encode=clusterd.v1." + message, "-I", os.path.join(ROOT, "proto"),
         "-I", "/usr/include", "clusterd/v1/agent.proto"],
        input=text.encode(), capture_output=True, check=True).stdout


def record(rtype: int, payload: bytes) -> bytes:
    head = struct.pack("<IB3x", len(payload), rtype)
    return head + struct.pack("<II", crc32c(head), crc32c(payload)) + payload


def transition(epoch, seq, raise_, device, code, subject=""):
    dev = f"device_id: {device} " if device is not None else ""
    return encode("FaultTransition",
                  f"id {{ epoch: {epoch} seq: {seq} }} action: {'TRANSITION_ACTION_RAISE' if raise_ else 'TRANSITION_ACTION_CLEAR'} "
                  f"fault {{ {dev}source: FAULT_SOURCE_ACCELERATOR code: \"{code}\" subject: \"{subject}\" "
                  f"message: \"m\" level: FAULT_LEVEL_SEPARATE }} time {{ seconds: 1700000000 }}")


def report(device, code):
    dev = f"device_id: {device} " if device is not None else ""
    return encode("FaultReport", f"{dev}source: FAULT_SOURCE_DISK code: \"{code}\" subject: \"/data\"")


def ack(epoch, seq):
    return struct.pack("<QQ", epoch, seq)


def snapshot(epoch, reports):
    out = struct.pack("<QI", epoch, len(reports))
    for r in reports:
        out += struct.pack("<I", len(r)) + r
    return out


def write(target, name, data: bytes):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


MAGIC = b"NDOUTBX1"
RAW, EPOCH = 1, 2
NO_EPOCH = b"\0" * 8


def outbox_seeds():
    t1 = transition(1, 1, True, 3, "80E01801")
    t2 = transition(1, 2, True, None, "NODE_DISK_FULL", "/data")
    t3 = transition(2, 1, False, 3, "80E01801")
    snap = snapshot(1, [report(None, "NODE_DISK_FULL"), report(2, "NODE_DISK_IO")])
    log = MAGIC + record(1, t1) + record(1, t2) + record(2, ack(1, 1))
    write("outbox", "raw_pending_and_ack", bytes([RAW]) + NO_EPOCH + log)
    write("outbox", "raw_snapshot", bytes([RAW]) + NO_EPOCH + log + record(3, snap) + record(1, t3))
    write("outbox", "raw_torn_tail", bytes([RAW]) + NO_EPOCH + log + record(1, t3)[:20])
    mid = bytearray(log)
    mid[len(MAGIC) + 20] ^= 0xFF  # inside the first payload, a valid record follows
    write("outbox", "raw_corrupt_middle", bytes([RAW]) + NO_EPOCH + bytes(mid))
    write("outbox", "raw_magic_only_epoch_7", bytes([RAW | EPOCH]) + struct.pack("<Q", 7) + MAGIC)
    write("outbox", "raw_bad_magic", bytes([RAW]) + NO_EPOCH + b"NDOUTBX0" + record(1, t1))
    write("outbox", "raw_epoch_max", bytes([RAW | EPOCH]) + struct.pack("<Q", 2**64 - 2) + log)

    def structured(*recs):
        out = b""
        for rtype, payload in recs:
            assert len(payload) < 256
            out += bytes([rtype, len(payload)]) + payload
        return out

    write("outbox", "records_transitions_ack", bytes([0]) + NO_EPOCH + structured((1, t1), (1, t2), (2, ack(1, 2))))
    write("outbox", "records_snapshot", bytes([EPOCH]) + struct.pack("<Q", 3) + structured((3, snap), (1, t3)))
    write("outbox", "records_unknown_type", bytes([0]) + NO_EPOCH + structured((1, t1), (4, b"xx")))


def key_codec_seeds():
    write("key_codec", "revision", struct.pack(">Q", 42))
    write("key_codec", "hex_token", b"776f726b65723031")
    write("key_codec", "hex_upper", b"776F726B")
    write("key_codec", "two_u64", struct.pack(">QQ", 1, 2**63))
    write("key_codec", "fault_key_fields", bytes([8, 0, 3, 1, 5]) + b"worker0180E01801@/data")
    write("key_codec", "node_with_nul", bytes([4, 0, 1, 0, 8]) + b"a\0b\0reporter/ext")


def page_token_seeds():
    def hx(b):
        return b.hex().encode()
    # byte 0: 0 nodes, 1 faults, 2 jobs, 3 recoveries; byte 1: page size.
    write("page_token", "nodes_first", bytes([0, 2]))
    write("page_token", "nodes_after_worker00", bytes([0, 1]) + hx(b"worker00"))
    write("page_token", "faults_after_key", bytes([1, 3]) + hx(b"worker01\0\x01\0\0\0\x02\x05" + b"8C084E00"))
    write("page_token", "jobs_after_job_a", bytes([2, 1]) + hx(b"job-a"))
    write("page_token", "recoveries_below_rev", bytes([3, 1]) + hx(struct.pack(">Q", 1000)))
    write("page_token", "odd_length", bytes([0, 0]) + b"abc")
    write("page_token", "not_hex", bytes([1, 0]) + b"zz")
    write("page_token", "uppercase", bytes([2, 0]) + b"6A6F62")


if __name__ == "__main__":
    outbox_seeds()
    key_codec_seeds()
    page_token_seeds()
