#!/usr/bin/python3
"""hf_transformers.py COMMAND ...: Hugging Face's side of run_hf_transformers.sh.

Run with Debian's /usr/bin/python3 (torch 1.13) and PYTHONPATH holding
transformers 4.40.2 (the script installs it), or, where transformers could
not be installed, only the `reader` commands, which need nothing but the
standard library.

  save OUT_DIR --seed S --n-layer L --n-head H --n-embd C --vocab V --positions P
        a GPT2LMHeadModel made by transformers, save_pretrained to OUT_DIR
        (f32), OUT_DIR-f16 and OUT_DIR-bf16 (the same weights loaded with
        torch_dtype and saved again)
  legacy HF_DIR OUT --lm-head same|differ
        the weights of HF_DIR as an older GPT-2 file: no "transformer."
        prefix, the attention buffers h.N.attn.bias and masked_bias, and an
        lm_head.weight equal to wte (or, with differ, not)
  loss MODEL BATCH [--config DIR]
        the mean cross-entropy of GPT2LMHeadModel.from_pretrained(MODEL) on
        BATCH's idx and targets (no shift: targets are the next tokens),
        computed in float32 from the weights as stored; prints "loss X"
  equal_weights EXPORTED TG_FILE
        every tensor of EXPORTED (transformer.NAME) is TG_FILE's NAME, bit
        for bit, and nothing else is there
  reader DIR
        the exported directory read with json and struct only: names,
        shapes, dtypes, metadata, config.json
  tokenizer DIR TEXT --kind char|gpt2 [--encoder ENCODER_JSON]
        AutoTokenizer.from_pretrained(DIR) is the kind's class, its
        vocabulary is tg's (char: TEXT's sorted characters, id i the i-th;
        gpt2: ENCODER_JSON's), decode(encode(TEXT)) == TEXT and
        encode(decode(ids)) == ids (char: every id; gpt2: TEXT's); bos/eos in
        config.json and generation_config.json are 50256 for gpt2, none for char
"""
import json
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        b = f.read()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    return head, b[8 + n:]


def cmd_reader(d):
    head, data = read_st(d + "/model.safetensors")
    meta = head.pop("__metadata__", None)
    assert meta == {"format": "pt"}, f"__metadata__ is {meta}, expected {{'format': 'pt'}}"
    cfg = json.load(open(d + "/config.json"))
    for k, want in [("model_type", "gpt2"), ("architectures", ["GPT2LMHeadModel"]),
                    ("activation_function", "gelu_new"), ("tie_word_embeddings", True)]:
        assert cfg.get(k) == want, f"config.json {k} = {cfg.get(k)!r}, expected {want!r}"
    L, C, V, P = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]
    assert cfg["n_ctx"] == P and C % cfg["n_head"] == 0
    want = {"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]}
    for i in range(L):
        for k, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                     ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
                     ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                     ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
                     ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
            want[f"h.{i}.{k}"] = s
    got = {k[len("transformer."):] if k.startswith("transformer.") else "!" + k: v for k, v in head.items()}
    assert set(got) == set(want), f"names differ: extra {sorted(set(got) - set(want))}, " \
                                  f"missing {sorted(set(want) - set(got))}"
    end = 0
    for k, v in got.items():
        assert v["dtype"] == "F32" and v["shape"] == want[k], f"{k}: {v['dtype']} {v['shape']}, expected F32 {want[k]}"
        s, e = v["data_offsets"]
        n = 1
        for x in v["shape"]:
            n *= x
        assert e - s == 4 * n
        end = max(end, e)
    assert end == len(data)
    # the tokenizer, where there is one: its vocabulary is the model's, and
    # bos/eos are <|endoftext|> exactly when it is GPT-2's BPE
    import os
    tok = "none"
    if os.path.exists(d + "/tokenizer.json"):
        t = json.load(open(d + "/tokenizer.json"))
        assert t["model"]["type"] == "WordLevel" and t["decoder"] == {"type": "Fuse"}, "not the char tokenizer's form"
        assert sorted(t["model"]["vocab"].values()) == list(range(V)), "the char vocabulary is not ids 0 .. V-1"
        assert all(len(k) == 1 for k in t["model"]["vocab"]), "a char vocabulary entry is not one character"
        assert cfg["bos_token_id"] is None and cfg["eos_token_id"] is None, "bos/eos for the char tokenizer"
        tok = "char"
    elif os.path.exists(d + "/vocab.json"):
        assert len(json.load(open(d + "/vocab.json"))) == V and os.path.exists(d + "/merges.txt")
        assert cfg["bos_token_id"] == 50256 and cfg["eos_token_id"] == 50256, "bos/eos not <|endoftext|>"
        tok = "gpt2"
    print(f"reader: {len(got)} tensors, F32, GPT-2 names and shapes (L={L} C={C} V={V} P={P}), "
          f"metadata format pt, config.json a GPT2Config, tokenizer {tok}")


def cmd_equal_weights(exported, tg_file):
    a, da = read_st(exported)
    b, db = read_st(tg_file)
    a.pop("__metadata__", None)
    b.pop("__metadata__", None)
    params = {k for k in b if not k.startswith("adam.")}
    names = {k[len("transformer."):] for k in a}
    assert names == params, f"exported {sorted(names ^ params)} differ"
    for k, v in a.items():
        w = b[k[len("transformer."):]]
        assert v["shape"] == w["shape"] and v["dtype"] == w["dtype"] == "F32"
        assert da[v["data_offsets"][0]:v["data_offsets"][1]] == db[w["data_offsets"][0]:w["data_offsets"][1]], k
    print(f"equal: {len(a)} tensors bit for bit")


def cmd_tokenizer(d, text_path, kind, encoder):
    from transformers import AutoTokenizer, GenerationConfig
    tok = AutoTokenizer.from_pretrained(d)
    text = open(text_path, encoding="utf-8").read()
    want_class = {"char": "PreTrainedTokenizerFast", "gpt2": "GPT2TokenizerFast"}[kind]
    assert type(tok).__name__ == want_class, f"AutoTokenizer made a {type(tok).__name__}, expected {want_class}"
    vocab = tok.get_vocab()
    if kind == "char":
        want = {c: i for i, c in enumerate(sorted(set(text)))}
        assert vocab == want, f"the vocabulary differs from tg's: {sorted(set(vocab.items()) ^ set(want.items()))[:5]}"
        ids = list(range(len(want)))
    else:
        want = json.load(open(encoder))
        assert vocab == want, "the vocabulary is not encoder.json's"
        ids = tok.encode(text)
    enc = tok.encode(text)
    assert tok.decode(enc) == text, "decode(encode(text)) is not the text"
    assert tok.encode(tok.decode(ids)) == ids, "encode(decode(ids)) is not ids"
    cfg = json.load(open(d + "/config.json"))
    gen = GenerationConfig.from_pretrained(d)
    eot = 50256 if kind == "gpt2" else None
    for where, b, e in [("config.json", cfg.get("bos_token_id"), cfg.get("eos_token_id")),
                        ("generation_config.json", gen.bos_token_id, gen.eos_token_id)]:
        assert b == eot and e == eot, f"{where}: bos {b}, eos {e}, expected {eot}"
    assert gen.max_length == cfg["n_positions"], f"max_length {gen.max_length}, n_positions {cfg['n_positions']}"
    print(f"tokenizer: {type(tok).__name__}, {len(vocab)} ids, {len(enc)} tokens round-trip, bos/eos {eot}")


def opt(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "reader":
        return cmd_reader(args[0])
    if cmd == "equal_weights":
        return cmd_equal_weights(args[0], args[1])
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    if cmd == "tokenizer":
        return cmd_tokenizer(args[0], args[1], opt(args, "--kind"), opt(args, "--encoder"))
    if cmd == "save":
        out = args[0]
        torch.manual_seed(int(opt(args, "--seed")))
        cfg = GPT2Config(n_layer=int(opt(args, "--n-layer")), n_head=int(opt(args, "--n-head")),
                         n_embd=int(opt(args, "--n-embd")), vocab_size=int(opt(args, "--vocab")),
                         n_positions=int(opt(args, "--positions")))
        m = GPT2LMHeadModel(cfg)
        # the initialiser's zero biases and unit gains would hide a mix-up of
        # weight and bias: random values everywhere
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn_like(p) * 0.1)
        m.save_pretrained(out)
        for dt, name in [(torch.float16, "f16"), (torch.bfloat16, "bf16")]:
            GPT2LMHeadModel.from_pretrained(out, torch_dtype=dt).save_pretrained(f"{out}-{name}")
        print(f"saved {out}, {out}-f16, {out}-bf16")
    elif cmd == "legacy":
        from safetensors.torch import load_file, save_file
        sd = load_file(args[0] + "/model.safetensors")
        cfg = json.load(open(args[0] + "/config.json"))
        out = {k[len("transformer."):]: v for k, v in sd.items()}
        P = cfg["n_positions"]
        for i in range(cfg["n_layer"]):
            out[f"h.{i}.attn.bias"] = torch.tril(torch.ones(P, P)).view(1, 1, P, P)
            out[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
        out["lm_head.weight"] = out["wte.weight"].clone()
        if opt(args, "--lm-head") == "differ":
            out["lm_head.weight"][3, 1] += 0.5
        save_file(out, args[1], metadata={"format": "pt"})
        print(f"wrote {args[1]}: {len(out)} tensors")
    elif cmd == "loss":
        from safetensors.numpy import load_file as load_np
        model, batch = args[0], args[1]
        kw = {}
        if opt(args, "--config"):
            kw["config"] = GPT2Config.from_pretrained(opt(args, "--config"))
        if kw:
            m = GPT2LMHeadModel.from_pretrained(model, **kw)
        else:
            # a directory: as a user loads it, the class from its config.json
            from transformers import AutoModelForCausalLM
            m = AutoModelForCausalLM.from_pretrained(model)
            assert type(m) is GPT2LMHeadModel, f"AutoModelForCausalLM made a {type(m).__name__}"
        m = m.float().eval()
        b = load_np(batch)
        idx = torch.from_numpy(b["idx"].astype("int64"))
        tgt = torch.from_numpy(b["targets"].astype("int64"))
        with torch.no_grad():
            logits = m(idx).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
        print(f"loss {loss.item():.9g}")
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
