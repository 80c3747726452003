// kernels/common/cuda/gated_linear_tc.cuh — device code the tensor-core gated linear kernels share:
// the intra-chunk score tiles of a 64-row chunk, and gla's per-key decayed scores.
//
// The warps of a 16-row block split its columns into Parts parts: warp w takes part w / 4 of
// the rows [r0, r0 + 16), r0 = 16·row_block(w) (the forward's 8 warps make 2 parts, the
// backward's 16 make 4). Of the 8-column score tiles c ≤ r0 / 8 + 1 that reach the diagonal,
// the warp takes those with c % Parts = part: tile c = Parts·m + part is its m-th, held in
// acc[m].
#pragma once

#include "common/cuda/cuda_check.h"
#include "common/cuda/gated_linear_cuda.h"
#include "common/cuda/tensor_core.cuh"

namespace lav::cuda {

/// The 16-row block of warp w. Warps w, w + 4, ... issue on one scheduler (w % 4), and a
/// block's score tiles grow with its index (2, 4, 6, 8), so odd parts take the blocks in
/// reverse and each scheduler carries the same number of tiles.
__device__ __forceinline__ int row_block(int warp) {
    return warp / 4 % 2 == 0 ? warp % 4 : 3 - warp % 4;
}

/// Score tiles a warp of Parts holds.
template <int Parts>
constexpr int kScoreTiles = 8 / Parts;

/// Calls f(m, c) for each of the warp's score tiles c = Parts·m + part with c < end.
template <int Parts, typename F>
__device__ __forceinline__ void for_score_tiles(int part, int end, F&& f) {
#pragma unroll
    for (int m = 0; m < kScoreTiles<Parts>; ++m) {
        const int c = Parts * m + part;
        if (c >= end) break;
        f(m, c);
    }
}

/// acc[m] += Σ_d x_id y_jd for rows i ∈ [r0, r0 + 16) and the warp's tiles that reach the
/// diagonal (j < r0 + 16).
template <typename T, int KT, int Parts, int PK>
__device__ void add_scores(float (&acc)[kScoreTiles<Parts>][4], const T (*x)[PK], const T (*y)[PK],
                           int r0, int part) {
    // the lanes' ldmatrix addresses of the first tile at contraction 0, found once; tiles
    // and steps are constant offsets from them
    const unsigned a0 = fragment_a_address(x, r0, 0), b0 = fragment_b_address(y, 8 * part, 0);
    // those of c = Parts·m + part < r0 / 8 + 2
    const int tiles = (r0 / 8 + 1 + Parts - part) / Parts;
#pragma unroll
    for (int kk = 0; kk < KT; kk += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, a0 + kk * sizeof(T));
#pragma unroll
        for (int m = 0; m < kScoreTiles<Parts>; ++m) {
            if (m >= tiles) break;
            uint32_t b[2];
            ldmatrix_x2(b, b0 + (8 * Parts * m * PK + kk) * sizeof(T));
            Half16<T>::mma(acc[m], a, b);
        }
    }
}

/// acc[m] += Σ_d q_id k_jd exp(G_id − G_jd) for rows i ∈ [r0, r0 + 16) and the warp's tiles
/// below the diagonal block (j < r0), and with `diagonal` its tile of the diagonal block too,
/// factored about row r0 as (q ⊙ exp(G − G_r0)) · (k ⊙ exp(G_r0 − G))ᵀ; each factor enters as
/// two 16-bit halves, and hi·hi + hi·lo + lo·hi keeps ~16 significant bits of the fp32
/// products. Below the diagonal block every exponent is ≤ 0 under a decaying gate; in it
/// exp(G_r0 − G_j) grows, so the caller asks for it only where diagonal_factors_fit and
/// per_key_cumsum found every block within kDiagonalSpan.
template <typename T, int KT, int Parts, int PK, int PG>
__device__ void add_factored_scores(float (&acc)[kScoreTiles<Parts>][4], const T (*q)[PK],
                                    const T (*k)[PK], const float (*g)[PG], int r0, int part,
                                    bool diagonal) {
    const int g8 = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
    const int end = r0 / 8 + (diagonal ? 2 : 0);
    const auto pair_at = [](const float* x) { return *reinterpret_cast<const float2*>(x); };
    for (int kk = 0; kk < KT && end > 0; kk += 16) {
        // G_r0 at the lane's columns kk + 2·t4 (+1) and kk + 2·t4 + 8 (+1)
        const float2 gn[2] = {pair_at(&g[r0][kk + 2 * t4]), pair_at(&g[r0][kk + 2 * t4 + 8])};
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int i = r0 + g8 + (u & 1) * 8, d = kk + 2 * t4 + (u & 2) * 4;
            const float2 x = to_float2<T>(word(&q[i][d])), gi = pair_at(&g[i][d]);
            const float2 f = gn[u / 2];
            split_pair<T>(a_hi[u], a_lo[u], x.x * fast_exp(gi.x - f.x), x.y * fast_exp(gi.y - f.y));
        }
        for_score_tiles<Parts>(part, end, [&](int m, int c) {
            uint32_t b_hi[2], b_lo[2];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int j = 8 * c + g8, d = kk + 2 * t4 + 8 * u;
                const float2 y = to_float2<T>(word(&k[j][d])), gj = pair_at(&g[j][d]);
                split_pair<T>(b_hi[u], b_lo[u], y.x * fast_exp(gn[u].x - gj.x),
                              y.y * fast_exp(gn[u].y - gj.y));
            }
            mma_split<T>(acc[m], a_hi, a_lo, b_hi, b_lo);
        });
    }
}

/// The bound on |G_id − G_nd| within each 16-row block (n its first row) under which the
/// diagonal blocks may be factored like the blocks below: the factors then lie within
/// exp(±32) of q and k (exp(±64) about the block's last row, as the backward's dk takes it),
/// far inside the range of bf16 and fp32, so neither overflows and neither loses precision
/// to underflow where the other would magnify it back. fp16's narrow range allows no such
/// bound. A decay of 2 per step, e^-2 a step, stays within it.
constexpr float kDiagonalSpan = 32.f;

template <typename T>
__device__ constexpr bool diagonal_factors_fit() {
    return Half16<T>::dtype == DType::bf16;
}

/// Column d of a per-key gate tile g made its running fp32 cumsum in place, in step order as
/// the CPU backend sums it, `in(i)` giving row i; returns whether some row lies farther than
/// kDiagonalSpan from its 16-row block's first row (an inf or a NaN too).
template <int Rows, int PG, typename In>
__device__ __forceinline__ bool per_key_cumsum(float (*g)[PG], int d, In&& in) {
    float sum = 0.f, first = 0.f;
    bool wide = false;
#pragma unroll
    for (int i0 = 0; i0 < Rows; i0 += 16) {
        // a block's loads issued before its adds, as the stores could alias them
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = in(i0 + i);
        first = sum + x[0];
#pragma unroll
        for (int i = 0; i < 16; ++i) {
            g[i0 + i][d] = sum += x[i];
            wide |= !(fabsf(sum - first) <= kDiagonalSpan);
        }
    }
    return wide;
}

/// Calls f(i, j, Σ_d q_id k_jd exp(G_id − G_jd)) for the 136 pairs j ≤ i of the diagonal
/// block of rows [r0, r0 + 16), summed element by element; above the diagonal there is
/// nothing to sum. The block's Parts warps share the pairs, four at a time: eight lanes take
/// a pair, each lane every eighth pair of keys, and shuffles add their sums.
template <typename T, int KT, int Parts, int PK, int PG, typename F>
__device__ void diagonal_scores(const T (*q)[PK], const T (*k)[PK], const float (*g)[PG], int r0,
                                int part, F&& f) {
    constexpr int kPairs = 16 * 17 / 2;
    const int lane = threadIdx.x % 32, eighth = lane % 8;
    for (int first = 4 * part; first < kPairs; first += 4 * Parts) {
        // pairs are numbered row by row: pair n is (i, j) with i(i + 1)/2 + j = n, j ≤ i
        const int n = first + lane / 8;
        int i = int((sqrtf(8.f * float(n) + 1.f) - 1.f) * 0.5f);
        if ((i + 1) * (i + 2) / 2 <= n) ++i;
        if (i * (i + 1) / 2 > n) --i;
        const int j = n - i * (i + 1) / 2;
        float sum = 0.f;
#pragma unroll
        for (int d = 2 * eighth; d < KT; d += 16) {
            const float2 qi = to_float2<T>(word(&q[r0 + i][d]));
            const float2 kj = to_float2<T>(word(&k[r0 + j][d]));
            const float2 gi = *reinterpret_cast<const float2*>(&g[r0 + i][d]);
            const float2 gj = *reinterpret_cast<const float2*>(&g[r0 + j][d]);
            sum += qi.x * kj.x * fast_exp(gi.x - gj.x);
            sum += qi.y * kj.y * fast_exp(gi.y - gj.y);
        }
        for (int o = 4; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (eighth == 0) f(r0 + i, r0 + j, sum);
    }
}

/// Calls f(i, j) for the pairs j > i of the diagonal block of rows [r0, r0 + 16), shared by
/// the block's Parts warps.
template <int Parts, typename F>
__device__ __forceinline__ void above_diagonal(int r0, int part, F&& f) {
    for (int e = threadIdx.x % 32 + 32 * part; e < 256; e += 32 * Parts)
        if (e % 16 > e / 16) f(r0 + e / 16, r0 + e % 16);
}

/// Streaming multiprocessors of the current device.
inline int multiprocessors() {
    int device = 0, sms = 0;
    LAV_CUDA_CHECK(cudaGetDevice(&device));
    LAV_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
}

/// Lets `kernel` take `bytes` of dynamic shared memory, with all of the unified L1 as shared
/// memory so that the blocks it is bounded to fit side by side; `what` names it in errors.
template <typename Kernel>
void take_shared_memory(Kernel kernel, int bytes, const char* what) {
    LAV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                   what);
    LAV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared),
                   what);
}

/// Whether q, k and v of p can be copied 16 bytes at a time (rows_aligned).
inline bool qkv_aligned(const GatedLinearProblem& p) {
    return rows_aligned(p.q, p.dk) && rows_aligned(p.k, p.dk) && rows_aligned(p.v, p.dv);
}

}  // namespace lav::cuda
