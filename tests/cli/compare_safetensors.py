#!/usr/bin/env python3
"""compare_safetensors.py A B TOL [NAME=TOL ...]: every tensor of A is in B
with the same shape and max|a - b| <= TOL * max(max|a|, 1e-3) (relative to
the tensor's scale, so a tiny gradient is held to the same relative standard
as a large one); NAME=TOL holds tensor NAME to its own limit (a scalar loss
to a tighter one than the gradients).  Prints the worst tensor; exits 1 on
any mismatch."""
import json, struct, sys
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
own = {k: float(v) for k, v in (arg.split("=", 1) for arg in sys.argv[4:])}
worst, worst_name, bad = 0.0, "", 0
for k, x in a.items():
    if k not in b or b[k].shape != x.shape:
        print(f"{k}: missing or of another shape in {sys.argv[2]}")
        bad += 1
        continue
    rel = float(np.abs(x - b[k]).max()) / max(float(np.abs(x).max()), 1e-3)
    if rel > worst and k not in own:
        worst, worst_name = rel, k
    if k in own:
        print(f"{k}: differs by {rel:.3g} of its scale (its own limit {own[k]:g})")
    if rel > own.get(k, tol):
        print(f"{k}: differs by {rel:.3g} of its scale (limit {own.get(k, tol):g})")
        bad += 1
print(f"{len(a)} tensors, worst {worst_name} at {worst:.3g} of its scale (limit {tol:g})")
sys.exit(1 if bad else 0)
