#!/usr/bin/python3
"""torch_gpt_train.py: the PyTorch peer for tg's training-throughput benchmark.

Trains nanoGPT's GPT on character-level Tiny Shakespeare and measures
training tokens per second, so that tg's trainer can be compared with
PyTorch on the same machine and the same model:

  - the model is nanoGPT's GPT: learned position embeddings, pre-LayerNorm
    blocks (eps 1e-5, with biases), GELU with the tanh approximation,
    biases on every Linear, no dropout, the token embedding tied to the
    head, causal attention through F.scaled_dot_product_attention where
    torch has it (2.0 and later) and the masked softmax otherwise;
    initialisation N(0, 0.02), the residual projections 0.02/sqrt(2 n_layer);
  - the optimizer is nanoGPT's configure_optimizers: AdamW, weight decay on
    the 2-D parameters only, fused on CUDA when torch offers it; the
    learning rate follows nanoGPT's get_lr (linear warmup, cosine decay to
    --min-lr at the last step); gradients are clipped to norm 1.0;
  - the data is $TG_DATA/tinyshakespeare/input.txt, 65 characters, the
    first 90% for training and the last 10% for validation, random windows
    drawn with a seeded torch.Generator.

The defaults are nanoGPT's "baby GPT" for CPUs (4 layers, 4 heads, 128
wide, 64 characters of context, 12 sequences a step, lr 1e-3 down to 1e-4,
beta2 0.99, 100 warmup steps), which reaches a validation loss of about
1.88 after 2000 steps.

Throughput is measured over the steps after the first --timing-warmup
ones (which include torch.compile's compilation); evaluation, when asked
for, is not counted.  On the CPU each timed step's time is kept too, and
their median reported (bench/baby_shakespeare.sh and bench/gpt2_cpu.sh
compare medians); on CUDA steps are not synchronized one by one, so only
the mean over the timed span means anything.  The CPU benchmarks run it
with the current torch from PyPI (bench/peer_venv.sh), compiled and eager;
it also runs with Debian's torch 1.13 (/usr/bin/python3, eager only) and
with torch 2.x on CUDA (--device cuda --compile).  With --compile on the
CPU, --json reports what TorchDynamo compiled (frames and graphs), so that
a caller can check that the compiled model, not an eager fallback, ran.

With --tokens DIR it trains on the token files `tgrun prepare` wrote
(DIR/train.bin and DIR/val.bin, llm.c's format: a 1024-byte header of
int32s, magic 20240520, version 1, the count, then uint16 ids) instead of
characters: GPT-2 BPE for bench/gpt2_gpu.sh, with --vocab-size 50304 (the
vocabulary padded to a multiple of 64, as nanoGPT does; the extra rows are
trained like the others) and --grad-accum micro-batches a step.

Examples:
  /usr/bin/python3 bench/torch_gpt_train.py --steps 30
  /usr/bin/python3 bench/torch_gpt_train.py --steps 2000 --eval-interval 250
  python3 bench/torch_gpt_train.py --device cuda --compile --steps 500 --json
"""
import argparse
import contextlib
import inspect
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


# --------------------------------------------------------------------------
# The model: nanoGPT's GPT (bias=True, dropout 0), tanh GELU.

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, use_sdpa):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.n_embd = n_embd
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        self.use_sdpa = use_sdpa
        if not use_sdpa:
            mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
            self.register_buffer("mask", mask.view(1, 1, block_size, block_size), persistent=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if self.use_sdpa:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=True)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=True)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, use_sdpa):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, use_sdpa)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, use_sdpa):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, use_sdpa) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, eps=1e-5),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        b, t = idx.size()
        assert t <= self.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def configure_optimizer(model, weight_decay, lr, betas, device_type):
    """nanoGPT's configure_optimizers: decay the 2-D tensors (matmul weights,
    embeddings), not the biases and LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    extra = {"fused": True} if fused else {}
    return torch.optim.AdamW(groups, lr=lr, betas=betas, **extra), fused


def get_lr(it, lr, min_lr, warmup, decay_steps):
    """nanoGPT's get_lr: linear warmup, then cosine decay to min_lr."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_steps or decay_steps <= warmup:
        return min_lr
    ratio = (it - warmup) / (decay_steps - warmup)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (lr - min_lr)


# --------------------------------------------------------------------------
# Data.

def find_data(explicit):
    """The Tiny Shakespeare text: --data, else $TG_DATA, else the shared data
    beside the checkout (../shared/data from the repo root), else /work/shared/data."""
    rel = os.path.join("tinyshakespeare", "input.txt")
    if explicit:
        return explicit
    candidates = []
    if os.environ.get("TG_DATA"):
        candidates.append(os.path.join(os.environ["TG_DATA"], rel))
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "..", "..", "shared", "data", rel))
    candidates.append(os.path.join("/work/shared/data", rel))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.normpath(c)
    sys.exit("torch_gpt_train.py: no Tiny Shakespeare found (looked at %s); set TG_DATA to a folder "
             "holding tinyshakespeare/input.txt, from https://raw.githubusercontent.com/karpathy/"
             "char-rnn/master/data/tinyshakespeare/input.txt" % ", ".join(candidates))


TOKENS_MAGIC, TOKENS_VERSION, TOKENS_HEADER_BYTES = 20240520, 1, 1024


def read_tokens(path):
    """The ids of one of tg's token files (runtime/data/tokens_file.c), as int64."""
    import numpy as np
    try:
        with open(path, "rb") as f:
            header = np.frombuffer(f.read(TOKENS_HEADER_BYTES), dtype="<i4")
            if len(header) < 3 or header[0] != TOKENS_MAGIC or header[1] != TOKENS_VERSION:
                sys.exit("torch_gpt_train.py: %s is not a tg token file (magic %d, version 1 expected); "
                         "make it with tgrun prepare" % (path, TOKENS_MAGIC))
            ids = np.frombuffer(f.read(2 * int(header[2])), dtype="<u2")
    except OSError as e:
        sys.exit("torch_gpt_train.py: cannot read %s: %s (make it with tgrun prepare --out DIR)" % (path, e))
    if len(ids) != header[2]:
        sys.exit("torch_gpt_train.py: %s holds %d ids, its header says %d" % (path, len(ids), header[2]))
    return torch.from_numpy(ids.astype(np.int64))


def load_tokens(folder):
    """train.bin and val.bin of a tgrun prepare folder, and the vocabulary
    size its tokenizer.json states."""
    vocab = None
    try:
        with open(os.path.join(folder, "tokenizer.json")) as f:
            vocab = int(json.load(f)["vocab_size"])
    except (OSError, KeyError, ValueError):
        pass
    train, val = (read_tokens(os.path.join(folder, n)) for n in ("train.bin", "val.bin"))
    if vocab is None:
        vocab = int(max(train.max().item(), val.max().item())) + 1
    return train, val, vocab


def load_data(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(data))
    return data[:n], data[n:], len(chars)


class Batches:
    """Random windows of block_size + 1 characters, nanoGPT's get_batch. The
    offsets are drawn on the CPU from a seeded generator (so the batches are
    the same on every device), 256 steps' worth at a time, and moved to the
    device in one copy: no host-device transfer, and no sync, per step."""

    CHUNK = 256

    def __init__(self, data, batch_size, block_size, seed, device):
        self.data = data.to(device)
        self.B, self.T = batch_size, block_size
        self.seed = seed
        self.device = device
        self.gen = torch.Generator()
        self.offsets = torch.arange(block_size, device=device).view(1, -1)
        self.reseed()

    def reseed(self):
        self.gen.manual_seed(self.seed)
        self.ix, self.used = None, self.CHUNK

    def next(self):
        if self.used == self.CHUNK:
            ix = torch.randint(len(self.data) - self.T, (self.CHUNK, self.B), generator=self.gen)
            self.ix, self.used = ix.to(self.device), 0
        ix = self.ix[self.used].view(-1, 1) + self.offsets
        self.used += 1
        return self.data[ix], self.data[ix + 1]


# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=64, help="tokens a sequence")
    ap.add_argument("--model-block-size", type=int, default=0,
                    help="rows of the position table (default: --block-size); GPT-2's is 1024")
    ap.add_argument("--batch-size", type=int, default=12)
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches whose gradients make one step")
    ap.add_argument("--tokens", default=None,
                    help="train on DIR/train.bin and DIR/val.bin (tgrun prepare's token files) instead of characters")
    ap.add_argument("--vocab-size", type=int, default=0,
                    help="the model's vocabulary, at least the data's (50304: GPT-2's padded; default: the data's)")
    ap.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    ap.add_argument("--warmup-steps", type=int, default=100, help="learning-rate warmup steps")
    ap.add_argument("--lr-decay-steps", type=int, default=None,
                    help="step at which the cosine reaches --min-lr (default: --steps)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="0 turns clipping off")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (or cuda:N)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "tf32", "bfloat16", "float16"],
                    help="float32 (default, strict fp32 matmuls), tf32, or bfloat16/float16 autocast (CUDA)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model where torch has it")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: torch's)")
    ap.add_argument("--timing-warmup", type=int, default=5, help="first steps left out of the timing")
    ap.add_argument("--eval-interval", type=int, default=0,
                    help="estimate train and val loss at step 0, every N steps and at the end (0: off)")
    ap.add_argument("--eval-batches", type=int, default=20, help="batches per loss estimate")
    ap.add_argument("--log-interval", type=int, default=0, help="print the loss every N steps (0: off)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--data", default=None, help="path of input.txt (default: $TG_DATA/tinyshakespeare/input.txt)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line of results on stdout (the text goes to stderr)")
    args = ap.parse_args()

    if args.steps < 1:
        ap.error("--steps must be at least 1")
    if args.grad_accum < 1:
        ap.error("--grad-accum must be at least 1")
    timing_warmup = min(args.timing_warmup, args.steps - 1)
    decay_steps = args.lr_decay_steps if args.lr_decay_steps is not None else args.steps
    say_to = sys.stderr if args.json else sys.stdout

    def say(*a):
        print(*a, file=say_to, flush=True)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt_train.py: --device cuda but torch.cuda.is_available() is False")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = args.dtype != "float32"
        torch.backends.cudnn.allow_tf32 = args.dtype != "float32"
    autocast_dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(args.dtype)
    if autocast_dtype is not None and device.type != "cuda":
        sys.exit("torch_gpt_train.py: --dtype %s is for CUDA only" % args.dtype)

    def ctx():
        if autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type="cuda", dtype=autocast_dtype)

    if args.tokens:
        path = args.tokens
        train_data, val_data, vocab = load_tokens(path)
    else:
        path = find_data(args.data)
        train_data, val_data, vocab = load_data(path)
    data_vocab = vocab
    if args.vocab_size:
        if args.vocab_size < vocab:
            sys.exit("torch_gpt_train.py: --vocab-size %d is below the data's vocabulary %d" % (args.vocab_size, vocab))
        vocab = args.vocab_size
    train = Batches(train_data, args.batch_size, args.block_size, args.seed, device)
    val = Batches(val_data, args.batch_size, args.block_size, args.seed + 1, device)
    train_eval = Batches(train_data, args.batch_size, args.block_size, args.seed + 2, device)

    pos_rows = args.model_block_size or args.block_size
    if pos_rows < args.block_size:
        ap.error("--model-block-size %d is below --block-size %d" % (pos_rows, args.block_size))
    model = GPT(vocab, pos_rows, args.n_layer, args.n_head, args.n_embd, HAVE_SDPA).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    n_params_no_wpe = n_params - model.transformer.wpe.weight.numel()
    optimizer, fused = configure_optimizer(model, args.weight_decay, args.lr,
                                           (args.beta1, args.beta2), device.type)
    scaler = None  # loss scaling, for float16 autocast only
    if autocast_dtype == torch.float16:
        scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())

    compiled = False
    run_model = model
    if args.compile:
        if hasattr(torch, "compile"):
            run_model = torch.compile(model)
            compiled = True
        else:
            say("note: torch %s has no torch.compile; running eagerly" % torch.__version__)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    @torch.no_grad()
    def estimate(batches):
        run_model.eval()
        batches.reseed()  # the same batches at every evaluation
        total = torch.zeros((), device=device)
        for _ in range(args.eval_batches):
            x, y = batches.next()
            with ctx():
                total += run_model(x, y).float()
        run_model.train()
        return total.item() / args.eval_batches

    evals = []

    def evaluate(step):
        t = time.perf_counter()
        sync()
        tr, va = estimate(train_eval), estimate(val)
        sync()
        evals.append({"step": step, "train_loss": tr, "val_loss": va})
        say("step %d: train loss %.4f, val loss %.4f" % (step, tr, va))
        return time.perf_counter() - t

    tokens_per_step = args.batch_size * args.block_size * args.grad_accum
    losses = []
    step_ms = []  # each timed step's time, on the CPU only (CUDA's would be launch times)
    eval_seconds = 0.0  # spent evaluating inside the timed span
    t_start = t0 = time.perf_counter()
    warmup_seconds = 0.0
    for it in range(args.steps):
        if args.eval_interval > 0 and it % args.eval_interval == 0:
            s = evaluate(it)
            if it >= timing_warmup:
                eval_seconds += s
        if it == timing_warmup:
            sync()
            t0 = time.perf_counter()
            warmup_seconds = t0 - t_start
        t_step = time.perf_counter()
        lr = get_lr(it, args.lr, args.min_lr, args.warmup_steps, decay_steps)
        for g in optimizer.param_groups:
            g["lr"] = lr
        loss = torch.zeros((), device=device)
        for micro in range(args.grad_accum):
            x, y = train.next()
            with ctx():
                micro_loss = run_model(x, y) / args.grad_accum
            if scaler is None:
                micro_loss.backward()
            else:
                scaler.scale(micro_loss).backward()
            loss += micro_loss.detach().float()
        if scaler is None:
            if args.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            optimizer.step()
        else:
            if args.grad_clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())  # no .item() per step: no sync on CUDA
        if device.type == "cpu" and it >= timing_warmup:
            step_ms.append(1000 * (time.perf_counter() - t_step))
        if args.log_interval > 0 and (it % args.log_interval == 0 or it == args.steps - 1):
            say("step %d: loss %.4f, lr %.2e, %.1f s" % (it, loss.item(), lr, time.perf_counter() - t_start))
    sync()
    t1 = time.perf_counter()
    if args.eval_interval > 0:
        evaluate(args.steps)

    timed_steps = args.steps - timing_warmup
    seconds = t1 - t0 - eval_seconds
    tok_s = timed_steps * tokens_per_step / seconds
    all_losses = torch.stack(losses).float().cpu()
    final_loss = all_losses[-1].item()
    last10 = all_losses[-10:].mean().item()

    median_ms = sorted(step_ms)[len(step_ms) // 2] if step_ms else None
    dynamo = None
    if compiled:
        from torch._dynamo.utils import counters
        dynamo = {"frames_ok": counters["frames"]["ok"], "frames_total": counters["frames"]["total"],
                  "unique_graphs": counters["stats"]["unique_graphs"],
                  "graph_breaks": sum(counters["graph_break"].values())}

    dev_name = device.type
    if device.type == "cuda":
        dev_name = "cuda (%s)" % torch.cuda.get_device_name(device)
    how = [dev_name]
    if compiled:
        how.append("compiled")
    if args.dtype != "float32":
        how.append(args.dtype)
    if device.type == "cpu":
        how.append("%d thread%s" % (torch.get_num_threads(), "" if torch.get_num_threads() == 1 else "s"))
    accum = " x %d accumulated" % args.grad_accum if args.grad_accum > 1 else ""
    say("torch %s %s: %d layers, %.2fM params, %dx%d%s tokens/step: %s tok/s (steps %d..%d, %.1f ms/step%s)"
        % (torch.__version__, ", ".join(how), args.n_layer, n_params / 1e6, args.batch_size,
           args.block_size, accum, "{:,.0f}".format(tok_s), timing_warmup, args.steps - 1,
           1000 * seconds / timed_steps, "" if median_ms is None else ", median %.1f" % median_ms))
    if dynamo is not None:
        say("torch.compile: %d of %d frames compiled, %d graphs, %d graph breaks; the first %d steps "
            "(compiling included) took %.1f s" % (dynamo["frames_ok"], dynamo["frames_total"],
                                                 dynamo["unique_graphs"], dynamo["graph_breaks"],
                                                 timing_warmup, warmup_seconds))
    line = "train loss %.4f at step %d (mean of the last %d: %.4f)" % (
        final_loss, args.steps - 1, min(10, args.steps), last10)
    if evals:
        line += ", val loss %.4f" % evals[-1]["val_loss"]
    say(line)

    if args.json:
        result = {
            "impl": "torch",
            "torch_version": torch.__version__,
            "device": dev_name,
            "compiled": compiled,
            "dtype": args.dtype,
            "attention": "sdpa" if HAVE_SDPA else "masked_softmax",
            "fused_adamw": fused,
            "threads": torch.get_num_threads(),
            "n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
            "block_size": args.block_size, "batch_size": args.batch_size, "vocab_size": vocab,
            "data_vocab_size": data_vocab, "grad_accum": args.grad_accum,
            "params": n_params, "params_without_wpe": n_params_no_wpe,
            "tokens_per_step": tokens_per_step,
            "steps": args.steps, "timed_steps": timed_steps, "timing_warmup": timing_warmup,
            "seconds": seconds, "ms_per_step": 1000 * seconds / timed_steps, "tokens_per_s": tok_s,
            "step_ms": step_ms, "median_ms_per_step": median_ms, "warmup_seconds": warmup_seconds,
            "dynamo": dynamo, "model_block_size": pos_rows,
            "train_loss": final_loss, "train_loss_last10": last10,
            "val_loss": evals[-1]["val_loss"] if evals else None,
            "evals": evals,
            "seed": args.seed, "data": path,
        }
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    try:
        main()
    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one (torch 2.x)
        if "out of memory" not in str(e):
            raise
        print("torch_gpt_train.py: CUDA out of memory (%s); try a smaller --batch-size" % str(e).split("\n")[0][:200],
              file=sys.stderr)
        sys.exit(3)
