/* flash_bwd_dkdv.cuh: the body of flash attention's backward kernel for
 * dk and dv (flash_cuda.c's design comment says how it works).  The
 * emitter prints the signature and, as constants, the call site's shape
 * before it: T, D, W, BM, BN, NS, AQ, AK, AV, ADO, SL2, SCALE, LOG2E, the
 * operand pointers and their strides; and replaces $P by the prefix
 * (flash_helpers.cuh).  Embedded at build time (cmake/embed.cmake,
 * without this comment). */

  TG_SHARED(__align__(16) unsigned, ks, BM * W);
  TG_SHARED(__align__(16) unsigned, vs, BM * W);
  TG_SHARED(__align__(16) unsigned, qs, NS * BN * W);  // NS stages of BN queries
  TG_SHARED(__align__(16) unsigned, dos, NS * BN * W);
  TG_SHARED(float, lss, NS * BN);
  TG_SHARED(float, dis, NS * BN);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int r0 = (int)blockIdx.x * BM;  // the first keys are seen by the most queries: first
  const int ja = r0 + warp * 16 + g, jb = ja + 8;  // this lane's two keys

  $P_load<AK>(ks, kp, K_ST, K_SD, r0, BM, T, D, W);
  $P_load<AV>(vs, vp, V_ST, V_SD, r0, BM, T, D, W);
  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; n++)
#pragma unroll
    for (int e = 0; e < 4; e++) dka[n][e] = dva[n][e] = 0.0f;

  // queries before r0 see none of these keys; BN divides BM, so r0 starts a query tile
  const int ntiles = (T - r0 + BN - 1) / BN;
  {  // the first query tile joins K and V's group of copies
    const int i1 = r0, sn = 0;
      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);
      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);
      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);
      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units
        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;
  }
  tg_cp_async_commit();  // the first group: the loop's wait counts groups
  for (int it = 0; it < ntiles; it++) {
    const int i0 = r0 + it * BN, cur = it % NS;
    TG_PTR(const unsigned) qt = qs + cur * (BN * W);
    TG_PTR(const unsigned) dot = dos + cur * (BN * W);
    TG_PTR(const float) lt = lss + cur * BN;
    TG_PTR(const float) dt = dis + cur * BN;
    if (NS == 2 && it + 1 < ntiles) {  // the next tile streams in while this one is used
      const int i1 = i0 + BN, sn = (it + 1) % NS;
      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);
      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);
      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);
      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units
        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;
    }
    tg_cp_async_commit();
    tg_cp_async_wait<NS - 1>();  // this thread's copies of tile it (and K, V) have landed
    __syncthreads();             // and every thread's
    float s[BN / 8][4], dp[BN / 8][4];  // S^T and dP^T: this warp's 16 keys x BN queries
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
      unsigned a[4], av[4];
      $P_frag_a(a, ks, W, warp * 16, kk);
      $P_frag_a(av, vs, W, warp * 16, kk);
#pragma unroll
      for (int n = 0; n < BN / 8; n++) {
        TG_PTR(const unsigned) pq = qt + (n * 8 + g) * W + kk * 8 + t;
        TG_PTR(const unsigned) pd = dot + (n * 8 + g) * W + kk * 8 + t;
        tg_mma_bf16(s[n], a, pq[0], pq[4]);
        tg_mma_bf16(dp[n], av, pd[0], pd[4]);
      }
    }
    // masks: a key after a query (only while the tile overlaps the keys), queries past T
    const bool mask = i0 < r0 + BM || i0 + BN > T;
#pragma unroll
    for (int n = 0; n < BN / 8; n++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int c = n * 8 + 2 * t + (e & 1), i = i0 + c, j = e < 2 ? ja : jb;
        float p = tg_ex2_approx(s[n][e] * SL2 - lt[c]);
        if (mask && (j > i || i >= T)) p = 0.0f;
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - dt[c]);  // dS^T
      }
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const unsigned a[4] = {tg_cvt_bf16x2(s[2 * kk][0], s[2 * kk][1]), tg_cvt_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             tg_cvt_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             tg_cvt_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const unsigned ad[4] = {tg_cvt_bf16x2(dp[2 * kk][0], dp[2 * kk][1]), tg_cvt_bf16x2(dp[2 * kk][2], dp[2 * kk][3]),
                              tg_cvt_bf16x2(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                              tg_cvt_bf16x2(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < D / 8; n++) {
        unsigned b[2];
        $P_ldsm_t(dot + (kk * 16 + (lane & 15)) * W + n * 4, b);
        tg_mma_bf16(dva[n], a, b[0], b[1]);
        $P_ldsm_t(qt + (kk * 16 + (lane & 15)) * W + n * 4, b);
        tg_mma_bf16(dka[n], ad, b[0], b[1]);
      }
    }
    __syncthreads();  // every warp is done with this stage before it is refilled
    if (NS == 1 && it + 1 < ntiles) {
      const int i1 = i0 + BN, sn = 0;
      $P_load<AQ>(qs + sn * (BN * W), qp, Q_ST, Q_SD, i1, BN, T, D, W);
      $P_load<ADO>(dos + sn * (BN * W), doutp, DO_ST, DO_SD, i1, BN, T, D, W);
      $P_rowdot(dis + sn * BN, doutp, DO_ST, DO_SD, op, O_ST, O_SD, i1, BN, T, D);
      for (int c = threadIdx.x; c < BN; c += blockDim.x)  // lse in log2 units
        lss[sn * BN + c] = i1 + c < T ? $P_ld(lsep, (i1 + c) * L_ST) * LOG2E : 0.0f;
    }
  }

#pragma unroll
  for (int n = 0; n < D / 8; n++) {
    const int c = n * 8 + 2 * t;
    if (ja < T) {
      $P_st(dkp, ja * DK_ST + c * DK_SD, dka[n][0] * SCALE);
      $P_st(dkp, ja * DK_ST + (c + 1) * DK_SD, dka[n][1] * SCALE);
      $P_st(dvp, ja * DV_ST + c * DV_SD, dva[n][0]);
      $P_st(dvp, ja * DV_ST + (c + 1) * DV_SD, dva[n][1]);
    }
    if (jb < T) {
      $P_st(dkp, jb * DK_ST + c * DK_SD, dka[n][2] * SCALE);
      $P_st(dkp, jb * DK_ST + (c + 1) * DK_SD, dka[n][3] * SCALE);
      $P_st(dvp, jb * DV_ST + c * DV_SD, dva[n][2]);
      $P_st(dvp, jb * DV_ST + (c + 1) * DV_SD, dva[n][3]);
    }
  }
}
