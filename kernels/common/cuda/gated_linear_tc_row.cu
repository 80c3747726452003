// kernels/common/cuda/gated_linear_tc_row.cu — the tensor-core chunk forward for a gate per row (a
// per-head gate, a constant gate or none: simple_gla), its state kept as an mma operand.
//
// One block per (sequence, head, value tile) walks the sequence's chunks in order. Where those
// blocks would leave multiprocessors idle, each sequence's chunks are cut into segments run side
// by side: a first pass (Carry) walks every segment but the last from a zero state, updating the
// state only, and leaves the state it ends with and the segment's total decay; a block of
// segment j then starts from h0 carried through segments 0..j−1 by those. Warp w
// keeps the transposed fp32 state Sᵀ of its 16 values and every key in mma accumulators,
// whose layout is that of an A operand: the state term of the outputs, oᵀ = Sᵀ·qᵀ, takes it
// from registers, and the update Sᵀ ← exp(Λ)·Sᵀ + ṽᵀ k accumulates into it in place. The warps
// share only the chunk's tiles and the scores A: two barriers per chunk, the next chunk's q,
// k and v loading while this one is computed.
//
// The precision contract is that of the chunk variant, as gated_linear_tc.cu keeps it: the
// state entering a chunk rounded to the state dtype and, where that is not the input dtype,
// split into two 16-bit halves for q·h; scores q kᵀ in fp32 times exp(G_i − G_j), masked and
// rounded to the input dtype; o = scale · (exp(G)·(q·h) + A·v); ṽ = v ⊙ exp(Λ − G) rounded to
// the input dtype; the carried state fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "common/cuda/cuda_check.h"
#include "common/cuda/gated_linear_tc.cuh"
#include "common/cuda/gated_linear_tc.h"

namespace lav::cuda {
namespace {

constexpr int kRows = 64;  // rows of a chunk tile: chunks of up to 64 steps

/// A sequence's chunks cut into `count` segments of ⌈chunks / count⌉, and what the Carry pass
/// leaves for the segments after each one but the last.
struct Segments {
    int count = 1;
    float* carry = nullptr;  ///< per block (sequence, head, tile) and segment: each thread's state
    float* decay = nullptr;  ///< per sequence and head and segment: exp of its summed gate
};

/// Shared memory of one block: q, k and v of two chunks (the one computed and the next, in
/// flight), stored as loaded with pitches of 8 extra elements so that ldmatrix's rows fall in
/// distinct banks.
template <typename T, int KT, int BV>
struct RowTiles {
    static constexpr int PK = KT + 8, PV = BV + 8, PR = kRows + 8;
    alignas(16) T q[2][kRows][PK];
    alignas(16) T k[2][kRows][PK];
    alignas(16) T v[2][kRows][PV];
    alignas(16) T a[kRows][PR];        // masked decayed scores rounded to T
    alignas(16) float grow[2][kRows];  // gate cumsum G of the chunk and of the next
    alignas(16) float g_next[kRows];   // the next chunk's per-head gate, before its cumsum
};

/// The score tiles (16-row block rb, 8-column tile c ≤ 2·rb + 1) of a 64-row chunk, 20 in
/// all, numbered so that equal runs of them cost the warps alike: rb 3, 0, 2, 1 in turn.
__device__ __forceinline__ void score_tile(int u, int& rb, int& c) {
    rb = u < 8 ? 3 : u < 10 ? 0 : u < 16 ? 2 : 1;
    c = u - (u < 8 ? 0 : u < 10 ? 8 : u < 16 ? 10 : 16);
}
constexpr int kScoreTiles = 20;

template <typename T, int KT, int BV, bool Carry>
__global__ void __launch_bounds__(2 * BV, BV < 128 ? 2 : 1)
    row_gate_forward(GatedLinearProblem p, bool vec, Segments sg) {
    using H = Half16<T>;
    using Tile = RowTiles<T, KT, BV>;
    constexpr int kWarps = BV / 16, kThreads = 32 * kWarps;
    constexpr int NK = KT / 8;                      // 8-key tiles of the warp's state
    [[maybe_unused]] constexpr int NR = kRows / 8;  // 8-row tiles of the warp's outputs
    // score tiles per warp: the first kExtra warps take one more, one warp on each of the four
    // schedulers of the multiprocessor (warp % 4)
    constexpr int kBase = kScoreTiles / kWarps, kExtra = kScoreTiles % kWarps;
    [[maybe_unused]] constexpr int kPerWarp = kBase + (kExtra > 0 ? 1 : 0);
    static_assert(kExtra <= 4, "the extra score tiles go one to a scheduler");
    [[maybe_unused]] constexpr int kE = sizeof(T), PK = Tile::PK, PV = Tile::PV, PR = Tile::PR;
    static_assert(kThreads >= kRows, "value tiles of 32 columns or more");
    extern __shared__ float4 smem[];
    Tile& t = *reinterpret_cast<Tile*>(smem);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g8 = lane / 4, t4 = lane % 4;
    const int n = blockIdx.x / p.heads, h = blockIdx.x % p.heads, v0 = blockIdx.y * BV;
    const int w16 = 16 * warp;  // the warp's first value within the tile
    // the warp's m-th score tile
    [[maybe_unused]] const int tile0 = kBase * warp + (warp < kExtra ? warp : kExtra);
    [[maybe_unused]] const auto has_tile = [&](int m) { return m < kBase || warp < kExtra; };
    const Span s = span(p.seqs, n);
    const int64_t own = (int64_t(n) * p.heads + h) * p.dk * p.dv;
    const int64_t chunks = (s.len + p.chunk - 1) / p.chunk;
    // the block's segment, chunks [first, end)
    const int seg = blockIdx.z;
    const int64_t per = (chunks + sg.count - 1) / sg.count;
    const int64_t first = seg * per < chunks ? seg * per : chunks;
    const int64_t end = first + per < chunks ? first + per : chunks;
    // the state a segment leaves: each thread's NK·4 values, in the order of S
    const auto carried = [&](int segment) {
        const int64_t tile = int64_t(blockIdx.x) * gridDim.y + blockIdx.y;
        return reinterpret_cast<float4*>(sg.carry) +
               ((tile * (sg.count - 1) + segment) * kThreads + threadIdx.x) * NK;
    };
    [[maybe_unused]] const bool split = p.state != H::dtype;
    const auto chunk_len = [&](int64_t step) {
        return int(s.len - step * p.chunk < p.chunk ? s.len - step * p.chunk : p.chunk);
    };
    // the lanes' ldmatrix addresses in buffer 0 at contraction 0; buffer 1, tiles and steps
    // are constant offsets from them
    [[maybe_unused]] const unsigned q_b2 = quad_address(t.q[0], 0, 0),
                                    a_b = fragment_b_address(t.a, 0, 0);
    // the lanes' rows of fragment_a give ldmatrix_x4_trans the B fragments of two 8-column
    // tiles of a tile stored [contraction][column]
    const unsigned k_b2 = fragment_a_address(t.k[0], 0, 0);
    const unsigned v_a = quad_address(t.v[0], 0, w16);
    constexpr unsigned kQK = sizeof(t.q[0]), kV = sizeof(t.v[0]);

    // S[kt][e]: value v0 + w16 + g8 (+8 for e ≥ 2), key 8·kt + 2·t4 (+1 for odd e)
    float S[NK][4];
    const auto for_state = [&](auto&& f) {
#pragma unroll
        for (int kt = 0; kt < NK; ++kt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                f(S[kt][e], 8 * kt + 2 * t4 + (e & 1), v0 + w16 + g8 + (e & 2) * 4);
    };
    for_state([&](float& x, int key, int value) {
        x = !Carry && p.h0 != nullptr && key < p.dk && value < p.dv
                ? load(p.h0, p.state, own + int64_t(key) * p.dv + value)
                : 0.f;
    });
    if (!Carry)
        for (int j = 0; j < seg; ++j) {
            const float d = sg.decay[int64_t(blockIdx.x) * (sg.count - 1) + j];
            const float4* c = carried(j);
#pragma unroll
            for (int kt = 0; kt < NK; ++kt) {
                const float4 x = c[kt];
                S[kt][0] = S[kt][0] * d + x.x;
                S[kt][1] = S[kt][1] * d + x.y;
                S[kt][2] = S[kt][2] * d + x.z;
                S[kt][3] = S[kt][3] * d + x.w;
            }
        }

    const auto load_chunk = [&](int64_t step) {
        const int b = int((step - first) % 2), len = chunk_len(step);
        const int64_t c0 = step * p.chunk;
        if (!Carry) load_rows<T, T, kRows, KT, kThreads>(t.q[b], p.q, s, c0, len, h, 0, p.dk, vec);
        load_rows<T, T, kRows, KT, kThreads>(t.k[b], p.k, s, c0, len, h, 0, p.dk, vec);
        load_rows<T, T, kRows, BV, kThreads>(t.v[b], p.v, s, c0, len, h, v0, p.dv, vec);
    };
    // the gate of a chunk's rows: a per-head gate read two chunks ahead by threads [0, kRows),
    // continued past the chunk's end as if it were 0 there, summed by one thread a chunk ahead
    const int i = threadIdx.x;
    const auto head_gate = [&](int64_t step) {
        const int64_t c0 = step * p.chunk;
        return p.gate == Gate::per_head && step < chunks && c0 + i < s.len && i < p.chunk
                   ? raw(p.g.data, p.g.dtype, at(p.g, s, c0 + i, h))
                   : 0u;
    };
    const auto constant_gate = [&](int64_t step) {
        const int len = chunk_len(step);
        return p.gate == Gate::constant ? p.g_gamma[h] * float((i < len ? i : len - 1) + 1) : 0.f;
    };
    // in fp32, in step order as the CPU backend sums them
    const auto sum_gate = [&](float* to) {
        const float4* from = reinterpret_cast<const float4*>(t.g_next);
        float4* rows = reinterpret_cast<float4*>(to);
        float sum = 0.f;
        // half a chunk's loads issued before the first add, as the stores could alias them
#pragma unroll
        for (int r0 = 0; r0 < kRows / 4; r0 += kRows / 8) {
            float4 x[kRows / 8];
#pragma unroll
            for (int r = 0; r < kRows / 8; ++r) x[r] = from[r0 + r];
#pragma unroll
            for (int r = 0; r < kRows / 8; ++r) {
                x[r].x = sum += x[r].x;
                x[r].y = sum += x[r].y;
                x[r].z = sum += x[r].z;
                x[r].w = sum += x[r].w;
                rows[r0 + r] = x[r];
            }
        }
    };
    const bool sums = p.gate == Gate::per_head && threadIdx.x == kThreads - 1;
    uint32_t g_ahead = 0;
    if (i < kRows) {
        t.g_next[i] = widen(head_gate(first), p.g.dtype);
        g_ahead = head_gate(first + 1);
        t.grow[0][i] = first < end ? constant_gate(first) : 0.f;
        t.grow[1][i] = 0.f;
    }
    if (first < end) load_chunk(first);
    __syncthreads();
    if (sums) sum_gate(t.grow[0]);

    [[maybe_unused]] float total_decay = 1.f;  // the segment's, for Carry
    for (int64_t step = first; step < end; ++step) {
        const int b = int((step - first) % 2), len = chunk_len(step);
        const int64_t c0 = step * p.chunk;
        const float* G = t.grow[b];
        copies_wait();
        // this chunk's tiles and gate are in; the other buffers were read in the step before
        __syncthreads();
        if (step + 1 < end) load_chunk(step + 1);
        if (i < kRows) {
            if (p.gate == Gate::per_head) {
                t.g_next[i] = widen(g_ahead, p.g.dtype);
                g_ahead = head_gate(step + 2);
            } else if (p.gate == Gate::constant && step + 1 < end) {
                t.grow[1 - b][i] = constant_gate(step + 1);
            }
        }

        // the warp's share of the scores q kᵀ, then masked, decayed and rounded into t.a. They
        // have a phase of their own: made inside the state term's loop instead, whose q
        // fragments hold theirs, the forward measured 20-35% slower on an H100
        if constexpr (!Carry) {
            float acc[kPerWarp][4] = {};
            unsigned qa[kPerWarp], kb[kPerWarp];
#pragma unroll
            for (int m = 0; m < kPerWarp; ++m) {
                int rb, c;
                score_tile(tile0 + m, rb, c);
                qa[m] = fragment_a_address(t.q[b], 16 * rb, 0);
                kb[m] = fragment_b_address(t.k[b], 8 * c, 0);
            }
#pragma unroll
            for (int kk = 0; kk < KT; kk += 16)
#pragma unroll
                for (int m = 0; m < kPerWarp; ++m) {
                    if (!has_tile(m)) continue;
                    uint32_t a[4], bk[2];
                    ldmatrix_x4(a, qa[m] + kk * kE);
                    ldmatrix_x2(bk, kb[m] + kk * kE);
                    H::mma(acc[m], a, bk);
                }
#pragma unroll
            for (int m = 0; m < kPerWarp; ++m) {
                if (!has_tile(m)) continue;
                int rb, c;
                score_tile(tile0 + m, rb, c);
                const int j = 8 * c + 2 * t4;
                const float gj0 = G[j], gj1 = G[j + 1];
#pragma unroll
                for (int e = 0; e < 4; e += 2) {
                    const int r = 16 * rb + g8 + (e & 2) * 4;
                    const float gi = G[r];
                    // mask before exp: above the diagonal G_i − G_j > 0 can overflow
                    const bool row = r < len;
                    const float x0 = row && j <= r ? acc[m][e] * fast_exp(gi - gj0) : 0.f;
                    const float x1 = row && j + 1 <= r ? acc[m][e + 1] * fast_exp(gi - gj1) : 0.f;
                    *reinterpret_cast<uint32_t*>(&t.a[r][j]) = pair<T>(x0, x1);
                }
            }
        }
        // the scores are written, and the next chunk's per-head gate
        __syncthreads();
        if (sums) sum_gate(t.grow[1 - b]);

        const unsigned va = v_a + b * kV;
        if constexpr (!Carry) {
            // oᵀ = Sᵀ·qᵀ for the warp's values and every row, S rounded to the state dtype and
            // split in two halves where that is not T; O[ni][e]: value w16 + g8 (+8 for e ≥ 2),
            // row 8·ni + 2·t4 (+1 for odd e)
            float O[NR][4] = {};
            const unsigned qb = q_b2 + b * kQK;
            with_rounding(p.state, [&](auto round) {
#pragma unroll
                for (int kk = 0; kk < KT; kk += 16) {
                    uint32_t hi[4], lo[4];
#pragma unroll
                    for (int u = 0; u < 4; ++u) {
                        const float(&x)[4] = S[kk / 8 + u / 2];
                        const float x0 = round(x[(u & 1) * 2]), x1 = round(x[(u & 1) * 2 + 1]);
                        lo[u] = 0u;
                        if (split)
                            split_pair<T>(hi[u], lo[u], x0, x1);
                        else
                            hi[u] = pair<T>(x0, x1);
                    }
#pragma unroll
                    for (int ni = 0; ni < NR; ni += 2) {
                        uint32_t bq[4];
                        ldmatrix_x4(bq, qb + (8 * ni * PK + kk) * kE);
                        const uint32_t b0[2] = {bq[0], bq[1]}, b1[2] = {bq[2], bq[3]};
                        H::mma(O[ni], hi, b0);
                        H::mma(O[ni + 1], hi, b1);
                        if (!split) continue;
                        H::mma(O[ni], lo, b0);
                        H::mma(O[ni + 1], lo, b1);
                    }
                }
            });
#pragma unroll
            for (int ni = 0; ni < NR; ++ni) {
                const float f0 = fast_exp(G[8 * ni + 2 * t4]),
                            f1 = fast_exp(G[8 * ni + 2 * t4 + 1]);
                O[ni][0] *= f0;
                O[ni][1] *= f1;
                O[ni][2] *= f0;
                O[ni][3] *= f1;
            }
            // + vᵀ·Aᵀ, over the keys j ≤ i only
#pragma unroll
            for (int kk = 0; kk < kRows; kk += 16) {
                uint32_t av[4];
                ldmatrix_x4_trans(av, va + kk * PV * kE);
#pragma unroll
                for (int ni = 2 * (kk / 16); ni < NR; ++ni) {
                    uint32_t ba[2];
                    ldmatrix_x2(ba, a_b + (8 * ni * PR + kk) * kE);
                    H::mma(O[ni], av, ba);
                }
            }
            // o by rows: with o in the inputs' dtype and the value tile within it, each 8×8 block
            // transposed in registers and stored a 32-bit pair of values; element by element else
            const int64_t o_first = at(p.o, s, c0, h) + v0;
            const bool words = p.o.dtype == H::dtype && v0 + BV <= p.dv && o_first % 2 == 0 &&
                               p.o.st % 2 == 0 && reinterpret_cast<uintptr_t>(p.o.data) % 4 == 0;
            if (words) {
                T* to = static_cast<T*>(p.o.data) + o_first + g8 * p.o.st + w16 + 2 * t4;
                const int64_t step8 = 8 * p.o.st;
#pragma unroll
                for (int ni = 0; ni < NR; ++ni, to += step8) {
                    const uint32_t x0 =
                        transpose8x8(pair<T>(O[ni][0] * p.scale, O[ni][1] * p.scale));
                    const uint32_t x1 =
                        transpose8x8(pair<T>(O[ni][2] * p.scale, O[ni][3] * p.scale));
                    if (8 * ni + g8 < len) {
                        *reinterpret_cast<uint32_t*>(to) = x0;
                        *reinterpret_cast<uint32_t*>(to + 8) = x1;
                    }
                }
            } else {
#pragma unroll
                for (int ni = 0; ni < NR; ++ni)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int r = 8 * ni + 2 * t4 + (e & 1), value = w16 + g8 + (e & 2) * 4;
                        if (r < len && v0 + value < p.dv)
                            store(p.o.data, p.o.dtype, o_first + r * p.o.st + value,
                                  O[ni][e] * p.scale);
                    }
            }
        }
        // Sᵀ ← exp(Λ)·Sᵀ + ṽᵀ k, ṽ = v ⊙ exp(Λ − G) rounded to T, the carried state fp32
        const float last = G[kRows - 1], decay = fast_exp(last);
        if constexpr (Carry) total_decay *= decay;
        for_state([&](float& x, int, int) { x *= decay; });
        const unsigned kb = k_b2 + b * kQK;
#pragma unroll
        for (int kk = 0; kk < kRows; kk += 16) {
            uint32_t av[4];
            ldmatrix_x4_trans(av, va + kk * PV * kE);
            if (p.gate != Gate::none) {
                // av[u]: value w16 + g8 (+8 for odd u), rows r and r + 1, r = kk + 2·t4 (+8
                // for u ≥ 2)
                const int r = kk + 2 * t4;
                const float f0 = fast_exp(last - G[r]), f1 = fast_exp(last - G[r + 1]);
                const float f8 = fast_exp(last - G[r + 8]), f9 = fast_exp(last - G[r + 9]);
#pragma unroll
                for (int u = 0; u < 4; ++u) {
                    const float2 x = to_float2<T>(av[u]);
                    av[u] = u < 2 ? pair<T>(x.x * f0, x.y * f1) : pair<T>(x.x * f8, x.y * f9);
                }
            }
#pragma unroll
            for (int kt = 0; kt < NK; kt += 2) {
                uint32_t bk[4];
                ldmatrix_x4_trans(bk, kb + (kk * PK + 8 * kt) * kE);
                const uint32_t b0[2] = {bk[0], bk[1]}, b1[2] = {bk[2], bk[3]};
                H::mma(S[kt], av, b0);
                H::mma(S[kt + 1], av, b1);
            }
        }
    }
    if constexpr (Carry) {
        float4* c = carried(seg);
#pragma unroll
        for (int kt = 0; kt < NK; ++kt) c[kt] = make_float4(S[kt][0], S[kt][1], S[kt][2], S[kt][3]);
        if (blockIdx.y == 0 && threadIdx.x == 0)
            sg.decay[int64_t(blockIdx.x) * (sg.count - 1) + seg] = total_decay;
    } else if (p.ht != nullptr && seg == sg.count - 1) {
        for_state([&](float x, int key, int value) {
            if (key < p.dk && value < p.dv)
                store(p.ht, p.state, own + int64_t(key) * p.dv + value, x);
        });
    }
}

/// The value tile and segments of a problem (the key tile is 64 or 128, the fewest that hold
/// p.dk).
struct RowPlan {
    int values = 64;
    int segments = 1;
};

RowPlan plan(const GatedLinearProblem& p) {
    RowPlan r;
    const int sms = multiprocessors();
    const int64_t heads = p.seqs.n * p.heads;
    // value tiles of 64, two blocks to a streaming multiprocessor, unless they would not run
    // one to each: then tiles of 128, one block of eight warps to each, which makes each
    // chunk's loads of q and k and its scores once for twice the values
    if (p.dv > 64 && heads * ((p.dv + 63) / 64) > sms) r.values = 128;
    const int64_t blocks = heads * ((p.dv + r.values - 1) / r.values);
    const int64_t resident = int64_t(r.values == 64 ? 2 : 1) * sms;
    // segments only where the blocks fill a quarter of the GPU or less: two segments, at a
    // half, measured slower than one (bench/results/2026-11-28-h200-row-segments.md); as many
    // as run at once, each of two chunks or more
    const int64_t len = p.seqs.cu_seqlens != nullptr ? p.seqs.t / p.seqs.n : p.seqs.t;
    const int64_t chunks = (len + p.chunk - 1) / p.chunk;
    const int64_t fit = resident / std::max<int64_t>(blocks, 1);
    if (fit >= 4) r.segments = int(std::clamp<int64_t>(std::min(fit, chunks / 2), 1, 1024));
    return r;
}

int64_t carry_floats(const GatedLinearProblem& p, const RowPlan& r) {
    if (r.segments == 1) return 0;
    const int64_t keys = p.dk <= 64 ? 64 : 128, heads = p.seqs.n * p.heads;
    const int64_t tiles = heads * ((p.dv + r.values - 1) / r.values);
    return (tiles * keys * r.values + heads) * (r.segments - 1);
}

template <typename T, int KT, int BV, bool Carry>
void launch_pass(const GatedLinearProblem& p, const Segments& sg, cudaStream_t stream) {
    const auto kernel = row_gate_forward<T, KT, BV, Carry>;
    const char* what = Carry ? "gated linear tensor-core row-gate forward (segments' states)"
                             : "gated linear tensor-core row-gate forward";
    take_shared_memory(kernel, int(sizeof(RowTiles<T, KT, BV>)), what);
    const dim3 grid(unsigned(p.seqs.n * p.heads), unsigned((p.dv + BV - 1) / BV),
                    unsigned(Carry ? sg.count - 1 : sg.count));
    kernel<<<grid, 2 * BV, sizeof(RowTiles<T, KT, BV>), stream>>>(p, qkv_aligned(p), sg);
    LAV_CUDA_CHECK(cudaGetLastError(), what);
}

template <typename T, int KT, int BV>
void launch(const GatedLinearProblem& p, const Segments& sg, cudaStream_t stream) {
    if (sg.count > 1) launch_pass<T, KT, BV, true>(p, sg, stream);
    launch_pass<T, KT, BV, false>(p, sg, stream);
}

template <typename T>
void launch_type(const GatedLinearProblem& p, int values, const Segments& sg, cudaStream_t stream) {
    if (p.dk <= 64)
        values == 64 ? launch<T, 64, 64>(p, sg, stream) : launch<T, 64, 128>(p, sg, stream);
    else
        values == 64 ? launch<T, 128, 64>(p, sg, stream) : launch<T, 128, 128>(p, sg, stream);
}

}  // namespace

int64_t gated_linear_tc_row_workspace_floats(const GatedLinearProblem& p) {
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return 0;
    return carry_floats(p, plan(p));
}

void gated_linear_tc_row_fwd(const GatedLinearProblem& p, float* workspace, cudaStream_t stream) {
    if (!gated_linear_tc_fits(p) || p.gate == Gate::per_key || p.o.data == nullptr)
        throw std::invalid_argument(
            "gated linear tensor-core row-gate forward: needs 16-bit inputs that fit, a gate per "
            "row (none, per head or constant) and o");
    if (p.seqs.n == 0 || p.heads == 0 || p.dv == 0) return;
    const RowPlan r = plan(p);
    Segments sg;
    sg.count = r.segments;
    if (sg.count > 1) {
        if (workspace == nullptr)
            throw std::invalid_argument(
                "gated linear tensor-core row-gate forward: no workspace for its segments");
        const int64_t heads = p.seqs.n * p.heads;
        sg.carry = workspace;
        sg.decay = workspace + carry_floats(p, r) - heads * (sg.count - 1);
    }
    if (p.q.dtype == DType::bf16)
        launch_type<__nv_bfloat16>(p, r.values, sg, stream);
    else
        launch_type<__half>(p, r.values, sg, stream);
}

}  // namespace lav::cuda
