// kernels/common/cuda/gated_linear_chunk.cu — the chunked form of the gated linear recurrence on
// CUDA, forward and backward, for simple_gla and gla.
//
// FLA's chunk scheme (fla/ops/common/chunk_h.py, fla/ops/common/chunk_o.py, fla/ops/gla/chunk.py):
// chunk_states carries the state over the chunks in order, one block per (sequence, head, key
// tile, value tile), and stores the state entering each chunk; chunk_output then takes every
// chunk's outputs in parallel. The backward recomputes those states, carries the state gradient
// over the chunks in reverse with the same kernel, and chunk_grads takes each chunk's dq, dk, dv
// and dg in parallel. Products are fp32 FMA over shared-memory tiles (never TF32), and every
// storage point of the CPU backend's contract (simple_gla_cpu.cpp, gla_cpu.cpp) is rounded at
// the same place, so that the two agree up to fp32 summation order.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/gated_linear_cuda.h"
#include "common/cuda/gated_linear_tc.h"

namespace lav::cuda {
namespace {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = kRows / kWarps;  // rows warp + kWarps·r, r < kPerThread
constexpr int kStateKeys = 64;              // key rows of a chunk_states tile
constexpr int kTile = 32;                   // value columns; key and value tile of the rest
// rows read across lanes (x[lane][·]) are padded by one float to fall in distinct banks
constexpr int kPitch = kTile + 1;
constexpr int kSquare = kRows + 1;

__device__ __forceinline__ int64_t state_at(const GatedLinearProblem& p, int64_t slot, int h) {
    return (slot * p.heads + h) * int64_t(p.dk) * p.dv;
}

/// Rows [0, kRows) × columns [col0, col0 + W) of x in chunk ch, head h, widened into a
/// row-major tile of pitch P; zeros past the chunk's end or x's width.
template <int W, int P>
__device__ void load_tile(float* dst, const Strided& x, const Chunk& ch, int h, int col0,
                          int width) {
    for (int e = threadIdx.x; e < kRows * W; e += kThreads) {
        const int r = e / W, c = e % W;
        dst[r * P + c] = r < ch.len && col0 + c < width
                             ? load(x.data, x.dtype, at(x, ch.s, ch.c0 + r, h) + col0 + c)
                             : 0.f;
    }
}

/// Keys [d0, d0 + kTile) × values [v0, v0 + kTile) of the [K, V] state at `base`, widened.
__device__ void load_state_tile(float (*dst)[kPitch], const void* src, DType dtype, int64_t base,
                                int d0, int v0, const GatedLinearProblem& p) {
    for (int e = threadIdx.x; e < kTile * kTile; e += kThreads) {
        const int r = e / kTile, c = e % kTile;
        dst[r][c] = d0 + r < p.dk && v0 + c < p.dv
                        ? load(src, dtype, base + int64_t(d0 + r) * p.dv + v0 + c)
                        : 0.f;
    }
}

/// G_i of a per-row gate (per_head, constant, none): the chunk-local inclusive cumsum in fp32
/// (as the CPU backend sums it), continued past the chunk's end as if g were 0 there, so that
/// G[kRows - 1] is the chunk's last G and padded rows decay no further. Thread 0 writes it.
__device__ void row_cumsum(const GatedLinearProblem& p, const Chunk& ch, int h, float* G) {
    if (threadIdx.x != 0) return;
    float acc = 0.f;
    for (int i = 0; i < kRows; ++i) {
        if (i < ch.len && p.gate == Gate::per_head)
            acc += load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h));
        if (i < ch.len && p.gate == Gate::constant) acc = p.g_gamma[h] * float(i + 1);
        G[i] = acc;
    }
}

/// G of a per-key gate for keys [d0, d0 + W) into a tile of pitch P: one thread per key sums
/// its column in order, continued like row_cumsum().
template <int W, int P>
__device__ void key_cumsum(const GatedLinearProblem& p, const Chunk& ch, int h, int d0, float* G) {
    const int d = threadIdx.x;
    if (d >= W) return;
    float acc = 0.f;
    for (int i = 0; i < kRows; ++i) {
        if (i < ch.len && d0 + d < p.dk)
            acc += load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h) + d0 + d);
        G[i * P + d] = acc;
    }
}

/// acc[r][u] += Σ_d a[i][d] b[j][d] (· exp(G[i][d] − G[j][d]) when G is given) over one
/// tile, for the thread's rows i = warp + kWarps·r < len and columns j = lane + 32u ≤ i.
__device__ void add_scores(const float (*a)[kPitch], const float (*b)[kPitch],
                           const float (*G)[kPitch], float (&acc)[kPerThread][2], int len) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
        const int i = warp + kWarps * r;
        if (i >= len) continue;
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int j = lane + 32 * u;
            if (j > i) continue;
            float sum = 0.f;
            if (G == nullptr)
                for (int d = 0; d < kTile; ++d) sum += a[i][d] * b[j][d];
            else
                for (int d = 0; d < kTile; ++d) sum += expf(G[i][d] - G[j][d]) * a[i][d] * b[j][d];
            acc[r][u] += sum;
        }
    }
}

/// acc[r] += Σ_d x[i][d] s[d][lane] over one key tile, for the thread's rows i: a row tile
/// times a [key, value] state tile.
__device__ void add_times_state(const float (*x)[kPitch], const float (*s)[kPitch],
                                float (&acc)[kPerThread]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < kPerThread; ++r) {
        const int i = warp + kWarps * r;
        for (int d = 0; d < kTile; ++d) acc[r] += x[i][d] * s[d][lane];
    }
}

// ---- state passing ----

/// Carries a [K, V] state tile over the chunks of one sequence and head, storing the state
/// before each chunk in its slot of `states` (state dtype). Forward (h, FLA's chunk_fwd_h):
/// S ← exp(Λ)·S + Kᵀ V with the decayed v (per-row gate) or the decayed k (per-key gate)
/// rounded to the input dtype first; xs = k, ys = v. Reverse (dh, FLA's chunk_bwd_dh):
/// dS ← exp(Λ)·dS + (scale · q ⊙ exp(G))ᵀ d_o in fp32; xs = q, ys = d_o. The carried tile
/// stays fp32 in registers; `start` and `end` are [N, H, K, V] in the state dtype.
template <bool Reverse>
__global__ void __launch_bounds__(kThreads)
    chunk_states(GatedLinearProblem p, Strided xs, Strided ys, const void* start, void* end,
                 void* states) {
    constexpr int R = kStateKeys / kWarps;
    __shared__ float X[kRows][kStateKeys];
    __shared__ float Y[kRows][kTile];
    __shared__ float G[kRows][kStateKeys];
    __shared__ float Grow[kRows];
    const int n = blockIdx.x / p.heads, h = blockIdx.x % p.heads;
    const int d0 = blockIdx.y * kStateKeys, col = blockIdx.z * kTile + threadIdx.x % 32;
    const int warp = threadIdx.x / 32;
    const bool per_key = p.gate == Gate::per_key;
    const Span s = span(p.seqs, n);
    const int64_t first = first_slot(p.seqs, p.chunk, n, s);
    const int64_t own = (int64_t(n) * p.heads + h) * p.dk * p.dv;
    float S[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int key = d0 + warp + kWarps * r;
        S[r] = start != nullptr && key < p.dk && col < p.dv
                   ? load(start, p.state, own + int64_t(key) * p.dv + col)
                   : 0.f;
    }
    const int64_t chunks = (s.len + p.chunk - 1) / p.chunk;
    for (int64_t step = 0; step < chunks; ++step) {
        const int64_t c = Reverse ? chunks - 1 - step : step;
        Chunk ch;
        ch.s = s, ch.n = n, ch.c0 = c * p.chunk;
        ch.len = int(s.len - ch.c0 < p.chunk ? s.len - ch.c0 : p.chunk);
        __syncthreads();  // the previous chunk's tiles are read
        load_tile<kStateKeys, kStateKeys>(&X[0][0], xs, ch, h, d0, p.dk);
        load_tile<kTile, kTile>(&Y[0][0], ys, ch, h, blockIdx.z * kTile, p.dv);
        if (per_key)
            key_cumsum<kStateKeys, kStateKeys>(p, ch, h, d0, &G[0][0]);
        else
            row_cumsum(p, ch, h, Grow);
        __syncthreads();
        for (int e = threadIdx.x; e < kRows * kStateKeys; e += kThreads) {
            const int i = e / kStateKeys, d = e % kStateKeys;
            if (Reverse)
                X[i][d] = per_key ? X[i][d] * expf(G[i][d]) * p.scale
                                  : X[i][d] * (expf(Grow[i]) * p.scale);
            else if (per_key)
                X[i][d] = rounded(X[i][d] * expf(G[kRows - 1][d] - G[i][d]), xs.dtype);
        }
        if (!Reverse && !per_key && p.gate != Gate::none)
            for (int e = threadIdx.x; e < kRows * kTile; e += kThreads) {
                const int i = e / kTile, c2 = e % kTile;
                Y[i][c2] = rounded(Y[i][c2] * expf(Grow[kRows - 1] - Grow[i]), ys.dtype);
            }
        __syncthreads();
        const int64_t base = state_at(p, first + c, h);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int dl = warp + kWarps * r, key = d0 + dl;
            if (key < p.dk && col < p.dv)
                store(states, p.state, base + int64_t(key) * p.dv + col, S[r]);
            float sum = 0.f;
            for (int i = 0; i < ch.len; ++i) sum += X[i][dl] * Y[i][threadIdx.x % 32];
            const float last = per_key ? expf(G[kRows - 1][dl]) : expf(Grow[kRows - 1]);
            S[r] = S[r] * last + sum;
        }
    }
    if (end == nullptr) return;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int key = d0 + warp + kWarps * r;
        if (key < p.dk && col < p.dv) store(end, p.state, own + int64_t(key) * p.dv + col, S[r]);
    }
}

// ---- forward output ----

struct OutputTiles {
    float A[kRows][kSquare];
    float q[kRows][kPitch], k[kRows][kPitch], g[kRows][kPitch], v[kRows][kPitch];
    float h[kTile][kPitch];
    float G[kRows];
};

/// o = scale · (q̃ h + A v) for one chunk and head (FLA's chunk_fwd_o, chunk_gla_fwd_o), with
/// the masked decayed scores A rounded to the input dtype before A·v; q̃ is q ⊙ exp(G) rounded
/// to the input dtype for a per-key gate, and q with exp(G_i) applied after the product
/// otherwise.
__global__ void __launch_bounds__(kThreads) chunk_output(GatedLinearProblem p, const void* hs) {
    extern __shared__ float4 smem[];
    OutputTiles& t = *reinterpret_cast<OutputTiles*>(smem);
    const int h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const Chunk ch = chunk_at(p.seqs, p.chunk, blockIdx.x);
    if (ch.len == 0) return;
    const bool per_key = p.gate == Gate::per_key;
    const int64_t base = state_at(p, blockIdx.x, h);
    if (!per_key) row_cumsum(p, ch, h, t.G);

    float acc[kPerThread][2] = {};
    for (int d0 = 0; d0 < p.dk; d0 += kTile) {
        __syncthreads();
        load_tile<kTile, kPitch>(&t.q[0][0], p.q, ch, h, d0, p.dk);
        load_tile<kTile, kPitch>(&t.k[0][0], p.k, ch, h, d0, p.dk);
        if (per_key) key_cumsum<kTile, kPitch>(p, ch, h, d0, &t.g[0][0]);
        __syncthreads();
        add_scores(t.q, t.k, per_key ? t.g : nullptr, acc, ch.len);
    }
#pragma unroll
    for (int r = 0; r < kPerThread; ++r)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int i = warp + kWarps * r, j = lane + 32 * u;
            const float a = per_key ? acc[r][u] : acc[r][u] * expf(t.G[i] - t.G[j]);
            t.A[i][j] = j <= i && i < ch.len ? rounded(a, p.v.dtype) : 0.f;
        }

    for (int v0 = 0; v0 < p.dv; v0 += kTile) {
        float o[kPerThread] = {};
        for (int d0 = 0; d0 < p.dk; d0 += kTile) {
            __syncthreads();
            load_tile<kTile, kPitch>(&t.q[0][0], p.q, ch, h, d0, p.dk);
            if (per_key) key_cumsum<kTile, kPitch>(p, ch, h, d0, &t.g[0][0]);
            load_state_tile(t.h, hs, p.state, base, d0, v0, p);
            __syncthreads();
            if (per_key) {
                for (int e = threadIdx.x; e < kRows * kTile; e += kThreads) {
                    const int i = e / kTile, d = e % kTile;
                    t.q[i][d] = rounded(t.q[i][d] * expf(t.g[i][d]), p.q.dtype);
                }
                __syncthreads();
            }
            add_times_state(t.q, t.h, o);
        }
        __syncthreads();
        load_tile<kTile, kPitch>(&t.v[0][0], p.v, ch, h, v0, p.dv);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < kPerThread; ++r) {
            const int i = warp + kWarps * r;
            if (i >= ch.len || v0 + lane >= p.dv) continue;
            if (!per_key) o[r] *= expf(t.G[i]);
            float av = 0.f;
            for (int j = 0; j <= i; ++j) av += t.A[i][j] * t.v[j][lane];
            store(p.o.data, p.o.dtype, at(p.o, ch.s, ch.c0 + i, h) + v0 + lane,
                  (o[r] + av) * p.scale);
        }
    }
}

// ---- backward ----

struct GradTiles {
    float A[kRows][kSquare], dA[kRows][kSquare];
    float q[kRows][kPitch], k[kRows][kPitch], g[kRows][kPitch];
    float d_o[kRows][kPitch], v[kRows][kPitch], dG[kRows][kPitch];
    float h[kTile][kPitch], dh[kTile][kPitch];
    float G[kRows], dGq[kRows], dGk[kRows];
    float partial[kWarps][kTile];
    float hdh[kTile];
};

/// dq, dk, dv and dg of one chunk and head (FLA's chunk_bwd_dqkwg, chunk_bwd_dv), from the
/// recomputed state h entering the chunk and the gradient dh of the state leaving it, both as
/// stored in the state dtype. Scores and their gradients stay fp32:
///   dq = scale·exp(G) ⊙ (d_o hᵀ) + Σ_j dA_ij k_j ⊙ exp(G_i − G_j)
///   dk = exp(Λ − G) ⊙ (v dhᵀ) + Σ_i dA_ij q_i ⊙ exp(G_i − G_j)
///   dv = (k ⊙ exp(Λ − G)) dh + Aᵀ d_o
///   dG = q ⊙ dq − k ⊙ dk, plus on the last row exp(Λ) Σ_v h ⊙ dh + Σ_j k_j ⊙ dk_inter_j,
/// and dg is dG summed from the chunk's end (per key for gla, over keys for simple_gla).
__global__ void __launch_bounds__(kThreads)
    chunk_grads(GatedLinearProblem p, GatedLinearGrads d, const void* hs, const void* dhs) {
    extern __shared__ float4 smem[];
    GradTiles& t = *reinterpret_cast<GradTiles*>(smem);
    const int h = blockIdx.y, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const Chunk ch = chunk_at(p.seqs, p.chunk, blockIdx.x);
    if (ch.len == 0) return;
    const bool per_key = p.gate == Gate::per_key;
    const int64_t base = state_at(p, blockIdx.x, h);
    const int len = ch.len;
    if (!per_key) row_cumsum(p, ch, h, t.G);
    if (threadIdx.x < kRows) t.dGq[threadIdx.x] = t.dGk[threadIdx.x] = 0.f;

    // dA = scale · d_o vᵀ (· exp(G_i − G_j) for a per-row gate), j ≤ i
    float acc[kPerThread][2] = {};
    for (int v0 = 0; v0 < p.dv; v0 += kTile) {
        __syncthreads();
        load_tile<kTile, kPitch>(&t.d_o[0][0], d.d_o, ch, h, v0, p.dv);
        load_tile<kTile, kPitch>(&t.v[0][0], p.v, ch, h, v0, p.dv);
        __syncthreads();
        add_scores(t.d_o, t.v, nullptr, acc, len);
    }
#pragma unroll
    for (int r = 0; r < kPerThread; ++r)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int i = warp + kWarps * r, j = lane + 32 * u;
            const float a = per_key ? acc[r][u] : acc[r][u] * expf(t.G[i] - t.G[j]);
            t.dA[i][j] = j <= i && i < len ? a * p.scale : 0.f;
            acc[r][u] = 0.f;
        }
    // A = scale · the masked decayed q kᵀ, unrounded
    for (int d0 = 0; d0 < p.dk; d0 += kTile) {
        __syncthreads();
        load_tile<kTile, kPitch>(&t.q[0][0], p.q, ch, h, d0, p.dk);
        load_tile<kTile, kPitch>(&t.k[0][0], p.k, ch, h, d0, p.dk);
        if (per_key) key_cumsum<kTile, kPitch>(p, ch, h, d0, &t.g[0][0]);
        __syncthreads();
        add_scores(t.q, t.k, per_key ? t.g : nullptr, acc, len);
    }
#pragma unroll
    for (int r = 0; r < kPerThread; ++r)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
            const int i = warp + kWarps * r, j = lane + 32 * u;
            const float a = per_key ? acc[r][u] : acc[r][u] * expf(t.G[i] - t.G[j]);
            t.A[i][j] = j <= i && i < len ? a * p.scale : 0.f;
        }

    // dq, dk and dG, one key tile at a time
    float state_carry = 0.f, k_carry = 0.f;  // thread 0's sums over keys, per-row gate
    for (int d0 = 0; d0 < p.dk; d0 += kTile) {
        __syncthreads();
        load_tile<kTile, kPitch>(&t.q[0][0], p.q, ch, h, d0, p.dk);
        load_tile<kTile, kPitch>(&t.k[0][0], p.k, ch, h, d0, p.dk);
        if (per_key) key_cumsum<kTile, kPitch>(p, ch, h, d0, &t.g[0][0]);
        if (threadIdx.x < kTile) t.hdh[threadIdx.x] = 0.f;
        float dq[kPerThread] = {}, dk[kPerThread] = {};
        for (int v0 = 0; v0 < p.dv; v0 += kTile) {
            __syncthreads();
            load_tile<kTile, kPitch>(&t.d_o[0][0], d.d_o, ch, h, v0, p.dv);
            load_tile<kTile, kPitch>(&t.v[0][0], p.v, ch, h, v0, p.dv);
            load_state_tile(t.h, hs, p.state, base, d0, v0, p);
            load_state_tile(t.dh, dhs, p.state, base, d0, v0, p);
            __syncthreads();
#pragma unroll
            for (int r = 0; r < kPerThread; ++r) {
                const int i = warp + kWarps * r;
                for (int c = 0; c < kTile; ++c) {
                    dq[r] += t.d_o[i][c] * t.h[lane][c];
                    dk[r] += t.v[i][c] * t.dh[lane][c];
                }
            }
            if (threadIdx.x < kTile)
                for (int c = 0; c < kTile; ++c)
                    t.hdh[threadIdx.x] += t.h[threadIdx.x][c] * t.dh[threadIdx.x][c];
        }
        float k_part = 0.f;
#pragma unroll
        for (int r = 0; r < kPerThread; ++r) {
            const int i = warp + kWarps * r;
            if (per_key) {
                dq[r] = dq[r] * expf(t.g[i][lane]) * p.scale;
                dk[r] *= expf(t.g[kRows - 1][lane] - t.g[i][lane]);
            } else {
                dq[r] *= expf(t.G[i]) * p.scale;
                dk[r] *= expf(t.G[kRows - 1] - t.G[i]);
            }
            k_part += t.k[i][lane] * dk[r];
        }
        t.partial[warp][lane] = k_part;
#pragma unroll
        for (int r = 0; r < kPerThread; ++r) {
            const int i = warp + kWarps * r;
            if (i >= len) continue;
            for (int j = 0; j <= i; ++j) {
                const float a =
                    per_key ? t.dA[i][j] * expf(t.g[i][lane] - t.g[j][lane]) : t.dA[i][j];
                dq[r] += a * t.k[j][lane];
            }
            for (int j = i; j < len; ++j) {
                const float a =
                    per_key ? t.dA[j][i] * expf(t.g[j][lane] - t.g[i][lane]) : t.dA[j][i];
                dk[r] += a * t.q[j][lane];
            }
        }
        const int key = d0 + lane;
#pragma unroll
        for (int r = 0; r < kPerThread; ++r) {
            const int i = warp + kWarps * r;
            const float qdq = t.q[i][lane] * dq[r], kdk = t.k[i][lane] * dk[r];
            if (i < len && key < p.dk) {
                store(d.dq.data, d.dq.dtype, at(d.dq, ch.s, ch.c0 + i, h) + key, dq[r]);
                store(d.dk.data, d.dk.dtype, at(d.dk, ch.s, ch.c0 + i, h) + key, dk[r]);
            }
            if (per_key) {
                t.dG[i][lane] = qdq - kdk;
            } else {
                const float sq = warp_sum(qdq), sk = warp_sum(kdk);
                if (lane == 0) t.dGq[i] += sq, t.dGk[i] += sk;
            }
        }
        __syncthreads();
        if (per_key && threadIdx.x < kTile && d0 + threadIdx.x < p.dk) {
            const int e = threadIdx.x;
            float carry = 0.f;
            for (int w = 0; w < kWarps; ++w) carry += t.partial[w][e];
            float run = t.dG[len - 1][e] + (expf(t.g[kRows - 1][e]) * t.hdh[e] + carry);
            for (int i = len - 1;; --i) {
                store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h) + d0 + e, run);
                if (i == 0) break;
                run += t.dG[i - 1][e];
            }
        }
        if (!per_key && threadIdx.x == 0)
            for (int e = 0; e < kTile; ++e) {
                state_carry += t.hdh[e];
                for (int w = 0; w < kWarps; ++w) k_carry += t.partial[w][e];
            }
    }
    if (p.gate == Gate::per_head && threadIdx.x == 0) {
        float run =
            (t.dGq[len - 1] - t.dGk[len - 1]) + (expf(t.G[kRows - 1]) * state_carry + k_carry);
        for (int i = len - 1;; --i) {
            store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h), run);
            if (i == 0) break;
            run += t.dGq[i - 1] - t.dGk[i - 1];
        }
    }

    // dv, one value tile at a time
    for (int v0 = 0; v0 < p.dv; v0 += kTile) {
        float dv[kPerThread] = {};
        for (int d0 = 0; d0 < p.dk; d0 += kTile) {
            __syncthreads();
            load_tile<kTile, kPitch>(&t.k[0][0], p.k, ch, h, d0, p.dk);
            if (per_key) key_cumsum<kTile, kPitch>(p, ch, h, d0, &t.g[0][0]);
            load_state_tile(t.dh, dhs, p.state, base, d0, v0, p);
            __syncthreads();
            if (per_key) {
                for (int e = threadIdx.x; e < kRows * kTile; e += kThreads) {
                    const int i = e / kTile, c = e % kTile;
                    t.k[i][c] *= expf(t.g[kRows - 1][c] - t.g[i][c]);
                }
                __syncthreads();
            }
            add_times_state(t.k, t.dh, dv);
        }
        __syncthreads();
        load_tile<kTile, kPitch>(&t.d_o[0][0], d.d_o, ch, h, v0, p.dv);
        __syncthreads();
#pragma unroll
        for (int r = 0; r < kPerThread; ++r) {
            const int j = warp + kWarps * r;
            if (j >= len || v0 + lane >= p.dv) continue;
            if (!per_key) dv[r] *= expf(t.G[kRows - 1] - t.G[j]);
            float ad = 0.f;
            for (int i = j; i < len; ++i) ad += t.A[i][j] * t.d_o[i][lane];
            store(d.dv.data, d.dv.dtype, at(d.dv, ch.s, ch.c0 + j, h) + v0 + lane, dv[r] + ad);
        }
    }
}

int64_t state_bytes(const GatedLinearProblem& p) {
    const int64_t elem = p.state == DType::f32 ? 4 : 2;
    return chunk_slots(p.seqs, p.chunk) * p.heads * p.dk * p.dv * elem;
}

void check_problem(const GatedLinearProblem& p) {
    if (p.chunk < 1 || p.chunk > kRows)
        throw std::invalid_argument("chunk size " + std::to_string(p.chunk) + " is outside 1.." +
                                    std::to_string(kRows));
    if (p.dk > kMaxGatedLinearKeys)
        throw std::invalid_argument("key width " + std::to_string(p.dk) + " exceeds " +
                                    std::to_string(kMaxGatedLinearKeys));
}

template <bool Reverse>
void launch_states(const GatedLinearProblem& p, const Strided& xs, const Strided& ys,
                   const void* start, void* end, void* states, cudaStream_t stream) {
    const dim3 grid(unsigned(p.seqs.n * p.heads), unsigned((p.dk + kStateKeys - 1) / kStateKeys),
                    unsigned((p.dv + kTile - 1) / kTile));
    chunk_states<Reverse><<<grid, kThreads, 0, stream>>>(p, xs, ys, start, end, states);
    LAV_CUDA_CHECK(cudaGetLastError(), Reverse ? "gated linear chunk dh" : "gated linear chunk h");
}

/// Launches a per-chunk kernel (one block per chunk slot and head) with `bytes` of dynamic
/// shared memory, above the 48 KiB default.
template <typename... Params, typename... Args>
void launch_chunks(void (*kernel)(Params...), size_t bytes, const GatedLinearProblem& p,
                   cudaStream_t stream, const char* what, Args... args) {
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    if (slots == 0) return;
    LAV_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
        what);
    kernel<<<dim3(unsigned(slots), unsigned(p.heads)), kThreads, bytes, stream>>>(args...);
    LAV_CUDA_CHECK(cudaGetLastError(), what);
}

}  // namespace

int64_t gated_linear_chunk_workspace_floats(const GatedLinearProblem& p, bool backward) {
    // the tensor-core forwards keep their states on chip, but for the row-gate forward's
    // segments
    if (!backward && gated_linear_tc_fits(p))
        return p.gate == Gate::per_key ? 0 : gated_linear_tc_row_workspace_floats(p);
    return ((backward ? 2 : 1) * state_bytes(p) + 3) / 4;
}

void gated_linear_chunk_fwd(const GatedLinearProblem& p, float* workspace, cudaStream_t stream) {
    check_problem(p);
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return;
    if (gated_linear_tc_fits(p))
        return p.gate == Gate::per_key ? gated_linear_tc_fwd(p, nullptr, stream)
                                       : gated_linear_tc_row_fwd(p, workspace, stream);
    launch_states<false>(p, p.k, p.v, p.h0, p.ht, workspace, stream);
    launch_chunks(chunk_output, sizeof(OutputTiles), p, stream, "gated linear chunk o", p,
                  static_cast<const void*>(workspace));
}

void gated_linear_chunk_bwd(const GatedLinearProblem& p, const GatedLinearGrads& d,
                            cudaStream_t stream) {
    check_problem(p);
    if (p.seqs.n == 0 || p.heads == 0) return;
    if (p.dv == 0) throw std::invalid_argument("gated linear chunk backward needs V >= 1");
    void* hs = d.workspace;
    void* dhs = reinterpret_cast<char*>(d.workspace) + state_bytes(p);
    if (gated_linear_tc_fits(p)) {
        GatedLinearProblem states_only = p;
        states_only.o.data = nullptr;
        states_only.ht = nullptr;
        gated_linear_tc_fwd(states_only, hs, stream);
    } else {
        launch_states<false>(p, p.k, p.v, p.h0, nullptr, hs, stream);
    }
    if (gated_linear_tc_state_grads_fit(p, d))
        gated_linear_tc_state_grads(p, d, dhs, stream);
    else
        launch_states<true>(p, p.q, d.d_o, d.dht, d.dh0, dhs, stream);
    if (gated_linear_tc_grads_fit(p, d)) return gated_linear_tc_grads(p, d, hs, dhs, stream);
    launch_chunks(chunk_grads, sizeof(GradTiles), p, stream, "gated linear chunk grads", p, d,
                  static_cast<const void*>(hs), static_cast<const void*>(dhs));
}

}  // namespace lav::cuda
