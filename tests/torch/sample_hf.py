#!/usr/bin/python3
"""sample_hf.py: tgrun sample's greedy text against Hugging Face's generate.

A small GPT-2 (2 layers, 2 heads, n_embd 48, GPT-2's 50,257-token
vocabulary, 64 positions; the head's product, 50304 x 48, is large enough
to take the CPU backend's matrix-vector path) with random weights, made in
transformers; its
weights are written twice: for transformers with its own names
(save_pretrained: `transformer.h.0...`, the tied lm_head) and for tg with
the model's names (models/gpt2.tg: `h.0...`, no prefix, no lm_head), so
that this test does not depend on tg's loader knowing Hugging Face's
prefix.  Both continue "Hello, my name is" greedily until the context is
full (5 + 59 = 64 tokens: every position of the caches is used);
`transformers.GPT2LMHeadModel.generate(do_sample=False, use_cache=True)`
against `tgrun sample --temperature 0` on each backend named.  The text
must be the same bytes.  Then again with a repetition penalty of
PENALTY, `generate(repetition_penalty=...)` against `--repetition-penalty`
on the CPU backend: the same rule, applied at every step.

The weights are drawn with std 0.3 (layernorm gains 1 + 0.1 noise), so the
largest logit is clear of the second (a float32 near-tie, where the two
sides' different summation orders could pick different tokens, would make
the test flaky; the script prints the smallest top-1 margin it saw to
show it).

Without transformers (--plain), the reference is a greedy loop over
gpt2_reference.py's model (the full forward each step, no cache); the
script says so.

usage: sample_hf.py --tgrun PATH --src DIR --gpt2-dir DIR --work DIR [--plain] [--backends ref,cpu]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

N_LAYER, N_HEAD, N_EMBD, VOCAB, CTX = 2, 2, 48, 50257, 64
PIECES = ["Hello", ",", "Ġmy", "Ġname", "Ġis"]  # GPT-2's BPE of "Hello, my name is"
PROMPT = "Hello, my name is"
PENALTY = 1.3


def byte_decoder():
    """GPT-2's byte-level alphabet, reversed: piece character -> byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def random_params():
    torch.manual_seed(1234)
    p = {"wte.weight": torch.randn(VOCAB, N_EMBD) * 0.3, "wpe.weight": torch.randn(CTX, N_EMBD) * 0.3}
    def ln(name):
        p[name + ".weight"] = 1 + 0.1 * torch.randn(N_EMBD)
        p[name + ".bias"] = 0.1 * torch.randn(N_EMBD)
    for i in range(N_LAYER):
        h = f"h.{i}."
        ln(h + "ln_1")
        ln(h + "ln_2")
        for name, shape in [("attn.c_attn", (N_EMBD, 3 * N_EMBD)), ("attn.c_proj", (N_EMBD, N_EMBD)),
                            ("mlp.c_fc", (N_EMBD, 4 * N_EMBD)), ("mlp.c_proj", (4 * N_EMBD, N_EMBD))]:
            p[h + name + ".weight"] = torch.randn(*shape) * 0.3
            p[h + name + ".bias"] = torch.randn(shape[1]) * 0.1
    ln("ln_f")
    return p


def hf_model(p, work):
    """p as transformers' GPT2LMHeadModel, saved to WORK/hf and loaded back from there."""
    from transformers import GPT2Config, GPT2LMHeadModel
    import transformers
    cfg = GPT2Config(n_layer=N_LAYER, n_head=N_HEAD, n_embd=N_EMBD, vocab_size=VOCAB, n_positions=CTX,
                     resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, activation_function="gelu_new",
                     layer_norm_epsilon=1e-5, tie_word_embeddings=True)
    m = GPT2LMHeadModel(cfg)
    sd = {"transformer." + k: v for k, v in p.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    # lm_head.weight is tied to wte; the attention mask buffers are not weights
    left = [k for k in missing if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if left or unexpected:
        sys.exit(f"FAIL: transformers' names: missing {left}, unexpected {unexpected}")
    # through its own file format and names, as the weights of a real model come
    hf_dir = os.path.join(work, "hf")
    m.save_pretrained(hf_dir)
    m = GPT2LMHeadModel.from_pretrained(hf_dir).eval()
    with open(os.path.join(hf_dir, "model.safetensors"), "rb") as f:
        names = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    print(f"transformers {transformers.__version__}: weights in {hf_dir}/model.safetensors, e.g. "
          f"{sorted(k for k in names if k.startswith('transformer.'))[0]}")
    return m


def hf_generate(p, prompt_ids, n_new, work, gpt2_dir):
    """The greedy ids, their logits, and the greedy ids under the penalty."""
    from transformers import GPT2Tokenizer
    tok = GPT2Tokenizer(vocab_file=os.path.join(gpt2_dir, "encoder.json"), merges_file=os.path.join(gpt2_dir, "vocab.bpe"))
    ids = tok(PROMPT)["input_ids"]
    if ids != prompt_ids:
        sys.exit(f"FAIL: transformers' tokenizer gives {ids} for the prompt, this script {prompt_ids}")
    m = hf_model(p, work)
    m.generation_config.eos_token_id = None  # and tg is told --no-stop-at-eot: the two agree past it
    with torch.no_grad():
        out = m.generate(torch.tensor([prompt_ids]), do_sample=False, use_cache=True, max_new_tokens=n_new,
                         pad_token_id=0)
        logits = m(out[:, :-1]).logits[0]
        penalized = m.generate(torch.tensor([prompt_ids]), do_sample=False, use_cache=True, max_new_tokens=n_new,
                               pad_token_id=0, repetition_penalty=PENALTY)
    return out[0].tolist(), logits, penalized[0].tolist()


def plain_generate(p, prompt_ids, n_new, src):
    sys.path.insert(0, os.path.join(src, "tests", "torch"))
    from gpt2_reference import logits_of
    runs = []
    with torch.no_grad():
        for penalty in (1.0, PENALTY):
            ids = list(prompt_ids)
            for _ in range(n_new):
                row = logits_of(p, torch.tensor([ids]), N_HEAD)[0, -1]
                seen = torch.tensor(sorted(set(ids)))
                row[seen] = torch.where(row[seen] < 0, row[seen] * penalty, row[seen] / penalty)
                ids.append(int(row.argmax()))
            runs.append(ids)
        logits = logits_of(p, torch.tensor([runs[0][:-1]]), N_HEAD)[0]
    return runs[0], logits, runs[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tgrun", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--gpt2-dir", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--plain", action="store_true")
    ap.add_argument("--backends", default="ref,cpu")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.src, "tests", "torch"))
    from gpt2_reference import write_safetensors

    enc = json.load(open(os.path.join(a.gpt2_dir, "encoder.json"), encoding="utf-8"))
    prompt_ids = [enc[x] for x in PIECES]
    n_new = CTX - len(prompt_ids)
    p = random_params()
    tg_weights = os.path.join(a.work, "tg.safetensors")
    write_safetensors(tg_weights, {k: v.numpy().astype(np.float32) for k, v in p.items()})
    if a.plain:
        print("transformers is not installed: comparing with a plain PyTorch greedy loop over "
              "tests/torch/gpt2_reference.py's model instead")
        ids, logits, penalized = plain_generate(p, prompt_ids, n_new, a.src)
    else:
        ids, logits, penalized = hf_generate(p, prompt_ids, n_new, a.work, a.gpt2_dir)
    top2 = logits.topk(2, dim=-1).values
    margin = float((top2[len(prompt_ids) - 1:, 0] - top2[len(prompt_ids) - 1:, 1]).min())
    print(f"reference: {len(ids) - len(prompt_ids)} new tokens, {len(set(ids[len(prompt_ids):]))} distinct; "
          f"smallest top-1 margin {margin:.3g}")
    dec = byte_decoder()
    inv = {v: k for k, v in enc.items()}
    def text(ids):
        return PROMPT.encode() + b"".join(bytes(dec[c] for c in inv[i]) for i in ids[len(prompt_ids):])
    if penalized == ids:
        print(f"FAIL: the repetition penalty {PENALTY} changed no token: it would test nothing")
        sys.exit(1)
    fails = 0
    sizes = ["-D", f"n_layer={N_LAYER}", "-D", f"n_head={N_HEAD}", "-D", f"n_embd={N_EMBD}", "-D", f"block_size={CTX}"]
    runs = [(backend, tg_weights, sizes, 1.0) for backend in a.backends.split(",")]
    if not a.plain:
        # transformers' own directory as it is: its names, and the sizes from
        # its shapes and config.json, with no -D
        runs.append(("cpu", os.path.join(a.work, "hf", "model.safetensors"), [], 1.0))
    runs.append(("cpu", tg_weights, sizes, PENALTY))
    for backend, weights, defines, penalty in runs:
        want = text(penalized if penalty != 1 else ids)
        r = subprocess.run([a.tgrun, "sample", "--weights", weights, "--model", os.path.join(a.src, "models", "gpt2.tg")]
                           + defines + ["--tokenizer", a.gpt2_dir, "--prompt", PROMPT,
                            "--max-new-tokens", str(n_new), "--temperature", "0", "--no-stop-at-eot",
                            "--repetition-penalty", str(penalty), "--backend", backend],
                           capture_output=True)
        backend = f"{backend} ({os.path.basename(os.path.dirname(weights))}/{os.path.basename(weights)}" + \
            (", sizes from the file" if not defines else "") + \
            (f", --repetition-penalty {penalty})" if penalty != 1 else ")")
        got = r.stdout.rstrip(b"\n")
        if r.returncode != 0:
            print(f"FAIL: {backend}: tgrun sample exited {r.returncode}:\n{r.stderr.decode(errors='replace')}")
            fails += 1
        elif got != want:
            k = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]), min(len(got), len(want)))
            print(f"FAIL: {backend}: the texts differ from byte {k}:\n  tg   {got!r}\n  want {want!r}")
            fails += 1
        else:
            print(f"ok: {backend}: tgrun sample --temperature 0 gives the reference's {n_new} tokens "
                  f"({len(want)} bytes): {want[:60]!r}...")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
