#!/usr/bin/env python3
"""Writes blake3-grid.txt: known answers of audit.StateHash's record terms
at every length where the term's code feeds BLAKE3 differently.

A record's framing before its value (prefix, bucket, key and their lengths)
is written in one piece when it fits in a 1024-byte chunk, in two when the
key does not fit after the rest, in more when the bucket name alone does
not; the value is written a chunk at a time. The grid takes, for buckets of
0, 7, 127, 128 (a two-byte length), 1000, 1100 and 2100 bytes, keys that
end the framing before the value just short of, at and just past one, two
and three chunks, and values that end the whole framing likewise, and past
five more chunks.

Every expansion is computed by b3sum, the reference BLAKE3 implementation:

    b3sum --length 2048 FILE...

Each line is: bucket length, key length, value length, SHA-256 of the
2048-byte expansion. The bytes are generated: bucket byte i is 'a' + i mod
26, key byte i is i mod 251, value byte i is (31 i + 7) mod 256. Run from
this directory: python3 grid.py (b3sum 1.2.0 made the committed file).
"""

import hashlib
import os
import subprocess
import tempfile

PREFIX = b"kvfence/state/v2\n"
CHUNK = 1024


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def bucket(n):
    return bytes(ord("a") + i % 26 for i in range(n))


def key(n):
    return bytes(i % 251 for i in range(n))


def value(n):
    return bytes((31 * i + 7) % 256 for i in range(n))


def framing(b, k, v):
    return PREFIX + uvarint(len(b)) + b + uvarint(len(k)) + k + v


def head_len(blen, klen):
    return len(PREFIX) + len(uvarint(blen)) + blen + len(uvarint(klen)) + klen


def key_lengths(blen):
    """Key lengths that end the framing before the value at the chunk
    boundaries past the bucket, and the empty key."""
    out = {0, 1}
    for edge in (CHUNK, 2 * CHUNK, 3 * CHUNK):
        for target in (edge - 1, edge, edge + 1):
            for klen in range(0, target + 1):
                if head_len(blen, klen) == target:
                    out.add(klen)
    return sorted(out)


def value_lengths(h):
    """Value lengths that end the framing at chunk boundaries past h."""
    out = {0, 1, 64}
    nxt = (h // CHUNK + 1) * CHUNK
    for edge in (nxt, nxt + CHUNK):
        for total in (edge - 1, edge, edge + 1):
            if total >= h:
                out.add(total - h)
    out.add(nxt + 5 * CHUNK + 17 - h)
    return sorted(out)


grid = []
for blen in (0, 7, 127, 128, 1000, 1100, 2100):
    for klen in key_lengths(blen):
        for vlen in value_lengths(head_len(blen, klen)):
            grid.append((blen, klen, vlen))

with tempfile.TemporaryDirectory() as d:
    names = []
    for i, (blen, klen, vlen) in enumerate(grid):
        name = os.path.join(d, "%05d" % i)
        with open(name, "wb") as f:
            f.write(framing(bucket(blen), key(klen), value(vlen)))
        names.append(name)
    out = subprocess.run(["b3sum", "--length", "2048", "--no-names"] + names,
                         check=True, capture_output=True, text=True).stdout.split()
assert len(out) == len(grid)

with open("blake3-grid.txt", "w") as f:
    f.write("# Written by grid.py with b3sum; do not edit. Fields: bucket, key and value lengths, SHA-256 of the expansion.\n")
    for (blen, klen, vlen), exp in zip(grid, out):
        e = bytes.fromhex(exp)
        assert len(e) == 2048
        f.write("%d %d %d %s\n" % (blen, klen, vlen, hashlib.sha256(e).hexdigest()))
