#!/usr/bin/env python3
"""compare_safetensors.py A B TOL [PATTERN=TOL ...]: every tensor of A is in
B with the same shape and max|a - b| <= TOL * max(max|a|, 1e-3) (relative
to the tensor's scale, so a tiny gradient is held to the same relative
standard as a large one).  PATTERN=TOL holds the tensors whose names match
PATTERN (a name, or a shell pattern such as '*.bias'; the first pattern
that matches wins) to their own limit: a scalar loss to a tighter one than
the gradients, or the bias gradients, whose sums cancel, to a looser one.
Prints the worst tensor of each pattern, then (last) the worst of the rest;
exits 1 on any mismatch."""
import fnmatch, json, struct, sys
import numpy as np

def load(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    data = b[8 + n:]
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        s, e = v["data_offsets"]
        out[k] = np.frombuffer(data[s:e], dtype=np.float32).reshape(v["shape"])
    return out

a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
own = [(p, float(t)) for p, t in (arg.split("=", 1) for arg in sys.argv[4:])]
# per class (a pattern, or None for the rest): [tensors, worst, worst's name, limit]
classes = {p: [0, 0.0, "", t] for p, t in own}
classes[None] = [0, 0.0, "", tol]
bad = 0
for k, x in a.items():
    if k not in b or b[k].shape != x.shape:
        print(f"{k}: missing or of another shape in {sys.argv[2]}")
        bad += 1
        continue
    cls = next((p for p, _ in own if fnmatch.fnmatchcase(k, p)), None)
    c = classes[cls]
    rel = float(np.abs(x - b[k]).max()) / max(float(np.abs(x).max()), 1e-3)
    c[0] += 1
    if rel > c[1] or not c[2]:
        c[1], c[2] = rel, k
    if rel > c[3]:
        print(f"{k}: differs by {rel:.3g} of its scale (limit {c[3]:g})")
        bad += 1
for p, _ in own:
    n, worst, name, limit = classes[p]
    if n:
        print(f"{p}: {n} tensor{'s' if n > 1 else ''}, worst {name} at {worst:.3g} of its scale (its own limit {limit:g})")
    else:
        print(f"{p}: no tensor of {sys.argv[1]} matches")
        bad += 1
n, worst, name, limit = classes[None]
print(f"{n} tensors, worst {name} at {worst:.3g} of its scale (limit {limit:g})")
sys.exit(1 if bad else 0)
