// kernels/common/cuda/delta_chunk_tc.cuh — what the delta rules' tensor-core chunk passes share:
// the chunk tile's rows, accumulator element places, 16-bit tile loads, and fp32 operands in parts.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/cuda/delta_chunk.cuh"
#include "common/cuda/tensor_core.cuh"

namespace lav::cuda {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps

/// Row and column, within its 16 × 8 tile, of element u of a thread's mma.sync accumulator.
__device__ __forceinline__ int acc_row(int u) { return threadIdx.x % 32 / 4 + u / 2 * 8; }
__device__ __forceinline__ int acc_col(int u) { return 2 * (threadIdx.x % 4) + u % 2; }

/// f(nt, u, i, j) for each element u of a warp's accumulators acc[nt], nt < NT, 16 × 8 tiles at
/// rows r0 + [0, 16) and columns c0 + 8 nt: i, j its row and column. With Pairs, for u = 0 and 2
/// only, elements u and u + 1 lying at columns j and j + 1.
template <int NT, bool Pairs = false, typename F>
__device__ __forceinline__ void each_accumulator(int r0, int c0, F&& f) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int u = 0; u < 4; u += Pairs ? 2 : 1)
            f(nt, u, r0 + acc_row(u), c0 + 8 * nt + acc_col(u));
}

/// R × W elements of 16-bit src into dst (row r from at + r · pitch, its first `cols` columns),
/// zeros past `rows` rows and `cols` columns. 16 bytes a load where src's rows are aligned to
/// them, and a thread's loads issued four at a time before it stores the first: the passes
/// through the chunks in order wait out a tile's load latency once or twice, not per element.
template <int R, int W, typename T, int P>
__device__ void load_rows(T (*dst)[P], const void* src, int64_t at, int64_t pitch, int rows,
                          int cols) {
    static_assert(W % 8 == 0 && P % 8 == 0, "rows of whole 16-byte vectors");
    constexpr int kVecs = R * W / 8, kBatch = 4;
    const auto* s = static_cast<const unsigned short*>(src) + at;
    const bool aligned = reinterpret_cast<uintptr_t>(s) % 16 == 0 && pitch % 8 == 0;
    for (int e0 = threadIdx.x; e0 < kVecs; e0 += kBatch * kDeltaChunkThreads) {
        uint4 v[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int e = e0 + b * kDeltaChunkThreads, r = e / (W / 8), c = e % (W / 8) * 8;
            v[b] = make_uint4(0u, 0u, 0u, 0u);
            if (e >= kVecs || r >= rows) continue;
            const unsigned short* x = s + r * pitch + c;
            if (aligned && c + 8 <= cols) {
                v[b] = *reinterpret_cast<const uint4*>(x);
                continue;
            }
            uint32_t w[8] = {};
#pragma unroll
            for (int q = 0; q < 8; ++q) w[q] = c + q < cols ? x[q] : 0u;
            v[b] = make_uint4(w[0] | w[1] << 16, w[2] | w[3] << 16, w[4] | w[5] << 16,
                              w[6] | w[7] << 16);
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int e = e0 + b * kDeltaChunkThreads;
            if (e < kVecs) *reinterpret_cast<uint4*>(&dst[e / (W / 8)][e % (W / 8) * 8]) = v[b];
        }
    }
}

/// Parts in T of an fp32 operand x that add up to it to fp32's precision (each part rounds what
/// the ones before left out), so that products with x are exact as the FMA passes' are; parts
/// past the first are zero where T holds x. In fp16 an operand beyond its range would overflow:
/// hence bf16 inputs, or fp16 with an fp16 state (delta_chunk_tensor_cores).
constexpr int kParts = 3;

template <typename T, int R, int P>
__device__ __forceinline__ void split_parts(T (*parts)[R][P], int r, int c, float x) {
#pragma unroll
    for (int q = 0; q < kParts; ++q) {
        const T y = Half16<T>::from(x);
        parts[q][r][c] = y;
        x -= Half16<T>::to(y);
    }
}

/// acc += a·(the first `parts` parts of x) for the B fragment (contraction k0, columns n0) of x
/// stored [contraction][column].
template <typename T, int R, int P>
__device__ __forceinline__ void mma_parts(float (&acc)[4], const uint32_t (&a)[4],
                                          const T (*x)[R][P], int parts, int k0, int n0) {
    uint32_t b[2];
    for (int q = 0; q < parts; ++q) {
        fragment_b_rows(b, x[q], k0, n0);
        Half16<T>::mma(acc, a, b);
    }
}

/// Zeros rows [from, R) of a tile.
template <typename T, int R, int P>
__device__ void zero_rows(T (*x)[P], int from) {
    for (int e = threadIdx.x; e < (R - from) * P; e += kDeltaChunkThreads)
        x[from + e / P][e % P] = Half16<T>::from(0.f);
}

/// load_rows's tile, copied without a trip through registers where src's rows are aligned to
/// 16 bytes (complete after copies_wait()), element by element otherwise.
template <int R, int W, typename T, int P>
__device__ void copy_rows(T (*dst)[P], const void* src, int64_t at, int64_t pitch, int rows,
                          int cols) {
    static_assert(W % 8 == 0 && P % 8 == 0, "rows of whole 16-byte vectors");
    const auto* s = static_cast<const unsigned short*>(src) + at;
    const bool aligned = reinterpret_cast<uintptr_t>(s) % 16 == 0 && pitch % 8 == 0;
    for (int e = threadIdx.x; e < R * W / 8; e += kDeltaChunkThreads) {
        const int r = e / (W / 8), c = e % (W / 8) * 8;
        const unsigned short* x = s + r * pitch + c;
        if (aligned && (r >= rows || c + 8 <= cols)) {
            copy16(&dst[r][c], r < rows ? x : s, r < rows);
            continue;
        }
        auto* y = reinterpret_cast<unsigned short*>(&dst[r][c]);
#pragma unroll
        for (int q = 0; q < 8; ++q) y[q] = r < rows && c + q < cols ? x[q] : 0u;
    }
}

/// The parts of two adjacent elements x0, x1 of row r, columns c and c + 1, a 32-bit store each.
template <typename T, int R, int P>
__device__ __forceinline__ void split_pair_parts(T (*parts)[R][P], int r, int c, float x0,
                                                 float x1) {
#pragma unroll
    for (int q = 0; q < kParts; ++q) {
        const uint32_t y = pair<T>(x0, x1);
        *reinterpret_cast<uint32_t*>(&parts[q][r][c]) = y;
        const float2 f = to_float2<T>(y);
        x0 -= f.x;
        x1 -= f.y;
    }
}

/// The parts of a [kRows, kRows] fp32 tile from src (row i at src + i · pitch): the rows and
/// columns below L, and only j ≤ i where `lower`; zeros elsewhere. A thread takes four columns
/// of four rows and issues every load before its first split (one load latency a tile).
template <typename T, int P>
__device__ void split_square(T (*parts)[kRows][P], const float* src, int64_t pitch, int L,
                             bool lower) {
    constexpr int kQuads = kRows * kRows / 4 / kDeltaChunkThreads;
    const int j = threadIdx.x % (kRows / 4) * 4;
    float x[kQuads][4] = {};
#pragma unroll
    for (int b = 0; b < kQuads; ++b) {
        const int i = (threadIdx.x + b * kDeltaChunkThreads) / (kRows / 4);
#pragma unroll
        for (int q = 0; q < 4; ++q)
            if (i < L && j + q < L && (!lower || j + q <= i)) x[b][q] = src[i * pitch + j + q];
    }
#pragma unroll
    for (int b = 0; b < kQuads; ++b) {
        const int i = (threadIdx.x + b * kDeltaChunkThreads) / (kRows / 4);
        split_pair_parts(parts, i, j, x[b][0], x[b][1]);
        split_pair_parts(parts, i, j + 2, x[b][2], x[b][3]);
    }
}

/// The kParts parts of the pair (z0, z1), each packed as pair<T>, at w[0], w[step], w[2 step]:
/// split_pair_parts for fragments built in registers.
template <typename T>
__device__ __forceinline__ void split_pair_regs(uint32_t* w, int step, float z0, float z1) {
#pragma unroll
    for (int q = 0; q < kParts; ++q) {
        w[q * step] = pair<T>(z0, z1);
        const float2 f = to_float2<T>(w[q * step]);
        z0 -= f.x;
        z1 -= f.y;
    }
}

/// acc += a·b for fragments in parts, over the pairs of parts whose orders add up to less than
/// kParts (the rest lie below fp32's precision).
template <typename T>
__device__ __forceinline__ void mma_parts_regs(float (&acc)[4], const uint32_t (&a)[kParts][4],
                                               const uint32_t (&b)[kParts][2]) {
#pragma unroll
    for (int qa = 0; qa < kParts; ++qa)
#pragma unroll
        for (int qb = 0; qa + qb < kParts; ++qb) Half16<T>::mma(acc, a[qa], b[qb]);
}

/// put(i, j, Σ_d x(i, d) y(j, d) e^{g(i, d) − g(j, d)}) for every j ≤ i < L (L ≤ kRows, x, y
/// and g fp32): kda's scores, every factor by fast_exp. The 16 × 16 blocks below the diagonal run
/// on tensor cores, warp w < 6 taking one: with r the first row of the block's rows, e^{g_i − g_j}
/// = e^{g_i − g_r} e^{g_r − g_j} (j < r ≤ i), both factors at most 1 where g does not rise down
/// the rows (a cumsum of log decays; a rising g of more than 88 within a chunk would overflow a
/// factor), and x e^{g − g_r}, y e^{g_r − g} go in as three bf16 parts each, their products
/// reaching fp32's precision. The blocks on the diagonal, whose factors e^{g_r − g_j} would grow
/// with the decay, form each pair's factor: thread t takes rows t / 16 + 16 u and columns
/// t % 16 + 16 u, each sum in ascending d < K.
template <typename X, typename Y, typename Gd, typename Put>
__device__ inline void decayed_products(int L, int K, X&& x, Y&& y, Gd&& g, Put&& put) {
    using T = __nv_bfloat16;
    static_assert(kDeltaChunkThreads == 256 && kRows == 64, "eight warps, 4 × 4 blocks");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;
    const int I = warp < 1 ? 1 : warp < 3 ? 2 : 3, J = warp - (I - 1) * I / 2;
    if (warp < 6 && 16 * I < L) {
        const int r = 16 * I, c = 16 * J;
        // x e^{g − g_r} (or y e^{g_r − g}) at row i, columns d and d + 1, in parts
        const auto parts = [&](uint32_t* w, int step, auto&& v, int i, int d, bool rows) {
            float z[2] = {};
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (d + e < K) {
                    const float gr = g(r, d + e), gi = g(i, d + e);
                    z[e] = v(i, d + e) * fast_exp(rows ? gi - gr : gr - gi);
                }
            split_pair_regs<T>(w, step, z[0], z[1]);
        };
        float acc[2][4] = {};
        for (int k0 = 0; k0 < K; k0 += 16) {
            uint32_t a[kParts][4], b[2][kParts][2];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int i = min(r + gq + (u & 1) * 8, L - 1), d = k0 + 2 * tq + (u & 2) * 4;
                parts(&a[0][u], 4, x, i, d, true);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    parts(&b[nt][0][h], 2, y, c + 8 * nt + gq, k0 + 2 * tq + 8 * h, false);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) mma_parts_regs<T>(acc[nt], a, b[nt]);
        }
        each_accumulator<2>(r, c, [&](int nt, int u, int i, int j) {
            if (i < L) put(i, j, acc[nt][u]);
        });
    }
    const int i0 = threadIdx.x / 16, j0 = threadIdx.x % 16;
    if (j0 > i0) return;
    int rows[4];  // the rows read, clamped to the chunk
#pragma unroll
    for (int u = 0; u < 4; ++u) rows[u] = i0 + 16 * u < L ? i0 + 16 * u : L - 1;
    float acc[4] = {};
    for (int d = 0; d < K; ++d)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            const int i = rows[u], j = j0 + 16 * u < L ? j0 + 16 * u : L - 1;
            acc[u] += x(i, d) * y(j, d) * fast_exp(g(i, d) - g(j, d));
        }
#pragma unroll
    for (int u = 0; u < 4; ++u)
        if (i0 + 16 * u < L) put(i0 + 16 * u, j0 + 16 * u, acc[u]);
}

/// f(T{}, KT) for the problem's 16-bit input type T and its keys padded to KT = 64, 128 or 256.
template <typename F>
inline void with_tiles(const DeltaChunkProblem& p, F&& f) {
    const auto keys = [&](auto type) {
        if (p.dk <= 64) return f(type, std::integral_constant<int, 64>{});
        if (p.dk <= 128) return f(type, std::integral_constant<int, 128>{});
        f(type, std::integral_constant<int, 256>{});
    };
    if (p.q.dtype == DType::bf16)
        keys(__nv_bfloat16{});
    else
        keys(__half{});
}

}  // namespace lav::cuda
