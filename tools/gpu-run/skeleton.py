#!/usr/bin/env python3
"""Shrink a GGUF to a skeleton and grow it back to a same-shaped file with repeating weights.

pack SRC DST: DST = 8-byte original size + 8-byte header length + header (everything before the
              tensor data) + per tensor (in table order) u64 chunk length + its first whole blocks.
grow SRC DST: rebuild a file of the original size: header, then each tensor's chunk repeated over
              its byte range (whole blocks, so every block stays valid), zeros in the padding.
rearch SRC DST: the same file with its architecture renamed from bitnet-b1.58 to bitnet (llama.cpp).
Used only to carry a model to a GPU machine for speed runs; the text a grown file makes is nonsense.
"""
import struct, sys

# ggml type id -> (elements per block, bytes per block)
BLOCKS = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
          10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
          30: (1, 2), 34: (256, 54), 35: (256, 66)}
CHUNK_BLOCKS = 128


def read_header(f):
    """The GGUF header of `f`: (data offset, tensors as (name, dims, type, offset), metadata as
    (key, start, end) with [start, end) the bytes of its type and value, the byte range of the
    tensor table, the alignment)."""
    def rd(fmt):
        n = struct.calcsize('<' + fmt)
        return struct.unpack('<' + fmt, f.read(n))

    def rstr():
        (n,) = rd('Q')
        return f.read(n).decode('utf-8', 'replace')

    scal = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            (et, n) = rd('IQ')
            return [rval(et) for _ in range(n)]
        return rd(scal[t])[0]

    assert f.read(4) == b'GGUF'
    (ver, nt, nkv) = rd('IQQ')
    align = 32
    kvs = []
    for _ in range(nkv):
        k = rstr()
        start = f.tell()
        (t,) = rd('I')
        v = rval(t)
        kvs.append((k, start, f.tell()))
        if k == 'general.alignment':
            align = v
    table_start = f.tell()
    tensors = []
    for _ in range(nt):
        name = rstr()
        (nd,) = rd('I')
        dims = rd('Q' * nd)
        (ty, off) = rd('IQ')
        tensors.append((name, dims, ty, off))
    pos = f.tell()
    data = (pos + align - 1) // align * align
    return data, tensors, kvs, (table_start, pos), align


def nbytes(dims, ty):
    if ty not in BLOCKS:
        raise SystemExit(f'type {ty} not in the block table')
    be, bb = BLOCKS[ty]
    n = 1
    for d in dims:
        n *= d
    assert n % be == 0
    return n // be * bb, bb


def pack(src, dst):
    with open(src, 'rb') as f:
        data, tensors, *_ = read_header(f)
        f.seek(0, 2)
        size = f.tell()
        f.seek(0)
        header = f.read(data)
        out = open(dst, 'wb')
        out.write(struct.pack('<QQ', size, data))
        out.write(header)
        for name, dims, ty, off in tensors:
            n, bb = nbytes(dims, ty)
            k = min(n, CHUNK_BLOCKS * bb)
            f.seek(data + off)
            out.write(struct.pack('<Q', k))
            out.write(f.read(k))


def grow(src, dst):
    with open(src, 'rb') as f:
        size, data = struct.unpack('<QQ', f.read(16))
        header = f.read(data)
    import io
    _, tensors, *_ = read_header(io.BytesIO(header + b'\0' * 64))
    with open(src, 'rb') as f, open(dst, 'wb') as out:
        f.seek(16 + data)
        out.truncate(size)
        out.write(header)
        for name, dims, ty, off in tensors:
            n, _ = nbytes(dims, ty)
            (k,) = struct.unpack('<Q', f.read(8))
            chunk = f.read(k)
            out.seek(data + off)
            reps = n // k
            big = chunk * max(1, min(reps, (64 << 20) // k))
            left = n
            while left > 0:
                w = big[:left]
                out.write(w)
                left -= len(w)


if __name__ == '__main__' and sys.argv[1] in ('pack', 'grow'):
    {'pack': pack, 'grow': grow}[sys.argv[1]](sys.argv[2], sys.argv[3])


def rearch(src, dst, new='bitnet'):
    """Copy a bitnet-b1.58 GGUF with its architecture renamed (llama.cpp at the fixtures' commit
    knows only `bitnet`); tensor table and data unchanged, the header re-aligned."""
    with open(src, 'rb') as f:
        data, _, kvs, (table_start, table_end), align = read_header(f)
        f.seek(0)
        raw = f.read(data)
        old = None
        header = bytearray(raw[:24])
        for k, start, end in kvs:
            val = raw[start:end]
            if k == 'general.architecture':
                old = val[4 + 8:].decode()
                val = struct.pack('<IQ', 8, len(new)) + new.encode()
            elif old and k.startswith(old + '.'):
                k = new + k[len(old):]
            header += struct.pack('<Q', len(k.encode())) + k.encode() + val
        header += raw[table_start:table_end]
        header += b'\0' * ((-len(header)) % align)
        with open(dst, 'wb') as o:
            o.write(header)
            while chunk := f.read(64 << 20):
                o.write(chunk)


if __name__ == '__main__' and sys.argv[1] == 'rearch':
    rearch(sys.argv[2], sys.argv[3])
