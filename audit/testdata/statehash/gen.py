#!/usr/bin/env python3
"""Writes blake3-kat.txt, the known answers of audit.StateHash (format 2).

Every expansion is computed by b3sum, the reference BLAKE3 implementation,
not by the package under test:

    b3sum --length 2048 --raw FILE

where FILE holds a record's framing, as audit/doc.go ("State Digest")
specifies it:

    "kvfence/state/v2\\n" || uvarint(len(bucket)) || bucket ||
    uvarint(len(key)) || key || value

The sums are SHA-256("kvfence/state-sum/v2\\n" || lanes), the lanes being
the lane-wise sums modulo 2^16 of the expansions, as 16-bit little-endian
integers. Run from this directory: python3 gen.py (b3sum 1.2.0 made the
committed file).
"""

import hashlib
import os
import struct
import subprocess
import tempfile


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def seq(n):
    """n bytes, byte i being i mod 251: long values without a long file."""
    return bytes(i % 251 for i in range(n))


def field(f):
    """A field is bytes, or an int n standing for seq(n)."""
    return seq(f) if isinstance(f, int) else f


def spec(f):
    return "seq:%d" % f if isinstance(f, int) else "hex:" + f.hex()


def framing(bucket, key, value):
    return (b"kvfence/state/v2\n" + uvarint(len(bucket)) + bucket +
            uvarint(len(key)) + key + value)


def check_lengths():
    """The chunk-boundary records frame to exactly 1024, 2048 and 1025 bytes."""
    got = [len(framing(b, field(k), field(v))) for b, k, v in records[5:8]]
    assert got == [1024, 2048, 1025], got


def b3(data):
    with tempfile.NamedTemporaryFile(delete=False) as f:
        f.write(data)
        name = f.name
    try:
        return subprocess.run(["b3sum", "--length", "2048", "--raw", name],
                              check=True, capture_output=True).stdout
    finally:
        os.unlink(name)


def lanes(expansions):
    acc = [0] * 1024
    for e in expansions:
        assert len(e) == 2048
        for i, v in enumerate(struct.unpack("<1024H", e)):
            acc[i] = (acc[i] + v) % 65536
    return struct.pack("<1024H", *acc)


def state_sum(expansions):
    return hashlib.sha256(b"kvfence/state-sum/v2\n" + lanes(expansions)).hexdigest()


prefix_len = len(b"kvfence/state/v2\n")
# (bucket, key, value)
records = [
    (b"", b"", b""),
    (b"control", b"configmap/prod/backup-policy", bytes.fromhex("a165") + b"epoch" + b"\x01"),
    (b"targets", b"configmap/prod/backup-policy", b'{"data":{"retention_days":"30"}}'),
    (b"receipts", bytes(range(256)), b""),
    (b"grants", b"", b"\x00"),
    # Framings of exactly one and two chunks (1024, 2048 bytes), and one
    # byte past a chunk: where BLAKE3 decides whether a chunk is the last.
    (b"app", b"k", 1024 - prefix_len - 1 - 3 - 1 - 1),
    (b"app", b"k", 2048 - prefix_len - 1 - 3 - 1 - 1),
    (b"app", b"k", 1025 - prefix_len - 1 - 3 - 1 - 1),
    # A long bucket name and key (two-byte lengths) and long values: many
    # chunks, a tree of several levels.
    (b"b" * 200, 300, 5000),
    (b"holds", b"scope-a", 65536),
    (b"targets", b"big", 100003),
    # A key that does not fit in the first chunk with the framing before
    # it, and a bucket name longer than a chunk.
    (b"control", 2000, b"v"),
    (b"c" * 1100, b"k", 3000),
]

check_lengths()
with open("blake3-kat.txt", "w") as out:
    out.write("# Written by gen.py with b3sum; do not edit. Fields: bucket key value expansion.\n")
    exps = []
    for bucket, key, value in records:
        frame = framing(bucket, field(key), field(value))
        e = b3(frame)
        exps.append(e)
        out.write("record %s %s %s %s\n" % (spec(bucket), spec(key), spec(value), e.hex()))
    out.write("sum empty %s\n" % state_sum([]))
    out.write("sum two-records %s\n" % state_sum([exps[1], exps[2]]))
    out.write("sum all %s\n" % state_sum(exps))
    # The control record added twice counts twice: the sum of a multiset.
    out.write("sum all-with-control-twice %s\n" % state_sum(exps + [exps[1]]))
