// kernels/common/cuda/gated_linear_recurrent.cu — the recurrent (step-by-step) gated linear
// recurrence on CUDA, forward and backward, for simple_gla and gla.
//
// A warp owns kCols value columns of one head's state and spreads its K rows over the lanes
// (key = lane + 32 j), so o_t = Sᵀq is one warp reduction per column and the state never leaves
// registers. The backward is FLA's fused_recurrent scheme: a forward pass recomputes S_t for dq,
// a reverse pass carries dS for dk, dv and dh0, and a last pass turns dq, dk into dg through
// dG_t = q_t ⊙ dq_t − k_t ⊙ dk_t (+ Σ_v ht ⊙ dht at the end), summed from the end. The sums
// over value columns (dq, dk, Σ_v ht ⊙ dht) go through shared memory in warp order and into one
// fp32 slice per block of columns, which the last pass adds in order: no atomics, so two runs
// give the same bits.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/gated_linear_cuda.h"
#include "common/cuda/ordered_sums.cuh"
#include "common/cuda/warp_state.cuh"

namespace lav::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kCols = 4;   // value columns per warp

__device__ __forceinline__ float decay(const GatedLinearProblem& p, const Span& s, int64_t t, int h,
                                       int key) {
    switch (p.gate) {
        case Gate::none:
            return 1.f;
        case Gate::constant:
            return expf(p.g_gamma[h]);
        case Gate::per_head:
            return expf(load(p.g.data, p.g.dtype, at(p.g, s, t, h)));
        default:
            return expf(load(p.g.data, p.g.dtype, at(p.g, s, t, h) + key));
    }
}

/// The tile a warp owns: sequence n, head h, columns [col0, col0 + kCols).
struct Tile {
    int n, h, col0;
    Span s;
    int64_t state;  // offset of this head's [K, V] state
};

__device__ __forceinline__ Tile tile_of(const GatedLinearProblem& p) {
    Tile w;
    w.n = blockIdx.x / p.heads;
    w.h = blockIdx.x % p.heads;
    w.col0 = (blockIdx.y * kWarps + threadIdx.x / 32) * kCols;
    w.s = span(p.seqs, w.n);
    w.state = (int64_t(w.n) * p.heads + w.h) * p.dk * p.dv;
    return w;
}

__device__ __forceinline__ void load_cols(float (&x)[kCols], const Strided& t, int64_t off,
                                          const GatedLinearProblem& p, const Tile& w) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
        x[c] = w.col0 + c < p.dv ? load(t.data, t.dtype, off + w.col0 + c) : 0.f;
}

/// Lane c < kCols writes column c's warp-reduced value.
__device__ __forceinline__ void store_cols(float (&x)[kCols], const Strided& t, int64_t off,
                                           const GatedLinearProblem& p, const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        const float sum = warp_sum(x[c]);
        if (lane == c && w.col0 + c < p.dv) store(t.data, t.dtype, off + w.col0 + c, sum);
    }
}

template <int KPL>
__global__ void __launch_bounds__(kWarps * 32) recurrent_fwd(GatedLinearProblem p) {
    const Tile w = tile_of(p);
    if (w.col0 >= p.dv) return;
    const int lane = threadIdx.x % 32;
    float S[KPL][kCols];
    load_state(S, p.h0, p.state, p, w);
    for (int64_t t = 0; t < w.s.len; ++t) {
        const int64_t qo = at(p.q, w.s, t, w.h), ko = at(p.k, w.s, t, w.h);
        float v[kCols], acc[kCols] = {};
        load_cols(v, p.v, at(p.v, w.s, t, w.h), p, w);
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            const int key = lane + 32 * j;
            if (key >= p.dk) continue;
            const float qj = load(p.q.data, p.q.dtype, qo + key) * p.scale;
            const float kj = load(p.k.data, p.k.dtype, ko + key);
            const float dj = decay(p, w.s, t, w.h, key);
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                S[j][c] = dj * S[j][c] + kj * v[c];
                acc[c] += S[j][c] * qj;
            }
        }
        store_cols(acc, p.o, at(p.o, w.s, t, w.h), p, w);
    }
    if (p.ht != nullptr) store_state(S, p.ht, p, w);
}

/// The backward's fp32 scratch: dq and dk, [slices][rows, H, K], and Σ_v ht ⊙ dht,
/// [slices][N, H, K], with one slice per block of value columns (the grid's second dimension).
struct Scratch {
    float *dq, *dk, *hterm;
    int64_t keys, states;  // elements of one slice of dq (and dk), of hterm
    int slices;
};

/// Per-warp partials of one step, double-buffered by the parity of t: one barrier per step.
/// Every warp of a block takes part; one past dv holds only zeros (masked columns).
using WarpKeys = float[2][kWarps][kMaxGatedLinearKeys];

/// After a barrier: the block's sum over its warps of `part`, into the block's slice at `at`.
__device__ __forceinline__ void add_block_keys(const float (&part)[kWarps][kMaxGatedLinearKeys],
                                               float* at, int dk, float scale) {
    for (int key = threadIdx.x; key < dk; key += blockDim.x) at[key] = scale * warps_sum(part, key);
}

/// Forward again, for dq_t = scale · S_t do_t and for Σ_v ht ⊙ dht.
template <int KPL>
__global__ void __launch_bounds__(kWarps * 32)
    recurrent_bwd_dq(GatedLinearProblem p, GatedLinearGrads d, Scratch x) {
    __shared__ WarpKeys part;
    const Tile w = tile_of(p);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float S[KPL][kCols];
    load_state(S, p.h0, p.state, p, w);
    for (int64_t t = 0; t < w.s.len; ++t) {
        const int64_t ko = at(p.k, w.s, t, w.h);
        const int64_t r = (row(p.seqs, w.s, t) * p.heads + w.h) * p.dk;
        float v[kCols], d_o[kCols];
        load_cols(v, p.v, at(p.v, w.s, t, w.h), p, w);
        load_cols(d_o, d.d_o, at(d.d_o, w.s, t, w.h), p, w);
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            const int key = lane + 32 * j;
            if (key >= p.dk) continue;
            const float kj = load(p.k.data, p.k.dtype, ko + key);
            const float dj = decay(p, w.s, t, w.h, key);
            float sum = 0.f;
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                S[j][c] = dj * S[j][c] + kj * v[c];
                sum += S[j][c] * d_o[c];
            }
            part[t & 1][warp][key] = sum;
        }
        __syncthreads();
        add_block_keys(part[t & 1], x.dq + blockIdx.y * x.keys + r, p.dk, p.scale);
    }
    if (d.dht == nullptr) return;
    __syncthreads();  // the last step's sums are read before part[0] is written again
    float dht[KPL][kCols];
    load_state(dht, d.dht, p.state, p, w);
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
        const int key = lane + 32 * j;
        if (key >= p.dk) continue;
        float sum = 0.f;
#pragma unroll
        for (int c = 0; c < kCols; ++c) sum += S[j][c] * dht[j][c];
        part[0][warp][key] = sum;
    }
    __syncthreads();
    const int64_t hr = (int64_t(w.n) * p.heads + w.h) * p.dk;
    add_block_keys(part[0], x.hterm + blockIdx.y * x.states + hr, p.dk, 1.f);
}

/// Reverse in time carrying dS: dk, dv and dh0.
template <int KPL>
__global__ void __launch_bounds__(kWarps * 32)
    recurrent_bwd_dkdv(GatedLinearProblem p, GatedLinearGrads d, Scratch x) {
    __shared__ WarpKeys part;
    const Tile w = tile_of(p);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dS[KPL][kCols];
    load_state(dS, d.dht, p.state, p, w);
    for (int64_t t = w.s.len - 1; t >= 0; --t) {
        const int64_t qo = at(p.q, w.s, t, w.h), ko = at(p.k, w.s, t, w.h);
        const int64_t r = (row(p.seqs, w.s, t) * p.heads + w.h) * p.dk;
        float v[kCols], d_o[kCols], dv[kCols] = {};
        load_cols(v, p.v, at(p.v, w.s, t, w.h), p, w);
        load_cols(d_o, d.d_o, at(d.d_o, w.s, t, w.h), p, w);
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            const int key = lane + 32 * j;
            if (key >= p.dk) continue;
            const float qj = load(p.q.data, p.q.dtype, qo + key) * p.scale;
            const float kj = load(p.k.data, p.k.dtype, ko + key);
            const float dj = decay(p, w.s, t, w.h, key);
            float sum = 0.f;
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                dS[j][c] += qj * d_o[c];
                sum += dS[j][c] * v[c];
                dv[c] += dS[j][c] * kj;
                dS[j][c] *= dj;
            }
            part[t & 1][warp][key] = sum;
        }
        store_cols(dv, d.dv, at(d.dv, w.s, t, w.h), p, w);
        __syncthreads();
        add_block_keys(part[t & 1], x.dk + blockIdx.y * x.keys + r, p.dk, 1.f);
    }
    if (d.dh0 != nullptr) store_state(dS, d.dh0, p, w);
}

/// One block per (sequence, head), one thread per key: rounds dq, dk and forms dg.
__global__ void recurrent_bwd_finish(GatedLinearProblem p, GatedLinearGrads d, Scratch x) {
    __shared__ float partial[kMaxGatedLinearKeys / 32];
    const int n = blockIdx.x / p.heads, h = blockIdx.x % p.heads, key = threadIdx.x;
    const bool mine = key < p.dk;
    const Span s = span(p.seqs, n);
    const int64_t hr = (int64_t(n) * p.heads + h) * p.dk + key;
    float run = mine && d.dht != nullptr ? slice_sum(x.hterm + hr, x.states, x.slices) : 0.f;
    for (int64_t t = s.len - 1; t >= 0; --t) {
        if (mine) {
            const int64_t r = (row(p.seqs, s, t) * p.heads + h) * p.dk + key;
            const int64_t qo = at(p.q, s, t, h) + key, ko = at(p.k, s, t, h) + key;
            const float dq = slice_sum(x.dq + r, x.keys, x.slices);
            const float dk = slice_sum(x.dk + r, x.keys, x.slices);
            store(d.dq.data, d.dq.dtype, at(d.dq, s, t, h) + key, dq);
            store(d.dk.data, d.dk.dtype, at(d.dk, s, t, h) + key, dk);
            run += load(p.q.data, p.q.dtype, qo) * dq - load(p.k.data, p.k.dtype, ko) * dk;
        }
        if (p.gate == Gate::per_key) {
            if (mine) store(d.dg.data, d.dg.dtype, at(d.dg, s, t, h) + key, run);
        } else if (p.gate == Gate::per_head) {
            const float sum = warp_sum(run);
            if (key % 32 == 0) partial[key / 32] = sum;
            __syncthreads();
            if (key == 0) {
                float total = 0.f;
                for (int i = 0; i < int(blockDim.x) / 32; ++i) total += partial[i];
                store(d.dg.data, d.dg.dtype, at(d.dg, s, t, h), total);
            }
            __syncthreads();
        }
    }
}

/// Blocks of value columns: the grid's second dimension and the scratch's slices.
int column_blocks(const GatedLinearProblem& p) {
    return (p.dv + kWarps * kCols - 1) / (kWarps * kCols);
}

dim3 grid_of(const GatedLinearProblem& p) {
    return dim3(unsigned(p.seqs.n * p.heads), unsigned(column_blocks(p)));
}

int64_t rows(const Sequences& s) { return s.cu_seqlens != nullptr ? s.t : s.n * s.t; }

Scratch scratch_of(const GatedLinearProblem& p, float* w) {
    Scratch x;
    x.keys = rows(p.seqs) * p.heads * p.dk;
    x.states = int64_t(p.seqs.n) * p.heads * p.dk;
    x.slices = column_blocks(p);
    x.dq = w;
    x.dk = x.dq + x.keys * x.slices;
    x.hterm = x.dk + x.keys * x.slices;
    return x;
}

/// Calls f(std::integral_constant<int, KPL>) for the smallest keys-per-lane that fits dk.
template <typename F>
void dispatch_keys(int dk, F&& f) {
    if (dk <= 32) return f(std::integral_constant<int, 1>{});
    if (dk <= 64) return f(std::integral_constant<int, 2>{});
    if (dk <= 128) return f(std::integral_constant<int, 4>{});
    if (dk <= 256) return f(std::integral_constant<int, 8>{});
    throw std::invalid_argument("key width " + std::to_string(dk) + " exceeds " +
                                std::to_string(kMaxGatedLinearKeys));
}

}  // namespace

int64_t gated_linear_workspace_floats(const GatedLinearProblem& p) {
    const Scratch x = scratch_of(p, nullptr);
    return (2 * x.keys + x.states) * x.slices;
}

void gated_linear_recurrent_fwd(const GatedLinearProblem& p, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return;
    dispatch_keys(p.dk, [&](auto kpl) {
        recurrent_fwd<decltype(kpl)::value><<<grid_of(p), kWarps * 32, 0, stream>>>(p);
    });
    LAV_CUDA_CHECK(cudaGetLastError(), "gated_linear_recurrent_fwd");
}

void gated_linear_recurrent_bwd(const GatedLinearProblem& p, const GatedLinearGrads& d,
                                cudaStream_t stream) {
    if (p.seqs.n == 0 || p.heads == 0) return;
    const Scratch x = scratch_of(p, d.workspace);  // every slice element is written once
    if (p.dv > 0)
        dispatch_keys(p.dk, [&](auto kpl) {
            constexpr int KPL = decltype(kpl)::value;
            recurrent_bwd_dq<KPL><<<grid_of(p), kWarps * 32, 0, stream>>>(p, d, x);
            recurrent_bwd_dkdv<KPL><<<grid_of(p), kWarps * 32, 0, stream>>>(p, d, x);
        });
    const int threads = (p.dk + 31) / 32 * 32;
    recurrent_bwd_finish<<<unsigned(p.seqs.n * p.heads), threads, 0, stream>>>(p, d, x);
    LAV_CUDA_CHECK(cudaGetLastError(), "gated_linear_recurrent_bwd");
}

}  // namespace lav::cuda
