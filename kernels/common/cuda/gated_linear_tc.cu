// kernels/common/cuda/gated_linear_tc.cu — the chunk passes of the gated linear recurrence on
// tensor cores (mma.sync m16n8k16, fp16/bf16 operands, fp32 accumulation): gla's forward, and the
// state passes of both families (the states entering the chunks, and the backward's state
// gradients). simple_gla's forward is gated_linear_tc_row.cu's.
//
// One block per (sequence, head, value tile) walks the sequence's chunks in order and keeps
// the fp32 state in registers, so the forward never writes chunk states to memory (FLA splits
// this into chunk_fwd_h, which stores them, and chunk_fwd_o, which reads them back). Per chunk:
// scores A = q kᵀ, o = q̃·h + A·v, h ← exp(Λ)·h + k̃ᵀ ṽ, all as mma tiles.
//
// The precision contract is the chunk variant's, item by item (simple_gla_cpu.cpp,
// gla_cpu.cpp), so this kernel, the FMA kernels and the CPU backend agree up to fp32
// summation order. Where the contract keeps an operand wider than the inputs, the operand is
// split into two 16-bit halves (x = hi + lo, ~16 significant bits) and each half multiplied
// exactly: the stored state when the state dtype is not the input dtype, and gla's factored
// decayed q and k. A per-key gate makes A_ij = Σ_d q_id k_jd exp(G_id − G_jd), which is no
// plain product; as in FLA's chunk_gla_fwd_intra, 16-row blocks below the diagonal factor it
// about their first row n, (q ⊙ exp(G − G_n))·(k ⊙ exp(G_n − G))ᵀ, every exponent ≤ 0. The
// diagonal blocks are factored the same way with bf16 inputs where the gate keeps each block
// within exp(±32) of its first row (kDiagonalSpan), and summed element by element otherwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/gated_linear_tc.cuh"
#include "common/cuda/gated_linear_tc.h"

namespace lav::cuda {
namespace {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps
// warp w takes rows [16·row_block(w), + 16) of a chunk and half w / 4 of a value tile
// (gated_linear_tc.cuh); two warps per scheduler hide each other's latencies
constexpr int kWarps = 8;
constexpr int kParts = kWarps / 4;  // warps per 16-row block (gated_linear_tc.cuh)
constexpr int kThreads = 32 * kWarps;
static_assert(kThreads == kTensorCoreThreads, "load_rows takes the whole block");

/// Shared memory of one block. Tiles are stored as loaded, [row][column], and ldmatrix
/// transposes the operands that need it; pitches of 8 extra elements keep its rows in
/// distinct banks.
template <typename T, int KT, int BV, bool PerKey, bool Outputs>
struct Tiles {
    // what only the outputs need shrinks to one row in the state passes
    static constexpr int OR = Outputs ? kRows : 1, OK = Outputs ? KT : 1;
    static constexpr int PK = KT + 8, PV = BV + 8, PR = kRows + 8;
    // cp.async destinations start 16-byte aligned
    union alignas(16) {
        T q[OR][PK];
        T kd_lo[Outputs ? 1 : kRows][PK];  // the state gradient pass: its keys' low half
    };
    alignas(16) T k[kRows][PK];
    alignas(16) T v[kRows][PV];
    // the state update's rounded operand: decayed keys (per-key gate, state gradient pass) or
    // decayed values (per-row gate); a 16-bit per-key gate as loaded, before its cumsum
    union alignas(16) {
        T kd[kRows][PK];
        T vd[kRows][PV];
        unsigned short g_rows[kRows][PK];
    };
    alignas(16) T a[OR][PR];                          // masked decayed scores rounded to T
    alignas(16) T qd[OR][PK];                         // q ⊙ exp(G) rounded to T
    alignas(16) T s_hi[OK][PV], s_lo[OK][PV];         // stored state entering the chunk, split
    alignas(16) float g[PerKey ? kRows : 1][KT + 4];  // per-key gate cumsum G
    alignas(16) float grow[kRows];                    // per-row gate cumsum G
};

// Two blocks fit on a streaming multiprocessor, except gla's with outputs: its fp32 gate tile
// and the output tiles together take ~159 KB at K = 128 (~200 KB with value tiles of 128)
constexpr int blocks_per_sm(bool per_key, bool outputs) { return per_key && outputs ? 1 : 2; }

template <typename T, int KT, int BV, bool PerKey, bool Outputs>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(PerKey, Outputs))
    chunk_forward(GatedLinearProblem p, void* states, bool reverse, bool vec, bool g_vec) {
    static_assert(PerKey || !Outputs, "a gate per row has its outputs from row_gate_forward");
    using H = Half16<T>;
    using Tile = Tiles<T, KT, BV, PerKey, Outputs>;
    constexpr int MT = KT / 64;  // 16-key row tiles of the state per warp
    constexpr int NT = BV / 16;  // 8-column tiles per warp: half a value tile
    extern __shared__ float4 smem[];
    Tile& t = *reinterpret_cast<Tile*>(smem);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g8 = lane / 4, t4 = lane % 4;
    const int n = blockIdx.x / p.heads, h = blockIdx.x % p.heads, v0 = blockIdx.y * BV;
    const Span s = span(p.seqs, n);
    const int64_t first = first_slot(p.seqs, p.chunk, n, s);
    const int64_t own = (int64_t(n) * p.heads + h) * p.dk * p.dv;
    const bool split = p.state != H::dtype;
    const int block = row_block(warp), half = warp / 4;
    const int r0 = 16 * block, cv0 = half * BV / 2;
    // a 16-bit per-key gate goes through g_rows only when its rows are copied whole
    const bool g16 = p.g.dtype != DType::f32 && g_vec;
    // the per-row gate decays the values of the state update unless there is none
    const bool decay_v = !PerKey && !reverse && p.gate != Gate::none;

    // S[m][c][e]: key block·KT/4 + 16m + g8 (+8 for e ≥ 2), column cv0 + 8c + 2·t4 (+1 for
    // odd e); the same element layout serves o
    const auto key_of = [&](int m, int e) { return block * (KT / 4) + 16 * m + g8 + (e & 2) * 4; };
    const auto col_of = [&](int c, int e) { return cv0 + 8 * c + 2 * t4 + (e & 1); };
    float S[MT][NT][4];
    // f(S element, key, column within the value tile) over the thread's state elements
    const auto for_state = [&](auto&& f) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int c = 0; c < NT; ++c)
#pragma unroll
                for (int e = 0; e < 4; ++e) f(S[m][c][e], key_of(m, e), col_of(c, e));
    };
    // f(S element pair, key, first column) over pairs of adjacent columns
    const auto for_state_pairs = [&](auto&& f) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int c = 0; c < NT; ++c)
#pragma unroll
                for (int e = 0; e < 4; e += 2)
                    f(S[m][c][e], S[m][c][e + 1], key_of(m, e), col_of(c, e));
    };
    // stores the state to `to` ([K, V] at `base`), as stored, two columns at a time
    const auto store_state = [&](void* to, int64_t base) {
        for_state_pairs([&](float x0, float x1, int key, int col) {
            if (key < p.dk && v0 + col < p.dv)
                store_pair(to, p.state, base + int64_t(key) * p.dv + v0 + col, x0, x1,
                           v0 + col + 1 < p.dv);
        });
    };
    for_state([&](float& x, int key, int col) {
        x = p.h0 != nullptr && key < p.dk && v0 + col < p.dv
                ? load(p.h0, p.state, own + int64_t(key) * p.dv + v0 + col)
                : 0.f;
    });

    const int64_t chunks = (s.len + p.chunk - 1) / p.chunk;
    // a per-head gate is read a chunk ahead, by threads [0, kRows) a step each, so that its
    // latency passes behind the chunk before
    const auto head_gate = [&](int64_t step) {
        const int64_t c0 = (reverse ? chunks - 1 - step : step) * p.chunk;
        const int i = threadIdx.x;
        return p.gate == Gate::per_head && step < chunks && c0 + i < s.len && i < p.chunk
                   ? raw(p.g.data, p.g.dtype, at(p.g, s, c0 + i, h))
                   : 0u;
    };
    uint32_t g_ahead = !PerKey && threadIdx.x < kRows ? head_gate(0) : 0u;
    for (int64_t step = 0; step < chunks; ++step) {
        const int64_t chunk = reverse ? chunks - 1 - step : step;
        const int64_t c0 = chunk * p.chunk;
        const int len = int(s.len - c0 < p.chunk ? s.len - c0 : p.chunk);
        __syncthreads();  // the previous chunk's tiles are read

        if constexpr (Outputs) load_rows<T, T, kRows, KT>(t.q, p.q, s, c0, len, h, 0, p.dk, vec);
        load_rows<T, T, kRows, KT>(t.k, p.k, s, c0, len, h, 0, p.dk, vec);
        load_rows<T, T, kRows, BV>(t.v, p.v, s, c0, len, h, v0, p.dv, vec);
        if (PerKey && g16)
            load_rows<unsigned short, unsigned short, kRows, KT>(t.g_rows, p.g, s, c0, len, h, 0,
                                                                 p.dk, true);
        else if (PerKey)
            load_rows<float, float, kRows, KT>(t.g, p.g, s, c0, len, h, 0, p.dk, g_vec);
        // while the copies fly: the state entering the chunk, as stored, to `states`, and
        // split for q·h, two adjacent columns a 32-bit store
        const int64_t slot = (first + chunk) * p.heads + h;
        if (states != nullptr) store_state(states, slot * p.dk * p.dv);
        if constexpr (Outputs)
            with_rounding(p.state, [&](auto round) {
                for_state_pairs([&](float s0, float s1, int key, int col) {
                    const float x0 = round(s0), x1 = round(s1);
                    uint32_t hi, lo = 0u;
                    if (split)
                        split_pair<T>(hi, lo, x0, x1);
                    else
                        hi = pair<T>(x0, x1);
                    *reinterpret_cast<uint32_t*>(&t.s_hi[key][col]) = hi;
                    *reinterpret_cast<uint32_t*>(&t.s_lo[key][col]) = lo;
                });
            });
        if (!PerKey && threadIdx.x < kRows) {
            const int i = threadIdx.x;
            t.grow[i] = p.gate == Gate::constant ? p.g_gamma[h] * float((i < len ? i : len - 1) + 1)
                                                 : widen(g_ahead, p.g.dtype);
            g_ahead = head_gate(step + 1);
        }
        copies_wait();
        __syncthreads();

        // gate cumsums in fp32, in step order as the CPU backend sums them, continued past
        // the chunk's end as if g were 0 there (the tiles hold zeros there)
        bool wide = false;
        if (PerKey && threadIdx.x < KT) {
            const int d = threadIdx.x;
            // the dtype's widening chosen once, outside the rows' loop
            if (!g16)
                wide = per_key_cumsum<kRows>(t.g, d, [&](int i) { return t.g[i][d]; });
            else if (p.g.dtype == DType::bf16)
                wide = per_key_cumsum<kRows>(
                    t.g, d, [&](int i) { return widen(t.g_rows[i][d], DType::bf16); });
            else
                wide = per_key_cumsum<kRows>(
                    t.g, d, [&](int i) { return widen(t.g_rows[i][d], DType::f16); });
        }
        if (!PerKey && p.gate == Gate::per_head && threadIdx.x == 0) {
            // one thread, four steps a shared-memory access
            float4* rows = reinterpret_cast<float4*>(t.grow);
            float sum = 0.f;
#pragma unroll
            for (int i = 0; i < kRows / 4; ++i) {
                float4 x = rows[i];
                x.x = sum += x.x;
                x.y = sum += x.y;
                x.z = sum += x.z;
                x.w = sum += x.w;
                rows[i] = x;
            }
        }
        // a gate that stays near each block's first row lets the diagonal blocks be factored
        const bool any_wide = __syncthreads_or(wide);
        const bool factored = diagonal_factors_fit<T>() && !any_wide;

        // the state update's operands, two adjacent elements a step: k ⊙ exp(Λ − G) rounded
        // (per-key gate) or v ⊙ exp(Λ − G) rounded (per-row gate), as FLA's chunk_fwd_h
        // rounds them; or, for the state gradient, q ⊙ exp(G) · scale kept fp32 as two halves.
        // Each thread keeps one pair of columns and steps down the rows.
        if (PerKey || reverse)
#pragma unroll
            for (int n = 0; n < kRows * KT / 2 / kThreads; ++n) {
                const int r = threadIdx.x / (KT / 2) + n * kThreads / (KT / 2);
                const int d = 2 * (threadIdx.x % (KT / 2));
                const float2 x = to_float2<T>(word(&t.k[r][d]));
                float2 f;
                if constexpr (!PerKey) {
                    f.x = f.y = fast_exp(t.grow[r]) * p.scale;
                } else {
                    const float2 gr = *reinterpret_cast<const float2*>(&t.g[r][d]);
                    const float2 gl = *reinterpret_cast<const float2*>(&t.g[kRows - 1][d]);
                    f = reverse ? make_float2(fast_exp(gr.x) * p.scale, fast_exp(gr.y) * p.scale)
                                : make_float2(fast_exp(gl.x - gr.x), fast_exp(gl.y - gr.y));
                    if constexpr (Outputs) {
                        // q̃ = q ⊙ exp(G) rounded to the input dtype, as FLA's chunk_gla_fwd_o
                        const float2 y = to_float2<T>(word(&t.q[r][d]));
                        *reinterpret_cast<uint32_t*>(&t.qd[r][d]) =
                            pair<T>(y.x * fast_exp(gr.x), y.y * fast_exp(gr.y));
                    }
                }
                if (reverse)
                    split_pair<T>(*reinterpret_cast<uint32_t*>(&t.kd[r][d]),
                                  *reinterpret_cast<uint32_t*>(&t.kd_lo[r][d]), x.x * f.x,
                                  x.y * f.y);
                else
                    *reinterpret_cast<uint32_t*>(&t.kd[r][d]) = pair<T>(x.x * f.x, x.y * f.y);
            }
        if (decay_v)
#pragma unroll
            for (int n = 0; n < kRows * BV / 2 / kThreads; ++n) {
                const int r = threadIdx.x / (BV / 2) + n * kThreads / (BV / 2);
                const int c = 2 * (threadIdx.x % (BV / 2));
                const float2 x = to_float2<T>(word(&t.v[r][c]));
                const float f = fast_exp(t.grow[kRows - 1] - t.grow[r]);
                *reinterpret_cast<uint32_t*>(&t.vd[r][c]) = pair<T>(x.x * f, x.y * f);
            }
        // the masked scores, rounded to T, two adjacent columns a 32-bit store
        const auto score_row = [&](int e) { return r0 + g8 + (e & 2) * 4; };
        if constexpr (Outputs) {
            float acc[kScoreTiles<kParts>][4] = {};
            add_factored_scores<T, KT, kParts>(acc, t.q, t.k, t.g, r0, half, factored);
            for_score_tiles<kParts>(half, r0 / 8 + (factored ? 2 : 0), [&](int m, int c) {
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int i = score_row(e), j = 8 * c + 2 * t4;
                    const bool row = i < len;
                    *reinterpret_cast<uint32_t*>(&t.a[i][j]) = pair<T>(
                        row && j <= i ? acc[m][e] : 0.f, row && j < i ? acc[m][e + 1] : 0.f);
                }
            });
            if (!factored) {
                diagonal_scores<T, KT, kParts>(
                    t.q, t.k, t.g, r0, half,
                    [&](int i, int j, float sum) { t.a[i][j] = H::from(i < len ? sum : 0.f); });
                above_diagonal<kParts>(r0, half, [&](int i, int j) { t.a[i][j] = H::from(0.f); });
            }
        }
        // the operands, and both warps' scores of each row block, are written
        __syncthreads();

        if constexpr (Outputs) {
            // o = scale · (q̃·h + A·v) for the warp's rows
            float o[NT][4] = {};
#pragma unroll
            for (int kk = 0; kk < KT; kk += 16) {
                uint32_t a[4];
                fragment_a(a, t.qd, r0, kk);
#pragma unroll
                for (int c = 0; c < NT; ++c)
                    mma_split_rows(o[c], a, a, false, t.s_hi, t.s_lo, kk, cv0 + 8 * c, split);
            }
            for (int kk = 0; kk <= r0; kk += 16) {
                uint32_t a[4];
                fragment_a(a, t.a, r0, kk);
#pragma unroll
                for (int c = 0; c < NT; ++c) {
                    uint32_t b[2];
                    fragment_b_rows(b, t.v, kk, cv0 + 8 * c);
                    H::mma(o[c], a, b);
                }
            }
            // from the chunk's first row by whole rows; one 32-bit store a pair when o has the
            // inputs' dtype (as it has unless the caller asked for another), pairs start
            // aligned and the value tile lies within o
            const int64_t o_first = at(p.o, s, c0, h) + v0;
            const bool words = p.o.dtype == H::dtype && v0 + BV <= p.dv && o_first % 2 == 0 &&
                               p.o.st % 2 == 0 && reinterpret_cast<uintptr_t>(p.o.data) % 4 == 0;
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                const int i = score_row(e);
                if (i >= len) continue;
                const int64_t row = o_first + i * p.o.st;
#pragma unroll
                for (int c = 0; c < NT; ++c) {
                    const int col = col_of(c, e);
                    const float x0 = o[c][e] * p.scale, x1 = o[c][e + 1] * p.scale;
                    if (words)
                        *reinterpret_cast<uint32_t*>(static_cast<T*>(p.o.data) + row + col) =
                            pair<T>(x0, x1);
                    else if (v0 + col < p.dv)
                        store_pair(p.o.data, p.o.dtype, row + col, x0, x1, v0 + col + 1 < p.dv);
                }
            }
        }

        // h ← exp(Λ)·h + k̃ᵀ ṽ, the carried state staying fp32
        const float decay = PerKey ? 0.f : fast_exp(t.grow[kRows - 1]);
        for_state(
            [&](float& x, int key, int) { x *= PerKey ? fast_exp(t.g[kRows - 1][key]) : decay; });
        const T(*keys)[Tile::PK] = PerKey || reverse ? t.kd : t.k;
        const T(*values)[Tile::PV] = decay_v ? t.vd : t.v;
#pragma unroll
        for (int kk = 0; kk < kRows; kk += 16)
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                uint32_t a[4], a_lo[4];
                fragment_a_rows(a, keys, kk, block * (KT / 4) + 16 * m);
                if (reverse) fragment_a_rows(a_lo, t.kd_lo, kk, block * (KT / 4) + 16 * m);
#pragma unroll
                for (int c = 0; c < NT; ++c) {
                    uint32_t b[2];
                    fragment_b_rows(b, values, kk, cv0 + 8 * c);
                    H::mma(S[m][c], a, b);
                    if (reverse) H::mma(S[m][c], a_lo, b);
                }
            }
    }
    if (p.ht != nullptr) store_state(p.ht, own);
}

template <typename T, int KT, int BV, bool PerKey, bool Outputs>
void launch(const GatedLinearProblem& p, void* states, bool reverse, cudaStream_t stream) {
    const auto kernel = chunk_forward<T, KT, BV, PerKey, Outputs>;
    const int bytes = int(sizeof(Tiles<T, KT, BV, PerKey, Outputs>));
    take_shared_memory(kernel, bytes, "gated linear tensor-core forward");
    const bool vec = qkv_aligned(p);
    const dim3 grid(unsigned(p.seqs.n * p.heads), unsigned((p.dv + BV - 1) / BV));
    const bool g_vec = p.gate == Gate::per_key && rows_aligned(p.g, p.dk);
    kernel<<<grid, kThreads, bytes, stream>>>(p, states, reverse, vec, g_vec);
    LAV_CUDA_CHECK(cudaGetLastError(), "gated linear tensor-core forward");
}

template <typename T, int KT, int BV>
void launch_tile(const GatedLinearProblem& p, void* states, bool reverse, cudaStream_t stream) {
    const bool per_key = p.gate == Gate::per_key, outputs = p.o.data != nullptr;
    if (!per_key)
        launch<T, KT, BV, false, false>(p, states, reverse, stream);
    else if (outputs)
        launch<T, KT, BV, true, true>(p, states, reverse, stream);
    else
        launch<T, KT, BV, true, false>(p, states, reverse, stream);
}

template <typename T, int KT>
void launch_keys(const GatedLinearProblem& p, void* states, bool reverse, cudaStream_t stream) {
    // gla's forward runs one block to a streaming multiprocessor: where value tiles of 64
    // would take more than one wave, tiles of 128 make each chunk's scores and operands once
    // for twice the values
    if (p.o.data != nullptr && p.dv > 64 &&
        p.seqs.n * p.heads * ((p.dv + 63) / 64) > multiprocessors())
        return launch<T, KT, 128, true, true>(p, states, reverse, stream);
    // narrower value tiles when wide ones would leave streaming multiprocessors idle and
    // narrow ones still run in one wave
    const int resident =
        multiprocessors() * blocks_per_sm(p.gate == Gate::per_key, p.o.data != nullptr);
    if (p.seqs.n * p.heads * ((p.dv + 31) / 32) <= resident)
        launch_tile<T, KT, 32>(p, states, reverse, stream);
    else
        launch_tile<T, KT, 64>(p, states, reverse, stream);
}

template <typename T>
void launch_type(const GatedLinearProblem& p, void* states, bool reverse, cudaStream_t stream) {
    if (p.dk <= 64)
        launch_keys<T, 64>(p, states, reverse, stream);
    else
        launch_keys<T, 128>(p, states, reverse, stream);
}

void launch_any(const GatedLinearProblem& p, void* states, bool reverse, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return;
    if (p.q.dtype == DType::bf16)
        launch_type<__nv_bfloat16>(p, states, reverse, stream);
    else
        launch_type<__half>(p, states, reverse, stream);
}

}  // namespace

bool gated_linear_tc_fits(const GatedLinearProblem& p) {
    const DType in = p.q.dtype;
    return (in == DType::bf16 || in == DType::f16) && p.k.dtype == in && p.v.dtype == in &&
           p.dk <= kMaxTensorCoreKeys && p.chunk <= kRows;
}

void gated_linear_tc_fwd(const GatedLinearProblem& p, void* states, cudaStream_t stream) {
    if (!gated_linear_tc_fits(p))
        throw std::invalid_argument("gated linear tensor-core forward: inputs do not fit");
    launch_any(p, states, /*reverse=*/false, stream);
}

bool gated_linear_tc_state_grads_fit(const GatedLinearProblem& p, const GatedLinearGrads& d) {
    return gated_linear_tc_fits(p) && d.d_o.dtype == p.q.dtype;
}

void gated_linear_tc_state_grads(const GatedLinearProblem& p, const GatedLinearGrads& d, void* dhs,
                                 cudaStream_t stream) {
    if (!gated_linear_tc_state_grads_fit(p, d))
        throw std::invalid_argument("gated linear tensor-core state gradients: inputs do not fit");
    // the same pass over the chunks, in reverse, with q in the keys' place and d_o in the
    // values'; dht starts it and dh0 is what it ends with
    GatedLinearProblem r = p;
    r.k = p.q;
    r.v = d.d_o;
    r.h0 = d.dht;
    r.ht = d.dh0;
    r.o.data = nullptr;
    launch_any(r, dhs, /*reverse=*/true, stream);
}

}  // namespace lav::cuda
