#!/usr/bin/python3
"""gpt2_reference.py: GPT-2 in PyTorch, the independent reference for tg.

The model is nanoGPT's GPT (bias=True, dropout 0, tanh GELU, token
embedding tied to the head), written against Hugging Face's GPT-2 state
dict layout (Conv1D: y = x @ W with W [in, out]).  It reads the same
safetensors weights and batches that `tgrun` reads, so that tg's loss,
gradients and optimizer steps can be compared with PyTorch's.

Commands (run with Debian's /usr/bin/python3, which has torch):
  batch   --out X --B 2 --T 16 --vocab 50257 --seed 1      a random batch
  grad    --weights W --batch X --n-head H --out G [--dtype float64]
  step    --weights W --batch X --n-head H --lr LR --steps N [AdamW options] [--dtype float64]
  compare A B --rtol R    max |a - b| / max |b| per tensor, failing above R
Safetensors are read and written here with json and struct (no extra
package), so the test needs nothing but torch and numpy.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "F16": np.float16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        if info["dtype"] == "BF16":
            raw = np.frombuffer(body[begin:end], dtype=np.uint16).astype(np.uint32) << 16
            arr = raw.view(np.float32)
        else:
            arr = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def write_safetensors(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, arr in tensors.items():
        arr = np.array(arr, order="C")  # (ascontiguousarray would make a scalar 1-D)
        kind = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}[arr.dtype]
        raw = arr.tobytes()
        header[name] = {"dtype": kind, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def n_layers(params):
    return len({k.split(".")[1] for k in params if k.startswith("h.")})


def forward(p, idx, targets, n_head):
    """nanoGPT's GPT.forward with HF names; returns the mean cross-entropy."""
    logits = logits_of(p, idx, n_head)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def mm(a, b):
    """a @ b.  Under autocast, as autocast means it and a GPU does it: bf16
    operands, f32 accumulation, a bf16 result.  PyTorch 1.13's own bf16
    matmul on a CPU without AVX-512 accumulates in bf16 (11% off on a
    3000-term sum), so the rounding is spelled out here: round the
    operands to bf16, multiply in f32, round the result.  Autograd's
    backward of these casts rounds the incoming gradient to bf16 and
    multiplies in f32 again, as autocast's backward would."""
    if not torch.is_autocast_cpu_enabled():
        return a @ b
    with torch.autocast("cpu", enabled=False):
        return (a.bfloat16().float() @ b.bfloat16().float()).bfloat16()


def logits_of(p, idx, n_head):
    """The logits [B, T, vocab] of nanoGPT's GPT with HF names."""
    B, T = idx.shape
    C = p["wte.weight"].shape[1]
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(n_layers(p)):
        h = f"h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        q, k, v = (mm(a, p[h + "attn.c_attn.weight"]) + p[h + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = mm(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = mm(att, v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + mm(y, p[h + "attn.c_proj.weight"]) + p[h + "attn.c_proj.bias"]
        a = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        a = F.gelu(mm(a, p[h + "mlp.c_fc.weight"]) + p[h + "mlp.c_fc.bias"], approximate="tanh")
        x = x + mm(a, p[h + "mlp.c_proj.weight"]) + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["ln_f.weight"], p["ln_f.bias"], eps=1e-5)
    return mm(x, p["wte.weight"].t())  # tied head


def load(args, dtype):
    w = read_safetensors(args.weights)
    params = {k: torch.tensor(v, dtype=dtype, requires_grad=True) for k, v in w.items()}
    b = read_safetensors(args.batch)
    return params, torch.tensor(b["idx"], dtype=torch.long), torch.tensor(b["targets"], dtype=torch.long)


def cmd_batch(args):
    rng = np.random.default_rng(args.seed)
    idx = rng.integers(0, args.vocab, size=(args.B, args.T), dtype=np.int32)
    targets = rng.integers(0, args.vocab, size=(args.B, args.T), dtype=np.int32)
    write_safetensors(args.out, {"idx": idx, "targets": targets})


def run_forward(args, p, idx, targets):
    """The loss; with --autocast, under PyTorch's bf16 autocast on the CPU
    (f32 parameters, bf16 matmuls, the ops autocast lists in f32)."""
    if args.autocast:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return forward(p, idx, targets, args.n_head).float()
    return forward(p, idx, targets, args.n_head)


def cmd_grad(args):
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    p, idx, targets = load(args, dtype)
    loss = run_forward(args, p, idx, targets)
    loss.backward()
    out = {"loss": np.array(loss.item(), dtype=np.float32)}
    out.update({k: v.grad.detach().to(torch.float32).numpy() for k, v in p.items()})
    write_safetensors(args.out, out)
    print(f"loss {loss.item():.8g}")


def cmd_step(args):
    p, idx, targets = load(args, torch.float64 if args.dtype == "float64" else torch.float32)
    # nanoGPT's configure_optimizers: decay the 2-D tensors only
    decay = [v for v in p.values() if v.dim() >= 2]
    no_decay = [v for v in p.values() if v.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)
    for step in range(1, args.steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = run_forward(args, p, idx, targets)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), args.clip) if args.clip > 0 else float("nan")
        opt.step()
        print(f"step {step}/{args.steps}  loss {loss.item():.8g}  grad_norm {float(norm):.6g}")
    if args.out:
        write_safetensors(args.out, {k: v.detach().to(torch.float32).numpy() for k, v in p.items()})


def cmd_compare(args):
    a, b = read_safetensors(args.a), read_safetensors(args.b)
    if set(a) != set(b):
        sys.exit(f"tensor names differ: only in {args.a}: {sorted(set(a) - set(b))}; "
                 f"only in {args.b}: {sorted(set(b) - set(a))}")
    worst, failed = 0.0, []
    for name in sorted(a):
        x, y = a[name].astype(np.float64), b[name].astype(np.float64)
        if x.shape != y.shape:
            failed.append(f"{name}: shapes {x.shape} vs {y.shape}")
            continue
        scale = max(np.max(np.abs(y)), 1e-30)
        err = float(np.max(np.abs(x - y)) / scale)
        worst = max(worst, err)
        if not err <= args.rtol:
            failed.append(f"{name}: max |a - b| / max |b| = {err:.3g} > {args.rtol:g}")
    print(f"compared {len(a)} tensors: worst max|a - b| / max|b| = {worst:.3g} (limit {args.rtol:g})")
    if failed:
        sys.exit("\n".join(failed))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("batch")
    b.add_argument("--out", required=True)
    b.add_argument("--B", type=int, required=True)
    b.add_argument("--T", type=int, required=True)
    b.add_argument("--vocab", type=int, required=True)
    b.add_argument("--seed", type=int, default=1)
    for name in ("grad", "step"):
        s = sub.add_parser(name)
        s.add_argument("--weights", required=True)
        s.add_argument("--batch", required=True)
        s.add_argument("--n-head", type=int, required=True)
        s.add_argument("--out")
        s.add_argument("--dtype", choices=("float32", "float64"), default="float32")
        s.add_argument("--autocast", action="store_true", help="bf16 autocast (CPU), float32 parameters")
    s = sub.choices["step"]
    s.add_argument("--lr", type=float, default=6e-4)
    s.add_argument("--steps", type=int, default=1)
    s.add_argument("--beta1", type=float, default=0.9)
    s.add_argument("--beta2", type=float, default=0.95)
    s.add_argument("--eps", type=float, default=1e-8)
    s.add_argument("--weight-decay", type=float, default=0.1)
    s.add_argument("--clip", type=float, default=1.0)
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--rtol", type=float, required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    {"batch": cmd_batch, "grad": cmd_grad, "step": cmd_step, "compare": cmd_compare}[args.cmd](args)


if __name__ == "__main__":
    main()
