#!/usr/bin/env python3
"""Makes the interop fixtures beside this script with Python protobuf (its upb backend).

For each case: `<case>.input.bin` (the bytes a decoder is given: canonical, or deliberately not,
e.g. a packed field sent unpacked or an unknown field), `<case>.bin` (what Python protobuf
re-serializes after parsing the input, deterministic=True) and `<case>.json` (the parsed message
in protobuf's JSON mapping, proto field names). `manifest.json` lists every case with its
message type, proto file, the protobuf version and backend, and sha256 of each file.

Run from anywhere (needs network access to PyPI once, nothing else):

    python3 -m venv /tmp/pb && /tmp/pb/bin/pip install protobuf grpcio-tools
    /tmp/pb/bin/python crates/tern-rpc/tests/interop/make_fixtures.py

`protoc` comes from grpcio-tools; `tern/rpcnic.proto` from crates/tern-rpc/proto.
"""

import hashlib
import importlib
import json
import math
import os
import struct
import sys
import tempfile

from google.protobuf import __version__ as pb_version
from google.protobuf import json_format
from google.protobuf.internal import api_implementation
from grpc_tools import protoc

HERE = os.path.dirname(os.path.abspath(__file__))
TERN_PROTO = os.path.join(HERE, "..", "..", "proto")


def compile_protos(out):
    import grpc_tools

    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    for name in ["all2.proto", "all3.proto", "tern/rpcnic.proto"]:
        args = ["protoc", f"-I{HERE}", f"-I{TERN_PROTO}", f"-I{well_known}", f"--python_out={out}", name]
        if protoc.main(args) != 0:
            sys.exit(f"protoc failed on {name}")
    sys.path.insert(0, out)
    return importlib.import_module("all2_pb2"), importlib.import_module("all3_pb2")


def varint(v):
    out = bytearray()
    v &= (1 << 64) - 1
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def tag(number, wire):
    return varint((number << 3) | wire)


def cases(all2, all3):
    """(name, message type, input bytes)."""
    out = []
    # proto2: every field set.
    m = all2.All2(
        d=-1.5, f=3.25, i64=-(2**63), u64=2**64 - 1, i32=-1, fx64=2**64 - 2, fx32=2**32 - 1, b=True,
        s="héllo ✓", by=bytes(range(256)), u32=4000000000, sf32=-(2**31), sf64=2**63 - 1, si32=-2**31,
        si64=-(2**63), color=all2.GREEN, req=7, unpacked=[1, -1, 300], packed=[0, -1, 2**62], names=["", "a", "bc"],
        colors=[all2.RED, all2.BLUE], ds=[0.0, -0.0, math.inf, 1e-300], fx32s=[1, 2**32 - 1],
    )
    m.inner.blob = b"\x00" * 5000
    m.inner.n = 12345678901
    m.grp.a = 9
    m.grp.tags.extend(["x", "yz"])
    m.by_name["k1"].blob = b"v1"
    m.by_name["k2"].n = 2
    m.other = "oneof string"
    m.child.req = 1
    m.child.child.req = 2
    m.child.child.s = "deep"
    m.inners.add().n = 1
    m.inners.add().blob = b"b"
    out.append(("all2_full", "interop.All2", m.SerializeToString(deterministic=True)))
    # proto2: only the required field (defaults are not written).
    out.append(("all2_required_only", "interop.All2", all2.All2(req=0).SerializeToString()))
    # proto2: a closed enum given a number it does not declare (kept as an unknown field), and an
    # unknown field of each wire type, after the known ones.
    raw = bytearray(all2.All2(req=1).SerializeToString())
    raw += tag(20, 0) + varint(3)  # color = 3: not declared
    raw += tag(1000, 0) + varint(150)
    raw += tag(1001, 1) + struct.pack("<q", -2)
    raw += tag(1002, 2) + varint(3) + b"abc"
    raw += tag(1003, 3) + tag(1, 0) + varint(1) + tag(1003, 4)
    raw += tag(1004, 5) + struct.pack("<I", 7)
    out.append(("all2_unknown", "interop.All2", bytes(raw)))
    # proto2: a packed field sent unpacked and an unpacked one sent packed (both accepted).
    raw = bytearray(all2.All2(req=1).SerializeToString())
    raw += tag(23, 0) + varint(2)  # sint64 2 -> zigzag(1)
    body = varint(5) + varint(6)
    raw += tag(22, 2) + varint(len(body)) + body
    out.append(("all2_packing_swapped", "interop.All2", bytes(raw)))
    # proto2: the last of repeated singular values wins; sub-messages given twice merge.
    raw = bytearray(all2.All2(req=1).SerializeToString())
    raw += tag(5, 0) + varint(1) + tag(5, 0) + varint(2)
    a = all2.All2.Inner(n=1).SerializeToString()
    b = all2.All2.Inner(blob=b"z").SerializeToString()
    raw += tag(25, 2) + varint(len(a)) + a + tag(25, 2) + varint(len(b)) + b
    out.append(("all2_merge", "interop.All2", bytes(raw)))

    # proto3: every field set.
    m = all3.All3(
        d=2.5, f=-0.5, i64=-5, u64=5, i32=-(2**31), fx64=1, fx32=2, b=True, s="日本語", by=b"\xff\x00",
        u32=1, sf32=-3, sf64=-4, si32=-5, si64=-6, mood=all3.SAD, maybe=0, packed=[1, 2, 3, -7],
        unpacked=[4, -5], names=["n1", "n2"], moods=[all3.HAPPY, all3.SAD], blobs=[b"", b"\x01"], fs=[1.5, -2.0],
    )
    m.leaf.name = "leaf"
    m.leaf.ns.extend([1, 2**64 - 1])
    m.counts["a"] = 1
    m.counts["b"] = -2
    m.leaves[7].name = "seven"
    m.leaves[-1].ns.append(3)
    m.third.name = "third"
    m.child.s = "child"
    out.append(("all3_full", "interop.All3", m.SerializeToString(deterministic=True)))
    out.append(("all3_empty", "interop.All3", b""))
    # proto3: an open enum with a number it does not declare (kept as the number).
    raw = tag(20, 0) + varint(99) + tag(32, 2) + varint(2) + varint(1) + varint(42)
    out.append(("all3_open_enum", "interop.All3", raw))
    # proto3: a value equal to its default written explicitly (Python drops it on re-serializing).
    raw = tag(5, 0) + varint(0) + tag(9, 2) + varint(0)
    out.append(("all3_explicit_defaults", "interop.All3", raw))
    return out


def main():
    with tempfile.TemporaryDirectory() as tmp:
        all2, all3 = compile_protos(tmp)
        types = {"interop.All2": (all2.All2, "all2.proto"), "interop.All3": (all3.All3, "all3.proto")}
        manifest = {
            "made_by": f"Python protobuf {pb_version} ({api_implementation.Type()} backend)",
            "script": "make_fixtures.py",
            "cases": [],
        }
        for name, ty, data in cases(all2, all3):
            cls, proto = types[ty]
            msg = cls()
            msg.ParseFromString(data)
            canonical = msg.SerializeToString(deterministic=True)
            as_json = json_format.MessageToJson(msg, preserving_proto_field_name=True, sort_keys=True)
            files = {"input": f"{name}.input.bin", "canonical": f"{name}.bin", "json": f"{name}.json"}
            for key, content in [("input", data), ("canonical", canonical), ("json", as_json.encode() + b"\n")]:
                with open(os.path.join(HERE, files[key]), "wb") as f:
                    f.write(content)
            manifest["cases"].append({
                "name": name,
                "type": ty,
                "proto": proto,
                "files": files,
                "sha256": {
                    "input": hashlib.sha256(data).hexdigest(),
                    "canonical": hashlib.sha256(canonical).hexdigest(),
                },
            })
        with open(os.path.join(HERE, "manifest.json"), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
    print(f"wrote {len(manifest['cases'])} cases to {HERE}")


if __name__ == "__main__":
    main()
