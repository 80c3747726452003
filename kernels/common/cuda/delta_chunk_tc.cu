// kernels/common/cuda/delta_chunk_tc.cu — the delta rules' chunk forward and the backward's dS pass
// on tensor cores (mma.sync m16n8k16, fp32 accumulation) for 16-bit inputs.
//
// The blocks of the FMA passes (delta_chunk.cu, delta_chunk_bwd.cu's pass 2b), with each value
// rounded in the same place: the first pass forms A = β (k̂ k̂ᵀ) ⊙ e^{G_i − G_j}, (I + A)⁻¹ (the
// fp32 forward substitution), w and u; the state pass carries the fp32 state S through the chunks
// (h = round(S), v_new = round(u − w h), S ← e^{G_last} S + k̂ᵀ round(v_new e^{G_last − G})); the
// output pass forms o = scale [(q̂ h) e^G + round(q̂ k̂ᵀ ⊙ e^{G_i − G_j}) v_new]; the dS pass walks
// the chunks backwards. The 16-bit operands are in the input dtype, so their products are exact;
// an fp32 operand (h in a wider state dtype, the backward's scores, dH, dv_new) goes in as three
// 16-bit parts that add up to it, so its products are too. Only the fp32 summation order differs
// from the FMA passes and the CPU contract. bf16 inputs, or fp16 ones with an fp16 state: the
// parts of a wider state in fp16 could overflow.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/delta_chunk_tc.cuh"
#include "common/cuda/kda_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kCols = 64;       // value columns per step of the output pass
constexpr int kStateCols = 32;  // value columns per block of the state pass
static_assert(kDeltaChunkThreads == kTensorCoreThreads, "eight warps: four row blocks, two halves");

/// The first pass's tiles.
template <typename T, int KT>
struct PrepTiles {
    alignas(16) T k[kRows][KT + 8];      // k̂, then kb = round(k̂ β e^G)
    alignas(16) T Ti[kRows][kRows + 8];  // (I + A)⁻¹ as stored, zero above the diagonal
    alignas(16) T vb[kRows][kCols + 8];  // round(v β)
    float kf[kRows][KT + 1];             // the k̂ rows prep_rows leaves
    float A[kRows][kRows + 1];   // rows an odd number of floats apart: the solve reads columns
    float Tf[kRows][kRows + 1];  // (I + A)⁻¹ in fp32
    float beta[kRows], G[kRows], decay[kRows];
};

/// acc[n] += a·b over the lower-triangular rows [rb, rb + 16) of the 16-bit tile `lower` and
/// the tile `x` stored [contraction][column], for the 8-column tiles n0[n]: the contraction
/// stops at the diagonal block.
template <typename T, int N, int PL, int PX>
__device__ __forceinline__ void lower_times(float (&acc)[N][4], const T (*lower)[PL],
                                            const T (*x)[PX], int rb, const int (&n0)[N]) {
    uint32_t a[4], b[2];
    for (int jj = 0; jj <= rb; jj += 16) {
        fragment_a(a, lower, rb, jj);
#pragma unroll
        for (int n = 0; n < N; ++n) {
            fragment_b_rows(b, x, jj, n0[n]);
            Half16<T>::mma(acc[n], a, b);
        }
    }
}

/// acc[nt] = x yᵀ for rows rb + [0, 16) and columns cb + 8·nt + [0, 8) of the [kRows, kRows]
/// product of two [kRows, KT] key tiles; tiles wholly above the diagonal stay zero.
template <typename T, int KT, int P>
__device__ __forceinline__ void lower_scores(float (&acc)[4][4], const T (*x)[P], const T (*y)[P],
                                             int rb, int cb) {
    uint32_t a[4], b[2];
    for (int kk = 0; kk < KT; kk += 16) {
        fragment_a(a, x, rb, kk);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            if (cb + 8 * nt > rb + 15) continue;
            fragment_b(b, y, cb + 8 * nt, kk);
            Half16<T>::mma(acc[nt], a, b);
        }
    }
}

// two blocks a multiprocessor at keys up to 128 (102 KB of tiles): registers up to 128
template <typename T, int KT>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    chunk_prep_tc(DeltaChunkProblem p, DeltaChunkSaved x) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<PrepTiles<T, KT>*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, blockIdx.x);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    prep_rows<KT>(p, x, ck, hv, &s.kf[0][0], KT + 1, s.beta, s.G, s.decay);
    __syncthreads();
    // f(row, first column of the pair) over the pairs of adjacent columns of a [kRows, KT] tile
    const auto for_key_pairs = [&](auto&& f) {
        for (int e = tid; e < kRows * KT / 2; e += kDeltaChunkThreads)
            f(e / (KT / 2), e % (KT / 2) * 2);
    };
    // k̂ in fp32, zero past the chunk and the keys; rounded into the tile
    const auto kf = [&](int i, int d) { return i < L && d < K ? s.kf[i][d] : 0.f; };
    for_key_pairs([&](int i, int d) {
        *reinterpret_cast<uint32_t*>(&s.k[i][d]) = pair<T>(kf(i, d), kf(i, d + 1));
    });
    __syncthreads();
    // warp w: rows rb + [0, 16), columns cb + [0, 32) of the chunk's [C, C] tiles
    const int rb = 16 * (warp % 4), cb = 32 * (warp / 4);
    {
        // A_ij = ((k̂_i·k̂_j) exp(G_i − G_j)) β_i below the diagonal, in fp32
        float acc[4][4] = {};
        lower_scores<T, KT>(acc, s.k, s.k, rb, cb);
        each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) {
            s.A[i][j] = j < i && i < L ? acc[nt][u] * expf(s.G[i] - s.G[j]) * s.beta[i] : 0.f;
        });
    }
    __syncthreads();
    // A has read k̂: it becomes kb = round(k̂ β e^G), w's factor
    for_key_pairs([&](int j, int d) {
        if (j >= L || d >= K) return;
        const float f = s.beta[j] * s.decay[j];
        *reinterpret_cast<uint32_t*>(&s.k[j][d]) =
            pair<T>(kf(j, d) * f, d + 1 < K ? kf(j, d + 1) * f : 0.f);
    });
    // (I + A) Ti = I in fp32; then stored
    solve_unit_lower(&s.A[0][0], kRows + 1, &s.Tf[0][0], kRows + 1, L);
    for (int e = tid; e < kRows * kRows / 2; e += kDeltaChunkThreads) {
        const int i = e / (kRows / 2), j = e % (kRows / 2) * 2;
        const bool row = i < L;
        const uint32_t ti =
            pair<T>(row && j <= i ? s.Tf[i][j] : 0.f, row && j + 1 <= i ? s.Tf[i][j + 1] : 0.f);
        *reinterpret_cast<uint32_t*>(&s.Ti[i][j]) = ti;
        if (row && j < L) {
            const float2 t = to_float2<T>(ti);
            store_pair(x.Ti, in, ((r0 + i) * HV + hv) * C + j, t.x, t.y, j + 1 < L);
        }
    }
    __syncthreads();
    // w = Ti kb, stored: warp w takes rows rb and the 32 columns from 32·(w / 4) + 64·m
    for (int n00 = 32 * (warp / 4); n00 < KT; n00 += 64) {
        const int n0[4] = {n00, n00 + 8, n00 + 16, n00 + 24};
        float acc[4][4] = {};
        lower_times(acc, s.Ti, s.k, rb, n0);
        each_accumulator<4, true>(rb, n00, [&](int n, int u, int i, int d) {
            if (i < L && d < K)
                store_pair(x.w, in, ((r0 + i) * HV + hv) * K + d, acc[n][u], acc[n][u + 1],
                           d + 1 < K);
        });
    }
    // u = Ti round(v β), stored, kCols value columns a step; vb's rows past the chunk stay zero
    zero_rows<T, kRows>(s.vb, L);
    for (int c0 = 0; c0 < V; c0 += kCols) {
        gather_tile(L, kCols, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, c0, V,
                    [&](int j, int c, float v) { s.vb[j][c] = Half16<T>::from(v * s.beta[j]); });
        __syncthreads();
        const int n0[4] = {cb, cb + 8, cb + 16, cb + 24};
        float acc[4][4] = {};
        lower_times(acc, s.Ti, s.vb, rb, n0);
        each_accumulator<4, true>(rb, c0 + cb, [&](int n, int u, int i, int c) {
            if (i < L && c < V)
                store_pair(x.u, in, ((r0 + i) * HV + hv) * V + c, acc[n][u], acc[n][u + 1],
                           c + 1 < V);
        });
        __syncthreads();  // the step is done with vb
    }
}

/// The state pass's tiles: w and k̂ of two chunks (the one computed, the next in flight); pitches
/// of 8 extra elements keep ldmatrix's rows on distinct banks.
template <typename T, int KT>
struct StateTiles {
    alignas(16) T w[2][kRows][KT + 8];
    alignas(16) T k[2][kRows][KT + 8];
    alignas(16) T h[kParts][KT][kStateCols + 8];  // h = round(S) in parts
    alignas(16) T vd[kRows][kStateCols + 8];      // round(v_new e^{G_last − G})
};

/// A block's [KT, kStateCols] fp32 state (the forward's S, the backward's dS) in its warps'
/// registers: warp w holds the 16 × 8 tiles at rows 16 (w / 4) + 32 i, columns 8 (w % 4), as
/// mma.sync accumulators hold them, so that the tile products of an update add in place.
template <int KT>
struct StateRegs {
    static_assert(kDeltaChunkThreads == 256 && kStateCols == 32, "eight warps, four tiles wide");
    static constexpr int kTiles = KT / 32;
    float x[kTiles][4];

    /// The first row (key) of tile i and the first column of the warp's tiles.
    static __device__ __forceinline__ int row0(int i) { return 16 * (threadIdx.x / 128) + 32 * i; }
    static __device__ __forceinline__ int col0() { return 8 * (threadIdx.x / 32 % 4); }

    /// f(element pair, key, column within the block's columns) over the thread's elements, two
    /// adjacent columns at a time.
    template <typename F>
    __device__ __forceinline__ void for_pairs(F&& f) {
#pragma unroll
        for (int i = 0; i < kTiles; ++i)
#pragma unroll
            for (int u = 0; u < 4; u += 2)
                f(x[i][u], x[i][u + 1], row0(i) + acc_row(u), col0() + acc_col(u));
    }

    /// From the [K, V] state at `state` of src in dtype d, the block's columns from `first`;
    /// zeros past K and V, and everywhere where src is nullptr.
    __device__ void load(const void* src, DType d, int64_t state, int K, int V, int first) {
        for_pairs([&](float& s0, float& s1, int key, int c) {
            const bool row = src != nullptr && key < K;
            const int64_t at = state + int64_t(key) * V + first + c;
            s0 = row && first + c < V ? lav::cuda::load(src, d, at) : 0.f;
            s1 = row && first + c + 1 < V ? lav::cuda::load(src, d, at + 1) : 0.f;
        });
    }

    /// The inverse of load, into dst.
    __device__ void store(void* dst, DType d, int64_t state, int K, int V, int first) {
        for_pairs([&](float s0, float s1, int key, int c) {
            if (key < K && first + c < V)
                store_pair(dst, d, state + int64_t(key) * V + first + c, s0, s1, first + c + 1 < V);
        });
    }
};

/// What the state pass reads and writes: the delta rules' values (a log decay per row; the
/// update's keys k̂, [rows, H, K]) or kda's (a log decay per key; the keys kg = round(k̂
/// e^{G_last − G}), [rows, HV, K], which carry the decay to the chunk's end).
struct StatePass {
    const void *w, *keys, *u;
    void *v_new, *h;
    const float* G;  ///< [rows, HV] or, per key, [rows, HV, K]
};

/// The state pass: a block per (sequence, value head, kStateCols value columns) walks the
/// chunks in order. Warp w keeps the state's 16 × 8 tiles at rows 16 (w / 4) + 32 i, columns
/// 8 (w % 4) in registers; the next chunk's w and keys are copied in while this one is computed.
/// S ← e^{G_last} S + keysᵀ vd with vd = round(v_new e^{G_last − G}) for a decay per row, and
/// S ← diag(e^{G_last}) S + kgᵀ v_new for one per key (kda).
// two blocks a multiprocessor at keys up to 128: registers up to 128
template <typename T, int KT, bool PerKey>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    chunk_state_tc(DeltaChunkProblem p, StatePass x) {
    constexpr int kTiles = StateRegs<KT>::kTiles;
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<StateTiles<T, KT>*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kStateCols;
    const Span sp = span(p.seqs, n);
    const int warp = threadIdx.x / 32;
    const DType in = p.q.dtype;
    const int parts = p.state == in ? 1 : kParts;
    const int64_t state = (int64_t(n) * HV + hv) * K * V;
    StateRegs<KT> S;
    S.load(p.h0, p.state, state, K, V, col0);
    const int64_t first = first_slot(p.seqs, C, n, sp);
    // v_new's tile of warp w: rows rb + [0, 16), columns cb + [0, 16)
    const int rb = 16 * (warp % 4), cb = 16 * (warp / 4);
    // a chunk's w and k̂ to tile buffer b, and its u and gate cumsums for the thread's v_new
    // elements to registers: the next chunk's are fetched while this one is computed
    // u as loaded (raw bits, widened when the chunk starts): widening at the fetch would wait
    // there for the loads, before this chunk's products
    uint32_t u_next[2][4];
    float G_next[2], G_last_next = 0.f;
    // a decay per key: G_last of the thread's state rows
    [[maybe_unused]] float G_key_next[kTiles][2];
    const auto fetch = [&](int64_t ch, int b) {
        const int64_t t0 = ch * C, r0 = row(p.seqs, sp, t0);
        const int L = int(sp.len - t0 < C ? sp.len - t0 : C);
        copy_rows<kRows, KT>(s.w[b], x.w, (r0 * HV + hv) * K, int64_t(HV) * K, L, K);
        if constexpr (PerKey) {
            copy_rows<kRows, KT>(s.k[b], x.keys, (r0 * HV + hv) * K, int64_t(HV) * K, L, K);
#pragma unroll
            for (int i = 0; i < kTiles; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int d = S.row0(i) + acc_row(2 * e);
                    G_key_next[i][e] = d < K ? x.G[((r0 + L - 1) * HV + hv) * K + d] : 0.f;
                }
        } else {
            copy_rows<kRows, KT>(s.k[b], x.keys, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L,
                                 K);
            G_last_next = x.G[(r0 + L - 1) * HV + hv];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int i = rb + acc_row(2 * e);
                G_next[e] = i < L ? x.G[(r0 + i) * HV + hv] : 0.f;
            }
        }
        each_accumulator<2>(rb, col0 + cb, [&](int nt, int u, int i, int c) {
            u_next[nt][u] = i < L && c < V ? raw(x.u, in, ((r0 + i) * HV + hv) * V + c) : 0u;
        });
    };
    if (sp.len > 0) fetch(0, 0);
    for (int64_t ch = 0; ch * C < sp.len; ++ch) {
        const int b = ch % 2;
        const int64_t t0 = ch * C, r0 = row(p.seqs, sp, t0);
        const int L = int(sp.len - t0 < C ? sp.len - t0 : C);
        const float G_last = G_last_next;
        float u_in[2][4], to_end[2], last[kTiles][2];
#pragma unroll
        for (int e = 0; e < 2; ++e)
            to_end[e] = PerKey ? 1.f : rb + acc_row(2 * e) < L ? expf(G_last - G_next[e]) : 0.f;
        if constexpr (PerKey)
#pragma unroll
            for (int i = 0; i < kTiles; ++i)
#pragma unroll
                for (int e = 0; e < 2; ++e) last[i][e] = expf(G_key_next[i][e]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) u_in[nt][u] = widen(u_next[nt][u], in);
        // the state as stored (FLA's h) is what v_new and the output read
        S.for_pairs([&](float s0, float s1, int d, int c) {
            const float h0 = rounded(s0, p.state), h1 = rounded(s1, p.state);
            split_pair_parts(s.h, d, c, h0, h1);
            if (d >= K || col0 + c >= V) return;
            const bool both = col0 + c + 1 < V;
            store_pair(x.h, p.state, (((first + ch) * HV + hv) * K + d) * V + col0 + c, h0, h1,
                       both);
            if (p.h != nullptr)
                store_pair(p.h, p.state,
                           ((p.first_chunk[n] + ch) * HV + hv) * K * V + int64_t(d) * V + col0 + c,
                           s0, s1, both);
        });
        copies_wait();
        __syncthreads();  // h and this chunk's tiles are in; the last chunk's are read
        if ((ch + 1) * C < sp.len) fetch(ch + 1, 1 - b);
        {
            // v_new = round(u − w h)
            float acc[2][4] = {};
            uint32_t a[4];
            for (int kk = 0; kk < KT; kk += 16) {
                fragment_a(a, s.w[b], rb, kk);
#pragma unroll
                for (int nt = 0; nt < 2; ++nt) mma_parts(acc[nt], a, s.h, parts, kk, cb + 8 * nt);
            }
            each_accumulator<2, true>(rb, cb, [&](int nt, int u, int i, int c) {
                float vd[2] = {0.f, 0.f};
                if (i < L) {
                    const float v0 = rounded(u_in[nt][u] - acc[nt][u], in),
                                v1 = rounded(u_in[nt][u + 1] - acc[nt][u + 1], in);
                    if (col0 + c < V)
                        store_pair(x.v_new, in, ((r0 + i) * HV + hv) * V + col0 + c, v0, v1,
                                   col0 + c + 1 < V);
                    vd[0] = PerKey ? v0 : v0 * to_end[u / 2];
                    vd[1] = PerKey ? v1 : v1 * to_end[u / 2];
                }
                *reinterpret_cast<uint32_t*>(&s.vd[i][c]) = pair<T>(vd[0], vd[1]);
            });
        }
        __syncthreads();  // vd is in
        // S ← e^{G_last} S + keysᵀ vd
        const float row_last = expf(G_last);
#pragma unroll
        for (int i = 0; i < kTiles; ++i) {
            const int db = S.row0(i);
            if (db >= K) continue;
            float acc[4] = {};
            uint32_t a[4], bf[2];
            for (int jj = 0; jj < kRows; jj += 16) {
                fragment_a_rows(a, s.k[b], jj, db);
                fragment_b_rows(bf, s.vd, jj, S.col0());
                Half16<T>::mma(acc, a, bf);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (db + acc_row(u) < K)
                    S.x[i][u] = S.x[i][u] * (PerKey ? last[i][u / 2] : row_last) + acc[u];
        }
    }
    if (p.ht != nullptr) S.store(p.ht, p.state, state, K, V, col0);
}

/// The backward's dS pass's tiles. PerKey (kda): the key tiles in fp32, in parts, and dO as it is.
template <typename T, int KT, bool PerKey>
struct StateGradTiles {
    static constexpr int kKeyParts = PerKey ? kParts : 1, kDoParts = PerKey ? 1 : kParts;
    // k̂, then q̂, then w; kda's k̂ e^{G_last − G}, q̂ e^G, then its fp32 W
    alignas(16) T X[kKeyParts][kRows][KT + 8];
    alignas(16) T dH[kParts][KT][kStateCols + 8];  // round(dS) in parts
    alignas(16) T P[kParts][kRows][kRows + 8];     // the fp32 scores in parts
    alignas(16) T dO[kRows][kStateCols + 8];
    alignas(16) T qdO[kDoParts][kRows][kStateCols + 8];  // scale e^G ⊙ dO in parts (not kda's)
    alignas(16) T dvn[kParts][kRows][kStateCols + 8];    // dv_new in parts
    float G[kRows];
};

/// What the dS pass reads of the forward's values: the delta rules' or kda's.
struct StateGradInputs {
    const void *qn, *kn;  ///< [rows, H, K] in the input dtype
    const void* w;        ///< [rows, HV, K] in the input dtype (the delta rules')
    const float* Wf;      ///< [rows, HV, K] kda's fp32 W
    const float* G;       ///< [rows, HV] or kda's [rows, HV, K]
};

/// The backward's dS pass (delta_chunk_bwd.cu, pass 2b) on tensor cores: a block per (sequence,
/// value head, kStateCols value columns) walks the chunks backwards carrying dS in fp32, keeping
/// dH = round(dS) and dv_new = (k̂ dH) e^{G_last − G} + scale Pᵀ dO, then dS ← e^{G_last} dS +
/// q̂ᵀ (scale e^G ⊙ dO) − wᵀ dv_new. The fp32 operands (P, dH when wider than T, scale e^G ⊙ dO,
/// dv_new) go in as three parts each; scale e^G multiplies dO before q̂ where the FMA pass
/// multiplies q̂ first, one fp32 rounding in another place. Warp w keeps dS's 16 × 8 tiles at
/// rows 16 (w / 4) + 32 m, columns 8 (w % 4) in registers, as the state pass keeps S.
/// PerKey, kda's form (kda_chunk_bwd.cu, pass 2b): dv_new = kg dH + Pᵀ dO with kg = k̂ e^{G_last −
/// G} in fp32 and P = A_qk scaled, dS ← diag(e^{G_last}) dS + scale (q̂ e^G)ᵀ dO − Wᵀ dv_new, the
/// decayed keys and W in three parts each, and a product of two operands in parts taking the
/// pairs of parts whose orders add up to less than three.
// two blocks a multiprocessor at keys up to 128 (109 KB of tiles): registers up to 128; one
// at 256 (155 KB), and kda's (131 KB at 128)
template <typename T, int KT, bool PerKey>
__global__ void __launch_bounds__(kDeltaChunkThreads, KT <= 128 && !PerKey ? 2 : 1)
    state_bwd_tc(DeltaChunkProblem p, DeltaGrads d, StateGradInputs f, const float* P, void* dH,
                 float* dvn) {
    extern __shared__ float sm[];
    using Tiles = StateGradTiles<T, KT, PerKey>;
    auto& s = *reinterpret_cast<Tiles*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kStateCols;
    const Span sp = span(p.seqs, n);
    const int tid = threadIdx.x, warp = tid / 32;
    const int dh_parts = p.state == p.q.dtype ? 1 : kParts;
    constexpr int kPerWarp = StateRegs<KT>::kTiles;
    const int64_t state = (int64_t(n) * HV + hv) * K * V;
    StateRegs<KT> dS;
    dS.load(d.dht, p.state, state, K, V, col0);
    const int64_t first = first_slot(p.seqs, C, n, sp);
    const auto key_tile = [&](const void* src, int64_t r0, int L, int heads, int head) {
        load_rows<kRows, KT>(s.X[0], src, (r0 * heads + head) * K, int64_t(heads) * K, L, K);
    };
    const DType in = p.q.dtype;
    const int64_t gs = int64_t(HV) * K;             // kda's G: row i of a chunk at i · gs
    const int64_t qk_pitch = int64_t(p.heads) * K;  // q̂'s and k̂'s rows
    // kda: X's parts ← rows [0, L) of x (pitch `pitch` from x + at) times e^{G_last − G} (Decay
    // < 0), e^G (> 0) or 1, zeros past the chunk and K; a thread's four keys at a time, its
    // loads all issued before its first split (the chunk's tiles wait out one load latency)
    const int dq = tid % (KT / 4) * 4;  // a thread's four keys, the same in every row it takes
    const bool quads = K % 4 == 0 && uintptr_t(f.G) % 16 == 0;
    const auto key_parts = [&](auto decay, const void* x, DType xt, int64_t at, int64_t pitch,
                               const float* G, int L) {
        constexpr int Decay = decltype(decay)::value, kQuads = kRows * KT / 4 / kDeltaChunkThreads;
        const bool vec = quads && at % 4 == 0 && pitch % 4 == 0 && uintptr_t(x) % 16 == 0;
        const auto quad = [&](float(&y)[4], const void* src, DType t, int64_t i0) {
            if (vec) {
                const float4 z = load_quad(src, t, i0);
                y[0] = z.x, y[1] = z.y, y[2] = z.z, y[3] = z.w;
                return;
            }
            for (int q = 0; q < 4; ++q) y[q] = dq + q < K ? load(src, t, i0 + q) : 0.f;
        };
        float v[kQuads][4] = {}, g[kQuads][4] = {}, last[4] = {};
        if (Decay < 0 && L > 0 && dq < K) quad(last, G, DType::f32, (L - 1) * gs + dq);
#pragma unroll
        for (int b = 0; b < kQuads; ++b) {
            const int i = (tid + b * kDeltaChunkThreads) / (KT / 4);
            if (i >= L || dq >= K) continue;
            quad(v[b], x, xt, at + i * pitch + dq);
            if (Decay != 0) quad(g[b], G, DType::f32, i * gs + dq);
        }
#pragma unroll
        for (int b = 0; b < kQuads; ++b) {
            const int i = (tid + b * kDeltaChunkThreads) / (KT / 4);
#pragma unroll
            for (int q = 0; q < 4; ++q)
                if (Decay != 0) v[b][q] *= expf(Decay < 0 ? last[q] - g[b][q] : g[b][q]);
            split_pair_parts(s.X, i, dq, v[b][0], v[b][1]);
            split_pair_parts(s.X, i, dq + 2, v[b][2], v[b][3]);
        }
    };
    for (int64_t ch = (sp.len + C - 1) / C; ch-- > 0;) {
        const int64_t t0 = ch * C;
        const int L = int(sp.len - t0 < C ? sp.len - t0 : C);
        const int64_t r0 = row(p.seqs, sp, t0), slot = (first + ch) * HV + hv;
        const int64_t keys = (r0 * p.heads + h) * K;
        const float* G = PerKey ? f.G + (r0 * HV + hv) * K : f.G;  // kda's per key
        __syncthreads();  // the later chunk is done with every tile
        if constexpr (PerKey)
            key_parts(std::integral_constant<int, -1>{}, f.kn, in, keys, qk_pitch, G, L);
        else
            key_tile(f.kn, r0, L, p.heads, h);
        split_square(s.P, P + slot * C * C, C, L, false);
        if constexpr (!PerKey)
            for (int i = tid; i < kRows; i += kDeltaChunkThreads)
                s.G[i] = i < L ? f.G[(r0 + i) * HV + hv] : 0.f;
        // d_o is in the input dtype on this path (delta_chunk_bwd.cu)
        load_rows<kRows, kStateCols>(s.dO, d.d_o.data, at(d.d_o, sp, t0, hv) + col0, d.d_o.st, L,
                                     V - col0);
        // the stored copy of dS, which this chunk's passes read
        dS.for_pairs([&](float s0, float s1, int dd, int c) {
            const float h0 = rounded(s0, p.state), h1 = rounded(s1, p.state);
            split_pair_parts(s.dH, dd, c, h0, h1);
            if (dd < K && col0 + c < V)
                store_pair(dH, p.state, (slot * K + dd) * V + col0 + c, h0, h1, col0 + c + 1 < V);
        });
        __syncthreads();
        if constexpr (!PerKey)
            for (int e = tid; e < kRows * kStateCols; e += kDeltaChunkThreads) {
                const int i = e / kStateCols, c = e % kStateCols;
                split_parts(s.qdO, i, c,
                            i < L ? expf(s.G[i]) * p.scale * Half16<T>::to(s.dO[i][c]) : 0.f);
            }
        {
            // dv_new = (k̂ dH) e^{G_last − G} + scale Pᵀ dO (kda: kg dH + Pᵀ dO): warp w takes
            // rows rb + [0, 16), columns cb + [0, 16)
            const int rb = 16 * (warp % 4), cb = 16 * (warp / 4);
            float kd[2][4] = {}, pd[2][4] = {};
            uint32_t a[4], b[2];
            for (int kk = 0; kk < KT; kk += 16)
#pragma unroll
                for (int q = 0; q < Tiles::kKeyParts; ++q) {
                    fragment_a(a, s.X[q], rb, kk);
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt)
                        mma_parts(kd[nt], a, s.dH, min(dh_parts, kParts - q), kk, cb + 8 * nt);
                }
            // P_ji is zero for j < i: the contraction starts at the diagonal block
            for (int jj = rb; jj < kRows; jj += 16)
                for (int q = 0; q < kParts; ++q) {
                    fragment_a_rows(a, s.P[q], jj, rb);
#pragma unroll
                    for (int nt = 0; nt < 2; ++nt) {
                        fragment_b_rows(b, s.dO, jj, cb + 8 * nt);
                        Half16<T>::mma(pd[nt], a, b);
                    }
                }
            each_accumulator<2>(rb, cb, [&](int nt, int u, int i, int c) {
                float v = 0.f;
                if (i < L) {
                    v = PerKey ? kd[nt][u] + pd[nt][u]
                               : kd[nt][u] * expf(s.G[L - 1] - s.G[i]) + pd[nt][u] * p.scale;
                    if (col0 + c < V) dvn[((r0 + i) * HV + hv) * V + col0 + c] = v;
                }
                split_parts(s.dvn, i, c, v);
            });
        }
        __syncthreads();
        // dS ← e^{G_last} dS + q̂ᵀ (scale e^G ⊙ dO) − wᵀ dv_new (kda: diag(e^{G_last}) dS + scale
        // (q̂ e^G)ᵀ dO − Wᵀ dv_new), warp w taking every kWarps-th tile; the q̂ term waits in
        // registers while X takes w
        float qd[kPerWarp][4] = {};
        if constexpr (PerKey)
            key_parts(std::integral_constant<int, 1>{}, f.qn, in, keys, qk_pitch, G, L);
        else
            key_tile(f.qn, r0, L, p.heads, h);
        __syncthreads();
#pragma unroll
        for (int m = 0; m < kPerWarp; ++m) {
            const int db = dS.row0(m);
            if (db >= K) continue;
            uint32_t a[4], b[2];
            for (int jj = 0; jj < kRows; jj += 16)
#pragma unroll
                for (int q = 0; q < Tiles::kKeyParts; ++q) {
                    fragment_a_rows(a, s.X[q], jj, db);
                    if constexpr (PerKey) {
                        fragment_b_rows(b, s.dO, jj, dS.col0());
                        Half16<T>::mma(qd[m], a, b);
                    } else {
                        mma_parts(qd[m], a, s.qdO, kParts, jj, dS.col0());
                    }
                }
        }
        __syncthreads();
        if constexpr (PerKey)
            key_parts(std::integral_constant<int, 0>{}, f.Wf, DType::f32, (r0 * HV + hv) * K, gs, G,
                      L);
        else
            key_tile(f.w, r0, L, HV, hv);
        __syncthreads();
        const float last = PerKey ? 0.f : expf(s.G[L - 1]);
#pragma unroll
        for (int m = 0; m < kPerWarp; ++m) {
            const int db = dS.row0(m);
            if (db >= K) continue;
            float wd[4] = {};
            uint32_t a[4];
            for (int jj = 0; jj < kRows; jj += 16)
#pragma unroll
                for (int q = 0; q < Tiles::kKeyParts; ++q) {
                    fragment_a_rows(a, s.X[q], jj, db);
                    mma_parts(wd, a, s.dvn, kParts - q, jj, dS.col0());
                }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int dd = db + acc_row(u);
                if (dd >= K) continue;
                if constexpr (PerKey)
                    dS.x[m][u] =
                        dS.x[m][u] * expf(G[(L - 1) * gs + dd]) + qd[m][u] * p.scale - wd[u];
                else
                    dS.x[m][u] = dS.x[m][u] * last + qd[m][u] - wd[u];
            }
        }
    }
    if (d.dh0 != nullptr) dS.store(d.dh0, p.state, state, K, V, col0);
}

/// The output pass's tiles.
template <typename T, int KT>
struct OutTiles {
    alignas(16) T q[kRows][KT + 8];
    alignas(16) T k[kRows][KT + 8];
    alignas(16) T P[kRows][kRows + 8];       // the rounded scores, zero above the diagonal
    alignas(16) T h[kParts][KT][kCols + 8];  // h as stored, in parts
    alignas(16) T v[kRows][kCols + 8];       // v_new
    float G[kRows], eG[kRows];
};

// ptxas, left alone, kept to 80 and spilled
template <typename T, int KT>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    chunk_out_tc(DeltaChunkProblem p, DeltaChunkSaved x) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<OutTiles<T, KT>*>(sm);
    const int K = p.dk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, p.chunk, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    // q̂, k̂ and the first value step's v_new are copied in while h's first step is split
    const auto values = [&](int c0) {
        copy_rows<kRows, kCols>(s.v, x.v_new, (r0 * HV + hv) * V + c0, int64_t(HV) * V, L, V - c0);
    };
    copy_rows<kRows, KT>(s.q, x.qn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    copy_rows<kRows, KT>(s.k, x.kn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    values(0);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads) {
        s.G[i] = i < L ? x.G[(r0 + i) * HV + hv] : 0.f;
        s.eG[i] = expf(s.G[i]);
    }
    // h's rows past K stay zero: q̂'s columns there are too, but 0 · NaN would not be
    for (int q = 0; q < kParts; ++q) zero_rows<T, KT>(s.h[q], K);
    const int64_t state = (slot * HV + hv) * K * V;
    const auto states = [&](int c0) {
        gather_tile(K, kCols, x.h, p.state, state, V, c0, V,
                    [&](int d, int c, float hd) { split_parts(s.h, d, c, hd); });
    };
    states(0);
    copies_wait();
    __syncthreads();
    // warp w: rows rb + [0, 16), columns cb + [0, 32) of the scores and of each value step
    const int warp = tid / 32;
    const int rb = 16 * (warp % 4), cb = 32 * (warp / 4);
    {
        float acc[4][4] = {};
        lower_scores<T, KT>(acc, s.q, s.k, rb, cb);
        each_accumulator<4, true>(rb, cb, [&](int nt, int u, int i, int j) {
            const bool row = i < L;
            const float v0 = row && j <= i ? acc[nt][u] * expf(s.G[i] - s.G[j]) : 0.f;
            const float v1 = row && j + 1 <= i ? acc[nt][u + 1] * expf(s.G[i] - s.G[j + 1]) : 0.f;
            *reinterpret_cast<uint32_t*>(&s.P[i][j]) = pair<T>(v0, v1);
        });
    }
    const int parts = p.state == in ? 1 : kParts;
    for (int c0 = 0; c0 < V; c0 += kCols) {
        if (c0 > 0) {
            __syncthreads();  // the previous columns are done
            values(c0);
            states(c0);
            copies_wait();
        }
        __syncthreads();  // the scores, h and v_new are in
        float qh[4][4] = {}, pv[4][4] = {};
        uint32_t a[4];
        for (int kk = 0; kk < KT; kk += 16) {
            fragment_a(a, s.q, rb, kk);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) mma_parts(qh[nt], a, s.h, parts, kk, cb + 8 * nt);
        }
        const int n0[4] = {cb, cb + 8, cb + 16, cb + 24};
        lower_times(pv, s.P, s.v, rb, n0);
        each_accumulator<4, true>(rb, c0 + cb, [&](int nt, int u, int i, int c) {
            if (i >= L || c >= V) return;
            const float o0 = (qh[nt][u] * s.eG[i] + pv[nt][u]) * p.scale,
                        o1 = (qh[nt][u + 1] * s.eG[i] + pv[nt][u + 1]) * p.scale;
            store_pair(p.o.data, p.o.dtype, at(p.o, ck.s, ck.c0 + i, hv) + c, o0, o1, c + 1 < V);
        });
    }
}

/// kda's output pass's tiles: what its scores and qg are formed from, then in the same bytes the
/// operands of each value step; q̂ and k̂ as stored (the input dtype holds them), rows an odd
/// number of 32-bit words apart for the diagonal blocks' column reads.
template <typename T, int KT>
struct KdaOutScores {
    float G[kRows][KT + 1];  // the cumsum per key
    T q[kRows][KT + 2], k[kRows][KT + 2];
};

template <typename T, int KT>
struct KdaOutSteps {
    alignas(16) T h[kParts][KT][kStateCols + 8];  // h as stored, in parts
    alignas(16) T v[kRows][kStateCols + 8];       // v_new
};

template <typename T, int KT>
struct KdaOutTiles {
    union {
        KdaOutScores<T, KT> sc;
        KdaOutSteps<T, KT> st;
    };
    alignas(16) T qg[kRows][KT + 8];    // round(q̂ e^G)
    alignas(16) T P[kRows][kRows + 8];  // A_qk as stored
};

/// kda's output pass (kda_chunk.cu's chunk_out) with its products on tensor cores: A_qk =
/// round(scale Σ_d (q̂_id k̂_jd) e^{G_id − G_jd}) by decayed_products, then o = A_qk v_new +
/// scale (qg h), qg = round(q̂ e^G), kStateCols value columns a step; h in parts where the state
/// dtype is wider.
// two blocks a multiprocessor (91 KB at K = 128): the tiles of the scores are dead once A_qk and
// qg are formed, so the value steps reuse their bytes
template <typename T, int KT>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    kda_out_tc(DeltaChunkProblem p, KdaChunkSaved x) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<KdaOutTiles<T, KT>*>(sm);
    auto& sc = s.sc;
    auto& st = s.st;
    const int K = p.dk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, p.chunk, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    const auto keys = [&](T(*dst)[KT + 2], const void* src) {
        gather_tile(L, K, src, in, (r0 * p.heads + h) * K, p.heads * K, 0, K,
                    [&](int i, int d, float y) { dst[i][d] = Half16<T>::from(y); });
    };
    keys(sc.q, x.qn);
    keys(sc.k, x.kn);
    load_tile(&sc.G[0][0], KT + 1, L, K, x.G, DType::f32, (r0 * HV + hv) * K, HV * K);
    __syncthreads();
    decayed_products(
        L, K, [&](int i, int d) { return Half16<T>::to(sc.q[i][d]); },
        [&](int j, int d) { return Half16<T>::to(sc.k[j][d]); },
        [&](int i, int d) { return sc.G[i][d]; },
        [&](int i, int j, float t) { s.P[i][j] = Half16<T>::from(rounded(p.scale * t, in)); });
    for (int e = tid; e < kRows * kRows; e += kDeltaChunkThreads) {
        const int i = e / kRows, j = e % kRows;
        if (j > i || i >= L) s.P[i][j] = Half16<T>::from(0.f);  // the entries put leaves
    }
    for (int e = tid; e < kRows * KT; e += kDeltaChunkThreads) {
        const int i = e / KT, d = e % KT;
        s.qg[i][d] =
            Half16<T>::from(i < L && d < K ? Half16<T>::to(sc.q[i][d]) * expf(sc.G[i][d]) : 0.f);
    }
    __syncthreads();  // q̂, k̂ and G are read: their bytes take h and v_new
    // h's rows past K stay zero: qg's columns there are too, but 0 · NaN would not be
    for (int q = 0; q < kParts; ++q) zero_rows<T, KT>(st.h[q], K);
    const int parts = p.state == in ? 1 : kParts;
    const int64_t state = (slot * HV + hv) * K * V;
    // warp w: rows rb + [0, 16), columns cb + [0, 16) of each value step
    const int rb = 16 * (warp % 4), cb = 16 * (warp / 4);
    for (int c0 = 0; c0 < V; c0 += kStateCols) {
        if (c0 > 0) __syncthreads();  // the previous columns are done
        gather_tile(K, kStateCols, x.h, p.state, state, V, c0, V,
                    [&](int d, int c, float hd) { split_parts(st.h, d, c, hd); });
        load_rows<kRows, kStateCols>(st.v, x.v_new, (r0 * HV + hv) * V + c0, int64_t(HV) * V, L,
                                     V - c0);
        __syncthreads();
        float qh[2][4] = {}, pv[2][4] = {};
        uint32_t a[4];
        for (int kk = 0; kk < KT; kk += 16) {
            fragment_a(a, s.qg, rb, kk);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma_parts(qh[nt], a, st.h, parts, kk, cb + 8 * nt);
        }
        const int n0[2] = {cb, cb + 8};
        lower_times(pv, s.P, st.v, rb, n0);
        each_accumulator<2, true>(rb, c0 + cb, [&](int nt, int u, int i, int c) {
            if (i >= L || c >= V) return;
            store_pair(p.o.data, p.o.dtype, at(p.o, ck.s, ck.c0 + i, hv) + c,
                       pv[nt][u] + qh[nt][u] * p.scale, pv[nt][u + 1] + qh[nt][u + 1] * p.scale,
                       c + 1 < V);
        });
    }
}

/// launch(T{}, KT, grid) for the problem's tiles (with_tiles) and the grid of the passes through
/// the chunks, a block per (sequence, value head, kStateCols value columns); kda's (PerKey) take
/// keys up to kMaxKdaChunkKeys.
template <bool PerKey, typename Launch>
void with_state_grid(const DeltaChunkProblem& p, const char* pass, Launch&& launch) {
    with_tiles(p, [&](auto type, auto keys) {
        if constexpr (PerKey && decltype(keys)::value > kMaxKdaChunkKeys)
            throw std::invalid_argument(std::string("the kda chunk ") + pass +
                                        " pass takes keys up to " +
                                        std::to_string(kMaxKdaChunkKeys));
        else
            launch(type, keys,
                   dim3(unsigned(p.seqs.n * p.value_heads),
                        unsigned((p.dv + kStateCols - 1) / kStateCols)));
    });
}

template <bool PerKey>
void launch_state_tc(const DeltaChunkProblem& p, const StatePass& x, cudaStream_t stream) {
    with_state_grid<PerKey>(p, "state", [&](auto type, auto keys, dim3 grid) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(chunk_state_tc<T, KT, PerKey>, grid,
                            int64_t(sizeof(StateTiles<T, KT>) + 3) / 4, stream, p, x);
    });
}

template <bool PerKey>
void launch_state_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d, const StateGradInputs& f,
                         const float* P, void* dH, float* dvn, cudaStream_t stream) {
    with_state_grid<PerKey>(p, "dS", [&](auto type, auto keys, dim3 grid) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(state_bwd_tc<T, KT, PerKey>, grid,
                            int64_t(sizeof(StateGradTiles<T, KT, PerKey>) + 3) / 4, stream, p, d, f,
                            P, dH, dvn);
    });
}

}  // namespace

void delta_chunk_prep_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                         cudaStream_t stream) {
    with_tiles(p, [&](auto type, auto keys) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(chunk_prep_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                            int64_t(sizeof(PrepTiles<T, KT>) + 3) / 4, stream, p, x);
    });
}

void delta_chunk_state_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x,
                          cudaStream_t stream) {
    launch_state_tc<false>(p, StatePass{x.w, x.kn, x.u, x.v_new, x.h, x.G}, stream);
}

void kda_chunk_out_tc(const DeltaChunkProblem& p, const KdaChunkSaved& x, int64_t slots,
                      cudaStream_t stream) {
    with_tiles(p, [&](auto type, auto keys) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        if constexpr (KT > kMaxKdaChunkKeys)
            throw std::invalid_argument("the kda chunk output pass takes keys up to " +
                                        std::to_string(kMaxKdaChunkKeys));
        else
            launch_chunk_kernel(kda_out_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                                int64_t(sizeof(KdaOutTiles<T, KT>) + 3) / 4, stream, p, x);
    });
}

void kda_chunk_state_tc(const DeltaChunkProblem& p, const KdaChunkSaved& x, cudaStream_t stream) {
    launch_state_tc<true>(p, StatePass{x.w, x.kg, x.u, x.v_new, x.h, x.G}, stream);
}

void delta_chunk_state_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                              const DeltaChunkSaved& f, const float* P, void* dH, float* dvn,
                              cudaStream_t stream) {
    launch_state_bwd_tc<false>(p, d, {f.qn, f.kn, f.w, nullptr, f.G}, P, dH, dvn, stream);
}

void kda_chunk_state_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d, const KdaChunkSaved& f,
                            const float* P, void* dH, float* dvn, cudaStream_t stream) {
    launch_state_bwd_tc<true>(p, d, {f.qn, f.kn, nullptr, f.Wf, f.G}, P, dH, dvn, stream);
}

void delta_chunk_out_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                        cudaStream_t stream) {
    with_tiles(p, [&](auto type, auto keys) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(chunk_out_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                            int64_t(sizeof(OutTiles<T, KT>) + 3) / 4, stream, p, x);
    });
}

}  // namespace lav::cuda
