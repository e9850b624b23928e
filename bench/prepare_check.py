"""prepare_check.py: the corpus and tiktoken's side of bench/prepare.sh.

  prepare_check.py generate OUT.jsonl SIZE_MB SHAKESPEARE.txt -> a JSON-lines corpus of about
      SIZE_MB MB, FineWeb's shape ({"text": ..., "id": ...} a line, documents of a few hundred
      to tens of thousands of characters), made from Tiny Shakespeare's paragraphs with web-like
      noise (numbers, URLs, accented and CJK words, emoji, tabs, runs of spaces); seeded
  prepare_check.py encode CORPUS.jsonl GPT2_DIR THREADS  -> times tiktoken's GPT-2 (r50k_base, made
      from GPT2_DIR's encoder.json and vocab.bpe, so no download) on every document's "text",
      prints one JSON line: documents, tokens, seconds, threads
  prepare_check.py compare CORPUS.jsonl GPT2_DIR SHARD_DIR -> checks that the shards tgrun prepare
      wrote hold exactly [<|endoftext|>] + encode_ordinary(text) for every document, in order;
      prints the first difference and exits 1 if there is one
"""
import glob
import json
import os
import sys
import time

import numpy as np
import tiktoken
from tiktoken.load import data_gym_to_mergeable_bpe_ranks

# tiktoken_ext/openai_public.py's r50k_pat_str: GPT-2's pre-tokenizer
PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOT = 50256


def gpt2(gpt2_dir):
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=os.path.join(gpt2_dir, "vocab.bpe"),
                                            encoder_json_file=os.path.join(gpt2_dir, "encoder.json"))
    return tiktoken.Encoding("gpt2-local", pat_str=PAT, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": EOT}, explicit_n_vocab=50257)


def documents(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)["text"]


NOISE = ["2024-05-20", "https://example.org/a/b?c=1", "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "\u6771\u4eac\u90fd",
         "\U0001F600 \U0001F680", "3.14159", "  \t  ", "x" * 40, "ALL CAPS DON'T", "#tag @user", "\u00a0\u2003",
         "\u0645\u0631\u062d\u0628\u0627", "1,234,567", "e-mail: a.b@example.com", "\n\n\n"]


def generate(out, size_mb, source):
    import random
    rng = random.Random(20240520)
    paragraphs = [p for p in open(source, encoding="utf-8").read().split("\n\n") if p.strip()]
    # rare words (names, typos, identifiers), so that not every word is one seen before: a
    # tokenizer's cache of words then helps about as much as on web text, not as on a poem
    letters = "abcdefghijklmnopqrstuvwxyzaeiouaeiou"
    rare = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(200000)]
    target, written, k = int(float(size_mb) * 1e6), 0, 0
    with open(out, "w", encoding="utf-8") as f:
        while written < target:
            parts = []
            for _ in range(rng.randint(1, 40)):
                parts.append(rng.choice(paragraphs) + " " + " ".join(rng.sample(rare, rng.randint(1, 8))))
                if rng.random() < 0.3:
                    parts.append(rng.choice(NOISE) + " " + str(rng.randint(0, 10 ** rng.randint(1, 9))))
            line = json.dumps({"text": "\n\n".join(parts), "id": "doc-%d" % k}) + "\n"
            f.write(line)
            written += len(line)
            k += 1
    print("%s: %d documents, %.1f MB" % (out, k, written / 1e6))


def encode(corpus, gpt2_dir, threads):
    enc = gpt2(gpt2_dir)
    docs = list(documents(corpus))
    t0 = time.perf_counter()
    n = 0
    for i in range(0, len(docs), 4096):
        for ids in enc.encode_ordinary_batch(docs[i:i + 4096], num_threads=threads):
            n += len(ids) + 1
    dt = time.perf_counter() - t0
    print(json.dumps({"documents": len(docs), "tokens": n, "seconds": dt, "threads": threads}))


def shards(shard_dir):
    files = sorted(glob.glob(os.path.join(shard_dir, "*_val_*.bin"))) + \
        sorted(glob.glob(os.path.join(shard_dir, "*_train_*.bin")))
    for path in files:
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(1024), dtype="<i4")
            assert header[0] == 20240520 and header[1] == 1, path + ": not llm.c's header"
            ids = np.frombuffer(f.read(), dtype="<u2")
            assert len(ids) == header[2], path + ": the count does not match"
            yield path, ids


def compare(corpus, gpt2_dir, shard_dir):
    enc = gpt2(gpt2_dir)
    got = np.concatenate([ids for _, ids in shards(shard_dir)])
    at = 0
    for k, text in enumerate(documents(corpus)):
        want = np.array([EOT] + enc.encode_ordinary(text), dtype=np.uint16)
        have = got[at:at + len(want)]
        if len(have) != len(want) or not np.array_equal(have, want):
            bad = next((i for i in range(min(len(have), len(want))) if have[i] != want[i]), min(len(have), len(want)))
            print("document %d (line %d): token %d differs: tgrun %s, tiktoken %s" %
                  (k, k + 1, bad, list(have[bad:bad + 5]), list(want[bad:bad + 5])))
            sys.exit(1)
        at += len(want)
    if at != len(got):
        print("the shards hold %d tokens after the last document" % (len(got) - at))
        sys.exit(1)
    print("identical: %d tokens of %d documents" % (at, k + 1))


if __name__ == "__main__":
    if sys.argv[1] == "generate":
        generate(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "encode":
        encode(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        compare(sys.argv[2], sys.argv[3], sys.argv[4])
