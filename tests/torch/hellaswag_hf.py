#!/usr/bin/python3
"""hellaswag_hf.py: tgrun eval's HellaSwag scores against transformers'.

The examples: tests/data/hellaswag_tiny.jsonl, six made-up examples in
HellaSwag's jsonl format (every field of the distributed file).  The
model: sample_hf.py's small GPT-2 (2 layers, n_embd 48, GPT-2's 50,257
ids, 64 positions) with its random weights (std 0.3, so the endings'
losses differ clearly; at GPT-2's init of 0.02 every loss is within a few
hundredths of ln 50257), saved by transformers' save_pretrained.

The reference is llm.c's dev/data/hellaswag.py, done here with
transformers' GPT2LMHeadModel in float32: tokens(ctx) + tokens(" " +
ending) with GPT2Tokenizer, the 4 rows padded to the longest, the logits,
F.cross_entropy(reduction="none") shifted by one, masked to the ending;
summed (acc: its argmin) and averaged (acc_norm: its argmin).  tgrun eval
runs on the reference interpreter and the CPU backend with tg-named
weights, and on the CPU backend from transformers' own directory (sizes
from its config.json).  Asserted for every example and ending:

  - the ending's token count is transformers' (the same BPE);
  - |tg - reference| <= TOL_AVG for the average loss a token, and
    TOL_AVG x tokens for the summed loss.  Why 1e-4: both sides are
    float32 forwards that differ only in summation order; the logits here
    reach a few tens in size, and float32 keeps about 7 digits, so each
    token's loss (a log-sum-exp over 50,257 logits minus one logit)
    differs by some 1e-5 at most; the measured largest difference is
    printed (about 1e-6);
  - both answers (pred, pred_norm) are the reference's, and so acc and
    acc_norm.  That comparison means something only if no example's best
    ending is within the tolerance of its second best: the script checks
    that the smallest such margin is more than 10 x the tolerance, and
    fails otherwise (the test would be flaky, not tg wrong).

usage: hellaswag_hf.py --tgrun PATH --src DIR --gpt2-dir DIR --work DIR
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

TOL_AVG = 1e-4


def bpe(gpt2_dir):
    """GPT-2's BPE as transformers' GPT2Tokenizer encodes."""
    from transformers import GPT2Tokenizer
    tok = GPT2Tokenizer(vocab_file=os.path.join(gpt2_dir, "encoder.json"),
                        merges_file=os.path.join(gpt2_dir, "vocab.bpe"))
    return lambda s: tok.encode(s)


def reference(examples, logits_of, encode):
    """llm.c's hellaswag.py, example by example: per ending, summed and average loss and its tokens."""
    out = []
    for ex in examples:
        ctx = encode(ex["ctx"])
        rows, masks = [], []
        for end in ex["endings"]:
            e = encode(" " + end)
            rows.append(ctx + e)
            masks.append([0] * len(ctx) + [1] * len(e))
        n = max(len(r) for r in rows)
        tokens = torch.zeros((4, n), dtype=torch.long)
        mask = torch.zeros((4, n), dtype=torch.long)
        for i, (r, m) in enumerate(zip(rows, masks)):
            tokens[i, :len(r)] = torch.tensor(r)
            mask[i, :len(m)] = torch.tensor(m)
        with torch.no_grad():
            logits = logits_of(tokens).float()
        losses = F.cross_entropy(logits[:, :-1, :].reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1),
                                 reduction="none").view(4, -1)
        m = mask[:, 1:]
        s = (losses * m).sum(dim=1)
        avg = s / m.sum(dim=1)
        out.append({"sum": s.tolist(), "avg": avg.tolist(), "tokens": m.sum(dim=1).tolist(),
                    "pred": int(s.argmin()), "pred_norm": int(avg.argmin()), "label": ex["label"]})
    return out


def margins(ref):
    """The smallest gap between the best and the second best ending, of the sums (per token) and the averages."""
    worst = float("inf")
    for r in ref:
        for key, scale in (("sum", r["tokens"]), ("avg", [1] * 4)):
            v = sorted(x / s for x, s in zip(r[key], scale))
            worst = min(worst, v[1] - v[0])
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tgrun", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--gpt2-dir", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.src, "tests", "torch"))
    from gpt2_reference import write_safetensors
    from sample_hf import random_params, N_LAYER, N_HEAD, N_EMBD, CTX

    data = os.path.join(a.src, "tests", "data", "hellaswag_tiny.jsonl")
    examples = [json.loads(line) for line in open(data, encoding="utf-8") if line.strip()]
    p = random_params()
    tg_weights = os.path.join(a.work, "tg.safetensors")
    write_safetensors(tg_weights, {k: v.numpy().astype(np.float32) for k, v in p.items()})
    from sample_hf import hf_model
    m = hf_model(p, a.work)
    ref = reference(examples, lambda t: m(t).logits, bpe(a.gpt2_dir))
    gap = margins(ref)
    acc = sum(r["pred"] == r["label"] for r in ref) / len(ref)
    acc_norm = sum(r["pred_norm"] == r["label"] for r in ref) / len(ref)
    print(f"reference (GPT2LMHeadModel, float32): acc {acc:.4f} acc_norm {acc_norm:.4f} over {len(ref)} examples; "
          f"smallest margin between the best and second best ending {gap:.3g} (a token)")
    if not gap > 10 * TOL_AVG:
        sys.exit(f"FAIL: an example's two best endings are within {gap:.3g} of each other, less than 10 x the "
                 f"tolerance {TOL_AVG}: comparing answers would be flaky; change the weights' seed")
    if len({r["pred"] for r in ref}) < 2 and len({r["pred_norm"] for r in ref}) < 2:
        sys.exit("FAIL: the reference picks the same ending every time: comparing answers would test little")
    sizes = ["-D", f"n_layer={N_LAYER}", "-D", f"n_head={N_HEAD}", "-D", f"n_embd={N_EMBD}", "-D", f"block_size={CTX}"]
    runs = [("ref", tg_weights, sizes), ("cpu", tg_weights, sizes),
            ("cpu", os.path.join(a.work, "hf", "model.safetensors"), [])]
    fails = 0
    for backend, weights, defines in runs:
        out = os.path.join(a.work, f"out-{backend}-{len(defines)}.jsonl")
        r = subprocess.run([a.tgrun, "eval", "--weights", weights, "--model", os.path.join(a.src, "models", "gpt2.tg")]
                           + defines + ["--tokenizer", a.gpt2_dir, "--hellaswag", data, "--backend", backend,
                                        "--out", out], capture_output=True, text=True)
        what = f"{backend} ({os.path.basename(weights)}{', sizes from config.json' if not defines else ''})"
        if r.returncode != 0:
            print(f"FAIL: {what}: tgrun eval exited {r.returncode}:\n{r.stderr}")
            fails += 1
            continue
        got = [json.loads(line) for line in open(out)]
        worst = 0.0
        bad = []
        if len(got) != len(ref):
            bad.append(f"{len(got)} examples scored, not {len(ref)}")
        for i, (g, w) in enumerate(zip(got, ref)):
            if g["tokens"] != w["tokens"]:
                bad.append(f"example {i}: ending tokens {g['tokens']}, transformers' {w['tokens']}")
                continue
            for b in range(4):
                d_avg = abs(g["avg_loss"][b] - w["avg"][b])
                d_sum = abs(g["sum_loss"][b] - w["sum"][b])
                worst = max(worst, d_avg, d_sum / w["tokens"][b])
                if d_avg > TOL_AVG or d_sum > TOL_AVG * w["tokens"][b]:
                    bad.append(f"example {i} ending {b}: sum {g['sum_loss'][b]:.7g} avg {g['avg_loss'][b]:.7g}, "
                               f"reference {w['sum'][b]:.7g} {w['avg'][b]:.7g}")
            if (g["pred"], g["pred_norm"], g["label"]) != (w["pred"], w["pred_norm"], w["label"]):
                bad.append(f"example {i}: answers {g['pred']}, {g['pred_norm']} (label {g['label']}), reference "
                           f"{w['pred']}, {w['pred_norm']} (label {w['label']})")
        line = re.search(r"hellaswag acc ([0-9.]+) acc_norm ([0-9.]+) \((\d+) examples", r.stdout)
        if not line or (float(line[1]), float(line[2]), int(line[3])) != (round(acc, 4), round(acc_norm, 4), len(ref)):
            bad.append(f"the summary line is not the reference's acc {acc:.4f} acc_norm {acc_norm:.4f}: {r.stdout!r}")
        if bad:
            print(f"FAIL: {what}:\n  " + "\n  ".join(bad))
            fails += 1
        else:
            print(f"ok: {what}: {len(ref)} examples, every ending's loss within {worst:.2g} a token of the "
                  f"reference's (tolerance {TOL_AVG}), the same answers; {line[0]}")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
