// kernels/common/cuda/delta_recurrent.cu — the recurrent delta rule on CUDA, forward and
// backward, for delta_rule, gated_delta_rule and kda (delta_recurrent_cuda.h).
//
// A block is one (sequence, value head, 16 value columns); each of its warps owns kCols columns
// of the fp32 state and spreads the K rows over its lanes (key = lane + 32 j), so Sᵀk and Sᵀq
// are one warp reduction per column and the state never leaves registers. Every step is the
// CPU backend's (common/cpu/delta_chunk.h step(), kda_cpu.cpp decay_and_delta/add_update) in
// the same order: S ← a S, p = Sᵀk, u = β (v − p), S ← S + k uᵀ, o = Sᵀ(scale q).
//
// The backward is the CPU backend's too: a forward pass keeps the state before every
// `segment`-th step (fp32, in the workspace); then, segment by segment from the end, the
// states before each step are recomputed from its checkpoint into the workspace and walked
// backwards carrying dS. Sums over the value columns (dq, dk, dg per key, dβ, GDN's dg) are
// added in a fixed order, never with atomics, so that two runs give the same bits: the block's
// warps through shared memory, then each block's sum into its own fp32 slice of the scratch;
// two finishing kernels add the slices in order (and, for dq and dk, a key head's value heads)
// and take the sums through the l2norm, the β sigmoid and the in-kernel gate, rounding each
// result once.
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_recurrent_cuda.h"
#include "common/cuda/ordered_sums.cuh"
#include "common/cuda/warp_state.cuh"

namespace lav::cuda {
namespace {

constexpr int kWarps = 4;  // warps per block
constexpr int kCols = 4;   // value columns per warp

/// The tile a warp owns: sequence n, value head hv (key head h), columns [col0, col0 + kCols).
struct Tile {
    int n, hv, h, col0;
    Span s;
    int64_t state;  // offset of this value head's [K, V] state
};

__device__ __forceinline__ Tile tile_of(const DeltaProblem& p) {
    Tile w;
    w.n = blockIdx.x / p.value_heads;
    w.hv = blockIdx.x % p.value_heads;
    w.h = w.hv / (p.value_heads / p.heads);
    w.col0 = (blockIdx.y * kWarps + threadIdx.x / 32) * kCols;
    w.s = span(p.seqs, w.n);
    w.state = (int64_t(w.n) * p.value_heads + w.hv) * p.dk * p.dv;
    return w;
}

/// What one step reads, for the lane's keys: q and k as the recurrence uses them (normalised
/// when asked; 0 past K), the decay of each key (1 past K and without a gate), and β as used.
template <int KPL>
struct Step {
    float q[KPL], k[KPL], a[KPL];
    float beta;
};

/// The log decay of step t: per head (key < 0) or of one key, activated in the kernel when asked.
__device__ __forceinline__ float log_decay(const DeltaProblem& p, const Tile& w, int64_t t,
                                           int key) {
    const int64_t off = at(p.g, w.s, t, w.hv) + (key >= 0 ? key : 0);
    const float raw = load(p.g.data, p.g.dtype, off);
    if (!p.gate_in_kernel) return raw;
    const float bias =
        p.dt_bias != nullptr ? p.dt_bias[key >= 0 ? int64_t(w.hv) * p.dk + key : w.hv] : 0.f;
    return activated_gate(p, expf(p.A_log[w.hv]), raw + bias);
}

template <int KPL>
__device__ __forceinline__ void load_step(const DeltaProblem& p, const Tile& w, int64_t t,
                                          Step<KPL>& st) {
    const int lane = threadIdx.x % 32;
    const int64_t qo = at(p.q, w.s, t, w.h), ko = at(p.k, w.s, t, w.h);
    float qq = 0.f, kk = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
        const int key = lane + 32 * j;
        const bool in = key < p.dk;
        st.q[j] = in ? load(p.q.data, p.q.dtype, qo + key) : 0.f;
        st.k[j] = in ? load(p.k.data, p.k.dtype, ko + key) : 0.f;
        qq += st.q[j] * st.q[j];
        kk += st.k[j] * st.k[j];
    }
    if (p.l2norm) {
        // x · rstd with rstd = 1/√(Σ x² + eps), in fp32 and never rounded (the CPU recurrent
        // variant's contract)
        const float rq = 1.f / sqrtf(warp_sum(qq) + kL2NormEps);
        const float rk = 1.f / sqrtf(warp_sum(kk) + kL2NormEps);
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            st.q[j] *= rq;
            st.k[j] *= rk;
        }
    }
    const float head = p.gate == DeltaGate::per_head ? expf(log_decay(p, w, t, -1)) : 1.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
        const int key = lane + 32 * j;
        st.a[j] = p.gate == DeltaGate::per_key && key < p.dk ? expf(log_decay(p, w, t, key)) : head;
    }
    st.beta = activated_beta(p, load(p.beta.data, p.beta.dtype, at(p.beta, w.s, t, w.hv)));
}

/// The fp32 copy of the lane's state elements at `at` ([K, V] row-major, fp32 scratch): written
/// and read back by the same thread, so no synchronisation is needed.
template <int KPL>
__device__ __forceinline__ void put(const float (&S)[KPL][kCols], float* at_, const DeltaProblem& p,
                                    const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const int key = lane + 32 * j, col = w.col0 + c;
            if (key < p.dk && col < p.dv) at_[int64_t(key) * p.dv + col] = S[j][c];
        }
}

template <int KPL>
__device__ __forceinline__ void get(float (&S)[KPL][kCols], const float* at_, const DeltaProblem& p,
                                    const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            const int key = lane + 32 * j, col = w.col0 + c;
            S[j][c] = key < p.dk && col < p.dv ? at_[int64_t(key) * p.dv + col] : 0.f;
        }
}

__device__ __forceinline__ void load_cols(float (&x)[kCols], const Strided& t, int64_t off,
                                          const DeltaProblem& p, const Tile& w) {
#pragma unroll
    for (int c = 0; c < kCols; ++c)
        x[c] = w.col0 + c < p.dv ? load(t.data, t.dtype, off + w.col0 + c) : 0.f;
}

/// Lane c < kCols writes x[c], which every lane holds.
__device__ __forceinline__ void store_cols(const float (&x)[kCols], const Strided& t, int64_t off,
                                           const DeltaProblem& p, const Tile& w) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int c = 0; c < kCols; ++c)
        if (lane == c && w.col0 + c < p.dv) store(t.data, t.dtype, off + w.col0 + c, x[c]);
}

/// S ← diag(a) S (the decayed state S̄), then u = β (v − S̄ᵀ k); returns p = S̄ᵀ k in `pk`.
template <int KPL>
__device__ __forceinline__ void decay_and_delta(float (&S)[KPL][kCols], const Step<KPL>& st,
                                                const float (&v)[kCols], float (&pk)[kCols],
                                                float (&u)[kCols]) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) pk[c] = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            S[j][c] *= st.a[j];
            pk[c] += st.k[j] * S[j][c];
        }
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        pk[c] = warp_sum(pk[c]);
        u[c] = st.beta * (v[c] - pk[c]);
    }
}

/// One step of the recurrence without an output: S ← S̄ + k uᵀ.
template <int KPL>
__device__ __forceinline__ void advance(float (&S)[KPL][kCols], const DeltaProblem& p,
                                        const Tile& w, int64_t t) {
    Step<KPL> st;
    load_step(p, w, t, st);
    float v[kCols], pk[kCols], u[kCols];
    load_cols(v, p.v, at(p.v, w.s, t, w.hv), p, w);
    decay_and_delta(S, st, v, pk, u);
#pragma unroll
    for (int j = 0; j < KPL; ++j)
#pragma unroll
        for (int c = 0; c < kCols; ++c) S[j][c] += st.k[j] * u[c];
}

template <int KPL>
__global__ void __launch_bounds__(kWarps * 32) recurrent_fwd(DeltaProblem p) {
    const Tile w = tile_of(p);
    if (w.col0 >= p.dv) return;
    float S[KPL][kCols];
    load_state(S, p.h0, p.state, p, w);
    for (int64_t t = 0; t < w.s.len; ++t) {
        Step<KPL> st;
        load_step(p, w, t, st);
        float v[kCols], pk[kCols], u[kCols], o[kCols] = {};
        load_cols(v, p.v, at(p.v, w.s, t, w.hv), p, w);
        decay_and_delta(S, st, v, pk, u);
#pragma unroll
        for (int j = 0; j < KPL; ++j) {
            // FLA's fused_recurrent scales q before the product
            const float qs = p.scale * st.q[j];
#pragma unroll
            for (int c = 0; c < kCols; ++c) {
                S[j][c] += st.k[j] * u[c];
                o[c] += qs * S[j][c];
            }
        }
#pragma unroll
        for (int c = 0; c < kCols; ++c) o[c] = warp_sum(o[c]);
        store_cols(o, p.o, at(p.o, w.s, t, w.hv), p, w);
    }
    if (p.ht != nullptr) store_state(S, p.ht, p, w);
}

// ---- backward ----

/// The backward's fp32 scratch (delta_recurrent_workspace_floats()), as offsets in elements.
/// The first four are sums over value columns kept apart per slice, each slice written by one
/// block: dq and dk have `key_slices` = (value heads of a key head) × (blocks of columns), the
/// rest `col_slices` = blocks of columns. `states` holds 2·segment [K, V] states per (sequence,
/// value head): the checkpoints, then the states before each step of the segment being walked.
struct ScratchLayout {
    int64_t keys, steps;  // elements of one slice: rows·H·K and rows·HV
    int key_slices, col_slices;
    int64_t dq, dk;  // [key_slices][rows, H, K] w.r.t. the normalised q̂, k̂
    int64_t dg;      // [col_slices][rows, HV, width] w.r.t. the log decay as used
    int64_t dbeta;   // [col_slices][rows, HV] w.r.t. β as used
    int64_t dA_log;  // [rows, HV] terms (finishing pass)
    int64_t ddt;     // [rows, HV, width] terms (finishing pass)
    int64_t states;
    int64_t end;
};

/// The same, as pointers into one workspace.
struct Scratch {
    float *dq, *dk, *dg, *dbeta, *dA_log, *ddt, *states;
    int64_t keys, steps;
    int key_slices, col_slices;
};

/// Gate terms per (row, value head): K per key, else one.
__host__ __device__ __forceinline__ int gate_width(const DeltaProblem& p) {
    return p.gate == DeltaGate::per_key ? p.dk : 1;
}

/// Blocks of value columns: the grid's second dimension.
int column_blocks(const DeltaProblem& p) { return (p.dv + kWarps * kCols - 1) / (kWarps * kCols); }

ScratchLayout layout_of(const DeltaProblem& p) {
    const int64_t rows = packed_rows(p.seqs);
    ScratchLayout l;
    l.keys = rows * p.heads * p.dk;
    l.steps = rows * p.value_heads;
    l.col_slices = column_blocks(p);
    l.key_slices = l.col_slices * (p.value_heads / p.heads);
    l.dq = 0;
    l.dk = l.dq + l.keys * l.key_slices;
    l.dg = l.dk + l.keys * l.key_slices;
    l.dbeta = l.dg + l.steps * gate_width(p) * l.col_slices;
    l.dA_log = l.dbeta + l.steps * l.col_slices;
    l.ddt = l.dA_log + l.steps;
    l.states = l.ddt + l.steps * gate_width(p);
    l.end = l.states + p.seqs.n * p.value_heads * 2 * int64_t(p.segment) * p.dk * p.dv;
    return l;
}

Scratch scratch_of(const ScratchLayout& l, float* w) {
    return {w + l.dq,     w + l.dk, w + l.dg, w + l.dbeta,  w + l.dA_log, w + l.ddt,
            w + l.states, l.keys,   l.steps,  l.key_slices, l.col_slices};
}

/// One step's sums over each warp's columns, in shared memory until the block adds them.
struct WarpSums {
    float dq[kWarps][kMaxDeltaKeys], dk[kWarps][kMaxDeltaKeys], dg[kWarps][kMaxDeltaKeys];
    float dbeta[kWarps][1], dg_head[kWarps][1];
};

/// The reverse step at t, from S = S_{t-1} (overwritten) and dS = ∂L/∂S_t (left ∂L/∂S_{t-1}),
/// as the CPU backward: dS_t += scale q doᵀ, du = dS_tᵀ k, r = v − S̄ᵀk, u = β r, dv = β du,
/// dβ = du·r, dp = −β du, dk = dS_t u + S̄ dp, dS̄ = dS_t + k dpᵀ, dg = rowsum(S̄ ⊙ dS̄),
/// dS_{t-1} = diag(a) dS̄; and dq = scale S_t do with S_t = S̄ + k uᵀ.
template <int KPL>
__device__ __forceinline__ void reverse_step(float (&S)[KPL][kCols], float (&dS)[KPL][kCols],
                                             const DeltaProblem& p, const DeltaGrads& d,
                                             WarpSums& sums, const Tile& w, int64_t t) {
    const int lane = threadIdx.x % 32;
    Step<KPL> st;
    load_step(p, w, t, st);
    float v[kCols], d_o[kCols], pk[kCols], u[kCols], du[kCols] = {};
    load_cols(v, p.v, at(p.v, w.s, t, w.hv), p, w);
    load_cols(d_o, d.d_o, at(d.d_o, w.s, t, w.hv), p, w);
    decay_and_delta(S, st, v, pk, u);  // S is S̄ from here
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
        const float sq = p.scale * st.q[j];
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            dS[j][c] += sq * d_o[c];
            du[c] += st.k[j] * dS[j][c];
        }
    }
    float dv[kCols], dp[kCols], dbeta = 0.f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
        du[c] = warp_sum(du[c]);
        dv[c] = st.beta * du[c];
        dbeta += du[c] * (v[c] - pk[c]);
        dp[c] = -st.beta * du[c];
    }
    store_cols(dv, d.dv, at(d.dv, w.s, t, w.hv), p, w);
    const int warp = threadIdx.x / 32;
    float dg_head = 0.f;
#pragma unroll
    for (int j = 0; j < KPL; ++j) {
        const int key = lane + 32 * j;
        float dq = 0.f, dk = 0.f, dk_bar = 0.f, dg = 0.f;
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
            dq += (S[j][c] + st.k[j] * u[c]) * d_o[c];
            dk += dS[j][c] * u[c];
            dk_bar += S[j][c] * dp[c];
            dS[j][c] += st.k[j] * dp[c];
            dg += S[j][c] * dS[j][c];
            dS[j][c] *= st.a[j];
        }
        if (key >= p.dk) continue;
        sums.dq[warp][key] = dq;
        sums.dk[warp][key] = dk + dk_bar;
        sums.dg[warp][key] = dg;
        dg_head += dg;
    }
    if (p.gate == DeltaGate::per_head) dg_head = warp_sum(dg_head);
    if (lane == 0) {
        sums.dbeta[warp][0] = dbeta;
        sums.dg_head[warp][0] = dg_head;
    }
}

/// After a barrier: the block's sums of step t, warps in order, into the block's slices.
__device__ __forceinline__ void add_block_sums(const WarpSums& sums, const DeltaProblem& p,
                                               const Scratch& x, const Tile& w, int64_t t) {
    const int64_t r = row(p.seqs, w.s, t);
    const int group = p.value_heads / p.heads;
    const int64_t key_slice = int64_t(w.hv % group) * gridDim.y + blockIdx.y;
    const int64_t key_row = key_slice * x.keys + (r * p.heads + w.h) * p.dk;
    const int64_t step = blockIdx.y * x.steps + r * p.value_heads + w.hv;
    for (int key = threadIdx.x; key < p.dk; key += blockDim.x) {
        x.dq[key_row + key] = p.scale * warps_sum(sums.dq, key);
        x.dk[key_row + key] = warps_sum(sums.dk, key);
        if (p.gate == DeltaGate::per_key) x.dg[step * p.dk + key] = warps_sum(sums.dg, key);
    }
    if (threadIdx.x == 0) {
        x.dbeta[step] = warps_sum(sums.dbeta, 0);
        if (p.gate == DeltaGate::per_head) x.dg[step] = warps_sum(sums.dg_head, 0);
    }
}

template <int KPL>
__global__ void __launch_bounds__(kWarps * 32)
    recurrent_bwd(DeltaProblem p, DeltaGrads d, Scratch x) {
    // every warp takes part in the block's sums; one past dv holds only zeros (masked columns)
    __shared__ WarpSums sums[2];  // by parity of t: one barrier per step
    const Tile w = tile_of(p);
    const int64_t kv = int64_t(p.dk) * p.dv, len = w.s.len, seg = p.segment;
    float* checkpoints = x.states + (int64_t(w.n) * p.value_heads + w.hv) * 2 * seg * kv;
    float* before = checkpoints + seg * kv;  // the states before each step of one segment
    float S[KPL][kCols];
    load_state(S, p.h0, p.state, p, w);
    for (int64_t t = 0; t < len; ++t) {
        if (t % seg == 0) put(S, checkpoints + (t / seg) * kv, p, w);
        if (t + 1 < len) advance(S, p, w, t);
    }
    float dS[KPL][kCols];
    load_state(dS, d.dht, p.state, p, w);
    for (int64_t sg = (len + seg - 1) / seg - 1; sg >= 0; --sg) {
        const int64_t t0 = sg * seg, t1 = t0 + seg < len ? t0 + seg : len;
        get(S, checkpoints + sg * kv, p, w);
        for (int64_t t = t0; t < t1; ++t) {
            put(S, before + (t - t0) * kv, p, w);
            if (t + 1 < t1) advance(S, p, w, t);
        }
        for (int64_t t = t1 - 1; t >= t0; --t) {
            get(S, before + (t - t0) * kv, p, w);
            reverse_step(S, dS, p, d, sums[t & 1], w, t);
            __syncthreads();
            add_block_sums(sums[t & 1], p, x, w, t);
        }
    }
    if (d.dh0 != nullptr) store_state(dS, d.dh0, p, w);
}

/// Step t's batch row and time in a [B, T, ...] tensor, for packed row r.
__device__ __forceinline__ Span row_span(const Sequences& s, int64_t r) {
    return {r / s.t, 0, s.t};
}

/// One warp per (row, key head): dq and dk back through the l2norm,
/// dx = (dx̂ − (dx̂·x̂) x̂) · rstd with x̂ in fp32, rounded once.
__global__ void __launch_bounds__(kWarps * 32)
    finish_keys(DeltaProblem p, DeltaGrads d, Scratch x, int64_t rows) {
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (item >= rows * p.heads) return;
    const int lane = threadIdx.x % 32;
    const int64_t r = item / p.heads;
    const int h = int(item % p.heads);
    const Span s = row_span(p.seqs, r);
    const int64_t t = r % p.seqs.t;
    const auto finish = [&](const Strided& in, const Strided& out, const float* grad) {
        const int64_t io = at(in, s, t, h), oo = at(out, s, t, h);
        const float* slices = grad + item * p.dk;
        const auto dy = [&](int key) { return slice_sum(slices + key, x.keys, x.key_slices); };
        if (!p.l2norm) {
            for (int key = lane; key < p.dk; key += 32)
                store(out.data, out.dtype, oo + key, dy(key));
            return;
        }
        float ss = 0.f;
        for (int key = lane; key < p.dk; key += 32) {
            const float xk = load(in.data, in.dtype, io + key);
            ss += xk * xk;
        }
        const float rstd = 1.f / sqrtf(warp_sum(ss) + kL2NormEps);
        float dot = 0.f;
        for (int key = lane; key < p.dk; key += 32)
            dot += dy(key) * (load(in.data, in.dtype, io + key) * rstd);
        dot = warp_sum(dot);
        for (int key = lane; key < p.dk; key += 32) {
            const float xhat = load(in.data, in.dtype, io + key) * rstd;
            store(out.data, out.dtype, oo + key, (dy(key) - dot * xhat) * rstd);
        }
    };
    finish(p.q, d.dq, x.dq);
    finish(p.k, d.dk, x.dk);
}

/// One warp per (row, value head): dβ back through the sigmoid, dg back through the in-kernel
/// gate (with its dA_log and ddt_bias terms), rounded once.
__global__ void __launch_bounds__(kWarps * 32)
    finish_values(DeltaProblem p, DeltaGrads d, Scratch x, int64_t rows) {
    const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
    if (item >= rows * p.value_heads) return;
    const int lane = threadIdx.x % 32;
    const int64_t r = item / p.value_heads;
    const int hv = int(item % p.value_heads);
    const Span s = row_span(p.seqs, r);
    const int64_t t = r % p.seqs.t;
    if (lane == 0) {
        const int64_t bo = at(p.beta, s, t, hv);
        const float db = slice_sum(x.dbeta + item, x.steps, x.col_slices);
        store(d.dbeta.data, d.dbeta.dtype, at(d.dbeta, s, t, hv),
              beta_backward(p, load(p.beta.data, p.beta.dtype, bo), db));
    }
    if (p.gate == DeltaGate::none) return;
    const int64_t width = gate_width(p);
    const int64_t go = at(p.g, s, t, hv), dgo = at(d.dg, s, t, hv);
    const float rate = p.gate_in_kernel ? expf(p.A_log[hv]) : 0.f;
    float dA = 0.f;
    for (int key = lane; key < width; key += 32) {
        const float dg = slice_sum(x.dg + item * width + key, x.steps * width, x.col_slices);
        if (!p.gate_in_kernel) {
            store(d.dg.data, d.dg.dtype, dgo + key, dg);
            continue;
        }
        const float bias = p.dt_bias != nullptr ? p.dt_bias[hv * width + key] : 0.f;
        const GateGrads gg = gate_backward(p, rate, load(p.g.data, p.g.dtype, go + key) + bias, dg);
        store(d.dg.data, d.dg.dtype, dgo + key, gg.d_arg);
        x.ddt[item * width + key] = gg.d_arg;
        dA += gg.d_A_log;
    }
    if (!p.gate_in_kernel) return;
    dA = warp_sum(dA);
    if (lane == 0) x.dA_log[item] = dA;
}

dim3 grid_of(const DeltaProblem& p) {
    return dim3(unsigned(p.seqs.n * p.value_heads), unsigned(column_blocks(p)));
}

/// Calls f(std::integral_constant<int, KPL>) for the smallest keys-per-lane that fits dk.
template <typename F>
void dispatch_keys(int dk, F&& f) {
    if (dk <= 32) return f(std::integral_constant<int, 1>{});
    if (dk <= 64) return f(std::integral_constant<int, 2>{});
    if (dk <= 128) return f(std::integral_constant<int, 4>{});
    if (dk <= 256) return f(std::integral_constant<int, 8>{});
    throw std::invalid_argument("key width " + std::to_string(dk) + " exceeds " +
                                std::to_string(kMaxDeltaKeys));
}

unsigned warp_blocks(int64_t items) { return unsigned((items + kWarps - 1) / kWarps); }

}  // namespace

int delta_recurrent_segment(int64_t longest) {
    int64_t s = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(longest))));
    while (s * s < longest) ++s;  // the root of a large square may round down
    return int(s > 1 ? s : 1);
}

int64_t delta_recurrent_workspace_floats(const DeltaProblem& p) { return layout_of(p).end; }

DeltaGateTerms delta_recurrent_terms(const DeltaProblem& p) {
    const ScratchLayout l = layout_of(p);
    DeltaGateTerms t;
    t.rows = packed_rows(p.seqs);
    t.width = gate_width(p);
    t.dA_log = l.dA_log;
    t.ddt_bias = l.ddt;
    return t;
}

void delta_recurrent_fwd(const DeltaProblem& p, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    dispatch_keys(p.dk, [&](auto kpl) {
        recurrent_fwd<decltype(kpl)::value><<<grid_of(p), kWarps * 32, 0, stream>>>(p);
    });
    LAV_CUDA_CHECK(cudaGetLastError(), "delta_recurrent_fwd");
}

void delta_recurrent_bwd(const DeltaProblem& p, const DeltaGrads& d, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    const ScratchLayout l = layout_of(p);
    const Scratch x = scratch_of(l, d.workspace);  // every slice element is written once
    dispatch_keys(p.dk, [&](auto kpl) {
        recurrent_bwd<decltype(kpl)::value><<<grid_of(p), kWarps * 32, 0, stream>>>(p, d, x);
    });
    const int64_t rows = packed_rows(p.seqs);
    if (rows > 0) {
        finish_keys<<<warp_blocks(rows * p.heads), kWarps * 32, 0, stream>>>(p, d, x, rows);
        finish_values<<<warp_blocks(rows * p.value_heads), kWarps * 32, 0, stream>>>(p, d, x, rows);
    }
    LAV_CUDA_CHECK(cudaGetLastError(), "delta_recurrent_bwd");
}

}  // namespace lav::cuda
