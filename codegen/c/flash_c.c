/* flash_c.c: flash attention rendered as C for the CPU backend (flash.h).
 *
 * The emitted function keeps everything it multiplies in small f32 tiles
 * on the stack, so that loads from strided (and possibly bf16) operands
 * happen once per tile and the hot loops run over contiguous arrays with
 * constant trip counts.  Those loops are written without reductions over D
 * (gcc vectorises a float sum only under -ffast-math): a score row is
 * accumulated as s[c] += q[d] * kt[d][c] over a transposed key tile, and an
 * output row as acc[d] += p * v[c][d]; both run over a contiguous axis.
 *
 * Forward: one OpenMP iteration per (batch, head, tile of BQ query rows);
 * the key tiles up to the diagonal are visited in order with the online
 * softmax.  Backward, in two parallel loops so that no two threads add into
 * one element: dk and dv by key tile (each visiting every query row at or
 * after it), then dq by query tile (each visiting the key tiles up to it).
 * P and dS are recomputed in both loops, the price of having no atomics and
 * no scratch buffer. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "flash_c.h"

enum { C_MAX_D = 256 };

/* Rows per tile.  The largest task (the backward's dq) holds six tiles of
 * TILE x D floats: at most 96 KiB of stack, well inside a thread's. */
static int c_tile(int64_t D) { return D <= 64 ? 32 : 16; }

static bool fail(char *why, size_t n, const char *msg) {
  if (why && n) snprintf(why, n, "%s", msg);
  return false;
}

bool tg_flash_supported_c(const tg_flash_shape *s, char *why, size_t n) {
  if (s->nb < 1 || s->nh < 1 || s->T < 1 || s->D < 1)
    return fail(why, n, "flash attention: empty shape (nb, nh, T and D must be positive)");
  /* the emitted code counts rows and (batch, head) pairs in int */
  if (s->T > INT32_MAX || s->nb > INT32_MAX / s->nh)
    return fail(why, n, "flash attention: T and nb*nh must each be below 2^31");
  if (s->D > C_MAX_D) {
    if (why && n)
      snprintf(why, n,
               "flash attention: head size D=%" PRId64 " is over the C backend's %d "
               "(its tiles live on the stack)",
               s->D, C_MAX_D);
    return false;
  }
  if (!isfinite(s->scale)) return fail(why, n, "flash attention: the scale is not finite");
  if (why && n) why[0] = 0;
  return true;
}

/* ---- pieces of emitted text ------------------------------------------------ */

/* A float literal that reads back as the same float. */
static void flt(char *buf, size_t n, double x) { snprintf(buf, n, "%.9ef", (double)(float)x); }

/* "t * ST + d * SD" for operand o, leaving out what is zero or one. */
static void idx(char *buf, size_t n, const tg_flash_operand *o, const char *t, const char *d) {
  size_t k = 0;
  buf[0] = 0;
  const char *var[2] = {t, d};
  int64_t st[2] = {o->stride[2], o->stride[3]};
  for (int a = 0; a < 2; a++) {
    if (!var[a] || st[a] == 0) continue;
    const char *plus = k ? " + " : "";
    if (st[a] == 1) k += (size_t)snprintf(buf + k, n - k, "%s%s", plus, var[a]);
    else k += (size_t)snprintf(buf + k, n - k, "%s(%s) * %" PRId64 "LL", plus, var[a], st[a]);
    if (k >= n) k = n - 1;
  }
  if (!k) snprintf(buf, n, "0");
}

/* The load of element (t, d) of operand name through its per-head pointer
 * name##p, as an f32 expression. */
static char *ld(char *buf, size_t n, const char *fn, const char *name, const tg_flash_operand *o,
                const char *t, const char *d) {
  char ix[256];
  idx(ix, sizeof ix, o, t, d);
  if (o->bf16) snprintf(buf, n, "%s_bf16_ld(%sp[%s])", fn, name, ix);
  else snprintf(buf, n, "%sp[%s]", name, ix);
  return buf;
}

/* The statement storing f32 expression val into element (t, d). */
static void st(FILE *f, const char *indent, const char *fn, const char *name,
               const tg_flash_operand *o, const char *t, const char *d, const char *val) {
  char ix[256];
  idx(ix, sizeof ix, o, t, d);
  if (o->bf16) fprintf(f, "%s%sp[%s] = %s_bf16_st(%s);\n", indent, name, ix, fn, val);
  else fprintf(f, "%s%sp[%s] = %s;\n", indent, name, ix, val);
}

static const char *ptype(const tg_flash_operand *o) { return o->bf16 ? "unsigned short" : "float"; }

/* Bit conversions for bf16 operands, only when some operand is bf16 (the
 * union is the C11 way to reinterpret bits without memcpy's header). */
static void emit_helpers(FILE *f, const char *fn, const tg_flash_operand *const *ops, int n) {
  bool any = false;
  for (int i = 0; i < n; i++) any |= ops[i]->bf16;
  if (!any) return;
  fprintf(f,
          "static inline float %s_bf16_ld(unsigned short h) {\n"
          "  union { unsigned int u; float f; } x;\n"
          "  x.u = (unsigned int)h << 16;\n"
          "  return x.f;\n"
          "}\n"
          "/* round to nearest even; NaN stays NaN (quiet) */\n"
          "static inline unsigned short %s_bf16_st(float f) {\n"
          "  union { float f; unsigned int u; } x;\n"
          "  x.f = f;\n"
          "  if ((x.u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x.u >> 16) | 0x40u);\n"
          "  return (unsigned short)((x.u + 0x7fffu + ((x.u >> 16) & 1u)) >> 16);\n"
          "}\n",
          fn, fn);
}

/* "name + (offset + b * SB + h * SH)": the operand's pointer for one head. */
static void head_ptr(FILE *f, const char *qual, const char *name, const tg_flash_operand *o) {
  fprintf(f, "    %s%s *%sp = %s + (%" PRId64 "LL + b * %" PRId64 "LL + h * %" PRId64 "LL);\n", qual,
          ptype(o), name, name, o->offset, o->stride[0], o->stride[1]);
}

static bool refuse(FILE *f, const char *fn, const tg_flash_shape *s) {
  char why[256];
  if (tg_flash_supported_c(s, why, sizeof why)) return false;
  fprintf(f, "#error \"%s: %s\"\n", fn, why);
  return true;
}

static void emit_consts(FILE *f, const tg_flash_shape *s, bool bwd) {
  int64_t B = c_tile(s->D), nt = (s->T + B - 1) / B;
  char sc[64];
  flt(sc, sizeof sc, s->scale);
  fprintf(f,
          "  enum { NB = %" PRId64 ", NH = %" PRId64 ", T = %" PRId64 ", D = %" PRId64
          ", BQ = %" PRId64 ", BK = %" PRId64 ", NQT = %" PRId64 "%s",
          s->nb, s->nh, s->T, s->D, B, B, nt, bwd ? ", NKT = NQT };\n" : " };\n");
  fprintf(f, "  const float scale = %s;\n", sc);
}

/* A Cephes-style e^x (about 1 ulp) that gcc vectorises, unlike libm's expf
 * (whose calls were half the backward's time); -inf gives 0, nan stays. */
static void emit_exp(FILE *f, const char *fn) {
  fprintf(f,
          "static inline float %s_exp(float x) {\n"
          "  float c = x < -87.5f ? -87.5f : x > 88.5f ? 88.5f : x;\n"
          "  float n = __builtin_floorf(c * 1.44269504088896341f + 0.5f);\n"
          "  float r = c - n * 0.693359375f + n * 2.12194440e-4f;\n"
          "  float y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r\n"
          "              + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;\n"
          "  y = y * r * r + r + 1.0f;\n"
          "  union { unsigned u; float f; } s = {(unsigned)((int)n + 126) << 23};\n"
          "  y = y * s.f * 2.0f;\n"
          "  return x < -87.5f ? 0.0f : x > 88.5f ? __builtin_inff() : y;\n"
          "}\n",
          fn);
}

/* ---- loops both directions share -------------------------------------------- */

/* An OpenMP loop over (batch, head, query tile) tasks, the last query
 * tiles first (they see the most keys); why, a comment line or "", says
 * so. */
static void query_tile_tasks(FILE *f, const char *why) {
  fprintf(f,
          "#pragma omp parallel for schedule(dynamic, 1)\n"
          "  for (long long task = 0; task < (long long)NB * NH * NQT; task++) {\n"
          "%s"
          "    const long long bh = task %% (NB * NH), b = bh / NH, h = bh %% NH;\n"
          "    const long long i0 = (NQT - 1 - task / (NB * NH)) * BQ;\n"
          "    const int nq = T - i0 < BQ ? (int)(T - i0) : BQ;\n",
          why);
}

/* The per-head pointers of what a loop reads: q, k, v and, backward, o,
 * lse and dout. */
static void input_head_ptrs(FILE *f, const tg_flash_shape *s, bool bwd) {
  head_ptr(f, "const ", "q", &s->q);
  head_ptr(f, "const ", "k", &s->k);
  head_ptr(f, "const ", "v", &s->v);
  if (!bwd) return;
  head_ptr(f, "const ", "o", &s->o);
  head_ptr(f, "const ", "lse", &s->lse);
  head_ptr(f, "const ", "dout", &s->dout);
}

/* Inside a query tile task: the key tiles up to its last row, nk keys in each. */
static void key_tiles_to_diagonal(FILE *f) {
  fprintf(f, "    for (long long j0 = 0; j0 < i0 + nq; j0 += BK) {\n"
             "      const int nk = T - j0 < BK ? (int)(T - j0) : BK;\n");
}

/* Inside a key tile: each row r of the query tile that sees some of its
 * keys, the first nc of them. */
static void causal_rows(FILE *f) {
  fprintf(f, "      for (int r = 0; r < nq; r++) {\n"
             "        const long long i = i0 + r;\n"
             "        if (i < j0) continue;\n"
             "        const int nc = i - j0 + 1 < nk ? (int)(i - j0 + 1) : nk; /* keys j <= i */\n");
}

/* The backward's scores s = q_i k^T and dp = do_i v^T of one query row
 * (q_i[d] is q, do_i[d] is dout) against a key tile, unscaled. */
static void bwd_scores(FILE *f, const char *in, const char *q, const char *dout) {
  fprintf(f,
          "%sfor (int c = 0; c < BK; c++) {\n"
          "%s  s[c] = 0.0f;\n"
          "%s  dp[c] = 0.0f;\n"
          "%s}\n"
          "%sfor (int d = 0; d < D; d++) {\n"
          "%s  const float x = %s, y = %s;\n"
          "%s  for (int c = 0; c < BK; c++) {\n"
          "%s    s[c] += x * kt[d][c];\n"
          "%s    dp[c] += y * vt[d][c];\n"
          "%s  }\n"
          "%s}\n",
          in, in, in, in, in, in, q, dout, in, in, in, in, in);
}

/* ---- forward --------------------------------------------------------------- */

void tg_flash_emit_c_fwd(FILE *f, const char *fn, const tg_flash_shape *s) {
  fprintf(f,
          "/* flash attention forward (tg codegen/c/flash_c.c): nb=%" PRId64 " nh=%" PRId64
          " T=%" PRId64 " D=%" PRId64 ".\n"
          " * o = causal softmax(scale q k^T) v and lse = its rows' log-sum-exp, by tiles of\n"
          " * query rows, the keys a tile at a time with a running max m and sum l. */\n",
          s->nb, s->nh, s->T, s->D);
  if (refuse(f, fn, s)) return;
  const tg_flash_operand *ops[] = {&s->q, &s->k, &s->v, &s->o, &s->lse};
  emit_helpers(f, fn, ops, 5);
  char a[512], b[512], c[512];
  fprintf(f, "float logf(float);\n");
  emit_exp(f, fn);
  fprintf(f, "void %s(const %s *q, const %s *k, const %s *v, %s *o, %s *lse) {\n", fn, ptype(&s->q),
          ptype(&s->k), ptype(&s->v), ptype(&s->o), ptype(&s->lse));
  emit_consts(f, s, false);
  query_tile_tasks(f, "    /* the last query tiles see the most keys: hand them out first */\n");
  input_head_ptrs(f, s, false);
  head_ptr(f, "", "o", &s->o);
  head_ptr(f, "", "lse", &s->lse);
  fprintf(f,
          "    float qt[BQ][D], acc[BQ][D], kt[D][BK], vt[BK][D], m[BQ], l[BQ], s[BK];\n"
          "    for (int r = 0; r < nq; r++) {\n"
          "      for (int d = 0; d < D; d++) {\n"
          "        qt[r][d] = %s;\n"
          "        acc[r][d] = 0.0f;\n"
          "      }\n"
          "      m[r] = -3.402823466e+38f; /* -FLT_MAX: exp(m - max) is 0 on the first tile */\n"
          "      l[r] = 0.0f;\n"
          "    }\n",
          ld(a, sizeof a, fn, "q", &s->q, "i0 + r", "d"));
  key_tiles_to_diagonal(f);
  fprintf(f,
          "      for (int c = 0; c < BK; c++)\n"
          "        for (int d = 0; d < D; d++) kt[d][c] = c < nk ? %s : 0.0f;\n"
          "      for (int c = 0; c < nk; c++)\n"
          "        for (int d = 0; d < D; d++) vt[c][d] = %s;\n",
          ld(b, sizeof b, fn, "k", &s->k, "j0 + c", "d"), ld(c, sizeof c, fn, "v", &s->v, "j0 + c", "d"));
  causal_rows(f);
  fprintf(f,
          "        for (int c = 0; c < BK; c++) s[c] = 0.0f;\n"
          "        for (int d = 0; d < D; d++) {\n"
          "          const float x = qt[r][d];\n"
          "          for (int c = 0; c < BK; c++) s[c] += x * kt[d][c];\n"
          "        }\n"
          "        float mx = m[r];\n"
          "        for (int c = 0; c < nc; c++) {\n"
          "          s[c] *= scale;\n"
          "          mx = s[c] > mx ? s[c] : mx;\n"
          "        }\n"
          "        const float alpha = %s_exp(m[r] - mx);\n"
          "        float sum = 0.0f;\n"
          "        for (int c = 0; c < nc; c++) {\n"
          "          s[c] = %s_exp(s[c] - mx);\n"
          "          sum += s[c];\n"
          "        }\n"
          "        m[r] = mx;\n"
          "        l[r] = l[r] * alpha + sum;\n"
          "        for (int d = 0; d < D; d++) acc[r][d] *= alpha;\n"
          "        for (int c = 0; c < nc; c++) {\n"
          "          const float p = s[c];\n"
          "          for (int d = 0; d < D; d++) acc[r][d] += p * vt[c][d];\n"
          "        }\n"
          "      }\n"
          "    }\n"
          "    for (int r = 0; r < nq; r++) {\n"
          "      const long long i = i0 + r;\n"
          "      const float inv = 1.0f / l[r];\n"
          "      for (int d = 0; d < D; d++) {\n",
          fn, fn);
  st(f, "        ", fn, "o", &s->o, "i", "d", "acc[r][d] * inv");
  fprintf(f, "      }\n");
  st(f, "      ", fn, "lse", &s->lse, "i", NULL, "m[r] + logf(l[r])");
  fprintf(f, "    }\n  }\n}\n");
}

/* ---- backward -------------------------------------------------------------- */

/* The backward's first loop: dk and dv by key tile, each task visiting
 * every query row at or after its first key. */
static void emit_bwd_dk_dv(FILE *f, const char *fn, const tg_flash_shape *s) {
  char a[512], b[512], c[512], d[512];
  fprintf(f,
          "#pragma omp parallel for schedule(dynamic, 1)\n"
          "  for (long long task = 0; task < (long long)NB * NH * NKT; task++) {\n"
          "    /* the first key tiles are seen by the most queries: hand them out first */\n"
          "    const long long bh = task %% (NB * NH), b = bh / NH, h = bh %% NH;\n"
          "    const long long j0 = task / (NB * NH) * BK;\n"
          "    const int nk = T - j0 < BK ? (int)(T - j0) : BK;\n");
  input_head_ptrs(f, s, true);
  head_ptr(f, "", "dk", &s->dk);
  head_ptr(f, "", "dv", &s->dv);
  fprintf(f,
          "    float kt[D][BK], vt[D][BK], dka[BK][D], dva[BK][D], qr[D], dr[D], s[BK], dp[BK];\n"
          "    for (int c = 0; c < BK; c++)\n"
          "      for (int d = 0; d < D; d++) {\n"
          "        kt[d][c] = c < nk ? %s : 0.0f;\n"
          "        vt[d][c] = c < nk ? %s : 0.0f;\n"
          "        dka[c][d] = 0.0f;\n"
          "        dva[c][d] = 0.0f;\n"
          "      }\n",
          ld(a, sizeof a, fn, "k", &s->k, "j0 + c", "d"), ld(b, sizeof b, fn, "v", &s->v, "j0 + c", "d"));
  fprintf(f,
          "    for (long long i = j0; i < T; i++) {\n"
          "      float di = 0.0f;\n"
          "      for (int d = 0; d < D; d++) {\n"
          "        qr[d] = %s;\n"
          "        dr[d] = %s;\n"
          "        di += dr[d] * %s;\n"
          "      }\n"
          "      const float li = %s;\n",
          ld(a, sizeof a, fn, "q", &s->q, "i", "d"), ld(b, sizeof b, fn, "dout", &s->dout, "i", "d"),
          ld(c, sizeof c, fn, "o", &s->o, "i", "d"), ld(d, sizeof d, fn, "lse", &s->lse, "i", NULL));
  bwd_scores(f, "      ", "qr[d]", "dr[d]");
  fprintf(f,
          "      const int nc = i - j0 + 1 < nk ? (int)(i - j0 + 1) : nk; /* keys j <= i */\n"
          "      for (int c = 0; c < nc; c++) s[c] = %s_exp(scale * s[c] - li);\n"
          "      for (int c = 0; c < nc; c++) {\n"
          "        const float p = s[c], ds = p * (dp[c] - di);\n"
          "        for (int d = 0; d < D; d++) {\n"
          "          dva[c][d] += p * dr[d];\n"
          "          dka[c][d] += ds * qr[d];\n"
          "        }\n"
          "      }\n"
          "    }\n"
          "    for (int c = 0; c < nk; c++)\n"
          "      for (int d = 0; d < D; d++) {\n",
          fn);
  st(f, "        ", fn, "dk", &s->dk, "j0 + c", "d", "scale * dka[c][d]");
  st(f, "        ", fn, "dv", &s->dv, "j0 + c", "d", "dva[c][d]");
  fprintf(f, "      }\n  }\n");
}

/* The backward's second loop: dq by query tile, each task visiting the
 * key tiles up to its last row. */
static void emit_bwd_dq(FILE *f, const char *fn, const tg_flash_shape *s) {
  char a[512], b[512], c[512], d[512];
  query_tile_tasks(f, "");
  input_head_ptrs(f, s, true);
  head_ptr(f, "", "dq", &s->dq);
  fprintf(f,
          "    float qt[BQ][D], dt[BQ][D], dqa[BQ][D], di[BQ], li[BQ], kt[D][BK], vt[D][BK], kr[BK][D];\n"
          "    float s[BK], dp[BK];\n"
          "    for (int r = 0; r < nq; r++) {\n"
          "      di[r] = 0.0f;\n"
          "      for (int d = 0; d < D; d++) {\n"
          "        qt[r][d] = %s;\n"
          "        dt[r][d] = %s;\n"
          "        di[r] += dt[r][d] * %s;\n"
          "        dqa[r][d] = 0.0f;\n"
          "      }\n"
          "      li[r] = %s;\n"
          "    }\n",
          ld(a, sizeof a, fn, "q", &s->q, "i0 + r", "d"), ld(b, sizeof b, fn, "dout", &s->dout, "i0 + r", "d"),
          ld(c, sizeof c, fn, "o", &s->o, "i0 + r", "d"), ld(d, sizeof d, fn, "lse", &s->lse, "i0 + r", NULL));
  key_tiles_to_diagonal(f);
  fprintf(f,
          "      for (int c = 0; c < BK; c++)\n"
          "        for (int d = 0; d < D; d++) {\n"
          "          const float x = c < nk ? %s : 0.0f;\n"
          "          kt[d][c] = x;\n"
          "          kr[c][d] = x;\n"
          "          vt[d][c] = c < nk ? %s : 0.0f;\n"
          "        }\n",
          ld(a, sizeof a, fn, "k", &s->k, "j0 + c", "d"), ld(b, sizeof b, fn, "v", &s->v, "j0 + c", "d"));
  causal_rows(f);
  bwd_scores(f, "        ", "qt[r][d]", "dt[r][d]");
  fprintf(f,
          "        for (int c = 0; c < nc; c++) s[c] = %s_exp(scale * s[c] - li[r]);\n"
          "        for (int c = 0; c < nc; c++) {\n"
          "          const float p = s[c], ds = p * (dp[c] - di[r]);\n"
          "          for (int d = 0; d < D; d++) dqa[r][d] += ds * kr[c][d];\n"
          "        }\n"
          "      }\n"
          "    }\n"
          "    for (int r = 0; r < nq; r++)\n"
          "      for (int d = 0; d < D; d++) {\n",
          fn);
  st(f, "        ", fn, "dq", &s->dq, "i0 + r", "d", "scale * dqa[r][d]");
  fprintf(f, "      }\n  }\n}\n");
}

void tg_flash_emit_c_bwd(FILE *f, const char *fn, const tg_flash_shape *s) {
  fprintf(f,
          "/* flash attention backward (tg codegen/c/flash_c.c): nb=%" PRId64 " nh=%" PRId64
          " T=%" PRId64 " D=%" PRId64 ".\n"
          " * With P = exp(scale q k^T - lse) (causal) recomputed and Di = do_i . o_i:\n"
          " * dS = P .* (do v^T - Di), dq = scale dS k, dk = scale dS^T q, dv = P^T do.\n"
          " * dk, dv by key tile, then dq by query tile: each element summed by one thread. */\n",
          s->nb, s->nh, s->T, s->D);
  if (refuse(f, fn, s)) return;
  const tg_flash_operand *ops[] = {&s->q, &s->k, &s->v, &s->o, &s->lse, &s->dout, &s->dq, &s->dk, &s->dv};
  emit_helpers(f, fn, ops, 9);
  emit_exp(f, fn);
  fprintf(f,
          "void %s(const %s *q, const %s *k, const %s *v, const %s *o, const %s *lse, const %s *dout,\n"
          "        %s *dq, %s *dk, %s *dv) {\n",
          fn, ptype(&s->q), ptype(&s->k), ptype(&s->v), ptype(&s->o), ptype(&s->lse), ptype(&s->dout),
          ptype(&s->dq), ptype(&s->dk), ptype(&s->dv));
  emit_consts(f, s, true);
  emit_bwd_dk_dv(f, fn, s);
  emit_bwd_dq(f, fn, s);
}
