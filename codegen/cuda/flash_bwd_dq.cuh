/* flash_bwd_dq.cuh: the body of flash attention's backward kernel for dq
 * (flash_cuda.c's design comment says how it works).  The emitter prints
 * the signature and, as constants, the call site's shape before it: T, D,
 * W, BM, BN, NS, AQ, AK, AV, ADO, SL2, SCALE, LOG2E, the operand pointers
 * and their strides; and replaces $P by the prefix (flash_helpers.cuh).
 * Embedded at build time (cmake/embed.cmake, without this comment). */

  TG_SHARED(__align__(16) unsigned, qs, BM * W);
  TG_SHARED(__align__(16) unsigned, dos, BM * W);
  TG_SHARED(__align__(16) unsigned, ks, NS * BN * W);  // NS stages of BN keys
  TG_SHARED(__align__(16) unsigned, vs, NS * BN * W);
  TG_SHARED(float, dis, BM);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int r0 = ((int)gridDim.x - 1 - (int)blockIdx.x) * BM;  // longest rows first
  const int ra = r0 + warp * 16 + g, rb = ra + 8;

  // Q, dO and the first key tile go in one group of copies; Di's loads overlap them
  $P_load<AQ>(qs, qp, Q_ST, Q_SD, r0, BM, T, D, W);
  $P_load<ADO>(dos, doutp, DO_ST, DO_SD, r0, BM, T, D, W);
  $P_load<AK>(ks, kp, K_ST, K_SD, 0, BN, T, D, W);
  $P_load<AV>(vs, vp, V_ST, V_SD, 0, BN, T, D, W);
  tg_cp_async_commit();  // the first group: the loop's wait counts groups
  $P_rowdot(dis, doutp, DO_ST, DO_SD, op, O_ST, O_SD, r0, BM, T, D);
  // lse in log2 units, like the scores
  const float lsa = ra < T ? $P_ld(lsep, ra * L_ST) * LOG2E : 0.0f;
  const float lsb = rb < T ? $P_ld(lsep, rb * L_ST) * LOG2E : 0.0f;
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
  const int last = (r0 + BM < T ? r0 + BM : T) - 1;
  const int ntiles = last / BN + 1;

  for (int it = 0; it < ntiles; it++) {
    const int j0 = it * BN;
    TG_PTR(const unsigned) kt = ks + (it % NS) * (BN * W);
    TG_PTR(const unsigned) vt = vs + (it % NS) * (BN * W);
    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used
      $P_load<AK>(ks + ((it + 1) % NS) * (BN * W), kp, K_ST, K_SD, j0 + BN, BN, T, D, W);
      $P_load<AV>(vs + ((it + 1) % NS) * (BN * W), vp, V_ST, V_SD, j0 + BN, BN, T, D, W);
    }
    tg_cp_async_commit();
    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it (and Q, dO) have landed
    __syncthreads();             // and every thread's, and Di
    const float da = dis[warp * 16 + g], db = dis[warp * 16 + g + 8];
    float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned a[4], ad[4];
      $P_frag_a(a, qs, W, warp * 16, kk);
      $P_frag_a(ad, dos, W, warp * 16, kk);
#pragma unroll
      for (int n = 0; n < BN / 8; n++) {
        TG_PTR(const unsigned) pk = kt + (n * 8 + g) * W + kk * 8 + t;
        TG_PTR(const unsigned) pv = vt + (n * 8 + g) * W + kk * 8 + t;
        tg_mma_bf16(s[n], a, pk[0], pk[4]);
        tg_mma_bf16(dp[n], ad, pv[0], pv[4]);
      }
    }
    const bool diag = j0 + BN - 1 > r0;
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int j = j0 + n * 8 + 2 * t + (e & 1), i = e < 2 ? ra : rb;
        float p = tg_ex2_approx(s[n][e] * SL2 - (e < 2 ? lsa : lsb));
        if (diag && j > i) p = 0.0f;  // keys past T are past every row below T
        s[n][e] = p * (dp[n][e] - (e < 2 ? da : db));  // dS
      }
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        unsigned b[2];
        $P_ldsm_t(kt + (kk * 16 + (lane & 15)) * W + n * 4, b);
        tg_mma_bf16(acc[n], a, b[0], b[1]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
    if (NS == 1 && it + 1 < ntiles) {
      $P_load<AK>(ks, kp, K_ST, K_SD, j0 + BN, BN, T, D, W);
      $P_load<AV>(vs, vp, V_ST, V_SD, j0 + BN, BN, T, D, W);
    }
  }

#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * t;
    if (ra < T) {
      $P_st(dqp, ra * DQ_ST + c * DQ_SD, acc[n][0] * SCALE);
      $P_st(dqp, ra * DQ_ST + (c + 1) * DQ_SD, acc[n][1] * SCALE);
    }
    if (rb < T) {
      $P_st(dqp, rb * DQ_ST + c * DQ_SD, acc[n][2] * SCALE);
      $P_st(dqp, rb * DQ_ST + (c + 1) * DQ_SD, acc[n][3] * SCALE);
    }
  }
}
