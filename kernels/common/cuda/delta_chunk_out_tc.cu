// kernels/common/cuda/delta_chunk_out_tc.cu — the delta rules' chunk output pass on tensor cores
// (mma.sync m16n8k16, fp32 accumulation) for 16-bit inputs.
//
// A block per (chunk slot, value head), as the FMA pass (delta_chunk.cu, pass 3):
// o = scale [(q̂ h) e^G + round(q̂ k̂ᵀ ⊙ e^{G_i − G_j}) v_new]. q̂, k̂, v_new and the rounded scores
// are in the input dtype, so their products are exact; h in a wider state dtype is split into two
// 16-bit halves (~16 significant bits), as the gated linear tensor-core kernels split their state.
// Only the fp32 summation order differs from the FMA pass and the CPU contract.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/cuda/cuda_check.h"
#include "common/cuda/delta_chunk.cuh"
#include "common/cuda/tensor_core.cuh"

namespace lav::cuda {
namespace {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps
constexpr int kCols = 64;  // value columns per step
static_assert(kDeltaChunkThreads == kTensorCoreThreads, "eight warps: four row blocks, two halves");

/// The block's tiles: 16-bit operands as ldmatrix reads them, pitches of 8 extra elements.
template <typename T, int KT>
struct OutTiles {
    alignas(16) T q[kRows][KT + 8];
    alignas(16) T k[kRows][KT + 8];
    alignas(16) T P[kRows][kRows + 8];  // the rounded scores, zero above the diagonal
    alignas(16) T h_hi[KT][kCols + 8];  // h as stored, split when wider than T
    alignas(16) T h_lo[KT][kCols + 8];
    alignas(16) T v[kRows][kCols + 8];  // v_new
    float G[kRows];
};

/// rows × KT elements from 16-bit src (row r at at + r · pitch, K wide) into dst, zeros past
/// `rows` valid ones and past K.
template <typename T, int KT>
__device__ void load_keys(T (*dst)[KT + 8], const void* src, int64_t at, int64_t pitch, int rows,
                          int K) {
    const auto* s = static_cast<const unsigned short*>(src);
    for (int e = threadIdx.x; e < kRows * KT; e += kDeltaChunkThreads) {
        const int r = e / KT, d = e % KT;
        const unsigned short b = r < rows && d < K ? s[at + int64_t(r) * pitch + d] : 0;
        dst[r][d] = *reinterpret_cast<const T*>(&b);
    }
}

// two blocks a multiprocessor at keys up to 128 (89 KB of tiles): registers up to 128, which
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
    load_keys<T, KT>(s.q, x.qn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    load_keys<T, KT>(s.k, x.kn, (r0 * p.heads + h) * K, int64_t(p.heads) * K, L, K);
    for (int i = tid; i < kRows; i += kDeltaChunkThreads)
        s.G[i] = i < L ? x.G[(r0 + i) * HV + hv] : 0.f;
    // the rows of h past K, which the column steps leave alone: q̂'s columns there are zero,
    // but 0 · NaN would not be
    for (int e = tid; e < (KT - K) * kCols; e += kDeltaChunkThreads) {
        s.h_hi[K + e / kCols][e % kCols] = Half16<T>::from(0.f);
        s.h_lo[K + e / kCols][e % kCols] = Half16<T>::from(0.f);
    }
    __syncthreads();
    // warp w: rows rb + [0, 16), columns cb + [0, 32) of the scores and of each value step
    const int warp = tid / 32, g = tid % 32 / 4, t = tid % 4;
    const int rb = 16 * (warp % 4), cb = 32 * (warp / 4);
    {
        float acc[4][4] = {};
        uint32_t a[4], b[2];
        // score tiles wholly above the diagonal stay zero
        for (int kk = 0; kk < KT; kk += 16) {
            fragment_a(a, s.q, rb, kk);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                if (cb + 8 * nt > rb + 15) continue;
                fragment_b(b, s.k, cb + 8 * nt, kk);
                Half16<T>::mma(acc[nt], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = rb + g + u / 2 * 8, j = cb + 8 * nt + 2 * t + u % 2;
                const float v = j <= i && i < L ? acc[nt][u] * expf(s.G[i] - s.G[j]) : 0.f;
                s.P[i][j] = Half16<T>::from(v);
            }
    }
    const bool split = p.state != in;
    const int64_t state = (slot * HV + hv) * K * V;
    for (int c0 = 0; c0 < V; c0 += kCols) {
        __syncthreads();  // the scores are in, or the previous columns are done
        gather_tile(K, kCols, x.h, p.state, state, V, c0, V, [&](int d, int c, float hd) {
            const T hi = Half16<T>::from(hd);
            s.h_hi[d][c] = hi;
            s.h_lo[d][c] = Half16<T>::from(hd - Half16<T>::to(hi));
        });
        const auto* vn = static_cast<const unsigned short*>(x.v_new);
        for (int e = tid; e < kRows * kCols; e += kDeltaChunkThreads) {
            const int i = e / kCols, c = e % kCols;
            const unsigned short b =
                i < L && c0 + c < V ? vn[((r0 + i) * HV + hv) * V + c0 + c] : 0;
            s.v[i][c] = *reinterpret_cast<const T*>(&b);
        }
        __syncthreads();
        float qh[4][4] = {}, pv[4][4] = {};
        uint32_t a[4], b[2];
        for (int kk = 0; kk < KT; kk += 16) {
            fragment_a(a, s.q, rb, kk);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
                mma_split_rows(qh[nt], a, a, false, s.h_hi, s.h_lo, kk, cb + 8 * nt, split);
        }
        // the scores are zero past the diagonal block
        for (int jj = 0; jj <= rb; jj += 16) {
            fragment_a(a, s.P, rb, jj);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                fragment_b_rows(b, s.v, jj, cb + 8 * nt);
                Half16<T>::mma(pv[nt], a, b);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = rb + g + u / 2 * 8, c = c0 + cb + 8 * nt + 2 * t + u % 2;
                if (i >= L || c >= V) continue;
                const float a_i = qh[nt][u] * expf(s.G[i]);
                store(p.o.data, p.o.dtype, at(p.o, ck.s, ck.c0 + i, hv) + c,
                      (a_i + pv[nt][u]) * p.scale);
            }
    }
}

template <typename T, int KT>
void launch(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
            cudaStream_t stream) {
    launch_chunk_kernel(chunk_out_tc<T, KT>, dim3(unsigned(slots), unsigned(p.value_heads)),
                        int64_t(sizeof(OutTiles<T, KT>) + 3) / 4, stream, p, x);
}

template <typename T>
void launch_keys(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                 cudaStream_t stream) {
    if (p.dk <= 64) return launch<T, 64>(p, x, slots, stream);
    if (p.dk <= 128) return launch<T, 128>(p, x, slots, stream);
    launch<T, 256>(p, x, slots, stream);
}

}  // namespace

void delta_chunk_out_tc(const DeltaChunkProblem& p, const DeltaChunkSaved& x, int64_t slots,
                        cudaStream_t stream) {
    if (p.q.dtype == DType::bf16)
        launch_keys<__nv_bfloat16>(p, x, slots, stream);
    else
        launch_keys<__half>(p, x, slots, stream);
}

}  // namespace lav::cuda
