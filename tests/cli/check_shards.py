"""check_shards.py CORPUS.jsonl SHARD_DIR GPT2_DIR: the shards tgrun prepare wrote hold every
document of CORPUS.jsonl ("text" of each non-blank line), in order, each preceded by
<|endoftext|> (50256) and decoding to its text exactly (GPT-2's byte-level decoding from
encoder.json, written out here so that no tokenizer library is needed); the first shard is
NAME_val_000000.bin, the rest NAME_train_NNNNNN.bin numbered on from 1, each in llm.c's format.
Prints a summary; exits 1 on the first difference."""
import glob
import json
import os
import struct
import sys


def byte_decoder():
    # GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + n
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main(corpus, shard_dir, gpt2_dir):
    enc = json.load(open(os.path.join(gpt2_dir, "encoder.json"), encoding="utf-8"))
    dec = byte_decoder()
    piece = {i: bytes(dec[ch] for ch in s) for s, i in enc.items()}
    val = sorted(glob.glob(os.path.join(shard_dir, "*_val_*.bin")))
    train = sorted(glob.glob(os.path.join(shard_dir, "*_train_*.bin")))
    if len(val) != 1 or not val[0].endswith("_val_000000.bin"):
        sys.exit("expected one shard NAME_val_000000.bin, found %s" % val)
    for k, path in enumerate(train, 1):
        if not path.endswith("_train_%06d.bin" % k):
            sys.exit("train shard %d is %s" % (k, path))
    ids = []
    for path in val + train:
        data = open(path, "rb").read()
        magic, version, n = struct.unpack("<3i", data[:12])
        if magic != 20240520 or version != 1 or len(data) != 1024 + 2 * n:
            sys.exit(path + ": not llm.c's format")
        ids.extend(struct.unpack("<%dH" % n, data[1024:]))
    docs = [json.loads(line)["text"] for line in open(corpus, encoding="utf-8") if line.strip()]
    if not ids or ids[0] != 50256:
        sys.exit("the first token is not <|endoftext|>")
    parts, cur = [], None
    for t in ids:
        if t == 50256:
            cur = []
            parts.append(cur)
        else:
            cur.append(t)
    if len(parts) != len(docs):
        sys.exit("%d documents, %d <|endoftext|>" % (len(docs), len(parts)))
    for k, (p, d) in enumerate(zip(parts, docs)):
        if b"".join(piece[t] for t in p) != d.encode("utf-8"):
            sys.exit("document %d (line %d) does not decode to its text" % (k, k + 1))
    print("%d documents, %d tokens in %d shards: each after <|endoftext|>, decoding to its text" %
          (len(docs), len(ids), len(val) + len(train)))


if __name__ == "__main__":
    main(*sys.argv[1:4])
