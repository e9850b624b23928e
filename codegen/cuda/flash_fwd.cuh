/* flash_fwd.cuh: the body of flash attention's forward kernel
 * (flash_cuda.c's design comment says how it works).  The emitter prints
 * the signature and, as constants, the call site's shape before it: T, D,
 * W, BM, BN, NS, AQ, AK, AV, SL2, LN2, the operand pointers qp, kp, vp, op,
 * lsep and their strides Q_ST, Q_SD, ...; and replaces $P by the prefix
 * (flash_helpers.cuh).  Embedded at build time (cmake/embed.cmake,
 * without this comment). */

  TG_SHARED(__align__(16) unsigned, ks, NS * BN * W);  // NS stages of BN keys
  TG_SHARED(__align__(16) unsigned, vs, NS * BN * W);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  // the last rows see the most keys: their blocks go first
  const int r0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BM;
  const int ra = r0 + warp * 16 + g, rb = ra + 8;  // this lane's two rows

  // Q passes through ks (NS * BN >= BM rows) into registers, where it stays.
  $P_load<AQ>(ks, qp, Q_ST, Q_SD, r0, BM, T, D, W);
  tg_cp_async_commit();
  tg_cp_async_wait<0>();
  __syncthreads();
  unsigned qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++) $P_frag_a(qf[kk], ks, W, warp * 16, kk);
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  float ma = $P_ninf(), mb = $P_ninf(), la = 0.0f, lb = 0.0f;  // running max and sum, log2 units
  const int last = (r0 + BM < T ? r0 + BM : T) - 1;  // the block's last row: no key past it is needed
  const int ntiles = last / BN + 1;
  __syncthreads();  // every warp has its Q fragments before the first tile lands on them
  $P_load<AK>(ks, kp, K_ST, K_SD, 0, BN, T, D, W);
  $P_load<AV>(vs, vp, V_ST, V_SD, 0, BN, T, D, W);
  tg_cp_async_commit();  // tile 0's group: the loop's wait counts groups

  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * BN;
    TG_PTR(const unsigned) kt = ks + (it % NS) * (BN * W);
    TG_PTR(const unsigned) vt = vs + (it % NS) * (BN * W);
    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used
      $P_load<AK>(ks + ((it + 1) % NS) * (BN * W), kp, K_ST, K_SD, j0 + BN, BN, T, D, W);
      $P_load<AV>(vs + ((it + 1) % NS) * (BN * W), vp, V_ST, V_SD, j0 + BN, BN, T, D, W);
    }
    tg_cp_async_commit();
    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it have landed
    __syncthreads();             // and every thread's
    float s[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++)
#pragma unroll
      for (int n = 0; n < BN / 8; n++) {
        TG_PTR(const unsigned) p = kt + (n * 8 + g) * W + kk * 8 + t;
        tg_mma_bf16(s[n], qf[kk], p[0], p[4]);
      }
    // only a tile reaching past the block's first row has keys to mask
    const bool diag = j0 + BN - 1 > r0;
    float xa = ma, xb = mb;
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = j0 + n * 8 + 2 * t + (e & 1), i = e < 2 ? ra : rb;
        float x = s[n][e] * SL2;
        if (diag && (j > i || j >= T)) x = $P_ninf();
        s[n][e] = x;
        if (e < 2) xa = fmaxf(xa, x);
        else xb = fmaxf(xb, x);
      }
    // a row's 64 columns are spread over the 4 lanes of its quad
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 1));
    xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, 2));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 1));
    xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, 2));
    // exponents against 0 while a row has seen no key, so that -inf - -inf never occurs
    const float ba = xa == $P_ninf() ? 0.0f : xa, bb = xb == $P_ninf() ? 0.0f : xb;
    const float ca = tg_ex2_approx(ma - ba), cb = tg_ex2_approx(mb - bb);
    ma = xa;
    mb = xb;
    la *= ca;
    lb *= cb;
#pragma unroll
    for (int n = 0; n < BN / 8; n++) {
      s[n][0] = tg_ex2_approx(s[n][0] - ba);
      s[n][1] = tg_ex2_approx(s[n][1] - ba);
      s[n][2] = tg_ex2_approx(s[n][2] - bb);
      s[n][3] = tg_ex2_approx(s[n][3] - bb);
      la += s[n][0] + s[n][1];
      lb += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
      acc[n][0] *= ca;
      acc[n][1] *= ca;
      acc[n][2] *= cb;
      acc[n][3] *= cb;
    }
    // P's accumulator layout, two n-tiles at a time, is the a layout of P V
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        unsigned b[2];
        $P_ldsm_t(vt + (kk * 16 + (lane & 15)) * W + n * 4, b);
        tg_mma_bf16(acc[n], a, b[0], b[1]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
    if (NS == 1 && it + 1 < ntiles) {
      $P_load<AK>(ks, kp, K_ST, K_SD, j0 + BN, BN, T, D, W);
      $P_load<AV>(vs, vp, V_ST, V_SD, j0 + BN, BN, T, D, W);
    }
  }

  la += __shfl_xor_sync(0xffffffffu, la, 1);
  la += __shfl_xor_sync(0xffffffffu, la, 2);
  lb += __shfl_xor_sync(0xffffffffu, lb, 1);
  lb += __shfl_xor_sync(0xffffffffu, lb, 2);
  const float ia = 1.0f / la, ib = 1.0f / lb;
#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * t;
    if (ra < T) {
      $P_st(op, ra * O_ST + c * O_SD, acc[n][0] * ia);
      $P_st(op, ra * O_ST + (c + 1) * O_SD, acc[n][1] * ia);
    }
    if (rb < T) {
      $P_st(op, rb * O_ST + c * O_SD, acc[n][2] * ib);
      $P_st(op, rb * O_ST + (c + 1) * O_SD, acc[n][3] * ib);
    }
  }
  if (t == 0 && ra < T) $P_st(lsep, ra * L_ST, (ma + tg_lg2_approx(la)) * LN2);
  if (t == 0 && rb < T) $P_st(lsep, rb * L_ST, (mb + tg_lg2_approx(lb)) * LN2);
}
