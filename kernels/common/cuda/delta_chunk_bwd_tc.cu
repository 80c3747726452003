// kernels/common/cuda/delta_chunk_bwd_tc.cu — the delta rules' chunk backward's scores and sums
// over value columns (delta_chunk_bwd.cu, passes 2a and 3) on tensor cores (mma.sync m16n8k16,
// fp32 accumulation), a block per (chunk slot, value head) as the FMA passes.
//
// The scores P = (q̂ k̂ᵀ) ⊙ e^{G_i − G_j} from q̂, k̂ in the input dtype. The sums: first those
// without a key axis, dov = dO v_newᵀ, dT = dv_new vbᵀ and dvb = Tiᵀ dv_new (dv = β dvb stored,
// dβ's value term Σ dvb ⊙ v), then, kRoundKeys keys a round, dw = −dv_new hᵀ, dq = dO hᵀ,
// dk = v_new dHᵀ and ⟨h, dH⟩; kValueCols value columns a step. The 16-bit operands (q̂, k̂, dO,
// v_new, vb = round(v β), Ti) are exact in the input dtype; the fp32 ones (dv_new, and h, dH in a
// wider state dtype) go in as kParts parts, and a product of two such takes the part pairs
// q + r < kParts, which reach fp32's precision: only the fp32 summation order differs from the
// FMA passes. kda's pass 3 (kda_chunk_bwd.cu) is the same kernel in its form: the fp32 inverse
// in parts, vb = β v with β applied after the product, dO v_newᵀ whole, ⟨h, dH⟩ per key.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/delta_chunk_tc.cuh"
#include "common/cuda/kda_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kValueCols = 32;  // value columns a step
constexpr int kRoundKeys = 64;  // keys a round
constexpr int kWarps = kDeltaChunkThreads / 32;

/// The scores' tiles: q̂ and k̂ of the chunk.
template <typename T, int KT>
struct ScoreTiles {
    alignas(16) T q[kRows][KT + 8];
    alignas(16) T k[kRows][KT + 8];
    float G[kRows];
};

/// The scores P into `P` ([slots, HV, C, C] fp32, rows and columns of the chunk), zero above the
/// diagonal. Warp w takes rows rb + [0, 16), columns cb + [0, 32).
// two blocks a multiprocessor or more (68 KB of tiles at keys 256)
template <typename T, int KT>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    scores_bwd_tc(DeltaChunkProblem p, DeltaChunkSaved f, float* P) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<ScoreTiles<T, KT>*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    copy_rows<kRows, KT>(s.q, f.qn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    copy_rows<kRows, KT>(s.k, f.kn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads)
        s.G[i] = i < L ? f.G[(r0 + i) * HV + hv] : 0.f;
    copies_wait();
    __syncthreads();
    const int rb = 16 * (warp % 4), cb = 32 * (warp / 4);
    float acc[4][4] = {};
    uint32_t a[4], b[2];
    for (int kk = 0; kk < KT; kk += 16) {
        fragment_a(a, s.q, rb, kk);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            if (cb + 8 * nt > rb + 15) continue;  // wholly above the diagonal
            fragment_b(b, s.k, cb + 8 * nt, kk);
            Half16<T>::mma(acc[nt], a, b);
        }
    }
    each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) {
        if (i >= L || j >= L) return;
        P[((slot * HV + hv) * C + i) * C + j] = j <= i ? acc[nt][u] * expf(s.G[i] - s.G[j]) : 0.f;
    });
}

/// A staged tile's row: kValueCols elements as loaded, fp32 or 16-bit (then in its first half).
constexpr int kStagePitch = kValueCols + 4;

/// Rows [0, rows) × columns [c0, c0 + kValueCols) of src in dtype d (row r at at + r · pitch;
/// zeros from column `width`) into the staging tile dst as raw elements: copied asynchronously
/// where the rows are 16-byte aligned (complete after copies_wait()), element by element
/// otherwise.
__device__ void stage(float (*dst)[kStagePitch], const void* src, DType d, int64_t at,
                      int64_t pitch, int rows, int c0, int width) {
    const int bytes = d == DType::f32 ? 4 : 2, per = 16 / bytes, vecs = kValueCols / per;
    const char* base = static_cast<const char*>(src) + (at + c0) * bytes;
    const bool vec =
        reinterpret_cast<uintptr_t>(base) % 16 == 0 && pitch % per == 0 && width % per == 0;
    for (int e = threadIdx.x; e < rows * vecs; e += kDeltaChunkThreads) {
        const int r = e / vecs, c = e % vecs * per;
        char* to = reinterpret_cast<char*>(dst[r]) + c * bytes;
        if (vec) {
            const bool in = c0 + c < width;
            copy16(to, in ? base + (r * pitch + c) * bytes : base, in);
            continue;
        }
        for (int q = 0; q < per; ++q) {
            const int col = c0 + c + q;
            const uint32_t x = col < width ? raw(src, d, at + r * pitch + col) : 0u;
            if (bytes == 4)
                reinterpret_cast<uint32_t*>(to)[q] = x;
            else
                reinterpret_cast<uint16_t*>(to)[q] = uint16_t(x);
        }
    }
}

/// Elements (r, c) and (r, c + 1) of a staged tile in dtype d, c even.
__device__ __forceinline__ float2 staged_pair(const float (*t)[kStagePitch], DType d, int r,
                                              int c) {
    if (d == DType::f32) return *reinterpret_cast<const float2*>(&t[r][c]);
    const uint32_t w = reinterpret_cast<const uint32_t*>(t[r])[c / 2];
    return make_float2(widen(w & 0xffffu, d), widen(w >> 16, d));
}

/// The sums' tiles: the operands of one step, and the next step's values as they come in (dO and
/// v_new straight into the other of two buffers). Pitches of 8 extra elements keep ldmatrix's
/// rows on distinct banks.
template <typename T>
struct KeyTiles {
    alignas(16) T h[kParts][kRoundKeys][kValueCols + 8];   // h as stored, in parts
    alignas(16) T dH[kParts][kRoundKeys][kValueCols + 8];  // dH as stored, the same
};

template <typename T>
struct ValueTiles {
    union {
        KeyTiles<T> keys;                            // the key steps'
        float v[kRows][kStagePitch];                 // the value steps' v as it is, for dβ's term
        alignas(16) T Tf[kParts][kRows][kRows + 8];  // kda's fp32 (I + A)⁻¹ in parts, lower
    };
    alignas(16) T dvn[kParts][kRows][kValueCols + 8];  // dv_new in parts, zero past the chunk
    alignas(16) T dO[2][kRows][kValueCols + 8];
    alignas(16) T vn[2][kRows][kValueCols + 8];  // v_new
    alignas(16) T vb[kRows][kValueCols + 8];     // round(v β)
    alignas(16) T Ti[kRows][kRows + 8];  // the rows of (I + A)⁻¹, zero above the diagonal
    alignas(16) float next_h[kRoundKeys][kStagePitch];  // h, or v in the value steps
    alignas(16) float next_dH[kRoundKeys][kStagePitch];
    alignas(16) float next_dvn[kRows][kStagePitch];
    float beta[kRows], G[kRows];
    float dbv[2][kRows];       // dβ's value term, by the two column halves of the warps
    float hd_key[kRoundKeys];  // kda's ⟨h, dH⟩ per key, over a round's steps
    float part[kWarps];
};

/// What the sums read of the forward's values: the delta rules' (DeltaChunkSaved) or kda's.
struct ValueInputs {
    const void* Ti = nullptr;   ///< [rows, HV, C] the rows of (I + A)⁻¹ in the input dtype
    const float* Tf = nullptr;  ///< kda's, in fp32 (Ti nullptr)
    const void *v_new = nullptr, *h = nullptr;
    const float *beta = nullptr, *G = nullptr;  ///< G [rows, HV]: the delta rules' only
};

/// The sums: the value steps n < nv (nv steps of kValueCols columns), then nv steps a key round;
/// each step's loads are issued before the step before it computes. PerKey: kda's form of them,
/// with (I + A)⁻¹ in fp32 (three parts), vb = β v unrounded (β applied to dT's columns after
/// the product with v), dO v_newᵀ kept whole and unscaled, and ⟨h, dH⟩ per key.
// two blocks a multiprocessor (110 KB of tiles): registers up to 128, which the key round's
// three [64, kRoundKeys] sums leave room in
template <typename T, bool PerKey>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    values_bwd_tc(DeltaChunkProblem p, DeltaGrads d, ValueInputs f, DeltaValueSums x) {
    extern __shared__ float sm[];
    auto& s = *reinterpret_cast<ValueTiles<T>*>(sm);
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), vo = (r0 * HV + hv) * V;
    const int64_t state = (slot * HV + hv) * K * V;
    const int parts = p.state == p.q.dtype ? 1 : kParts;  // of h and dH
    const int nv = (V + kValueCols - 1) / kValueCols;
    const int total = nv * (1 + (K + kRoundKeys - 1) / kRoundKeys);
    const auto issue = [&](int n) {
        if (n >= total) return;
        const int c0 = n % nv * kValueCols, buf = n % 2;
        copy_rows<kRows, kValueCols>(s.dO[buf], d.d_o.data, at(d.d_o, ck.s, ck.c0, hv) + c0,
                                     d.d_o.st, L, V - c0);
        copy_rows<kRows, kValueCols>(s.vn[buf], f.v_new, vo + c0, int64_t(HV) * V, L, V - c0);
        stage(s.next_dvn, x.dvn, DType::f32, vo, int64_t(HV) * V, L, c0, V);
        if (n < nv) {
            stage(s.next_h, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, L, c0, V);
            return;
        }
        const int k0 = (n - nv) / nv * kRoundKeys, nk = min(kRoundKeys, K - k0);
        stage(s.next_h, f.h, p.state, state + int64_t(k0) * V, V, nk, c0, V);
        stage(s.next_dH, x.dH, p.state, state + int64_t(k0) * V, V, nk, c0, V);
    };
    // dv_new's parts (rows past the chunk zero: dvb's contraction runs over them), two
    // adjacent columns at a time as every staged tile below
    constexpr int kPairs = kValueCols / 2;
    const auto take_dvn = [&] {
        for (int e = tid; e < kRows * kPairs; e += kDeltaChunkThreads) {
            const int i = e / kPairs, c = e % kPairs * 2;
            const float2 x = i < L ? staged_pair(s.next_dvn, DType::f32, i, c) : float2{};
            split_pair_parts(s.dvn, i, c, x.x, x.y);
        }
    };
    issue(0);
    if constexpr (PerKey)
        split_square(s.Tf, f.Tf + (r0 * HV + hv) * C, int64_t(HV) * C, L, true);
    else
        copy_rows<kRows, kRows>(s.Ti, f.Ti, (r0 * HV + hv) * C, int64_t(HV) * C, L, L);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads) {
        s.beta[i] = i < L ? f.beta[(r0 + i) * HV + hv] : 0.f;
        if (!PerKey) s.G[i] = i < L ? f.G[(r0 + i) * HV + hv] : 0.f;
    }
    // warp w: rows rb + [0, 16) of every product
    const int rb = 16 * (warp % 4), half = warp / 4;
    {
        // dov and dT over columns cb + [0, 32) of the chunk's rows; dvb over the step's columns
        // cv + [0, 16)
        const int cb = 32 * half, cv = 16 * half;
        float ov[4][4] = {}, tv[4][4] = {}, dbv[2] = {};
        for (int n = 0; n < nv; ++n) {
            const int c0 = n * kValueCols, buf = n % 2;
            copies_wait();
            __syncthreads();  // the step's values are in, and the step before is done
            if (!PerKey && n == 0)
                for (int e = tid; e < kRows * kRows; e += kDeltaChunkThreads)
                    if (e % kRows > e / kRows) s.Ti[e / kRows][e % kRows] = Half16<T>::from(0.f);
            take_dvn();
            for (int e = tid; e < L * kPairs; e += kDeltaChunkThreads) {
                const int i = e / kPairs, c = e % kPairs * 2;
                const float2 v = staged_pair(s.next_h, p.v.dtype, i, c);
                if constexpr (PerKey) {
                    *reinterpret_cast<uint32_t*>(&s.vb[i][c]) = pair<T>(v.x, v.y);
                } else {
                    *reinterpret_cast<uint32_t*>(&s.vb[i][c]) =
                        pair<T>(v.x * s.beta[i], v.y * s.beta[i]);
                    *reinterpret_cast<float2*>(&s.v[i][c]) = v;
                }
            }
            __syncthreads();
            issue(n + 1);
            uint32_t a[4], ad[kParts][4], b[2];
#pragma unroll
            for (int kk = 0; kk < kValueCols; kk += 16) {
                fragment_a(a, s.dO[buf], rb, kk);
#pragma unroll
                for (int q = 0; q < kParts; ++q) fragment_a(ad[q], s.dvn[q], rb, kk);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    fragment_b(b, s.vn[buf], cb + 8 * nt, kk);
                    Half16<T>::mma(ov[nt], a, b);
                    fragment_b(b, s.vb, cb + 8 * nt, kk);
#pragma unroll
                    for (int q = 0; q < kParts; ++q) Half16<T>::mma(tv[nt], ad[q], b);
                }
            }
            // Ti_mi is zero for m < i: the contraction starts at the diagonal block
            float db[2][4] = {};
            for (int m0 = rb; m0 < kRows; m0 += 16) {
                // kda's fp32 inverse in parts: the pairs of parts q + r < kParts
                uint32_t at[kParts][4];
#pragma unroll
                for (int q = 0; q < (PerKey ? kParts : 1); ++q)
                    fragment_a_rows(at[q], PerKey ? s.Tf[q] : s.Ti, m0, rb);
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int r = 0; r < kParts; ++r) {
                        fragment_b_rows(b, s.dvn[r], m0, cv + 8 * nt);
#pragma unroll
                        for (int q = 0; q + r < (PerKey ? kParts : r + 1); ++q)
                            Half16<T>::mma(db[nt], at[q], b);
                    }
            }
            each_accumulator<2, true>(rb, cv, [&](int nt, int u, int i, int c) {
                if (i >= L || c0 + c >= V) return;
                store_pair(d.dv.data, d.dv.dtype, at(d.dv, ck.s, ck.c0 + i, hv) + c0 + c,
                           db[nt][u] * s.beta[i], db[nt][u + 1] * s.beta[i], c0 + c + 1 < V);
                // kda's v is exact in T, as the inputs' dtype
                const float2 v = PerKey ? to_float2<T>(word(&s.vb[i][c]))
                                        : make_float2(s.v[i][c], s.v[i][c + 1]);
                dbv[u / 2] += db[nt][u] * v.x;
                dbv[u / 2] += db[nt][u + 1] * v.y;
            });
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            dbv[r] += __shfl_xor_sync(~0u, dbv[r], 1);
            dbv[r] += __shfl_xor_sync(~0u, dbv[r], 2);
            if (lane % 4 == 0) s.dbv[half][rb + lane / 4 + 8 * r] = dbv[r];
        }
        each_accumulator<4>(rb, cb, [&](int nt, int u, int i, int j) {
            if (i >= L || j >= L) return;
            const int64_t o = ((slot * HV + hv) * C + i) * C + j;
            if constexpr (PerKey) {
                x.dov[o] = ov[nt][u];
                x.dT[o] = tv[nt][u] * s.beta[j];
            } else {
                x.dov[o] = j <= i ? ov[nt][u] * expf(s.G[i] - s.G[j]) * p.scale : 0.f;
                x.dT[o] = tv[nt][u];
            }
        });
    }
    // the key rounds: warp w takes keys cb + [0, kRoundKeys / 2) of the round
    constexpr int NT = kRoundKeys / 16;
    const int cb = kRoundKeys / 2 * half;
    float hd = 0.f, dw[NT][4], dq[NT][4], dk[NT][4];
    for (int n = nv; n < total; ++n) {
        const int k0 = (n - nv) / nv * kRoundKeys, nk = min(kRoundKeys, K - k0), buf = n % 2;
        if (n % nv == 0)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int u = 0; u < 4; ++u) dw[nt][u] = dq[nt][u] = dk[nt][u] = 0.f;
        copies_wait();
        __syncthreads();  // the step's values are in, and the step before is done
        take_dvn();
        for (int e = tid; e < kRoundKeys * kPairs; e += kDeltaChunkThreads) {
            const int dd = e / kPairs, c = e % kPairs * 2;
            const float2 hx = staged_pair(s.next_h, p.state, dd, c);
            const float2 dx = staged_pair(s.next_dH, p.state, dd, c);
            split_pair_parts(s.keys.h, dd, c, hx.x, hx.y);
            split_pair_parts(s.keys.dH, dd, c, dx.x, dx.y);
            if (!PerKey && dd < nk) hd += hx.x * dx.x + hx.y * dx.y;
            if constexpr (PerKey) {
                // the key's kPairs pairs lie in 16 adjacent lanes, which add them in one order
                float t = hx.x * dx.x + hx.y * dx.y;
                for (int o = kPairs / 2; o > 0; o /= 2) t += __shfl_xor_sync(~0u, t, o);
                if (lane % kPairs == 0) s.hd_key[dd] = (n % nv == 0 ? 0.f : s.hd_key[dd]) + t;
            }
        }
        __syncthreads();
        issue(n + 1);
        uint32_t ao[4], av[4], ad[kParts][4], bh[kParts][2], bd[kParts][2];
#pragma unroll
        for (int kk = 0; kk < kValueCols; kk += 16) {
            fragment_a(ao, s.dO[buf], rb, kk);
            fragment_a(av, s.vn[buf], rb, kk);
#pragma unroll
            for (int q = 0; q < kParts; ++q) fragment_a(ad[q], s.dvn[q], rb, kk);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int n0 = cb + 8 * nt;
#pragma unroll
                for (int r = 0; r < kParts; ++r) {
                    if (r >= parts) break;
                    fragment_b(bh[r], s.keys.h[r], n0, kk);
                    fragment_b(bd[r], s.keys.dH[r], n0, kk);
                    Half16<T>::mma(dq[nt], ao, bh[r]);
                    Half16<T>::mma(dk[nt], av, bd[r]);
                }
#pragma unroll
                for (int q = 0; q < kParts; ++q)
#pragma unroll
                    for (int r = 0; r + q < kParts; ++r)
                        if (r < parts) Half16<T>::mma(dw[nt], ad[q], bh[r]);
            }
        }
        if (n % nv != nv - 1) continue;
        each_accumulator<NT>(rb, cb, [&](int nt, int u, int i, int dd) {
            if (i >= L || dd >= nk) return;
            const int64_t o = ((r0 + i) * HV + hv) * K + k0 + dd;
            x.dw[o] = -dw[nt][u];
            x.dq[o] = dq[nt][u];
            x.dk[o] = dk[nt][u];
        });
        if (PerKey)
            for (int dd = tid; dd < nk; dd += kDeltaChunkThreads)
                x.hdH[(slot * HV + hv) * K + k0 + dd] = s.hd_key[dd];
    }
    hd = warp_sum(hd);
    if (lane == 0) s.part[warp] = hd;
    __syncthreads();
    if (!PerKey && tid == 0) {
        float sum = 0.f;
        for (int w = 0; w < kWarps; ++w) sum += s.part[w];
        x.hdH[slot * HV + hv] = sum;
    }
    for (int i = tid; i < L; i += kDeltaChunkThreads)
        x.dbv[(r0 + i) * HV + hv] = s.dbv[0][i] + s.dbv[1][i];
}

template <bool PerKey>
void launch(const DeltaChunkProblem& p, const DeltaGrads& d, const ValueInputs& f,
            const DeltaValueSums& x, int64_t slots, cudaStream_t stream) {
    const auto go = [&](auto type) {
        using T = decltype(type);
        launch_chunk_kernel(values_bwd_tc<T, PerKey>,
                            dim3(unsigned(slots), unsigned(p.value_heads)),
                            int64_t(sizeof(ValueTiles<T>) + 3) / 4, stream, p, d, f, x);
    };
    if (p.q.dtype == DType::bf16)
        go(__nv_bfloat16{});
    else
        go(__half{});
}

}  // namespace

void delta_chunk_scores_bwd_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& f, float* P,
                               int64_t slots, cudaStream_t stream) {
    with_tiles(p, [&](auto type, auto keys) {
        using T = decltype(type);
        constexpr int KT = decltype(keys)::value;
        launch_chunk_kernel(scores_bwd_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                            int64_t(sizeof(ScoreTiles<T, KT>) + 3) / 4, stream, p, f, P);
    });
}

void delta_chunk_values_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                               const DeltaChunkSaved& f, const DeltaValueSums& x, int64_t slots,
                               cudaStream_t stream) {
    launch<false>(p, d, {f.Ti, nullptr, f.v_new, f.h, f.beta, f.G}, x, slots, stream);
}

void kda_chunk_values_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                             const KdaChunkSaved& f, const DeltaValueSums& x, int64_t slots,
                             cudaStream_t stream) {
    launch<true>(p, d, {nullptr, f.Tf, f.v_new, f.h, f.beta, nullptr}, x, slots, stream);
}

}  // namespace lav::cuda
