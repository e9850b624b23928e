#!/usr/bin/python3
"""make_safetensors.py OUT SPEC...: writes a small safetensors file for tests.

Each SPEC is NAME:DTYPE:SHAPE:VALUES, e.g. idx:I32:2x3:0,1,2,3,4,5 or
w:F32:4:fill=0.5.  Only the standard library: the CLI tests use it to make
well-formed files with the wrong content (a missing tensor, a bad id)."""
import json
import struct
import sys

FORMATS = {"F32": "f", "I32": "i", "F64": "d"}


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    header, body = {}, b""
    for spec in specs:
        name, dtype, shape, values = spec.split(":")
        dims = [int(d) for d in shape.split("x")] if shape else []
        n = 1
        for d in dims:
            n *= d
        if values.startswith("fill="):
            vals = [float(values[5:])] * n
        else:
            vals = [float(v) for v in values.split(",")] if values else []
        assert len(vals) == n, f"{name}: {len(vals)} values for shape {dims}"
        fmt = FORMATS[dtype]
        raw = struct.pack("<%d%s" % (n, fmt), *[int(v) if fmt == "i" else v for v in vals])
        header[name] = {"dtype": dtype, "shape": dims, "data_offsets": [len(body), len(body) + len(raw)]}
        body += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + body)


if __name__ == "__main__":
    main()
