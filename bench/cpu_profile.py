#!/usr/bin/env python3
"""cpu_profile.py PERF_DATA [CACHE_DIR]: where a CPU step's cycles go.

Reads `perf report` of a tgrun run on the CPU backend and sorts its samples
by what they are: OpenBLAS's matmul kernel and its packing, the generated
functions by the step they run (flash attention forward and backward, a
matmul's epilogue, the other nests), tgrun itself and the rest.  The
generated functions are named by the hash of their text (f_<10 hex>); what
each runs is read from the headers render_c.c writes above it in the C
files of the kernel cache (CACHE_DIR, default ~/.cache/tg).  Shares are of
the process's own cycles, so a busy machine moves them less than it moves
times.  Used by bench/cpu_profile.sh; docs/performance.md has its tables."""
import collections
import glob
import os
import re
import subprocess
import sys


def what_functions_run(cache):
    kinds = {}
    for path in glob.glob(os.path.join(cache, "*.c")):
        text = open(path, errors="replace").read()
        for m in re.finditer(r"flash attention (forward|backward) \(tg codegen/c/flash_c\.c\)(?:.*\n)*?void (f_[0-9a-f]+)\(", text):
            kinds[m.group(2)] = "attention " + m.group(1)
        for m in re.finditer(r"// tg kernel: (f_[0-9a-f]+)\n/\*.*\n \*   k\d+_\d+ \(k\d+ (\w+) \"([^\"]+)\"\)", text):
            kinds.setdefault(m.group(1), m.group(2) + " " + m.group(3))
    return kinds


def category(dso, sym, kinds):
    if "openblas" in dso:
        return "matmuls: OpenBLAS's kernel" if "kernel" in sym else "matmuls: OpenBLAS's packing and C = 0", None
    if "dnnl" in dso:
        return "matmuls: oneDNN's library (its drivers, packing)", None
    if dso in ("[unknown]", "//anon", "[anon]") or dso.startswith("[JIT]") or dso.startswith("jitted-"):
        # code in anonymous memory: oneDNN's JIT-made kernels, the only code tg's process generates in place
        return "matmuls: oneDNN's JIT kernels", None
    if re.fullmatch(r"[0-9a-f]{64}\.so", dso):
        fn = re.sub(r"(\._omp_fn\.\d+|_mm_\w+.*|_exp.*)$", "", sym)
        kind = kinds.get(fn, "?")
        if kind.startswith("attention"):
            return "flash " + kind, (fn, kind)
        if kind.startswith("matmul"):
            return "matmul epilogues", (fn, kind)
        return "elementwise, rows, reductions", (fn, kind)
    if dso == "tgrun":
        return "runtime (tgrun)", None
    if "libgomp" in dso:
        return "OpenMP's runtime (libgomp)", None
    return "the rest", None


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: cpu_profile.py PERF_DATA [CACHE_DIR]")
    cache = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser("~/.cache/tg")
    report = subprocess.run(["perf", "report", "-i", sys.argv[1], "--no-children", "--sort", "dso,symbol", "--stdio"],
                            capture_output=True, text=True, check=True).stdout
    kinds = what_functions_run(cache)
    shares, functions = collections.Counter(), collections.Counter()
    for line in report.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\[JIT\] tid \d+|\S+)\s+\[.\]\s+(\S+)", line)
        if not m:
            continue
        share = float(m.group(1))
        cat, fn = category(m.group(2), m.group(3), kinds)
        shares[cat] += share
        if fn:
            functions[fn] += share
    for cat, share in shares.most_common():
        print("%6.1f%%  %s" % (share, cat))
    print("the generated functions that take most:")
    for (fn, kind), share in functions.most_common(10):
        print("%6.1f%%  %s  %s" % (share, fn, kind))


if __name__ == "__main__":
    main()
