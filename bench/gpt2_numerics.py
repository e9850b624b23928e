#!/usr/bin/python3
"""gpt2_numerics.py: the PyTorch side of bench/gpt2_numerics.sh.

Trains nanoGPT's GPT (bench/torch_gpt_train.py's model) for --steps steps
from the weights tg started from (tgrun init's safetensors, Hugging Face
GPT-2 names and layout: matrices [in, out]) on the batches tg's training
loop drew, then compares its per-step losses with tg's metrics.jsonl.

The batches are tg's own: runtime/data/dataloader.c's draw (xoshiro256**
seeded through splitmix64 by (seed, step), tg_rng_below's rejection
sampling, micro-step m taking the m-th slice of B offsets), ported below
bit for bit, so micro-step m of step s reads the windows tg read.  The vocabulary is the data's (50257 for GPT-2):
tg pads it to a multiple of 64 and masks the extra logits, which leaves the
loss and gradients what they are without the padding.  AdamW, clipping and
the learning-rate schedule are the ones tg's train.cfg names (nanoGPT's
get_lr, torch.optim.AdamW with decay on the 2-D tensors only).

Usage (the shell script passes these):
  gpt2_numerics.py --weights W --tokens DIR --tg-metrics METRICS --n-head H
      --batch-size B --block-size T --grad-accum A --steps N --seed S
      --lr X --min-lr X --warmup-steps N --beta1 X --beta2 X
      --weight-decay X --grad-clip X --device cuda --dtype bfloat16
      [--step0-tol X --tol X --bias-tol X] [--json FILE]
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt_train as peer  # noqa: E402  the model, optimizer and schedule

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class Rng:
    """base/rng.c: tg_rng_seed, tg_rng_next, tg_rng_below."""

    def __init__(self, seed, stream):
        key = mix64(mix64((seed + GOLDEN) & M64) ^ ((stream + 0xD1B54A32D192ED03) & M64))
        self.s = []
        for _ in range(4):
            key = (key + GOLDEN) & M64
            self.s.append(mix64(key))

    def next(self):
        s = self.s
        rotl = lambda x, k: ((x << k) | (x >> (64 - k))) & M64  # noqa: E731
        result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
        t = (s[1] << 17) & M64
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def below(self, n):
        threshold = ((1 << 64) - n) % n
        while True:
            x = self.next()
            if x >= threshold:
                return x % n


def tg_batch(ids, B, T, seed, step, micro):
    """Micro-batch micro of optimizer step step on one rank, as tg's training
    loop draws it (runtime/train/train.c, runtime/data/dataloader.c): a
    step's batch is one draw from stream step, grad_accum slices of B
    offsets each; micro-step m reads slice m (the draws before it made and
    dropped, since the rejections make their count unknowable)."""
    r = Rng(seed, step)
    starts = len(ids) - T
    for _ in range(micro * B):
        r.below(starts)
    off = [r.below(starts) for _ in range(B)]
    x = np.stack([ids[o:o + T] for o in off]).astype(np.int64)
    y = np.stack([ids[o + 1:o + T + 1] for o in off]).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = np.frombuffer(data[:8], dtype="<u8")
    header = json.loads(data[8:8 + int(n)])
    body = data[8 + int(n):]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit("gpt2_numerics.py: %s: tensor %s is %s, F32 expected (tgrun init writes F32)"
                     % (path, name, info["dtype"]))
        b, e = info["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(body[b:e], dtype="<f4").reshape(info["shape"]).copy())
    return out


def load_weights(model, w):
    """tg's names (Hugging Face GPT-2's: matrices [in, out]) into nanoGPT's
    GPT (nn.Linear weights [out, in]); every parameter must be set."""
    sd = model.state_dict()
    done = set()
    for name, t in w.items():
        key = "transformer." + name
        if key not in sd:
            sys.exit("gpt2_numerics.py: weights tensor %s has no place in the PyTorch model" % name)
        if name.endswith(".weight") and any(name.endswith(s) for s in
                                            ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                                             "mlp.c_proj.weight")):
            t = t.t()
        if tuple(sd[key].shape) != tuple(t.shape):
            sys.exit("gpt2_numerics.py: %s is %s in the weights, %s in the model (is --n-head or the vocabulary "
                     "different?)" % (name, list(t.shape), list(sd[key].shape)))
        sd[key] = t.contiguous()
        done.add(key)
    missing = [k for k in sd if k not in done and not k.startswith("lm_head")]
    if missing:
        sys.exit("gpt2_numerics.py: the weights file lacks %s" % ", ".join(missing[:5]))
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    model.load_state_dict(sd)


def read_tg_losses(path):
    losses = {}
    try:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                if "loss" in row and "step" in row:
                    losses[int(row["step"])] = float(row["loss"])
    except OSError as e:
        sys.exit("gpt2_numerics.py: cannot read tg's metrics %s: %s" % (path, e))
    return [losses[s] for s in sorted(losses)]  # step 1 .. N: the loss of optimizer step s-1


def main():
    ap = argparse.ArgumentParser()
    for name, kind, default in [("weights", str, None), ("tokens", str, None), ("tg-metrics", str, None),
                                ("n-head", int, 12), ("batch-size", int, 8), ("block-size", int, 1024),
                                ("grad-accum", int, 1), ("steps", int, 50), ("seed", int, 1337),
                                ("lr", float, 6e-4), ("min-lr", float, 6e-5), ("warmup-steps", int, 10),
                                ("lr-decay-steps", int, 0), ("beta1", float, 0.9), ("beta2", float, 0.95),
                                ("eps", float, 1e-8), ("weight-decay", float, 0.1), ("grad-clip", float, 1.0),
                                ("device", str, "cpu"), ("dtype", str, "bfloat16"), ("threads", int, 0),
                                ("step0-tol", float, 2e-3), ("tol", float, 1e-2), ("bias-tol", float, 3e-3),
                                ("json", str, None)]:
        ap.add_argument("--" + name, type=kind, default=default)
    a = ap.parse_args()
    for need in ("weights", "tokens", "tg_metrics"):
        if getattr(a, need) is None:
            ap.error("--%s is required" % need.replace("_", "-"))
    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            sys.exit("gpt2_numerics.py: --device cuda but torch.cuda.is_available() is False")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = None
    if a.dtype == "bfloat16":
        autocast = lambda: torch.autocast(device_type=device.type, dtype=torch.bfloat16)  # noqa: E731
    elif a.dtype != "float32":
        sys.exit("gpt2_numerics.py: --dtype bfloat16 or float32")

    w = read_safetensors(a.weights)
    vocab, C = w["wte.weight"].shape
    L = len({k.split(".")[1] for k in w if k.startswith("h.")})
    npos = w["wpe.weight"].shape[0]
    train_ids, _, data_vocab = peer.load_tokens(a.tokens)
    if data_vocab != vocab:
        sys.exit("gpt2_numerics.py: the weights' vocabulary is %d, the data's %d" % (vocab, data_vocab))
    ids = train_ids.numpy()
    torch.manual_seed(0)
    model = peer.GPT(vocab, npos, L, a.n_head, C, peer.HAVE_SDPA)
    load_weights(model, w)
    model.to(device)
    opt, fused = peer.configure_optimizer(model, a.weight_decay, a.lr, (a.beta1, a.beta2), device.type)
    for g in opt.param_groups:
        g["eps"] = a.eps
    decay = a.lr_decay_steps or a.steps
    say = lambda *x: print(*x, flush=True)  # noqa: E731
    say("torch %s on %s, %s%s: %d layers, %d wide, %d heads, vocab %d; %d x %d x %d accumulated tokens a step; "
        "%s AdamW" % (torch.__version__, device, a.dtype, " autocast" if autocast else "", L, C, a.n_head, vocab,
                      a.batch_size, a.block_size, a.grad_accum, "fused" if fused else "unfused"))

    losses = []
    t0 = time.perf_counter()
    for s in range(a.steps):
        lr = peer.get_lr(s, a.lr, a.min_lr, a.warmup_steps, decay)
        for g in opt.param_groups:
            g["lr"] = lr
        total = 0.0
        for m in range(a.grad_accum):
            x, y = tg_batch(ids, a.batch_size, a.block_size, a.seed, s, m)
            x, y = x.to(device), y.to(device)
            with (autocast() if autocast else contextlib.nullcontext()):
                loss = model(x, y) / a.grad_accum
            loss.backward()
            total += loss.detach().float()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
    losses = [float(v) for v in losses]
    say("torch: %d steps in %.1f s" % (a.steps, time.perf_counter() - t0))

    tg = read_tg_losses(a.tg_metrics)
    if len(tg) < a.steps:
        sys.exit("gpt2_numerics.py: %s has %d step losses, %d expected (did tg's run stop early?)"
                 % (a.tg_metrics, len(tg), a.steps))
    say("%5s %10s %10s %10s %9s %9s" % ("step", "tg", "torch", "tg-torch", "rel", "allowed"))
    worst, fails, signed = 0.0, [], []
    for s in range(a.steps):
        d = tg[s] - losses[s]
        rel = abs(d) / abs(losses[s])
        tol = a.step0_tol if s == 0 else a.tol
        bad = rel > tol or not math.isfinite(tg[s])
        if bad:
            fails.append(s)
        if s > 0:
            signed.append(d / abs(losses[s]))
        worst = max(worst, rel)
        say("%5d %10.5f %10.5f %+10.5f %9.2e %9.1e%s" % (s, tg[s], losses[s], d, rel, tol, "  FAIL" if bad else ""))
    bias = sum(signed) / len(signed) if signed else 0.0
    bias_bad = abs(bias) > a.bias_tol
    verdict = "PASS" if not fails and not bias_bad else "FAIL"
    say("worst relative difference %.2e (step 0: %.2e, allowed %.0e; later steps allowed %.0e); mean signed "
        "relative difference over steps 1..%d %+.2e (allowed +-%.0e)"
        % (worst, abs(tg[0] - losses[0]) / abs(losses[0]), a.step0_tol, a.tol, a.steps - 1, bias, a.bias_tol))
    if fails:
        say("steps over the tolerance: %s" % ", ".join(map(str, fails)))
    if bias_bad:
        say("tg's losses drift to one side of PyTorch's: a systematic difference (schedule, optimizer, data), "
            "not rounding")
    say("%s: tg and PyTorch, %d steps, worst %.2e, mean %+.2e" % (verdict, a.steps, worst, bias))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"tg": tg[:a.steps], "torch": losses, "worst_rel": worst, "mean_signed_rel": bias,
                       "verdict": verdict, "torch_version": torch.__version__, "device": str(device),
                       "dtype": a.dtype}, f)
    sys.exit(0 if verdict == "PASS" else 1)


if __name__ == "__main__":
    main()
