#!/usr/bin/python3
"""hf_generate.py: the peer of bench/sample.sh: transformers' greedy
generate with the KV cache (use_cache=True) on the CPU, for weights in tg's
names (models/gpt2.tg: wte.weight, h.0.attn.c_attn.weight, ...) loaded into
GPT2LMHeadModel under its own names (transformer. prefix, tied lm_head).

usage: hf_generate.py WEIGHTS PROMPT_IDS(comma-separated) NEW_TOKENS THREADS
Prints one line: new tokens, seconds, tokens/s, and the first generated ids
(so that the caller can check both generated the same text).
"""
import json
import struct
import sys
import time

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        body = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        assert info["dtype"] == "F32", name
        out[name] = torch.from_numpy(np.frombuffer(body[a:b], dtype=np.float32).reshape(info["shape"]).copy())
    return out


def main():
    weights, ids, n_new, threads = sys.argv[1], [int(x) for x in sys.argv[2].split(",")], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(threads)
    w = read_safetensors(weights)
    n_layer = len({k.split(".")[1] for k in w if k.startswith("h.")})
    vocab, n_embd = w["wte.weight"].shape
    cfg = GPT2Config(n_layer=n_layer, n_head=n_embd // 64, n_embd=n_embd, vocab_size=vocab,
                     n_positions=w["wpe.weight"].shape[0], resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    m = GPT2LMHeadModel(cfg)
    missing, unexpected = m.load_state_dict({"transformer." + k: v for k, v in w.items()}, strict=False)
    assert not unexpected and all(k == "lm_head.weight" or k.endswith("attn.bias") or k.endswith("masked_bias")
                                  for k in missing), (missing, unexpected)
    m.eval()
    m.generation_config.eos_token_id = None
    x = torch.tensor([ids])
    with torch.no_grad():
        m.generate(x, do_sample=False, use_cache=True, max_new_tokens=4, pad_token_id=0)  # warm-up
        t0 = time.perf_counter()
        out = m.generate(x, do_sample=False, use_cache=True, max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=0)
        dt = time.perf_counter() - t0
    new = out[0, len(ids):].tolist()
    print(f"hf {len(new)} {dt:.3f} {len(new) / dt:.3f} {','.join(map(str, new[:16]))}")


if __name__ == "__main__":
    main()
