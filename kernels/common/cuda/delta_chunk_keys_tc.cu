// kernels/common/cuda/delta_chunk_keys_tc.cu — the delta rules' chunk backward's keys pass
// (delta_chunk_bwd.cu, pass 4) on tensor cores (mma.sync m16n8k16, fp32 accumulation), a block
// per (chunk slot, value head) as the FMA pass.
//
// Its products: dT = dT_v + dw kbᵀ, X = Tiᵀ dT, dA = −X Tiᵀ (M = dA ⊙ e^{G_i − G_j} below the
// diagonal) and k̂ k̂ᵀ over the chunk; then, kRoundKeys keys a round, dq̂ = dov k̂, dkb = Tiᵀ dw,
// dk̂'s Σ_{j ≥ i} dov_ji q̂_j and its two M terms Σ_{j<i} M_ij β_i k̂_j + Σ_{j>i} M_ji β_j k̂_j,
// one product with the key weights W_ij = M_ij β_i below the diagonal and M_ji β_j above it. The
// 16-bit operands (k̂, q̂, kb = round(k̂ β e^G), Ti) are exact in the input dtype; the fp32 ones
// (dw, dT, X, dov, W) go in as kParts parts, whose products with an exact operand reach fp32's
// precision: only the fp32 summation order differs from the FMA pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/delta_chunk_tc.cuh"

namespace lav::cuda {
namespace {

constexpr int kRoundKeys = 64;      // keys a round of dw's parts and of the per-key products
constexpr int kSquare = kRows + 8;  // the pitch of a [chunk, chunk] 16-bit tile

template <typename T, int KT>
struct KeyPassTiles {
    alignas(16) T k[kRows][KT + 8];             // k̂
    alignas(16) T y[kRows][KT + 8];             // kb = round(k̂ β e^G), then q̂
    alignas(16) T Ti[kRows][kSquare];           // (I + A)⁻¹, zero above the diagonal
    alignas(16) T dov[kParts][kRows][kSquare];  // scale (dO v_newᵀ ⊙ D)
    alignas(16) T x[kParts][kRows][kSquare];    // dT, then X = Tiᵀ dT, then the key weights W
    union {
        alignas(16) T dw[kParts][kRows][kSquare];  // a round's dw
        float M[kRows][kRows + 1];                 // M, then M ⊙ k̂ k̂ᵀ
    };
    float G[kRows], beta[kRows];
    float dG[kRows], db[kRows], kdk[kRows];  // ∂L/∂G before the reverse sum, dβ, k̂·dk_inter
    float sums[4][2][kRows];  // per row, by the two column halves of the warps: q̂·dq̂,
                              // k̂·(dk_intra + dk_inter), dkb·k̂, k̂·dk_inter
};

// one block a multiprocessor (130 KB of tiles at keys 128): registers up to 255
template <typename T, int KT>
__global__ void __launch_bounds__(kDeltaChunkThreads, 1)
    keys_bwd_tc(DeltaChunkProblem p, DeltaGrads d, DeltaChunkSaved f, DeltaValueSums x,
                float* dA_log, float* ddt) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<KeyPassTiles<T, KT>*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), cc = (slot * HV + hv) * C * C;
    const int64_t keys = (r0 * p.heads + h) * K, ko = (r0 * HV + hv) * K;
    copy_rows<kRows, KT>(s.k, f.kn, keys, int64_t(p.heads) * K, L, K);
    copy_rows<kRows, kRows>(s.Ti, f.Ti, (r0 * HV + hv) * C, int64_t(HV) * C, L, L);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads) {
        s.G[i] = i < L ? f.G[(r0 + i) * HV + hv] : 0.f;
        s.beta[i] = i < L ? f.beta[(r0 + i) * HV + hv] : 0.f;
    }
    // [64, 64] fp32 tiles into parts two adjacent columns at a time, zeros past the chunk: a
    // thread's loads all issued before its first split, so that it waits out one latency
    static_assert(kRoundKeys == kRows, "dw's rounds are square tiles");
    constexpr int kPairs = kRows / 2, kPerThread = kRows * kPairs / kDeltaChunkThreads;
    const auto take = [&](T(*parts)[kRows][kSquare], const float* src, int64_t pitch, int rows,
                          int cols) {
        float2 v[kPerThread];
#pragma unroll
        for (int n = 0; n < kPerThread; ++n) {
            const int e = tid + n * kDeltaChunkThreads, i = e / kPairs, j = e % kPairs * 2;
            const float* from = src + i * pitch + j;
            v[n] = make_float2(i < rows && j < cols ? from[0] : 0.f,
                               i < rows && j + 1 < cols ? from[1] : 0.f);
        }
#pragma unroll
        for (int n = 0; n < kPerThread; ++n) {
            const int e = tid + n * kDeltaChunkThreads;
            split_pair_parts(parts, e / kPairs, e % kPairs * 2, v[n].x, v[n].y);
        }
    };
    take(s.dov, x.dov + cc, C, L, L);
    const auto take_dw = [&](int k0) { take(s.dw, x.dw + ko + k0, int64_t(HV) * K, L, K - k0); };
    copies_wait();
    __syncthreads();
    for (int e = tid; e < kRows * kRows; e += kDeltaChunkThreads)
        if (e % kRows > e / kRows) s.Ti[e / kRows][e % kRows] = Half16<T>::from(0.f);
    // kb = round(k̂ β e^G), as the forward rounds it
    for (int e = tid; e < kRows * KT / 2; e += kDeltaChunkThreads) {
        const int i = e / (KT / 2), c = e % (KT / 2) * 2;
        const float bd = s.beta[i] * expf(s.G[i]);
        const float2 k = to_float2<T>(word(&s.k[i][c]));
        *reinterpret_cast<uint32_t*>(&s.y[i][c]) = pair<T>(k.x * bd, k.y * bd);
    }
    // warp w: rows rb + [0, 16) of every product, columns cb + [0, 32) of the [chunk, chunk]
    // ones and of a round's keys
    const int rb = 16 * (warp % 4), half = warp / 4, cb = 32 * half;
    uint32_t a[kParts][4], b[2], bn[4][2];
    // acc[nt] += Σ_q a[q] bn[nt], the four accumulators' chains interleaved
    const auto mma_tiles = [](float(&acc)[4][4], const uint32_t(&a)[kParts][4],
                              const uint32_t(&bn)[4][2]) {
#pragma unroll
        for (int q = 0; q < kParts; ++q)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) Half16<T>::mma(acc[nt], a[q], bn[nt]);
    };
    // acc[nt] += a0 · Σ_q x[q] over the columns c0 + 8 nt from contraction m0 (x stored
    // [contraction][column] in parts)
    const auto mma_parts_b = [&](float(&acc)[4][4], const uint32_t(&a0)[4], T(*x)[kRows][kSquare],
                                 int m0, int c0) {
#pragma unroll
        for (int q = 0; q < kParts; ++q) {
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) fragment_b_rows(bn[nt], x[q], m0, c0 + 8 * nt);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) Half16<T>::mma(acc[nt], a0, bn[nt]);
        }
    };
    // a [chunk, chunk] accumulator into parts in t (rows and columns past the chunk zero)
    const auto keep = [&](T(*t)[kRows][kSquare], const float(&acc)[4][4]) {
        each_accumulator<4, true>(rb, cb, [&](int nt, int u, int i, int j) {
            const bool in = i < L;
            split_pair_parts(t, i, j, in && j < L ? acc[nt][u] : 0.f,
                             in && j + 1 < L ? acc[nt][u + 1] : 0.f);
        });
    };
    {
        // dT = dT_v + dw kbᵀ over the key rounds, dT_v fetched first
        float acc[4][4] = {}, dT[4][4];
        each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) {
            dT[nt][u] = i < L && j < L ? x.dT[cc + i * C + j] : 0.f;
        });
        for (int k0 = 0; k0 < K; k0 += kRoundKeys) {
            __syncthreads();  // the round before is done with dw's parts
            take_dw(k0);
            __syncthreads();
            for (int kk = 0; kk < kRoundKeys && k0 + kk < K; kk += 16) {
#pragma unroll
                for (int q = 0; q < kParts; ++q) fragment_a(a[q], s.dw[q], rb, kk);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) fragment_b(bn[nt], s.y, cb + 8 * nt, k0 + kk);
                mma_tiles(acc, a, bn);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) acc[nt][u] += dT[nt][u];
        keep(s.x, acc);
    }
    __syncthreads();  // kb is read
    copy_rows<kRows, KT>(s.y, f.qn, keys, int64_t(p.heads) * K, L, K);
    {
        // X = Tiᵀ dT: Ti_mi is zero for m < i, so the contraction starts at the diagonal block
        float acc[4][4] = {};
        for (int m0 = rb; m0 < L; m0 += 16) {
            fragment_a_rows(a[0], s.Ti, m0, rb);
            mma_parts_b(acc, a[0], s.x, m0, cb);
        }
        __syncthreads();  // dT is read
        keep(s.x, acc);
        __syncthreads();
    }
    {
        // dA = −X Tiᵀ below the diagonal (Ti_jm is zero for m > j, so the contraction ends at the
        // diagonal block) and k̂ k̂ᵀ
        float da[4][4] = {}, kk[4][4] = {};
        for (int m0 = 0; m0 <= rb && m0 < L; m0 += 16) {
#pragma unroll
            for (int q = 0; q < kParts; ++q) fragment_a(a[q], s.x[q], rb, m0);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                if (cb + 8 * nt > rb + 15) continue;  // wholly above the diagonal
                fragment_b(b, s.Ti, cb + 8 * nt, m0);
#pragma unroll
                for (int q = 0; q < kParts; ++q) Half16<T>::mma(da[nt], a[q], b);
            }
        }
        for (int d0 = 0; d0 < K; d0 += 16) {
            fragment_a(a[0], s.k, rb, d0);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                if (cb + 8 * nt > rb + 15) continue;
                fragment_b(b, s.k, cb + 8 * nt, d0);
                Half16<T>::mma(kk[nt], a[0], b);
            }
        }
        // M in dw's place, which the dT rounds are done with
        each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) {
            s.M[i][j] = j < i && i < L ? -da[nt][u] * expf(s.G[i] - s.G[j]) : 0.f;
        });
        __syncthreads();
        // the key weights W in X's place, which dA has read
        for (int e = tid; e < kRows * kPairs; e += kDeltaChunkThreads) {
            const int i = e / kPairs, j = e % kPairs * 2;
            const auto weight = [&](int j) {
                return j < i ? s.M[i][j] * s.beta[i] : j > i ? s.M[j][i] * s.beta[j] : 0.f;
            };
            split_pair_parts(s.x, i, j, weight(j), weight(j + 1));
        }
        __syncthreads();
        each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) { s.M[i][j] *= kk[nt][u]; });
        __syncthreads();
        // E = M ⊙ k̂ k̂ᵀ's terms, a warp a row and a lane two columns: dβ's Σ_{j<i} E_ij, ∂L/∂G's
        // β_i Σ_{j<i} E_ij − Σ_{j>i} E_ji β_j (E is zero on and above the diagonal)
        for (int i = warp; i < L; i += kDeltaChunkThreads / 32) {
            float mk = s.M[i][lane] + s.M[i][lane + 32], above = 0.f;
            for (int j = lane; j < L; j += 32) above += s.M[j][i] * s.beta[j];
            mk = warp_sum(mk);
            above = warp_sum(above);
            if (lane != 0) continue;
            s.db[i] = mk;
            s.dG[i] = mk * s.beta[i] - above;
        }
    }
    // the key rounds: a thread's two rows' factors, and its shares of the per-row sums
    float fq[2], fe[2], fb[2], part[4][2] = {};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float g = s.G[rb + acc_row(2 * r)];
        fq[r] = expf(g) * p.scale;
        fe[r] = expf(s.G[L - 1] - g);
        fb[r] = s.beta[rb + acc_row(2 * r)] * expf(g);
    }
    copies_wait();  // q̂
    for (int k0 = 0; k0 < K; k0 += kRoundKeys) {
        __syncthreads();  // E's sums, or the round before, are done with dw's place
        take_dw(k0);
        __syncthreads();
        // the state terms fetched before the products, which hide their latency
        float dq_state[4][4], dk_state[4][4];
        each_accumulator<4>(rb, k0 + cb, [&](int nt, int u, int i, int dd) {
            const int64_t o = ko + int64_t(i) * HV * K + dd;
            dq_state[nt][u] = i < L && dd < K ? x.dq[o] : 0.f;
            dk_state[nt][u] = i < L && dd < K ? x.dk[o] : 0.f;
        });
        // dov k̂ (j ≤ i), W k̂, dovᵀ q̂ (j ≥ i) and Tiᵀ dw (j ≥ i)
        float dq[4][4] = {}, dk[4][4] = {}, in[4][4] = {}, kb[4][4] = {};
        for (int m0 = 0; m0 < L; m0 += 16) {
#pragma unroll
            for (int q = 0; q < kParts; ++q) fragment_a(a[q], s.x[q], rb, m0);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) fragment_b_rows(bn[nt], s.k, m0, k0 + cb + 8 * nt);
            mma_tiles(dk, a, bn);
            if (m0 <= rb) {
#pragma unroll
                for (int q = 0; q < kParts; ++q) fragment_a(a[q], s.dov[q], rb, m0);
                mma_tiles(dq, a, bn);
            }
            if (m0 < rb) continue;
#pragma unroll
            for (int q = 0; q < kParts; ++q) fragment_a_rows(a[q], s.dov[q], m0, rb);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) fragment_b_rows(bn[nt], s.y, m0, k0 + cb + 8 * nt);
            mma_tiles(in, a, bn);
            fragment_a_rows(a[0], s.Ti, m0, rb);
            mma_parts_b(kb, a[0], s.dw, m0, cb);
        }
        each_accumulator<4>(rb, k0 + cb, [&](int nt, int u, int i, int dd) {
            if (i >= L || dd >= K) return;
            const int64_t o = ko + int64_t(i) * HV * K + dd;
            const int r = u / 2;
            const float inter = dk_state[nt][u] * fe[r];
            const float dqv = dq_state[nt][u] * fq[r] + dq[nt][u];
            const float intra = in[nt][u] + inter;
            x.dq[o] = dqv;
            x.dk[o] = intra + kb[nt][u] * fb[r] + dk[nt][u];
            const float qv = Half16<T>::to(s.y[i][dd]), kv = Half16<T>::to(s.k[i][dd]);
            part[0][r] += qv * dqv;
            part[1][r] += kv * intra;
            part[2][r] += kb[nt][u] * kv;
            part[3][r] += kv * inter;
        });
    }
#pragma unroll
    for (int c = 0; c < 4; ++c)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float v = part[c][r];
            v += __shfl_xor_sync(~0u, v, 1);
            v += __shfl_xor_sync(~0u, v, 2);
            if (lane % 4 == 0) s.sums[c][half][rb + lane / 4 + 8 * r] = v;
        }
    __syncthreads();
    for (int i = tid; i < L; i += kDeltaChunkThreads) {
        const auto sum = [&](int c) { return s.sums[c][0][i] + s.sums[c][1][i]; };
        const float decay = expf(s.G[i]), skb = sum(2);
        s.db[i] += skb * decay + x.dbv[(r0 + i) * HV + hv];
        s.dG[i] += sum(0) - sum(1) + skb * (s.beta[i] * decay);
        s.kdk[i] = sum(3);
    }
    __syncthreads();
    store_key_grads(p, d, ck, hv, r0, s.G, s.dG, s.db, s.kdk, x.hdH + slot * HV + hv, dA_log, ddt);
}

}  // namespace

void delta_chunk_keys_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                             const DeltaChunkSaved& f, const DeltaValueSums& x, float* dA_log,
                             float* ddt, int64_t slots, cudaStream_t stream) {
    with_tiles(p, [&](auto type, auto keys) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(keys_bwd_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                            int64_t(sizeof(KeyPassTiles<T, KT>) + 3) / 4, stream, p, d, f, x,
                            dA_log, ddt);
    });
}

}  // namespace lav::cuda
