// kernels/common/cuda/delta_chunk.cuh — what the delta rules' and kda's chunk kernels share.
//
// delta_chunk*.cu and kda_chunk*.cu: their block size and launch, their workspaces' layout, the
// rows of q̂ and k̂ as they read them, the solve for (I + A)⁻¹ and products with its transpose,
// the backward's sums over value columns without a key axis, and its last pass.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_cuda.h"

namespace lav::cuda {

/// Threads per block of every chunk kernel.
constexpr int kDeltaChunkThreads = 256;
/// Value columns the backward's chunk-parallel sums add at a time (the order of their sums),
/// columns its tiles hold (a step: one round of loads for two of those), and the row stride of
/// the tiles: rows start 16-byte aligned, so that sixteen values are read as four float4s, and
/// 36 floats apart, which puts the float4s of eight consecutive rows in distinct banks.
constexpr int kChunkCols = 16;
constexpr int kChunkStepCols = 2 * kChunkCols;
constexpr int kChunkColRow = kChunkStepCols + 4;
/// n floats rounded up to whole float4s: a tile after n floats starts as aligned as the first.
constexpr int64_t whole_float4s(int64_t n) { return (n + 3) / 4 * 4; }

/// put(r, j, x) for each row r < rows and column j < cols of a tile of a 32- or 16-bit array in
/// dtype d: x is element at + r · pitch + col0 + j, or 0 where col0 + j ≥ width. Where the rows
/// are whole 16-byte vectors in the array (aligned, cols and pitch multiples of a vector's
/// elements, no column past width), a thread has four vectors in flight, a tile of 64 rows of
/// 128 16-bit values one round of loads; otherwise eight elements. load()'s dtype switch inside
/// a loop made each load wait out the last one's latency, which the passes through the chunks
/// in order cannot hide.
template <typename Put>
__device__ __forceinline__ void gather_tile(int rows, int cols, const void* src, DType d,
                                            int64_t at, int64_t pitch, int col0, int width,
                                            Put&& put) {
    const int bytes = d == DType::f32 ? 4 : 2, per = 16 / bytes;  // per: elements of a vector
    const char* first =
        src != nullptr ? static_cast<const char*>(src) + (at + col0) * bytes : nullptr;
    if (first != nullptr && cols % per == 0 && pitch % per == 0 && col0 + cols <= width &&
        reinterpret_cast<uintptr_t>(first) % 16 == 0) {
        constexpr int kVectors = 4;
        const int row_vectors = cols / per, n = rows * row_vectors;
        for (int e0 = threadIdx.x; e0 < n; e0 += kVectors * kDeltaChunkThreads) {
            uint4 v[kVectors];
#pragma unroll
            for (int b = 0; b < kVectors; ++b) {
                const int e = e0 + b * kDeltaChunkThreads;
                const int64_t off = int64_t(e / row_vectors) * pitch + e % row_vectors * per;
                if (e < n) v[b] = *reinterpret_cast<const uint4*>(first + off * bytes);
            }
#pragma unroll
            for (int b = 0; b < kVectors; ++b) {
                const int e = e0 + b * kDeltaChunkThreads;
                if (e >= n) continue;
                const int r = e / row_vectors, j = e % row_vectors * per;
                const uint32_t w[4] = {v[b].x, v[b].y, v[b].z, v[b].w};
                if (d == DType::f32) {
#pragma unroll
                    for (int q = 0; q < 4; ++q) put(r, j + q, __uint_as_float(w[q]));
                } else {
#pragma unroll
                    for (int q = 0; q < 4; ++q) {
                        put(r, j + 2 * q, widen(w[q] & 0xffffu, d));
                        put(r, j + 2 * q + 1, widen(w[q] >> 16, d));
                    }
                }
            }
        }
        return;
    }
    constexpr int kBatch = 8;
    const int n = rows * cols;
    for (int e0 = threadIdx.x; e0 < n; e0 += kBatch * kDeltaChunkThreads) {
        uint32_t bits[kBatch];
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int e = e0 + b * kDeltaChunkThreads, j = e % cols;
            const bool ok = e < n && col0 + j < width;
            bits[b] = ok ? raw(src, d, at + int64_t(e / cols) * pitch + col0 + j) : 0u;
        }
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
            const int e = e0 + b * kDeltaChunkThreads;
            if (e < n) put(e / cols, e % cols, widen(bits[b], d));
        }
    }
}

/// gather_tile into fp32 dst of row pitch dst_pitch.
__device__ __forceinline__ void load_tile(float* dst, int dst_pitch, int rows, int cols,
                                          const void* src, DType d, int64_t at, int64_t pitch,
                                          int col0 = 0, int width = 1 << 30) {
    gather_tile(rows, cols, src, d, at, pitch, col0, width,
                [&](int r, int j, float x) { dst[r * dst_pitch + j] = x; });
}

/// The inverse of load_tile for a block's [K, cols] fp32 state tile `src` (contiguous): column j
/// to columns col0 + j < V of the [K, V] state at `state` of dst, in dtype d.
__device__ inline void store_state_tile(void* dst, DType d, int64_t state, int V, int col0,
                                        const float* src, int K, int cols) {
    for (int e = threadIdx.x; e < K * cols; e += kDeltaChunkThreads) {
        const int c = col0 + e % cols;
        if (c < V) store(dst, d, state + int64_t(e / cols) * V + c, src[e]);
    }
}

/// Sets the dynamic shared memory `kernel` may take (`floats` fp32 elements), and launches it
/// with kDeltaChunkThreads threads a block.
template <typename... Params, typename... Args>
void launch_chunk_kernel(void (*kernel)(Params...), dim3 grid, int64_t floats, cudaStream_t stream,
                         const Args&... args) {
    const int bytes = int(floats * sizeof(float));
    LAV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                   "a delta rule chunk kernel");
    kernel<<<grid, kDeltaChunkThreads, bytes, stream>>>(args...);
}

/// Lays regions out one after another from `base` (nullptr: only counts them). fp32 regions
/// follow each other exactly (the backward's callers find its last ones from the total);
/// a region in a 16-bit dtype, 2 bytes a value, starts and ends on 16 bytes.
class ChunkWorkspace {
  public:
    /// `floats` fp32 elements from `base` are taken already.
    explicit ChunkWorkspace(float* base, int64_t floats = 0)
        : base_(reinterpret_cast<char*>(base)), bytes_(floats * 4) {}
    void* take(int64_t n, DType dtype) {
        if (dtype == DType::f32) return take(n);
        bytes_ = (bytes_ + 15) / 16 * 16;
        void* at = base_ != nullptr ? base_ + bytes_ : nullptr;
        bytes_ += (n * 2 + 15) / 16 * 16;
        return at;
    }
    float* take(int64_t n) {
        float* at = base_ != nullptr ? reinterpret_cast<float*>(base_ + bytes_) : nullptr;
        bytes_ += n * 4;
        return at;
    }
    /// What is taken, in fp32 elements.
    int64_t floats() const { return bytes_ / 4; }

  private:
    char* base_;
    int64_t bytes_;
};

/// A lane's elements lane + 32 m (m < M) of one row of q or k, widened from the input dtype.
template <int M>
struct KeyRow {
    float x[M];
};

/// Row t of key head h of src (elements of type E) for this lane; zero past the keys.
template <typename E, int M>
__device__ inline KeyRow<M> fetch_row(const DeltaChunkProblem& p, const Strided& src, const Span& s,
                                      int64_t t, int h) {
    const int lane = threadIdx.x % 32;
    const E* x = static_cast<const E*>(src.data) + at(src, s, t, h) + lane;
    KeyRow<M> r;
#pragma unroll
    for (int m = 0; m < M; ++m) r.x[m] = lane + 32 * m < p.dk ? widened(x[32 * m]) : 0.f;
    return r;
}

/// A fetched row as the chunk kernels read it, by one warp: x / √(Σ x² + eps) rounded to the
/// input dtype E with the in-kernel l2norm, x itself without. Written to `tile` (elements 0..K)
/// where not nullptr, and to `kept` where not nullptr.
template <typename E, int M>
__device__ inline void unit_row(const DeltaChunkProblem& p, const KeyRow<M>& r, float* tile,
                                E* kept) {
    const int lane = threadIdx.x % 32, K = p.dk;
    float ss = 0.f;
#pragma unroll
    for (int m = 0; m < M; ++m) ss += r.x[m] * r.x[m];
    const float rstd = p.l2norm ? 1.f / sqrtf(warp_sum(ss) + kL2NormEps) : 1.f;
#pragma unroll
    for (int m = 0; m < M; ++m) {
        const int e = lane + 32 * m;
        if (e >= K) break;
        const float y = p.l2norm ? widened(narrow<E>(r.x[m] * rstd)) : r.x[m];
        if (tile != nullptr) tile[e] = y;
        if (kept != nullptr) kept[e] = narrow<E>(y);
    }
}

/// The k̂ rows of chunk ck for value head hv into `k` (row stride kp), and q̂ and k̂ into `qn`,
/// `kn` by one value head of each key head, for keys up to Keys. A warp fetches the q and k of
/// R rows before it uses any (R · Keys ≤ 1024 floats a warp an array: ≤ 32 registers a lane), so
/// that it waits out one load latency for them all; the element type is fixed once for the
/// loop (q, k and v share one dtype).
template <int Keys>
__device__ inline void key_rows(const DeltaChunkProblem& p, const Chunk& ck, int hv, float* k,
                                int kp, void* qn, void* kn) {
    constexpr int kWarps = kDeltaChunkThreads / 32, M = Keys / 32;
    constexpr int R = 32 / M < kMaxDeltaChunk / kWarps ? 32 / M : kMaxDeltaChunk / kWarps;
    const int h = hv / (p.value_heads / p.heads), L = ck.len;
    const bool keeps_keys = hv % (p.value_heads / p.heads) == 0;
    const int64_t t0 = ck.c0, r0 = row(p.seqs, ck.s, t0);
    with_element(p.q.dtype, [&](auto element) {
        using E = decltype(element);
        for (int i0 = threadIdx.x / 32; i0 < L; i0 += R * kWarps) {
            KeyRow<M> kr[R], qr[R];
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const int i = i0 + kWarps * u < L ? i0 + kWarps * u : i0;
                kr[u] = fetch_row<E, M>(p, p.k, ck.s, t0 + i, h);
                if (keeps_keys) qr[u] = fetch_row<E, M>(p, p.q, ck.s, t0 + i, h);
            }
#pragma unroll
            for (int u = 0; u < R; ++u) {
                const int i = i0 + kWarps * u;
                if (i >= L) break;
                const int64_t r = ((r0 + i) * p.heads + h) * p.dk;
                unit_row(p, kr[u], k + i * kp, keeps_keys ? static_cast<E*>(kn) + r : nullptr);
                if (keeps_keys) unit_row<E>(p, qr[u], nullptr, static_cast<E*>(qn) + r);
            }
        }
    });
}

/// The delta rules' first pass, per row of chunk ck and value head hv, for keys up to Keys: the
/// k̂ rows into `k` (row stride kp, as stored), q̂ and k̂ into the workspace (by one value head
/// of each key head), β as used, G the chunk-local cumsum of the log decay and decay = exp(G),
/// G and β into the workspace too. By the whole block; the tiles are complete after its next
/// barrier. β and the gate are fetched before the key rows, so that their loads are in flight
/// with them.
template <int Keys>
__device__ inline void prep_rows(const DeltaChunkProblem& p, const DeltaChunkSaved& x,
                                 const Chunk& ck, int hv, float* k, int kp, float* beta, float* G,
                                 float* decay) {
    const int HV = p.value_heads, L = ck.len, tid = threadIdx.x;
    const Span& s = ck.s;
    const int64_t t0 = ck.c0, r0 = row(p.seqs, s, t0);
    static_assert(kMaxDeltaChunk <= kDeltaChunkThreads, "a row a thread");
    const bool mine = tid < L, gated = p.gate == DeltaGate::per_head;
    const float b = mine ? load(p.beta.data, p.beta.dtype, at(p.beta, s, t0 + tid, hv)) : 0.f;
    const float g = mine && gated ? load(p.g.data, p.g.dtype, at(p.g, s, t0 + tid, hv)) : 0.f;
    key_rows<Keys>(p, ck, hv, k, kp, x.qn, x.kn);
    if (mine) {
        beta[tid] = activated_beta(p, b);
        G[tid] = gated && p.gate_in_kernel
                     ? activated_gate(p, expf(p.A_log[hv]),
                                      g + (p.dt_bias != nullptr ? p.dt_bias[hv] : 0.f))
                     : g;
    }
    __syncthreads();
    if (tid == 0) {
        // a running fp32 sum, as the CPU forms G
        float acc = 0.f;
        for (int i = 0; i < L; ++i) G[i] = acc += G[i];
    }
    __syncthreads();
    for (int i = tid; i < L; i += kDeltaChunkThreads) {
        decay[i] = expf(G[i]);
        x.G[(r0 + i) * HV + hv] = G[i];
        x.beta[(r0 + i) * HV + hv] = beta[i];
    }
}

/// (I + A) T = I for a strictly lower A ([L, L], row pitch ap; T's pitch tp), by forward
/// substitution in fp32, each entry T_ij = δ_ij − Σ_{m=j}^{i−1} A_im T_mj summed in ascending m
/// (the CPU rows' order). A column's sums advance together: once T_mj is final, every row below
/// takes its term m. Warp w takes columns w + 8c, c < 8, a lane rows lane and lane + 32; each
/// step shuffles T_mj of all eight columns before it adds any term, so that the eight shuffles'
/// latencies overlap (a column's shuffle waits on its last step's term). The block is
/// synchronised on return. An odd ap keeps the lanes' reads of A's column m in distinct banks.
__device__ inline void solve_unit_lower(const float* A, int ap, float* T, int tp, int L) {
    constexpr int kWarps = kDeltaChunkThreads / 32, kCols = kMaxDeltaChunk / kWarps;
    static_assert(kMaxDeltaChunk == 64, "two rows a lane");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int i0 = lane, i1 = lane + 32;
    float t[kCols][2];
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        const int j = warp + kWarps * c;
        t[c][0] = i0 == j ? 1.f : 0.f;
        t[c][1] = i1 == j ? 1.f : 0.f;
    }
    for (int m = warp; m < L - 1; ++m) {
        // the lanes' rows below m (and within the chunk) take term m
        const bool r0 = i0 > m && i0 < L;
        const bool r1 = i1 > m && i1 < L;
        const float a0 = r0 ? A[i0 * ap + m] : 0.f, a1 = r1 ? A[i1 * ap + m] : 0.f;
        float tm[kCols];
#pragma unroll
        for (int c = 0; c < kCols; ++c)
            tm[c] = __shfl_sync(~0u, m < 32 ? t[c][0] : t[c][1], m % 32);
            // the warp's later columns start further down: a predicate, not a branch
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const bool on = m >= warp + kWarps * c;
            if (on && r0) t[c][0] -= a0 * tm[c];
            if (on && r1) t[c][1] -= a1 * tm[c];
        }
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        const int j = warp + kWarps * c;
        if (j <= i0 && i0 < L) T[i0 * tp + j] = t[c][0];
        if (j <= i1 && i1 < L) T[i1 * tp + j] = t[c][1];
    }
    __syncthreads();
}

/// Element (i, j) of Tᵀ M for a lower-triangular T ([L, L] of row stride C) and M of row stride
/// `stride`: Σ_{m ≥ i} T_mi M_mj in ascending m.
__device__ inline float lower_transposed(const float* T, int C, const float* M, int stride, int L,
                                         int i, int j) {
    float a = 0.f;
    for (int m = i; m < L; ++m) a += T[m * C + i] * M[m * stride + j];
    return a;
}

/// put(i, c, Σ_m T_mi x(m, c)) over m ≥ i (Transposed) or put(i, c, Σ_m T_im x(m, c)) over
/// m ≤ i, for a lower-triangular T ([L, L] of row stride C), every row i < L and column c < cols,
/// each sum in ascending m. A warp takes the blocks of four rows w and 15 − w (so that the warps
/// sum as many terms), a lane the columns lane + 32 v, v < 4, 128 at a time: a step of the sums
/// reads 8 values for 16 products, where a thread per element read 2 for 1.
template <bool Transposed, typename X, typename Put>
__device__ inline void lower_products(const float* T, int C, X&& x, int L, int cols, Put&& put) {
    constexpr int kWarps = kDeltaChunkThreads / 32;
    static_assert(2 * kWarps * 4 == kMaxDeltaChunk, "two blocks of four rows a warp");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int half = 0; half < 2; ++half) {
        const int i0 = 4 * (half == 0 ? warp : 2 * kWarps - 1 - warp);
        if (i0 >= L) continue;
        const int m0 = Transposed ? i0 : 0, m1 = Transposed ? L : (i0 + 4 < L ? i0 + 4 : L);
        for (int c0 = lane; c0 < cols; c0 += 128) {
            float acc[4][4] = {};
            for (int m = m0; m < m1; ++m) {
                float t[4], y[4];
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const int i = i0 + u < L ? i0 + u : L - 1;
                    t[u] = Transposed ? T[m * C + i] : T[i * C + m];
                }
#pragma unroll
                for (int v = 0; v < 4; ++v) y[v] = c0 + 32 * v < cols ? x(m, c0 + 32 * v) : 0.f;
#pragma unroll
                for (int u = 0; u < 4; ++u)
                    if (Transposed ? m >= i0 + u : m <= i0 + u)
#pragma unroll
                        for (int v = 0; v < 4; ++v) acc[u][v] += t[u] * y[v];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    if (i0 + u < L && c0 + 32 * v < cols) put(i0 + u, c0 + 32 * v, acc[u][v]);
        }
    }
}

/// lower_products<true> over a row-major M of row stride `stride`: put(i, c, (Tᵀ M)_ic).
template <typename Put>
__device__ inline void lower_transposed_all(const float* T, int C, const float* M, int stride,
                                            int L, int cols, Put&& put) {
    lower_products<true>(
        T, C, [&](int m, int c) { return M[m * stride + c]; }, L, cols, put);
}

/// put(i, j, Σ_{m < depth(j)} A_im B_jm) for every i, j < L, or only j < i where Lower, each sum
/// in ascending m (A, B of row strides lda, ldb; depth(j) ≤ most). A thread takes rows
/// threadIdx.x / 16 + 16 u and columns threadIdx.x % 16 + 16 v, u, v < 4 (v ≤ u where Lower: the
/// tiles v > u lie above the diagonal): a step reads 8 values for up to 16 products, where a
/// thread per element read 2 for 1. B's rows are read 16 at a time: a stride of C + 1 floats
/// keeps them in distinct banks.
template <bool Lower, typename Depth, typename Put>
__device__ inline void row_products(const float* A, int lda, const float* B, int ldb, int L,
                                    int most, Depth&& depth, Put&& put) {
    static_assert(kDeltaChunkThreads == 256 && kMaxDeltaChunk == 64,
                  "16 × 16 threads, 4 × 4 tiles");
    const int i0 = threadIdx.x / 16, j0 = threadIdx.x % 16;
    int ri[4], rj[4], dj[4];  // the rows read, clamped to the chunk, and each column's depth
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        ri[u] = i0 + 16 * u < L ? i0 + 16 * u : L - 1;
        rj[u] = j0 + 16 * u < L ? j0 + 16 * u : L - 1;
        dj[u] = depth(j0 + 16 * u);
    }
    float acc[4][4] = {};
    for (int m = 0; m < most; ++m) {
        float a[4], b[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            a[u] = A[ri[u] * lda + m];
            b[u] = B[rj[u] * ldb + m];
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int v = 0; v < 4; ++v)
                if ((!Lower || v <= u) && m < dj[v]) acc[u][v] += a[u] * b[v];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
        for (int v = 0; v < 4; ++v) {
            const int i = i0 + 16 * u, j = j0 + 16 * v;
            if ((!Lower || v <= u) && i < L && j < L && (!Lower || j < i)) put(i, j, acc[u][v]);
        }
}

/// The row-walks of the backward's sums over value columns: a thread takes column
/// threadIdx.x % kColumnThreads, holds that column's kChunkCols values in registers, and walks
/// the rows threadIdx.x / kColumnThreads + kRowStep u, two at a time: the rows' values are
/// read as float4s, the same for all of a warp's lanes.
constexpr int kColumnThreads = 64;
constexpr int kRowStep = kDeltaChunkThreads / kColumnThreads;

/// The kChunkCols values of a column tile's row (row stride kChunkColRow).
__device__ __forceinline__ void tile_row(float (&r)[kChunkCols], const float* row) {
#pragma unroll
    for (int c = 0; c < kChunkCols; c += 4) {
        const float4 x = *reinterpret_cast<const float4*>(row + c);
        r[c] = x.x, r[c + 1] = x.y, r[c + 2] = x.z, r[c + 3] = x.w;
    }
}

/// s + Σ_c x_c y_c over a row's kChunkCols columns, x a column tile's row, in ascending c.
__device__ __forceinline__ float row_dot(float s, const float* x, const float (&y)[kChunkCols]) {
#pragma unroll
    for (int c = 0; c < kChunkCols; c += 4) {
        const float4 v = *reinterpret_cast<const float4*>(x + c);
        s += v.x * y[c];
        s += v.y * y[c + 1];
        s += v.z * y[c + 2];
        s += v.w * y[c + 3];
    }
    return s;
}

/// The rows i and i + kRowStep of a row-walk (the second clamped to the last row, its sums
/// then not kept): sum(i, r) returns row r's sums and keep(i, sums) adds them where they go.
template <typename Sum, typename Keep>
__device__ __forceinline__ void walk_rows(int L, Sum&& sum, Keep&& keep) {
    for (int i = threadIdx.x / kColumnThreads; i < L; i += 2 * kRowStep) {
        const int i2 = i + kRowStep;
        const auto first = sum(i), second = sum(i2 < L ? i2 : L - 1);
        keep(i, first);
        if (i2 < L) keep(i2, second);
    }
}

/// One step of kChunkCols value columns of the backward's [L, nk] sums over the value columns
/// (tiles of row stride kChunkColRow, the [L, nk] sums compact): dw += dv_new hᵀ, dqh += dO hᵀ,
/// dkh += v_new dHᵀ. Row-walks (above) over the key columns, a column's h and dH in registers.
__device__ inline void key_column_sums(int L, int nk, const float* h, const float* dH,
                                       const float* dO, const float* vn, const float* dvn,
                                       float* dw, float* dqh, float* dkh) {
    struct Sums {
        float w, q, k;
    };
    for (int dd = threadIdx.x % kColumnThreads; dd < nk; dd += kColumnThreads) {
        float hr[kChunkCols], dHr[kChunkCols];
        tile_row(hr, h + dd * kChunkColRow);
        tile_row(dHr, dH + dd * kChunkColRow);
        walk_rows(
            L,
            [&](int i) {
                const int o = i * kChunkColRow;
                return Sums{row_dot(0.f, dvn + o, hr), row_dot(0.f, dO + o, hr),
                            row_dot(0.f, vn + o, dHr)};
            },
            [&](int i, const Sums& s) {
                dw[i * nk + dd] += s.w;
                dqh[i * nk + dd] += s.q;
                dkh[i * nk + dd] += s.k;
            });
    }
}

/// One step of kChunkCols value columns (nc of them real, from c0) of the backward's sums that
/// no key axis enters, by the whole block, on tiles of row stride kChunkColRow: dov += dO
/// v_newᵀ, dTv += dv_new vbᵀ, and with dvb = Tᵀ dv_new (T the rows of (I + A)⁻¹ the backward
/// reads): dv = dvb β stored, and dβ's value term Σ dvb ⊙ v over the columns added to dbv.
__device__ inline void value_column_sums(const DeltaChunkProblem& p, const DeltaGrads& d,
                                         const Chunk& ck, int hv, int c0, int nc, const float* T,
                                         const float* dO, const float* vn, const float* dvn,
                                         const float* vb, const float* beta, float* dov, float* dTv,
                                         float* dbv) {
    const int L = ck.len, C = p.chunk, tid = threadIdx.x;
    // a row-walk (above), column j's values in registers
    const int j = tid % kColumnThreads;
    if (j < L) {
        struct Sums {
            float o, t;
        };
        float vj[kChunkCols], bj[kChunkCols];
        tile_row(vj, vn + j * kChunkColRow);
        tile_row(bj, vb + j * kChunkColRow);
        walk_rows(
            L,
            [&](int i) {
                const int o = i * kChunkColRow;
                return Sums{row_dot(0.f, dO + o, vj), row_dot(0.f, dvn + o, bj)};
            },
            [&](int i, const Sums& s) {
                dov[i * L + j] += s.o;
                dTv[i * L + j] += s.t;
            });
    }
    // the 16 lanes of a row add its dβ term
    for (int base = 0; base < L * kChunkCols; base += kDeltaChunkThreads) {
        const int e = base + tid, i = e / kChunkCols, c = e % kChunkCols;
        float term = 0.f;
        if (e < L * kChunkCols && c < nc) {
            const float dvb = lower_transposed(T, C, dvn, kChunkColRow, L, i, c);
            const int64_t vo = at(p.v, ck.s, ck.c0 + i, hv) + c0 + c;
            store(d.dv.data, d.dv.dtype, at(d.dv, ck.s, ck.c0 + i, hv) + c0 + c, dvb * beta[i]);
            term = dvb * load(p.v.data, p.v.dtype, vo);
        }
        for (int o = kChunkCols / 2; o > 0; o /= 2) term += __shfl_xor_sync(0xffffffffu, term, o);
        if (e < L * kChunkCols && c == 0) dbv[i] += term;
    }
}

/// The end of the backward's keys pass over chunk ck, value head hv (its FMA and tensor-core
/// forms): from ∂L/∂G_i before the reverse sum (dG), dβ as used (db) and k̂_i·dk_inter_i (kdk) in
/// shared memory, the carry's share on the last row, exp(G_last)⟨h, dH⟩ + Σ_j kdk_j, and the
/// reverse running sum that G's cumsum takes back; then dβ and dg through their activations,
/// stored, and the in-kernel gate's per-row terms into dA_log, ddt ([rows, HV]). `hdH` is the
/// chunk's ⟨h, dH⟩. Taken by the whole block.
__device__ inline void store_key_grads(const DeltaChunkProblem& p, const DeltaGrads& d,
                                       const Chunk& ck, int hv, int64_t r0, const float* G,
                                       float* dG, const float* db, const float* kdk,
                                       const float* hdH, float* dA_log, float* ddt) {
    const int L = ck.len, HV = p.value_heads;
    if (threadIdx.x == 0 && p.gate != DeltaGate::none) {
        float carry = 0.f;
        for (int j = 0; j < L; ++j) carry += kdk[j];
        dG[L - 1] += expf(G[L - 1]) * *hdH + carry;
        float acc = 0.f;
        for (int i = L; i-- > 0;) dG[i] = acc += dG[i];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < L; i += kDeltaChunkThreads) {
        const int64_t t = ck.c0 + i;
        const float raw = load(p.beta.data, p.beta.dtype, at(p.beta, ck.s, t, hv));
        store(d.dbeta.data, d.dbeta.dtype, at(d.dbeta, ck.s, t, hv), beta_backward(p, raw, db[i]));
        if (p.gate == DeltaGate::none) continue;
        float dg = dG[i];
        if (p.gate_in_kernel) {
            const float bias = p.dt_bias != nullptr ? p.dt_bias[hv] : 0.f;
            const GateGrads gg = gate_backward(
                p, expf(p.A_log[hv]), load(p.g.data, p.g.dtype, at(p.g, ck.s, t, hv)) + bias, dg);
            dg = gg.d_arg;
            dA_log[(r0 + i) * HV + hv] = gg.d_A_log;
            ddt[(r0 + i) * HV + hv] = gg.d_arg;
        }
        store(d.dg.data, d.dg.dtype, at(d.dg, ck.s, t, hv), dg);
    }
}

/// The backward's last pass: dq and dk from the per-value-head gradients `dq`, `dk` ([rows, HV,
/// K] fp32), summed over each key head's value heads in order, then back through the l2norm,
/// dx = (dx̂ − (dx̂·y) y) rstd, rounded once. y is q̂, k̂ as the forward stored them (`qn`, `kn`
/// in the input dtype, the delta rules' contract) or, where those are nullptr, the fp32 unit
/// vector x rstd (kda's).
void finish_chunk_keys(const DeltaChunkProblem& p, const DeltaGrads& d, const float* dq,
                       const float* dk, const void* qn, const void* kn, cudaStream_t stream);

}  // namespace lav::cuda
