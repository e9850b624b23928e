/* findings_text.c: the text renderer of the passes' findings (findings.h):
 * each report as `tgc --report NAME` prints it.
 *
 * The passes decide and record; every line of their reports is written
 * here, from the findings alone (no graph: what a pass did not record, a
 * report cannot say).  The golden tests (tests/golden/, tests/cli/) hold
 * these lines byte for byte; the page (report/report.c) draws the same
 * findings as tables. */
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "findings.h"
#include "passes.h"

static bool is(const tg_finding *f, const char *verdict) { return !strcmp(f->verdict, verdict); }

static long long num(const tg_finding *f, const char *name) { return (long long)tg_finding_number(f, name); }

static const char *str_or(const tg_finding *f, const char *name, const char *absent) {
  const char *s = tg_finding_str(f, name);
  return s ? s : absent;
}

static const char *file_or(const tg_finding *f, const char *absent) { return f->loc.file ? f->loc.file : absent; }

static const char *short_file(const char *file) {
  const char *s = file ? strrchr(file, '/') : NULL;
  return s ? s + 1 : file ? file : "?";
}

static void bytes(char *buf, size_t n, const tg_finding *f, const char *name) {
  tg_memplan_format_bytes(buf, n, (int64_t)tg_finding_number(f, name));
}

/* The memory plan's totals, which fusion's report quotes too. */
static void print_totals(FILE *out, const char *prefix, const tg_finding *f) {
  char a[32], s[32], z[32];
  bytes(a, sizeof a, f, "peak_bytes");
  bytes(s, sizeof s, f, "unreused_bytes");
  bytes(z, sizeof z, f, "persistent_bytes");
  fprintf(out, "%speak memory %s (intermediates, planned) vs %s without reuse; parameters and state %s\n", prefix, a, s,
          z);
}

/* ---- fuse: --report fusion ------------------------------------------------ */

static void print_fuse(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  (void)s, (void)at;
  char r[32], w[32], u[32];
  if (is(f, "kernel")) {
    bytes(r, sizeof r, f, "bytes_read");
    bytes(w, sizeof w, f, "bytes_written");
    bytes(u, sizeof u, f, "bytes_unfused");
    fprintf(out, "fusion: k%lld %s \"%s\": %lld ops, reads %s, writes %s, unfused %s: %s\n", num(f, "kernel"),
            str_or(f, "kind", "?"), str_or(f, "name", ""), num(f, "ops"), r, w, u, str_or(f, "ops_by_line", ""));
  } else if (is(f, "stop")) {
    fprintf(out, "fusion: stop at %%%d %s (%s:%d): not in k%lld: %s\n", f->node, str_or(f, "op", "?"),
            short_file(f->loc.file), f->loc.line, num(f, "kernel"), f->reason ? f->reason : "");
  } else if (is(f, "summary")) {
    double fused = tg_finding_number(f, "bytes_fused"), unfused = tg_finding_number(f, "bytes_unfused");
    fprintf(out, "fusion: %lld kernels (%lld matmuls) for %lld ops; %lld stops\n", num(f, "kernels"), num(f, "matmuls"),
            num(f, "ops"), num(f, "stops"));
    bytes(r, sizeof r, f, "bytes_fused");
    bytes(u, sizeof u, f, "bytes_unfused");
    fprintf(out, "fusion: bytes moved %s fused, %s unfused (%.1fx less)\n", r, u, fused ? unfused / fused : 0.0);
    print_totals(out, "fusion: ", f);
  }
}

/* ---- memplan: --report memplan ------------------------------------------- */

enum { MEMPLAN_LARGEST = 10 };

/* A buffer's value as a person finds it: its node, op, the name the model
 * gave it if any (or, for an assign, its leaf's), and its source line. */
static void describe_buffer(char *buf, size_t n, const tg_finding *f) {
  int k = snprintf(buf, n, "%%%d %s", f->node, str_or(f, "op", "?"));
  const char *name = tg_finding_str(f, "name"), *into = tg_finding_str(f, "into");
  if (k >= 0 && (size_t)k < n && name) k += snprintf(buf + k, n - (size_t)k, " \"%s\"", name);
  if (k >= 0 && (size_t)k < n && into) k += snprintf(buf + k, n - (size_t)k, " into \"%s\"", into);
  if (k >= 0 && (size_t)k < n && f->loc.file) snprintf(buf + k, n - (size_t)k, " (%s:%d)", short_file(f->loc.file), f->loc.line);
}

/* The ten largest buffers after a summary at index at (what a person looks
 * for first): the buffers that follow it, the larger first, ties in order. */
static void print_largest(FILE *out, const tg_findings *s, int at) {
  const tg_finding *top[MEMPLAN_LARGEST];
  int n_top = 0;
  for (int i = at + 1; i < tg_findings_count(s); i++) {
    const tg_finding *f = tg_findings_at(s, i);
    if (strcmp(f->pass, "memplan")) continue;
    if (!is(f, "buffer")) break;
    double b = tg_finding_number(f, "bytes");
    if (n_top == MEMPLAN_LARGEST && b <= tg_finding_number(top[n_top - 1], "bytes")) continue;
    int k = n_top < MEMPLAN_LARGEST ? n_top++ : MEMPLAN_LARGEST - 1;
    for (; k > 0 && tg_finding_number(top[k - 1], "bytes") < b; k--) top[k] = top[k - 1];
    top[k] = f;
  }
  fprintf(out, "memplan: the %d largest:\n", n_top);
  char b[32], what[256];
  for (int i = 0; i < n_top; i++) {
    bytes(b, sizeof b, top[i], "bytes");
    describe_buffer(what, sizeof what, top[i]);
    fprintf(out, "memplan:   %s  %s\n", b, what);
  }
  fprintf(out, "memplan: every buffer:\n");
}

static void print_memplan(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  char b[32], what[256];
  if (is(f, "summary")) {
    bytes(b, sizeof b, f, "live_bytes");
    fprintf(out, "memplan: %lld buffers; at most %s live at once (no plan needs less)\n", num(f, "buffers"), b);
    print_totals(out, "memplan: ", f);
    print_largest(out, s, at);
  } else if (is(f, "buffer")) {
    bytes(b, sizeof b, f, "bytes");
    char last[32];
    if (tg_finding_number(f, "last") < 0) snprintf(last, sizeof last, "end");
    else snprintf(last, sizeof last, "k%lld", num(f, "last"));
    describe_buffer(what, sizeof what, f);
    fprintf(out, "memplan: %s: %s at 0x%llx, live k%lld..%s\n", what, b, (unsigned long long)num(f, "offset"),
            num(f, "first"), last);
  }
}

/* ---- schedule: --report schedule ------------------------------------------ */

/* The tensor axis's collectives (collectives.c records them after the
 * buckets): a heading before the first, the total after the last. */
static void print_tensor_collective(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  const tg_finding *prev = tg_findings_at(s, at - 1), *next = tg_findings_at(s, at + 1);
  if (!prev || strcmp(prev->pass, f->pass) || !is(prev, "collective"))
    fprintf(out, "collective: tensor parallelism over %lld ranks (passes/shard_tensor.c): each collective of the "
                 "tensor axis in run order, the bytes a rank sends on a ring\n", num(f, "ranks"));
  fprintf(out, "collective: k%lld %s %s of %lld %s values, %.0f bytes sent per rank (%s:%d)\n", num(f, "kernel"),
          str_or(f, "phase", "?"), str_or(f, "op", "?"), num(f, "numel"), str_or(f, "dtype", "?"),
          tg_finding_number(f, "sent"), file_or(f, "?"), f->loc.line);
  if (next && !strcmp(next->pass, f->pass) && is(next, "collective")) return;
  int n = 0;
  double total = 0;
  for (int i = at; i >= 0; i--) {
    const tg_finding *c = tg_findings_at(s, i);
    if (strcmp(c->pass, f->pass) || !is(c, "collective")) break;
    n++;
  }
  for (int i = at - n + 1; i <= at; i++) total += tg_finding_number(tg_findings_at(s, i), "sent");
  fprintf(out, "collective: tensor axis total per micro-step per rank: %d collectives, %.0f bytes sent over %lld "
               "ranks\n", n, total, num(f, "ranks"));
}

static void print_schedule(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  if (is(f, "bucket")) {
    long long grads = num(f, "gradients");
    fprintf(out, "schedule: bucket %lld: %lld gradient%s, %lld bytes, all-reduced after k%lld \"%s\":", num(f, "bucket"),
            grads, grads == 1 ? "" : "s", num(f, "bytes"), num(f, "after_kernel"), str_or(f, "kernel_name", ""));
    /* its gradients follow it */
    for (int i = at + 1, k = 0; i < tg_findings_count(s); i++, k++) {
      const tg_finding *x = tg_findings_at(s, i);
      if (strcmp(x->pass, f->pass) || !is(x, "gradient")) break;
      const char *param = tg_finding_str(x, "param");
      if (param) fprintf(out, "%s %s (%%%d)", k ? "," : "", param, x->node);
      else fprintf(out, "%s %%%d", k ? "," : "", x->node);
    }
    fputc('\n', out);
  } else if (is(f, "summary")) {
    long long n = num(f, "buckets");
    fprintf(out, "schedule: %lld bucket%s of up to %lld bytes over %lld kernels\n", n, n == 1 ? "" : "s",
            num(f, "bucket_bytes"), num(f, "kernels"));
  } else if (is(f, "collective")) {
    print_tensor_collective(out, s, at, f);
  }
}

/* ---- precision: --report precision ---------------------------------------- */

static void print_precision(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  if (is(f, "unchanged")) {
    fprintf(out, "precision: %s: %s\n", str_or(f, "policy", "?"), f->reason ? f->reason : "");
  } else if (is(f, "value")) {
    fprintf(out, "precision: %%%d %-10s %-28s %-16s %s:%d\n", f->node, str_or(f, "op", "?"), str_or(f, "type", "?"),
            str_or(f, "rule", "?"), file_or(f, "-"), f->loc.line);
  } else if (is(f, "rule")) {
    const tg_finding *prev = tg_findings_at(s, at - 1);
    if (!prev || strcmp(prev->pass, f->pass) || !is(prev, "rule"))
      fprintf(out, "precision: bf16: the rules, and how many values each chose:\n");
    fprintf(out, "precision:   %-16s %5lld  %s\n", str_or(f, "rule", "?"), num(f, "values"), f->reason ? f->reason : "");
  }
}

/* ---- flash_attn and gelu: --report flash_attn, --report gelu -------------- */

static void print_flash_attn(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  (void)s, (void)at;
  if (is(f, "matched")) {
    char scale[32];
    const char *from = tg_finding_str(f, "q_from");
    fprintf(out, "flash_attn: matched causal attention at %s:%d:%d: q %s, scale %s%s%s\n", file_or(f, "?"), f->loc.line,
            f->loc.col, str_or(f, "q_type", "?"), tg_fmt_double(tg_finding_number(f, "scale"), scale, sizeof scale),
            from ? ", q from " : "", from ? from : "");
  } else if (is(f, "not_matched")) {
    fprintf(out, "flash_attn: not matched at %s:%d:%d: %s\n", file_or(f, "?"), f->loc.line, f->loc.col,
            f->reason ? f->reason : "");
  } else if (is(f, "summary")) {
    long long n = num(f, "replaced");
    fprintf(out, "flash_attn: %lld attention%s replaced\n", n, n == 1 ? "" : "s");
  }
}

static void print_gelu(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  (void)s, (void)at;
  if (is(f, "matched")) {
    fprintf(out, "gelu: matched GELU (tanh form) at %s:%d:%d: %%%d = gelu(%%%lld)\n", file_or(f, "?"), f->loc.line,
            f->loc.col, f->node, num(f, "input"));
  } else if (is(f, "summary")) {
    long long n = num(f, "replaced");
    fprintf(out, "gelu: %lld GELU%s replaced\n", n, n == 1 ? "" : "s");
  }
}

/* ---- shard_tensor: --report sharding -------------------------------------- */

static void print_shard_tensor(FILE *out, const tg_findings *s, int at, const tg_finding *f) {
  (void)s, (void)at;
  if (is(f, "no_axis")) {
    fprintf(out, "sharding: no tensor axis (the model declares %s)\n", str_or(f, "declares", "?"));
  } else if (is(f, "split_already")) {
    fprintf(out, "sharding: the graph is split over the tensor axis already\n");
  } else if (is(f, "axis")) {
    fprintf(out, "sharding: tensor axis of %lld ranks, rank %lld's graph; in graph order, each split parameter, each "
                 "split value (every other value is replicated: each rank holds all of it) and each collective of "
                 "the forward with the bytes a rank sends (ring)\n", num(f, "ranks"), num(f, "rank"));
  } else if (is(f, "param")) {
    long long groups = num(f, "groups");
    fprintf(out, "  param               %-24s split %s%s%.0lld: [%lld] of %lld on axis %lld  %s:%d:%d\n",
            str_or(f, "name", ""), str_or(f, "split", "?"), groups > 1 ? "/" : "", groups > 1 ? groups : 0,
            num(f, "part"), num(f, "whole"), num(f, "axis"), file_or(f, "?"), f->loc.line, f->loc.col);
  } else if (is(f, "value")) {
    fprintf(out, "  %-19s %-24s %s split on axis %lld%s  %s:%d:%d\n", str_or(f, "op", "?"), str_or(f, "name", ""),
            str_or(f, "type", "?"), num(f, "axis"), num(f, "groups") > 1 ? " in groups" : "", file_or(f, "?"),
            f->loc.line, f->loc.col);
  } else if (is(f, "collective")) {
    fprintf(out, "  %-19s %-24s f32[%lld] %.0f bytes sent  %s:%d:%d\n", str_or(f, "op", "?"), "", num(f, "numel"),
            tg_finding_number(f, "sent"), file_or(f, "?"), f->loc.line, f->loc.col);
  } else if (is(f, "summary")) {
    fprintf(out, "sharding: %lld collectives in the forward, %.0f bytes sent per rank; the backward all-reduces "
                 "the gradient of each of %lld replicated values entering split computations\n",
            num(f, "collectives"), tg_finding_number(f, "bytes"), num(f, "replicated"));
  }
}

/* ---- by pass ---------------------------------------------------------------- */

typedef void print_fn(FILE *out, const tg_findings *s, int at, const tg_finding *f);

static const struct {
  const char *pass;
  print_fn *print;
} renderers[] = {
    {"flash_attn", print_flash_attn}, {"gelu", print_gelu},     {"precision", print_precision},
    {"shard_tensor", print_shard_tensor}, {"fuse", print_fuse}, {"memplan", print_memplan},
    {"schedule", print_schedule},
};

bool tg_findings_print(FILE *out, const tg_findings *s, const char *pass) {
  print_fn *print = NULL;
  for (size_t r = 0; r < sizeof renderers / sizeof renderers[0] && !print; r++)
    if (!strcmp(renderers[r].pass, pass)) print = renderers[r].print;
  if (!print) return false;
  for (int i = 0; i < tg_findings_count(s); i++) {
    const tg_finding *f = tg_findings_at(s, i);
    if (!strcmp(f->pass, pass)) print(out, s, i, f);
  }
  return true;
}
