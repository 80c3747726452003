// kernels/common/cuda/delta_values_bwd_tc.cu — the delta rules' chunk backward's sums over value
// columns (delta_chunk_bwd.cu, pass 3) on tensor cores (mma.sync m16n8k16, fp32 accumulation).
//
// A block per (chunk slot, value head), as the FMA pass: first the sums without a key axis,
// dov = dO v_newᵀ, dT = dv_new vbᵀ and dvb = Tiᵀ dv_new (dv = β dvb stored, dβ's value term
// Σ dvb ⊙ v), then, kRoundKeys keys a round, dw = −dv_new hᵀ, dq = dO hᵀ, dk = v_new dHᵀ and
// ⟨h, dH⟩; kValueCols value columns a step. The 16-bit operands (dO, v_new, vb = round(v β), Ti)
// are exact in the input dtype; the fp32 ones (dv_new, and h, dH in a wider state dtype) go in as
// kParts parts, and a product of two such takes the part pairs q + r < kParts, which reach fp32's
// precision: only the fp32 summation order differs from the FMA pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/delta_chunk_tc.cuh"

namespace lav::cuda {
namespace {

constexpr int kValueCols = 32;  // value columns a step
constexpr int kRoundKeys = 64;  // keys a round
constexpr int kWarps = kDeltaChunkThreads / 32;

/// The pass's tiles: pitches of 8 extra elements keep ldmatrix's rows on distinct banks.
template <typename T>
struct ValueTiles {
    alignas(16) T h[kParts][kValueCols][kRoundKeys + 8];   // h as stored, [column][key], in parts
    alignas(16) T dH[kParts][kValueCols][kRoundKeys + 8];  // dH as stored, the same
    alignas(16) T dvn[kParts][kRows][kValueCols + 8];      // dv_new in parts, zero past the chunk
    alignas(16) T dO[kRows][kValueCols + 8];
    alignas(16) T vn[kRows][kValueCols + 8];  // v_new
    alignas(16) T vb[kRows][kValueCols + 8];  // round(v β)
    alignas(16) T Ti[kRows][kRows + 8];       // the rows of (I + A)⁻¹, zero above the diagonal
    float beta[kRows], G[kRows];
    float dbv[2][kRows];  // dβ's value term, by the two column halves of the warps
    float part[kWarps];
};

// two blocks a multiprocessor (69 KB of tiles): registers up to 128, which the key round's three
// [64, kRoundKeys] sums leave room in; each step waits out a few load latencies, which the other
// block's steps hide
template <typename T>
__global__ void __launch_bounds__(kDeltaChunkThreads, 2)
    values_bwd_tc(DeltaChunkProblem p, DeltaGrads d, DeltaChunkSaved f, DeltaValueSums x) {
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
    copy_rows<kRows, kRows>(s.Ti, f.Ti, (r0 * HV + hv) * C, int64_t(HV) * C, L, L);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads) {
        s.beta[i] = i < L ? f.beta[(r0 + i) * HV + hv] : 0.f;
        s.G[i] = i < L ? f.G[(r0 + i) * HV + hv] : 0.f;
    }
    copies_wait();
    __syncthreads();
    for (int e = tid; e < kRows * kRows; e += kDeltaChunkThreads)
        if (e % kRows > e / kRows) s.Ti[e / kRows][e % kRows] = Half16<T>::from(0.f);
    // dO, v_new and dv_new of the value step from c0 (dv_new's rows past the chunk zero: dvb's
    // contraction runs over them)
    const auto values = [&](int c0) {
        copy_rows<kRows, kValueCols>(s.dO, d.d_o.data, at(d.d_o, ck.s, ck.c0, hv) + c0, d.d_o.st, L,
                                     V - c0);
        copy_rows<kRows, kValueCols>(s.vn, f.v_new, vo + c0, int64_t(HV) * V, L, V - c0);
        gather_tile(L, kValueCols, x.dvn, DType::f32, vo, int64_t(HV) * V, c0, V,
                    [&](int i, int c, float v) { split_parts(s.dvn, i, c, v); });
        for (int e = L * kValueCols + tid; e < kRows * kValueCols; e += kDeltaChunkThreads)
            split_parts(s.dvn, e / kValueCols, e % kValueCols, 0.f);
    };
    // warp w: rows rb + [0, 16) of every product
    const int rb = 16 * (warp % 4), half = warp / 4;
    {
        // dov and dT over columns cb + [0, 32) of the chunk's rows; dvb over the step's columns
        // cv + [0, 16)
        const int cb = 32 * half, cv = 16 * half;
        float ov[4][4] = {}, tv[4][4] = {}, dbv[2] = {};
        for (int c0 = 0; c0 < V; c0 += kValueCols) {
            __syncthreads();  // the previous step is done with every tile
            values(c0);
            gather_tile(
                L, kValueCols, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, c0, V,
                [&](int i, int c, float v) { s.vb[i][c] = Half16<T>::from(v * s.beta[i]); });
            copies_wait();
            __syncthreads();
            uint32_t a[4], ad[kParts][4], b[2];
#pragma unroll
            for (int kk = 0; kk < kValueCols; kk += 16) {
                fragment_a(a, s.dO, rb, kk);
#pragma unroll
                for (int q = 0; q < kParts; ++q) fragment_a(ad[q], s.dvn[q], rb, kk);
#pragma unroll
                for (int nt = 0; nt < 4; ++nt) {
                    fragment_b(b, s.vn, cb + 8 * nt, kk);
                    Half16<T>::mma(ov[nt], a, b);
                    fragment_b(b, s.vb, cb + 8 * nt, kk);
#pragma unroll
                    for (int q = 0; q < kParts; ++q) Half16<T>::mma(tv[nt], ad[q], b);
                }
            }
            // Ti_mi is zero for m < i: the contraction starts at the diagonal block
            float db[2][4] = {};
            for (int m0 = rb; m0 < kRows; m0 += 16) {
                fragment_a_rows(a, s.Ti, m0, rb);
#pragma unroll
                for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                    for (int q = 0; q < kParts; ++q) {
                        fragment_b_rows(b, s.dvn[q], m0, cv + 8 * nt);
                        Half16<T>::mma(db[nt], a, b);
                    }
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int i = rb + acc_row(u), c = c0 + cv + 8 * nt + acc_col(u);
                    if (i >= L || c >= V) continue;
                    const int64_t t = ck.c0 + i;
                    store(d.dv.data, d.dv.dtype, at(d.dv, ck.s, t, hv) + c, db[nt][u] * s.beta[i]);
                    dbv[u / 2] += db[nt][u] * load(p.v.data, p.v.dtype, at(p.v, ck.s, t, hv) + c);
                }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            dbv[r] += __shfl_xor_sync(~0u, dbv[r], 1);
            dbv[r] += __shfl_xor_sync(~0u, dbv[r], 2);
            if (lane % 4 == 0) s.dbv[half][rb + lane / 4 + 8 * r] = dbv[r];
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = rb + acc_row(u), j = cb + 8 * nt + acc_col(u);
                if (i >= L || j >= L) continue;
                const int64_t o = ((slot * HV + hv) * C + i) * C + j;
                x.dov[o] = j <= i ? ov[nt][u] * expf(s.G[i] - s.G[j]) * p.scale : 0.f;
                x.dT[o] = tv[nt][u];
            }
    }
    // the key rounds: warp w takes keys cb + [0, kRoundKeys / 2) of the round
    constexpr int NT = kRoundKeys / 16;
    const int cb = kRoundKeys / 2 * half;
    float hd = 0.f;
    for (int k0 = 0; k0 < K; k0 += kRoundKeys) {
        const int nk = K - k0 < kRoundKeys ? K - k0 : kRoundKeys;
        const int64_t hk = state + int64_t(k0) * V;
        float dw[NT][4] = {}, dq[NT][4] = {}, dk[NT][4] = {};
        for (int c0 = 0; c0 < V; c0 += kValueCols) {
            __syncthreads();  // the previous step is done with every tile
            values(c0);
            gather_tile(nk, kValueCols, f.h, p.state, hk, V, c0, V,
                        [&](int dd, int c, float v) { split_parts(s.h, c, dd, v); });
            __syncthreads();
            // ⟨h, dH⟩ with h from its parts, as dH comes in
            gather_tile(nk, kValueCols, x.dH, p.state, hk, V, c0, V, [&](int dd, int c, float v) {
                split_parts(s.dH, c, dd, v);
                const float hx = Half16<T>::to(s.h[0][c][dd]) + Half16<T>::to(s.h[1][c][dd]) +
                                 Half16<T>::to(s.h[2][c][dd]);
                hd += hx * v;
            });
            copies_wait();
            __syncthreads();
            uint32_t ao[4], av[4], ad[kParts][4], bh[kParts][2], bd[kParts][2];
#pragma unroll
            for (int kk = 0; kk < kValueCols; kk += 16) {
                fragment_a(ao, s.dO, rb, kk);
                fragment_a(av, s.vn, rb, kk);
#pragma unroll
                for (int q = 0; q < kParts; ++q) fragment_a(ad[q], s.dvn[q], rb, kk);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int n0 = cb + 8 * nt;
#pragma unroll
                    for (int r = 0; r < kParts; ++r) {
                        if (r >= parts) break;
                        fragment_b_rows(bh[r], s.h[r], kk, n0);
                        fragment_b_rows(bd[r], s.dH[r], kk, n0);
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
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = rb + acc_row(u), dd = cb + 8 * nt + acc_col(u);
                if (i >= L || dd >= nk) continue;
                const int64_t o = ((r0 + i) * HV + hv) * K + k0 + dd;
                x.dw[o] = -dw[nt][u];
                x.dq[o] = dq[nt][u];
                x.dk[o] = dk[nt][u];
            }
    }
    hd = warp_sum(hd);
    if (lane == 0) s.part[warp] = hd;
    __syncthreads();
    if (tid == 0) {
        float sum = 0.f;
        for (int w = 0; w < kWarps; ++w) sum += s.part[w];
        x.hdH[slot * HV + hv] = sum;
    }
    for (int i = tid; i < L; i += kDeltaChunkThreads)
        x.dbv[(r0 + i) * HV + hv] = s.dbv[0][i] + s.dbv[1][i];
}

template <typename T>
void launch(const DeltaChunkProblem& p, const DeltaGrads& d, const DeltaChunkSaved& f,
            const DeltaValueSums& x, int64_t slots, cudaStream_t stream) {
    launch_chunk_kernel(values_bwd_tc<T>, dim3(unsigned(slots), unsigned(p.value_heads)),
                        int64_t(sizeof(ValueTiles<T>) + 3) / 4, stream, p, d, f, x);
}

}  // namespace

void delta_chunk_values_bwd_tc(const DeltaChunkProblem& p, const DeltaGrads& d,
                               const DeltaChunkSaved& f, const DeltaValueSums& x, int64_t slots,
                               cudaStream_t stream) {
    if (p.q.dtype == DType::bf16)
        launch<__nv_bfloat16>(p, d, f, x, slots, stream);
    else
        launch<__half>(p, d, f, x, slots, stream);
}

}  // namespace lav::cuda
