# cpu_rounds.sh: the measuring loop that bench/baby_shakespeare.sh and
# bench/gpt2_cpu.sh share (sourced, not run): tg's trainer against nanoGPT's
# model (bench/torch_gpt_train.py) on the current torch from PyPI
# (bench/peer_venv.sh), compiled with torch.compile and eager, on the CPU,
# with the same model, batch, schedule and thread count.
#
# Rounds are interleaved (tg, compile, eager, tg, compile, eager, ...), so
# that a change in the machine's load during the run falls on all three
# alike rather than on whichever ran last.  Each run's figure is the median
# of its step times from the 6th step on (steps before are start-up:
# caches, page faults, and torch.compile's compiling, which is therefore
# never timed; tg compiles before its first step); each side's figure is
# the median over the rounds of its runs' medians.  Each run is printed
# as it finishes, then the ratios: tg's speed over compile's and over
# eager's (ms/step of torch over ms/step of tg: above 1, tg is faster),
# three ways: of the sides' medians, the median of each round's own ratio,
# and of each side's fastest run.
#
# The caller calls rounds_init with its name, its defaults and its own
# arguments (STEPS ROUNDS THREADS...), which sets rounds_steps,
# rounds_count, rounds_threads, rounds_work (BENCH_DIR/NAME), rounds_data
# (TG_DATA), tgrun, peer_py and rounds_sides (TG_BENCH_SIDES [tg compile
# eager]); then sets
#   rounds_tg_cfg    tg's train.cfg; rounds_tg_args its key=value overrides
#                    (data_dir, sizes, schedule; not threads, out_dir or
#                    max_steps, which the loop sets)
#   rounds_torch_args  torch_gpt_train.py's arguments for the same model
#                    and schedule (not --threads, --steps, --compile)
#   rounds_tokens    tokens a step
# and calls rounds_header (the machine, the commit) and rounds_run.

# shellcheck shell=bash disable=SC2154,SC2034 # the caller sets rounds_tg_*, rounds_torch_args, rounds_tokens; reads rounds_data

# rounds_init NAME DEFAULT_STEPS DEFAULT_ROUNDS "DEFAULT_THREADS" [STEPS [ROUNDS [THREADS...]]]
rounds_init() {
  local name=$1 default_threads=$4
  rounds_steps=${5:-$2} rounds_count=${6:-$3}
  shift 6 2> /dev/null || shift $#
  rounds_threads=("$@")
  # "1 nproc" on one core is one thread count
  [ ${#rounds_threads[@]} -gt 0 ] || read -r -a rounds_threads <<< "$(tr ' ' '\n' <<< "$default_threads" | awk '!seen[$0]++' | tr '\n' ' ')"
  [ "$rounds_steps" -gt 5 ] || { echo "$name: STEPS must be above 5 (the first 5 are not timed)" >&2; exit 2; }
  rounds_warmup=5 rounds_sides=${TG_BENCH_SIDES:-tg compile eager}
  rounds_data=${TG_DATA:-../shared/data}
  rounds_work=${BENCH_DIR:-out/bench}/$name
  tgrun=${TGRUN:-build/tgrun}
  [ -x "$tgrun" ] || { echo "build tg first: cmake -S . -B build && cmake --build build" >&2; exit 1; }
  . bench/peer_venv.sh
  mkdir -p "$rounds_work"
}

rounds_header() {
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores," \
    "load average $(cut -d' ' -f1-3 /proc/loadavg); tg $(git rev-parse --short HEAD 2> /dev/null || echo '?')"
}

# the median step time of one tg run, from its metrics.jsonl, as JSON
rounds_tg_json() {
  "$peer_py" - "$1" "$rounds_warmup" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = sorted(r["dt_ms"] for r in rows if r.get("dt_ms") is not None and r["step"] > int(sys.argv[2]))  # step rows
if not ms:
    sys.exit("%s has no step after step %s" % (sys.argv[1], sys.argv[2]))
print(json.dumps({"median_ms_per_step": ms[len(ms) // 2], "timed_steps": len(ms)}))
PY
}

# one run: side (tg, compile or eager), threads, round -> prints its line,
# writes $rounds_work/t$threads-r$round-$side.json
rounds_one() {
  local side=$1 t=$2 r=$3 out log
  out=$rounds_work/t$t-r$r-$side.json log=$rounds_work/t$t-r$r-$side.log
  if [ "$side" = tg ]; then
    rm -rf "$rounds_work/run"
    OMP_NUM_THREADS=$t "$tgrun" "$rounds_tg_cfg" "${rounds_tg_args[@]}" out_dir="$rounds_work/run" \
      max_steps="$rounds_steps" threads="$t" > "$log" 2>&1 || { tail -5 "$log" >&2; echo "tg failed: $log" >&2; return 1; }
    rounds_tg_json "$rounds_work/run/metrics.jsonl" > "$out"
  else
    local flag=()
    [ "$side" = compile ] && flag=(--compile)
    OMP_NUM_THREADS=$t "$peer_py" bench/torch_gpt_train.py "${rounds_torch_args[@]}" "${flag[@]}" --threads "$t" \
      --steps "$rounds_steps" --timing-warmup "$rounds_warmup" --json > "$out" 2> "$log" ||
      { tail -5 "$log" >&2; echo "torch ($side) failed: $log" >&2; return 1; }
  fi
  "$peer_py" - "$out" "$side" "$t" "$r" "$rounds_tokens" << 'PY'
import json, sys
res, side, t, r, tokens = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
ms = res["median_ms_per_step"]
extra = ""
if side == "compile":
    d = res["dynamo"]
    if not d or d["frames_ok"] < 1 or d["unique_graphs"] < 1:
        sys.exit("torch.compile compiled nothing (%s): the compiled figure would be eager's" % d)
    extra = "  (compiled: %d graphs, %d graph breaks; first %d steps %.1f s)" % (
        d["unique_graphs"], d["graph_breaks"], res["timing_warmup"], res["warmup_seconds"])
print("threads %-2s round %s  %-8s %9.1f ms/step  %9s tok/s%s" % (
    t, r, side, ms, format(round(tokens / ms * 1000), ","), extra), flush=True)
PY
}

rounds_run() {
  local t r side
  rm -f "$rounds_work"/t*-r*-*.json  # a result of an earlier run is never read as this one's
  for t in "${rounds_threads[@]}"; do
    for r in $(seq 1 "$rounds_count"); do
      for side in $rounds_sides; do rounds_one "$side" "$t" "$r" || return 1; done
    done
  done
  "$peer_py" - "$rounds_work" "$rounds_count" "$rounds_tokens" "$rounds_sides" "${rounds_threads[@]}" << 'PY'
import json, os, sys
work, rounds, tokens, sides, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5:]
def med(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
print("\nmedian over %d round%s of each run's median ms/step (tokens/s), and tg's speed-up:" % (rounds, "" if rounds == 1 else "s"))
versus = [s for s in sides if s != "tg"] if "tg" in sides else []
print("%-8s" % "threads" + "".join("%22s" % s for s in sides) + "".join("%16s" % ("tg vs " + s) for s in versus))
for t in threads:
    m = {}
    for s in sides:
        runs = [json.load(open(os.path.join(work, "t%s-r%d-%s.json" % (t, r, s))))["median_ms_per_step"]
                for r in range(1, rounds + 1)]
        m[s] = (med(runs), min(runs), max(runs))
    cells = "".join("%22s" % ("%.1f (%s)" % (m[s][0], format(round(tokens / m[s][0] * 1000), ","))) for s in sides)
    ratios = "".join("%16s" % ("%.2fx" % (m[s][0] / m["tg"][0])) for s in versus)
    print("%-8s" % t + cells + ratios)
    spread = ", ".join("%s %.1f-%.1f" % (s, m[s][1], m[s][2]) for s in sides)
    print("%-8s rounds' range (ms/step): %s" % ("", spread))
    # each round's runs are neighbours in time: a swing of the machine's
    # speed (these are shared virtual machines) moves both alike, so the
    # ratio within a round is steadier than the ratio of the medians
    if versus and rounds > 1:
        paired = []
        for s in versus:
            rs = sorted(json.load(open(os.path.join(work, "t%s-r%d-%s.json" % (t, r, s))))["median_ms_per_step"] /
                        json.load(open(os.path.join(work, "t%s-r%d-tg.json" % (t, r))))["median_ms_per_step"]
                        for r in range(1, rounds + 1))
            paired.append("tg vs %s %.2fx (rounds %s)" % (s, med(rs), " ".join("%.2f" % x for x in rs)))
        print("%-8s median of the rounds' own ratios: %s" % ("", "; ".join(paired)))
        # the machine's interference only ever adds time: each side's
        # fastest run is the one least disturbed, the nearest to what the
        # code costs on a quiet machine
        print("%-8s fastest runs' ratio: %s" % ("", "; ".join(
            "tg vs %s %.2fx (%.1f / %.1f ms)" % (s, m[s][1] / m["tg"][1], m[s][1], m["tg"][1]) for s in versus)))
PY
}
