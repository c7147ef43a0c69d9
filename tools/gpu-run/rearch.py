#!/usr/bin/env python3
"""rearch.py SRC DST: a copy of a `bitnet-b1.58` GGUF with its architecture renamed to `bitnet`
(llama.cpp at the fixtures' commit knows BitNet only under that name): the metadata keys under the
old prefix renamed, the tensor table and data unchanged, the header re-aligned. For speed runs of
llama.cpp on purebee-rs's synthetic files (tools/gpu-run/run.sh)."""
import struct
import sys

SCALARS = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def read_header(f):
    """(data offset, metadata as (key, start, end) with [start, end) the bytes of its type and
    value, the byte range of the tensor table, the alignment) of the GGUF file `f`."""
    def rd(fmt):
        return struct.unpack('<' + fmt, f.read(struct.calcsize('<' + fmt)))

    def rstr():
        (n,) = rd('Q')
        return f.read(n).decode('utf-8', 'replace')

    def rval(t):
        if t == 8:
            return rstr()
        if t == 9:
            (et, n) = rd('IQ')
            return [rval(et) for _ in range(n)]
        return rd(SCALARS[t])[0]

    assert f.read(4) == b'GGUF', 'not a GGUF file'
    (_version, n_tensors, n_kv) = rd('IQQ')
    align = 32
    kvs = []
    for _ in range(n_kv):
        k = rstr()
        start = f.tell()
        (t,) = rd('I')
        v = rval(t)
        kvs.append((k, start, f.tell()))
        if k == 'general.alignment':
            align = v
    table_start = f.tell()
    for _ in range(n_tensors):
        rstr()
        (nd,) = rd('I')
        rd('Q' * nd)
        rd('IQ')
    table_end = f.tell()
    data = (table_end + align - 1) // align * align
    return data, kvs, (table_start, table_end), align


def rearch(src, dst, new='bitnet'):
    with open(src, 'rb') as f:
        data, kvs, (table_start, table_end), align = read_header(f)
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


if __name__ == '__main__':
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    rearch(sys.argv[1], sys.argv[2])
