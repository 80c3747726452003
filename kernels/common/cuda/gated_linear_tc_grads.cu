// kernels/common/cuda/gated_linear_tc_grads.cu — the chunk backward's per-chunk gradients on tensor
// cores, for simple_gla and gla with fp16/bf16 inputs.
//
// One block per (chunk, head), as chunk_grads in gated_linear_chunk.cu, with the same formulas
// and the same contract; its 16 warps take four parts of each 16-row block's columns, and the
// scores come first so that each value tile's dv is done while the tile is loaded. The
// contract: scores and their gradients stay fp32, and the stored states h and dh are read as
// stored. fp32 operands (the scores, decayed keys and queries, and the states
// unless stored in the input dtype) enter the mma as two 16-bit halves, hi + lo, so each
// product keeps ~16 significant bits; 16-bit inputs enter exactly.
//   dq = scale·exp(G) ⊙ (d_o hᵀ) + Σ_j dA_ij k_j ⊙ exp(G_i − G_j)      dA = scale · masked d_o vᵀ
//   dk = exp(Λ − G) ⊙ (v dhᵀ) + Σ_i dA_ij q_i ⊙ exp(G_i − G_j)         A  = scale · masked q kᵀ
//   dv = (k ⊙ exp(Λ − G)) dh + Aᵀ d_o
//   dg = reverse cumsum of q ⊙ dq − k ⊙ dk, plus exp(Λ) Σ h ⊙ dh + Σ k ⊙ dk_inter at the end
// A per-row gate (simple_gla) factors out of every sum: its decays scale the score tiles and
// the rows. A per-key gate (gla) does not; as in the forward, blocks off the diagonal are
// factored about a row of the diagonal block, every exponent ≤ 0, and the diagonal 16 × 16
// blocks too where the forward would factor them (kDiagonalSpan), else summed element by
// element.
#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/gated_linear_tc.cuh"
#include "common/cuda/gated_linear_tc.h"
#include "common/cuda/ordered_sums.cuh"

namespace lav::cuda {
namespace {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps
// warp w takes rows [16·row_block(w), + 16) of a chunk and part w / 4 of the key and value
// columns (gated_linear_tc.cuh); four warps per scheduler hide each other's latencies
constexpr int kParts = 4;
constexpr int kWarps = 4 * kParts;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileV = 64;  // value columns per pass
// a state tile is read four columns at a time: kQuadRows keys a pass of the block
constexpr int kQuadsPerRow = kTileV / 4, kQuadRows = kThreads / kQuadsPerRow;

template <typename T, int KT, bool PerKey>
struct GradTiles {
    static constexpr int PK = KT + 8, PV = kTileV + 8, PS = kRows + 4, PG = KT + 4;
    alignas(16) T q[kRows][PK];
    alignas(16) T k[kRows][PK];
    alignas(16) T v[kRows][PV];
    alignas(16) T d_o[kRows][PV];
    // stored states entering (h) and the gradient of the state leaving (dh) the chunk, one
    // value tile, [key][column], split; h's space takes a per-key gate's dG once h is read
    union alignas(16) {
        struct {
            T h_hi[KT][PV], h_lo[KT][PV];
        };
        float dG[PerKey ? kRows : 1][PG];
    };
    alignas(16) T dh_hi[KT][PV], dh_lo[KT][PV];
    float A[kRows][PS], dA[kRows][PS];             // masked, decayed, scaled; fp32
    alignas(16) float g[PerKey ? kRows : 1][PG];   // per-key gate cumsum G
    float G[kRows];                                // per-row gate cumsum G
    float dGq[kParts][kRows], dGk[kParts][kRows];  // per column part: Σ_d q ⊙ dq, Σ_d k ⊙ dk
    float hdh[kWarps], kdk[kWarps];                // per warp: Σ h ⊙ dh, Σ k ⊙ dk_inter
    float hdh_key[KT];                             // per key, for a per-key gate
    float kdk_key[kRows / 16][KT];                 // the same, per block of 16 rows
};

/// Elements (key, col + [0, 4)) of the [K, V] state at `base`, as stored; 0 outside it. One
/// load when `vec` (p.dv a multiple of 4, the states 16-byte aligned).
__device__ __forceinline__ float4 state_quad(const void* src, DType dtype, int64_t base, int key,
                                             int col, const GatedLinearProblem& p, bool vec) {
    if (key >= p.dk || col >= p.dv) return make_float4(0.f, 0.f, 0.f, 0.f);
    const int64_t i = base + int64_t(key) * p.dv + col;
    if (vec) return load_quad(src, dtype, i);
    float x[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) x[u] = col + u < p.dv ? load(src, dtype, i + u) : 0.f;
    return make_float4(x[0], x[1], x[2], x[3]);
}

/// x's four elements into row r, columns [c, c + 4) of a tile as two 16-bit halves; the low
/// half only when `split` (else hi is x exactly and lo goes unread).
template <typename T, int P>
__device__ __forceinline__ void put_quad(T (*hi)[P], T (*lo)[P], int r, int c, float4 x,
                                         bool split) {
    uint2 h, l;
    split_pair<T>(h.x, l.x, x.x, x.y);
    split_pair<T>(h.y, l.y, x.z, x.w);
    *reinterpret_cast<uint2*>(&hi[r][c]) = h;
    if (split) *reinterpret_cast<uint2*>(&lo[r][c]) = l;
}

/// The decay of a factored block: x ⊙ exp(sign·(G_ref − G)) per key (sign 1: keys decayed
/// to row ref, sign −1: queries), or none.
struct Decay {
    const float* g = nullptr;  ///< per-key cumsum tile, pitch `pitch`; nullptr: no decay
    int pitch = 0, ref = 0;
    float sign = 1.f;
};

/// acc[c] += Σ_{j ∈ [from, to)} s_ij x̃_j,(col0 + 8c + ·) for the warp's rows i ∈ [r0, r0 + 16)
/// (Transposed: s_ji): fp32 scores s as two halves times the tile x stored
/// [contraction][column], decayed as `decay` says (then x̃ is fp32 and enters as two halves
/// too).
template <typename T, bool Transposed, int NC, int PS, int PX>
__device__ void add_scores_times(float (&acc)[NC][4], const float (*s)[PS], const T (*x)[PX],
                                 int r0, int from, int to, int col0, const Decay& decay = {}) {
    using H = Half16<T>;
    const int g8 = threadIdx.x % 32 / 4, t4 = threadIdx.x % 4;
    for (int kk = from; kk < to; kk += 16) {
        uint32_t hi[4], lo[4];
        fragment_a_split<T, Transposed>(hi, lo, s, r0, kk);
#pragma unroll
        for (int c = 0; c < NC; ++c) {
            if (decay.g == nullptr) {
                uint32_t b[2];
                fragment_b_rows(b, x, kk, col0 + 8 * c);
                H::mma(acc[c], hi, b);
                H::mma(acc[c], lo, b);
                continue;
            }
            uint32_t b_hi[2], b_lo[2];
            const int key = col0 + 8 * c + g8;
            const float g_ref = decay.g[decay.ref * decay.pitch + key];
#pragma unroll
            for (int u = 0; u < 2; ++u) {
                const int j = kk + 2 * t4 + 8 * u;
                const float y0 = H::to(x[j][key]) *
                                 fast_exp(decay.sign * (g_ref - decay.g[j * decay.pitch + key]));
                const float y1 =
                    H::to(x[j + 1][key]) *
                    fast_exp(decay.sign * (g_ref - decay.g[(j + 1) * decay.pitch + key]));
                split_pair<T>(b_hi[u], b_lo[u], y0, y1);
            }
            mma_split<T>(acc[c], hi, lo, b_hi, b_lo);
        }
    }
}

template <typename T, int KT, bool PerKey>
__global__ void __launch_bounds__(kThreads, 1)
    chunk_grads_tc(GatedLinearProblem p, GatedLinearGrads d, const void* hs, const void* dhs,
                   bool vec_qk, bool vec_vo, bool vec_g, bool vec_state) {
    using H = Half16<T>;
    using Tile = GradTiles<T, KT, PerKey>;
    constexpr int NK = KT / (8 * kParts);      // 8-column tiles per warp: its part of the keys
    constexpr int NV = kTileV / (8 * kParts);  // and of a value tile
    constexpr int kQuads = KT / kQuadRows;     // a thread's quads of a state tile
    extern __shared__ float4 smem[];
    Tile& t = *reinterpret_cast<Tile*>(smem);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g8 = lane / 4, t4 = lane % 4;
    const int part = warp / 4, r0 = 16 * row_block(warp);
    const int kc0 = part * KT / kParts, vc0 = part * kTileV / kParts;
    const int h = blockIdx.y;
    const Chunk ch = chunk_at(p.seqs, p.chunk, blockIdx.x);
    if (ch.len == 0) return;
    const int len = ch.len;
    const int64_t base = (int64_t(blockIdx.x) * p.heads + h) * p.dk * p.dv;
    const bool split = p.state != H::dtype;
    // accumulator element e of a tile: row r0 + g8 (+8 for e ≥ 2), column 2·t4 (+1 for odd e)
    const auto row_of = [&](int e) { return r0 + g8 + (e & 2) * 4; };
    const auto col_of = [&](int e) { return 2 * t4 + (e & 1); };
    // the thread's quads of a state tile: keys quad_key(n), columns [quad_col, + 4)
    const auto quad_key = [&](int n) { return threadIdx.x / kQuadsPerRow + n * kQuadRows; };
    const int quad_col = 4 * (threadIdx.x % kQuadsPerRow);

    load_rows<T, T, kRows, KT, kThreads>(t.q, p.q, ch.s, ch.c0, len, h, 0, p.dk, vec_qk);
    load_rows<T, T, kRows, KT, kThreads>(t.k, p.k, ch.s, ch.c0, len, h, 0, p.dk, vec_qk);
    if constexpr (PerKey) {
        load_rows<float, float, kRows, KT, kThreads>(t.g, p.g, ch.s, ch.c0, len, h, 0, p.dk, vec_g);
    } else if (threadIdx.x < kRows) {
        const int i = threadIdx.x;
        float x = 0.f;
        if (i < len && p.gate == Gate::per_head)
            x = load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h));
        if (p.gate == Gate::constant) x = p.g_gamma[h] * float((i < len ? i : len - 1) + 1);
        t.G[i] = x;
    }
    copies_wait();
    __syncthreads();
    // gate cumsums in fp32 in step order, continued past the chunk's end as if g were 0
    bool wide = false;
    if (PerKey && threadIdx.x < KT)
        wide = per_key_cumsum<kRows>(t.g, threadIdx.x, [&](int i) { return t.g[i][threadIdx.x]; });
    if (!PerKey && p.gate == Gate::per_head && threadIdx.x == 0) {
        float acc = 0.f;
#pragma unroll
        for (int i = 0; i < kRows; ++i) t.G[i] = acc += t.G[i];
    }
    // a gate that stays near each block's first row lets the diagonal blocks be factored
    const bool any_wide = __syncthreads_or(wide);
    const bool factored = diagonal_factors_fit<T>() && !any_wide;

    // the scores into shared memory, masked and scaled, before the value tiles that dv takes
    // them with: A = q kᵀ decayed by exp(G_i − G_j) for a per-row gate; for a per-key gate
    // as the forward's (gated_linear_tc.cuh), unrounded
    if constexpr (!PerKey) {
        float A[kScoreTiles<kParts>][4] = {};
        add_scores<T, KT, kParts>(A, t.q, t.k, r0, part);
        for_score_tiles<kParts>(part, r0 / 8 + 2, [&](int m, int c) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), j = 8 * c + col_of(e);
                // mask before exp: above the diagonal G_i − G_j > 0 can overflow
                t.A[i][j] = j <= i && i < len ? A[m][e] * fast_exp(t.G[i] - t.G[j]) * p.scale : 0.f;
            }
        });
    } else {
        float A[kScoreTiles<kParts>][4] = {};
        add_factored_scores<T, KT, kParts>(A, t.q, t.k, t.g, r0, part, factored);
        for_score_tiles<kParts>(part, r0 / 8 + (factored ? 2 : 0), [&](int m, int c) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), j = 8 * c + col_of(e);
                t.A[i][j] = j <= i && i < len ? A[m][e] * p.scale : 0.f;
            }
        });
        if (!factored) {
            diagonal_scores<T, KT, kParts>(t.q, t.k, t.g, r0, part, [&](int i, int j, float sum) {
                t.A[i][j] = i < len ? sum * p.scale : 0.f;
            });
            above_diagonal<kParts>(r0, part, [&](int i, int j) { t.A[i][j] = 0.f; });
        }
    }

    // over the value tiles: dA = d_o vᵀ, dq_inter = d_o hᵀ, dk_inter = v dhᵀ, Σ h ⊙ dh, and
    // the tile's dv = (k ⊙ exp(Λ − G)) dh + Aᵀ d_o
    float dA[kScoreTiles<kParts>][4] = {}, dq[NK][4] = {}, dk[NK][4] = {};
    float hdh[kQuads] = {};  // per quad key for a per-key gate, else all in hdh[0]
    const float last = t.G[kRows - 1];
    for (int v0 = 0; v0 < p.dv; v0 += kTileV) {
        __syncthreads();  // the previous tiles are read
        load_rows<T, T, kRows, kTileV, kThreads>(t.v, p.v, ch.s, ch.c0, len, h, v0, p.dv, vec_vo);
        load_rows<T, T, kRows, kTileV, kThreads>(t.d_o, d.d_o, ch.s, ch.c0, len, h, v0, p.dv,
                                                 vec_vo);
        {
            // every quad's loads in flight before the first is used
            float4 x[kQuads], y[kQuads];
#pragma unroll
            for (int n = 0; n < kQuads; ++n) {
                x[n] = state_quad(hs, p.state, base, quad_key(n), v0 + quad_col, p, vec_state);
                y[n] = state_quad(dhs, p.state, base, quad_key(n), v0 + quad_col, p, vec_state);
            }
#pragma unroll
            for (int n = 0; n < kQuads; ++n) {
                put_quad(t.h_hi, t.h_lo, quad_key(n), quad_col, x[n], split);
                put_quad(t.dh_hi, t.dh_lo, quad_key(n), quad_col, y[n], split);
                hdh[PerKey ? n : 0] +=
                    x[n].x * y[n].x + x[n].y * y[n].y + x[n].z * y[n].z + x[n].w * y[n].w;
            }
        }
        copies_wait();
        __syncthreads();
        for (int kk = 0; kk < kTileV; kk += 16) {
            uint32_t a_do[4], a_v[4];
            fragment_a(a_do, t.d_o, r0, kk);
            fragment_a(a_v, t.v, r0, kk);
            for_score_tiles<kParts>(part, r0 / 8 + 2, [&](int m, int c) {
                uint32_t b[2];
                fragment_b(b, t.v, 8 * c, kk);
                H::mma(dA[m], a_do, b);
            });
#pragma unroll
            for (int c = 0; c < NK; ++c) {
                uint32_t b[2];
                fragment_b(b, t.h_hi, kc0 + 8 * c, kk);
                H::mma(dq[c], a_do, b);
                fragment_b(b, t.dh_hi, kc0 + 8 * c, kk);
                H::mma(dk[c], a_v, b);
                if (!split) continue;
                fragment_b(b, t.h_lo, kc0 + 8 * c, kk);
                H::mma(dq[c], a_do, b);
                fragment_b(b, t.dh_lo, kc0 + 8 * c, kk);
                H::mma(dk[c], a_v, b);
            }
        }
        float dv[NV][4] = {};
        for (int kk = 0; kk < KT; kk += 16) {
            uint32_t a[4], a_lo[4];
            if constexpr (PerKey) {
                // k ⊙ exp(Λ − G), kept fp32 as two halves
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int j = r0 + g8 + (u & 1) * 8, dd = kk + 2 * t4 + (u & 2) * 4;
                    const float2 x = to_float2<T>(word(&t.k[j][dd]));
                    const float2 gj = *reinterpret_cast<const float2*>(&t.g[j][dd]);
                    const float2 gl = *reinterpret_cast<const float2*>(&t.g[kRows - 1][dd]);
                    split_pair<T>(a[u], a_lo[u], x.x * fast_exp(gl.x - gj.x),
                                  x.y * fast_exp(gl.y - gj.y));
                }
            } else {
                fragment_a(a, t.k, r0, kk);
            }
#pragma unroll
            for (int c = 0; c < NV; ++c)
                mma_split_rows(dv[c], a, a_lo, PerKey, t.dh_hi, t.dh_lo, kk, vc0 + 8 * c, split);
        }
        if constexpr (!PerKey)
#pragma unroll
            for (int c = 0; c < NV; ++c)
#pragma unroll
                for (int e = 0; e < 4; ++e) dv[c][e] *= fast_exp(last - t.G[row_of(e)]);
        add_scores_times<T, true>(dv, t.A, t.d_o, r0, r0, kRows, vc0);
#pragma unroll
        for (int c = 0; c < NV; ++c)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int j = row_of(e), col = v0 + vc0 + 8 * c + col_of(e);
                if (j < len && col < p.dv)
                    store_pair(d.dv.data, d.dv.dtype, at(d.dv, ch.s, ch.c0 + j, h) + col, dv[c][e],
                               dv[c][e + 1], col + 1 < p.dv);
            }
    }
    if constexpr (PerKey) {
        // a key's quads lie in the 16 lanes of one half warp
#pragma unroll
        for (int n = 0; n < kQuads; ++n) {
            for (int o = 1; o < kQuadsPerRow; o *= 2)
                hdh[n] += __shfl_xor_sync(0xffffffffu, hdh[n], o);
            if (threadIdx.x % kQuadsPerRow == 0) t.hdh_key[quad_key(n)] = hdh[n];
        }
    }

    // dA into shared memory, masked and scaled, decayed by exp(G_i − G_j) for a per-row gate;
    // a per-key gate decays it inside the sums
    for_score_tiles<kParts>(part, r0 / 8 + 2, [&](int m, int c) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = row_of(e), j = 8 * c + col_of(e);
            const bool below = j <= i && i < len;
            const float decay = PerKey || !below ? 1.f : fast_exp(t.G[i] - t.G[j]);
            t.dA[i][j] = below ? dA[m][e] * decay * p.scale : 0.f;
        }
    });

    // the inter-chunk parts, decayed; Σ k ⊙ dk_inter for dg
    float kdk = 0.f;
#pragma unroll
    for (int c = 0; c < NK; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = row_of(e), key = kc0 + 8 * c + col_of(e);
            if constexpr (PerKey) {
                dq[c][e] *= fast_exp(t.g[i][key]) * p.scale;
                dk[c][e] *= fast_exp(t.g[kRows - 1][key] - t.g[i][key]);
            } else {
                dq[c][e] *= fast_exp(t.G[i]) * p.scale;
                dk[c][e] *= fast_exp(last - t.G[i]);
            }
        }
    if constexpr (PerKey) {
        // per key: the warp's 16 rows summed across the lanes of one column, then the blocks of
        // rows in order when dg is formed (no atomics: the same bits every run)
#pragma unroll
        for (int c = 0; c < NK; ++c)
#pragma unroll
            for (int odd = 0; odd < 2; ++odd) {
                const int key = kc0 + 8 * c + 2 * t4 + odd;
                float x = H::to(t.k[row_of(odd)][key]) * dk[c][odd] +
                          H::to(t.k[row_of(odd + 2)][key]) * dk[c][odd + 2];
                for (int o = 4; o < 32; o *= 2) x += __shfl_xor_sync(0xffffffffu, x, o);
                if (g8 == 0) t.kdk_key[r0 / 16][key] = x;
            }
    } else {
#pragma unroll
        for (int c = 0; c < NK; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                kdk += H::to(t.k[row_of(e)][kc0 + 8 * c + col_of(e)]) * dk[c][e];
    }
    __syncthreads();  // dA is complete

    // intra-chunk parts: dq += dA k over j < r0 + 16, dk += dAᵀ q over i ≥ r0
    if constexpr (!PerKey) {
        add_scores_times<T, false>(dq, t.dA, t.k, r0, 0, r0 + 16, kc0);
        add_scores_times<T, true>(dk, t.dA, t.q, r0, r0, kRows, kc0);
    } else {
        // blocks off the diagonal, factored: for dq about row r0, exp(G_i − G_r0) ·
        // Σ_j dA_ij (k_j ⊙ exp(G_r0 − G_j)); for dk about row m = r0 + 15,
        // exp(G_m − G_j) · Σ_i dA_ij (q_i ⊙ exp(G_i − G_m)); every exponent ≤ 0. The diagonal
        // block joins them where `factored`, its exponents then within 2·kDiagonalSpan
        const int m_row = r0 + 15, diagonal = factored ? 16 : 0;
        float partial[NK][4] = {};
        const int pitch = Tile::PG;
        add_scores_times<T, false>(partial, t.dA, t.k, r0, 0, r0 + diagonal, kc0,
                                   Decay{&t.g[0][0], pitch, r0, 1.f});
#pragma unroll
        for (int c = 0; c < NK; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), key = kc0 + 8 * c + col_of(e);
                dq[c][e] += partial[c][e] * fast_exp(t.g[i][key] - t.g[r0][key]);
                partial[c][e] = 0.f;
            }
        add_scores_times<T, true>(partial, t.dA, t.q, r0, r0 + 16 - diagonal, kRows, kc0,
                                  Decay{&t.g[0][0], pitch, m_row, -1.f});
#pragma unroll
        for (int c = 0; c < NK; ++c)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int i = row_of(e), key = kc0 + 8 * c + col_of(e);
                const float gi = t.g[i][key];
                float sq = 0.f, sk = 0.f;
                // else the diagonal block element by element; above it the exponent is −inf
                if (!factored)
#pragma unroll 4
                    for (int j = r0; j < r0 + 16; ++j) {
                        const float gj = t.g[j][key];
                        sq += t.dA[i][j] * H::to(t.k[j][key]) *
                              fast_exp(j <= i ? gi - gj : -INFINITY);
                        sk += t.dA[j][i] * H::to(t.q[j][key]) *
                              fast_exp(j >= i ? gj - gi : -INFINITY);
                    }
                dq[c][e] += sq;
                dk[c][e] += sk + partial[c][e] * fast_exp(t.g[m_row][key] - gi);
            }
    }

    float qdq[2] = {}, kdk_rows[2] = {};
#pragma unroll
    for (int c = 0; c < NK; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int i = row_of(e), key = kc0 + 8 * c + col_of(e);
            const float x = H::to(t.q[i][key]) * dq[c][e], y = H::to(t.k[i][key]) * dk[c][e];
            if constexpr (PerKey) {
                t.dG[i][key] = x - y;
            } else {
                qdq[e / 2] += x;
                kdk_rows[e / 2] += y;
            }
            // two adjacent keys a store
            if (e % 2 == 0 && i < len && key < p.dk) {
                store_pair(d.dq.data, d.dq.dtype, at(d.dq, ch.s, ch.c0 + i, h) + key, dq[c][e],
                           dq[c][e + 1], key + 1 < p.dk);
                store_pair(d.dk.data, d.dk.dtype, at(d.dk, ch.s, ch.c0 + i, h) + key, dk[c][e],
                           dk[c][e + 1], key + 1 < p.dk);
            }
        }
    if constexpr (!PerKey) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            // the four lanes of a row hold its columns
            for (int o = 1; o < 4; o *= 2) {
                qdq[r] += __shfl_xor_sync(0xffffffffu, qdq[r], o);
                kdk_rows[r] += __shfl_xor_sync(0xffffffffu, kdk_rows[r], o);
            }
            if (t4 == 0) {
                t.dGq[part][r0 + g8 + 8 * r] = qdq[r];
                t.dGk[part][r0 + g8 + 8 * r] = kdk_rows[r];
            }
        }
        const float state_sum = warp_sum(hdh[0]);
        kdk = warp_sum(kdk);
        if (lane == 0) t.hdh[warp] = state_sum, t.kdk[warp] = kdk;
    }

    // dg: dG summed from the chunk's end, per key or over keys
    __syncthreads();
    if constexpr (PerKey) {
        const int key = threadIdx.x;
        if (key >= p.dk) return;
        float run = t.dG[len - 1][key] +
                    (fast_exp(t.g[kRows - 1][key]) * t.hdh_key[key] + warps_sum(t.kdk_key, key));
        for (int i = len - 1;; --i) {
            store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h) + key, run);
            if (i == 0) break;
            run += t.dG[i - 1][key];
        }
    } else {
        if (p.gate != Gate::per_head || threadIdx.x != 0) return;
        float state_carry = 0.f, k_carry = 0.f;
        for (int w = 0; w < kWarps; ++w) state_carry += t.hdh[w], k_carry += t.kdk[w];
        const auto dG = [&](int i) {
            float x = 0.f;
#pragma unroll
            for (int q = 0; q < kParts; ++q) x += t.dGq[q][i] - t.dGk[q][i];
            return x;
        };
        float run = dG(len - 1) + (fast_exp(last) * state_carry + k_carry);
        for (int i = len - 1;; --i) {
            store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h), run);
            if (i == 0) break;
            run += dG(i - 1);
        }
    }
}

template <typename T, int KT, bool PerKey>
void launch(const GatedLinearProblem& p, const GatedLinearGrads& d, const void* hs, const void* dhs,
            cudaStream_t stream) {
    const auto kernel = chunk_grads_tc<T, KT, PerKey>;
    const int bytes = int(sizeof(GradTiles<T, KT, PerKey>));
    take_shared_memory(kernel, bytes, "gated linear tensor-core grads");
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    if (slots == 0) return;
    const bool vec_qk = rows_aligned(p.q, p.dk) && rows_aligned(p.k, p.dk);
    const bool vec_vo = rows_aligned(p.v, p.dv) && rows_aligned(d.d_o, p.dv);
    const bool vec_g = PerKey && p.g.dtype == DType::f32 && rows_aligned(p.g, p.dk);
    const auto aligned = [](const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; };
    const bool vec_state = p.dv % 4 == 0 && aligned(hs) && aligned(dhs);
    kernel<<<dim3(unsigned(slots), unsigned(p.heads)), kThreads, bytes, stream>>>(
        p, d, hs, dhs, vec_qk, vec_vo, vec_g, vec_state);
    LAV_CUDA_CHECK(cudaGetLastError(), "gated linear tensor-core grads");
}

template <typename T, int KT>
void launch_gate(const GatedLinearProblem& p, const GatedLinearGrads& d, const void* hs,
                 const void* dhs, cudaStream_t stream) {
    if (p.gate == Gate::per_key)
        launch<T, KT, true>(p, d, hs, dhs, stream);
    else
        launch<T, KT, false>(p, d, hs, dhs, stream);
}

template <typename T>
void launch_keys(const GatedLinearProblem& p, const GatedLinearGrads& d, const void* hs,
                 const void* dhs, cudaStream_t stream) {
    if (p.dk <= 64)
        launch_gate<T, 64>(p, d, hs, dhs, stream);
    else
        launch_gate<T, 128>(p, d, hs, dhs, stream);
}

/// Shared memory of the kernel p takes; both 16-bit types lay out alike.
size_t grads_bytes(const GatedLinearProblem& p) {
    const bool per_key = p.gate == Gate::per_key;
    if (p.dk <= 64)
        return per_key ? sizeof(GradTiles<__half, 64, true>) : sizeof(GradTiles<__half, 64, false>);
    return per_key ? sizeof(GradTiles<__half, 128, true>) : sizeof(GradTiles<__half, 128, false>);
}

}  // namespace

bool gated_linear_tc_grads_fit(const GatedLinearProblem& p, const GatedLinearGrads& d) {
    // a per-key gate's tiles at 128 keys take more than an sm_80 block may have
    int device = 0, most = 0;
    LAV_CUDA_CHECK(cudaGetDevice(&device));
    LAV_CUDA_CHECK(cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    return gated_linear_tc_state_grads_fit(p, d) && grads_bytes(p) <= size_t(most);
}

void gated_linear_tc_grads(const GatedLinearProblem& p, const GatedLinearGrads& d, const void* hs,
                           const void* dhs, cudaStream_t stream) {
    if (!gated_linear_tc_grads_fit(p, d))
        throw std::invalid_argument("gated linear tensor-core grads: inputs do not fit");
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return;
    if (p.q.dtype == DType::bf16)
        launch_keys<__nv_bfloat16>(p, d, hs, dhs, stream);
    else
        launch_keys<__half>(p, d, hs, dhs, stream);
}

}  // namespace lav::cuda
