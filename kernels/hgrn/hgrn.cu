// kernels/hgrn/hgrn.cu — HGRN's recurrence on CUDA, forward and backward: the recurrent variant
// (one thread per channel steps through its sequence) and the chunked scan.
//
// The recurrent backward recomputes h_t into fp32 scratch, then runs
// dh_t = d_o_t + exp(g_{t+1}) dh_{t+1} from the end: dx_t = dh_t, dg_t = exp(g_t) h_{t-1} dh_t,
// dh0 = exp(g_0) dh_0.
//
// The chunked scan (FLA's fla/ops/hgrn/chunk.py) has one thread per (chunk, channel) scan its
// chunk from a zero state in fp32, one thread per (sequence, channel) carry the state over the
// chunk ends (fp32, stored per chunk in the state dtype), and the chunks then add the decayed
// entering state to their local scans in parallel. The backward does the same with the reverse
// scan of d_o, recomputing the chunk states; every step is the CPU chunk backend's
// (hgrn_cpu.cpp) in the same order, but for each chunk's reverse-scan carry (chunk_local).
// Where every tensor a pass reads or writes pairs its channels into aligned words, a thread of
// the local scans and the output pass takes two channels: one load fetches both, so twice the
// bytes are in flight per instruction, and each channel's arithmetic is unchanged (same bits).
#include <cuda_runtime.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "hgrn/hgrn_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kThreads = 128;

struct Channel {
    int n, h, key;
    Span s;
    int64_t state;  // offset in [N, H, K]
};

__device__ __forceinline__ bool channel_of(const HgrnProblem& p, Channel& c) {
    c.n = blockIdx.x / p.heads;
    c.h = blockIdx.x % p.heads;
    c.key = blockIdx.y * kThreads + threadIdx.x;
    if (c.key >= p.width) return false;
    c.s = span(p.seqs, c.n);
    c.state = (int64_t(c.n) * p.heads + c.h) * p.width + c.key;
    return true;
}

/// Steps the forward recurrence; writes o (when given) and h_t into scratch (when given).
__device__ __forceinline__ float forward(const HgrnProblem& p, const Channel& c, float* hs) {
    float h = p.h0 != nullptr ? load(p.h0, p.state, c.state) : 0.f;
    for (int64_t t = 0; t < c.s.len; ++t) {
        const float g = load(p.g.data, p.g.dtype, at(p.g, c.s, t, c.h) + c.key);
        h = expf(g) * h + load(p.x.data, p.x.dtype, at(p.x, c.s, t, c.h) + c.key);
        if (hs != nullptr)
            hs[(row(p.seqs, c.s, t) * p.heads + c.h) * p.width + c.key] = h;
        else
            store(p.o.data, p.o.dtype, at(p.o, c.s, t, c.h) + c.key, h);
    }
    return h;
}

__global__ void __launch_bounds__(kThreads) recurrent_fwd(HgrnProblem p) {
    Channel c;
    if (!channel_of(p, c)) return;
    const float h = forward(p, c, nullptr);
    if (p.ht != nullptr) store(p.ht, p.state, c.state, h);
}

__global__ void __launch_bounds__(kThreads) recurrent_bwd(HgrnProblem p, HgrnGrads d) {
    Channel c;
    if (!channel_of(p, c)) return;
    forward(p, c, d.workspace);
    float dh = d.dht != nullptr ? load(d.dht, p.state, c.state) : 0.f;
    for (int64_t t = c.s.len - 1; t >= 0; --t) {
        dh += load(d.d_o.data, d.d_o.dtype, at(d.d_o, c.s, t, c.h) + c.key);
        store(d.dx.data, d.dx.dtype, at(d.dx, c.s, t, c.h) + c.key, dh);
        const float decay = expf(load(p.g.data, p.g.dtype, at(p.g, c.s, t, c.h) + c.key));
        const float before =
            t > 0 ? d.workspace[(row(p.seqs, c.s, t - 1) * p.heads + c.h) * p.width + c.key]
                  : (p.h0 != nullptr ? load(p.h0, p.state, c.state) : 0.f);
        store(d.dg.data, d.dg.dtype, at(d.dg, c.s, t, c.h) + c.key, decay * before * dh);
        dh *= decay;
    }
    if (d.dh0 != nullptr) store(d.dh0, p.state, c.state, dh);
}

// ---- chunked scan ----

/// Chunk scratch: per chunk slot and channel, fp32 (see hgrn_chunk_workspace_floats()).
struct ChunkScratch {
    float *y_last, *g_last, *z_first, *h, *dh;
};

ChunkScratch scratch_of(const HgrnProblem& p, float* w, bool backward) {
    const int64_t n = chunk_slots(p.seqs, p.chunk) * p.heads * p.width;
    return {w, w + n, backward ? w + 2 * n : nullptr, w + (backward ? 3 : 2) * n,
            backward ? w + 4 * n : nullptr};
}

// rows of a chunk whose loads a thread has in flight at once: the scans themselves are
// serial, but their inputs are not, and one row at a time would leave the memory idle
constexpr int kBatch = 8;
// enough resident warps that batches of all of them keep the memory busy: 64 registers a thread
// hold a batch of up to four row values a row (two tensors of two channels), 80 one of six
constexpr int blocks_per_sm(int values_a_row) { return values_a_row <= 4 ? 8 : 6; }

/// The P adjacent channels at `from`, widened: one load (P = 2 only where they are aligned).
template <typename E, int P>
__device__ __forceinline__ void load_channels(float (&out)[P], const E* from) {
    if constexpr (P == 1) {
        out[0] = widened(*from);
    } else {
        const ElementPair<E> two = *reinterpret_cast<const ElementPair<E>*>(from);
        out[0] = widened(two.a);
        out[1] = widened(two.b);
    }
}

/// Rows i0 + [0, kBatch) of the thread's P channels of x in chunk ch, widened; 0 past its
/// end. The dtype is chosen once, so that the loads of a batch issue back to back.
template <typename E, int P>
__device__ __forceinline__ void load_batch_as(float (&out)[kBatch][P], const Strided& x,
                                              const Chunk& ch, int h, int key, int i0) {
    const E* row = static_cast<const E*>(x.data) + at(x, ch.s, ch.c0 + i0, h) + key;
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
        if (i0 + u < ch.len) {
            load_channels<E, P>(out[u], row + u * x.st);
        } else {
#pragma unroll
            for (int j = 0; j < P; ++j) out[u][j] = 0.f;
        }
    }
}

template <int P>
__device__ __forceinline__ void load_batch(float (&out)[kBatch][P], const Strided& x,
                                           const Chunk& ch, int h, int key, int i0) {
    if (x.dtype == DType::f32)
        load_batch_as<float, P>(out, x, ch, h, key, i0);
    else if (x.dtype == DType::f16)
        load_batch_as<__half, P>(out, x, ch, h, key, i0);
    else
        load_batch_as<__nv_bfloat16, P>(out, x, ch, h, key, i0);
}

/// Stores the P channels of a row, rounded to d.
template <int P>
__device__ __forceinline__ void store_channels(void* to, DType d, int64_t i, const float (&x)[P]) {
    if constexpr (P == 1)
        store(to, d, i, x[0]);
    else
        store_pair(to, d, i, x[0], x[1], true);
}

/// Calls f(i, g_i, x_i) for the chunk's rows i = 0, 1, ... in order (g_i, x_i: P channels).
template <int P, typename F>
__device__ __forceinline__ void for_rows(const Strided& g, const Strided& x, const Chunk& ch, int h,
                                         int key, F&& f) {
    for (int i0 = 0; i0 < ch.len; i0 += kBatch) {
        float gs[kBatch][P], xs[kBatch][P];
        load_batch<P>(gs, g, ch, h, key, i0);
        load_batch<P>(xs, x, ch, h, key, i0);
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
            if (i0 + u < ch.len) f(i0 + u, gs[u], xs[u]);
    }
}

/// Calls f(i, g_i, x_i, d_i) for the chunk's rows i = 0, 1, ... in order.
template <int P, typename F>
__device__ __forceinline__ void for_rows(const Strided& g, const Strided& x, const Strided& d,
                                         const Chunk& ch, int h, int key, F&& f) {
    for (int i0 = 0; i0 < ch.len; i0 += kBatch) {
        float gs[kBatch][P], xs[kBatch][P], ds[kBatch][P];
        load_batch<P>(gs, g, ch, h, key, i0);
        load_batch<P>(xs, x, ch, h, key, i0);
        load_batch<P>(ds, d, ch, h, key, i0);
#pragma unroll
        for (int u = 0; u < kBatch; ++u)
            if (i0 + u < ch.len) f(i0 + u, gs[u], xs[u], ds[u]);
    }
}

/// Calls f(i, g_i, x_i) for the chunk's rows i = len − 1, len − 2, ... in order.
template <int P, typename F>
__device__ __forceinline__ void for_rows_reversed(const Strided& g, const Strided& x,
                                                  const Chunk& ch, int h, int key, F&& f) {
    for (int i0 = (ch.len - 1) / kBatch * kBatch; i0 >= 0; i0 -= kBatch) {
        float gs[kBatch][P], xs[kBatch][P];
        load_batch<P>(gs, g, ch, h, key, i0);
        load_batch<P>(xs, x, ch, h, key, i0);
#pragma unroll
        for (int u = kBatch - 1; u >= 0; --u)
            if (i0 + u < ch.len) f(i0 + u, gs[u], xs[u]);
    }
}

/// The first of the P channels of a per-chunk thread: chunk blockIdx.x, head blockIdx.y;
/// false when idle.
template <int P>
__device__ __forceinline__ bool chunk_channel_of(const HgrnProblem& p, Chunk& ch, int& h, int& key,
                                                 int64_t& at_slot) {
    h = blockIdx.y;
    key = (blockIdx.z * kThreads + threadIdx.x) * P;
    if (key >= p.width) return false;
    ch = chunk_at(p.seqs, p.chunk, blockIdx.x);
    at_slot = (int64_t(blockIdx.x) * p.heads + h) * p.width + key;
    return ch.len > 0;
}

/// Per chunk: the local scan's last value y, the chunk's gate sum Λ (the cumsum's last G, in
/// the same order) and, for the backward, the reverse scan's carry into the chunk's start,
/// exp(g_0) z_0 with z_i = d_o_i + exp(g_{i+1}) z_{i+1} from a zero gradient at its end.
/// Unrolled, that carry is Σ_i exp(G_i) d_o_i, which the same forward pass sums: the CPU
/// backend forms it by the reverse scan, so the two differ by fp32 rounding only.
template <int P, bool Backward>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(P*(Backward ? 3 : 2)))
    chunk_local(HgrnProblem p, Strided d_o, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of<P>(p, ch, h, key, slot)) return;
    float y[P] = {}, G[P] = {};
    const auto scan = [&](int j, float g, float x) {
        G[j] += g;
        y[j] = expf(g) * y[j] + x;
    };
    if constexpr (!Backward) {
        for_rows<P>(p.g, p.x, ch, h, key, [&](int, const float(&g)[P], const float(&x)[P]) {
#pragma unroll
            for (int j = 0; j < P; ++j) scan(j, g[j], x[j]);
        });
    } else {
        float carry[P] = {};
        for_rows<P>(p.g, p.x, d_o, ch, h, key,
                    [&](int, const float(&g)[P], const float(&x)[P], const float(&d)[P]) {
#pragma unroll
                        for (int j = 0; j < P; ++j) {
                            scan(j, g[j], x[j]);
                            carry[j] += expf(G[j]) * d[j];
                        }
                    });
#pragma unroll
        for (int j = 0; j < P; ++j) w.z_first[slot + j] = carry[j];
    }
#pragma unroll
    for (int j = 0; j < P; ++j) {
        w.y_last[slot + j] = y[j];
        w.g_last[slot + j] = G[j];
    }
}

/// Per sequence and channel: the state entering each chunk, S ← y_last + exp(Λ) S from h0,
/// kept as stored (rounded to the state dtype) into w.h; ht the final S. With a backward, also
/// the gradient leaving each chunk, dS ← z_first + exp(Λ) dS from dht in reverse, into w.dh
/// as stored, and dh0 the final dS.
__global__ void __launch_bounds__(kThreads)
    chunk_pass(HgrnProblem p, ChunkScratch w, const void* dht, void* dh0) {
    Channel c;
    if (!channel_of(p, c)) return;
    const int64_t first = first_slot(p.seqs, p.chunk, c.n, c.s);
    const int64_t chunks = (c.s.len + p.chunk - 1) / p.chunk;
    const auto at_slot = [&](int64_t k) { return ((first + k) * p.heads + c.h) * p.width + c.key; };
    // the chunks' summaries do not depend on the carry: a batch of them is loaded before it
    // is stepped through, so that their loads are in flight together
    const auto carry_over = [&](const float* add, float* store_at, float S, bool reverse) {
        for (int64_t k0 = 0; k0 < chunks; k0 += kBatch) {
            float adds[kBatch], gates[kBatch];
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                const int64_t k = reverse ? chunks - 1 - (k0 + u) : k0 + u;
                adds[u] = k0 + u < chunks ? add[at_slot(k)] : 0.f;
                gates[u] = k0 + u < chunks ? w.g_last[at_slot(k)] : 0.f;
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
                if (k0 + u >= chunks) break;
                store_at[at_slot(reverse ? chunks - 1 - (k0 + u) : k0 + u)] = rounded(S, p.state);
                S = adds[u] + expf(gates[u]) * S;
            }
        }
        return S;
    };
    const float S =
        carry_over(w.y_last, w.h, p.h0 != nullptr ? load(p.h0, p.state, c.state) : 0.f, false);
    if (p.ht != nullptr) store(p.ht, p.state, c.state, S);
    if (w.dh == nullptr) return;
    const float dS =
        carry_over(w.z_first, w.dh, dht != nullptr ? load(dht, p.state, c.state) : 0.f, true);
    if (dh0 != nullptr) store(dh0, p.state, c.state, dS);
}

/// o_i = y_i + exp(G_i) h: the local scan plus the decayed state entering the chunk.
template <int P>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(2 * P))
    chunk_out(HgrnProblem p, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of<P>(p, ch, h, key, slot)) return;
    float hc[P], y[P] = {}, G[P] = {};
#pragma unroll
    for (int j = 0; j < P; ++j) hc[j] = w.h[slot + j];
    for_rows<P>(p.g, p.x, ch, h, key, [&](int i, const float(&g)[P], const float(&x)[P]) {
        float o[P];
#pragma unroll
        for (int j = 0; j < P; ++j) {
            G[j] += g[j];
            y[j] = expf(g[j]) * y[j] + x[j];
            o[j] = y[j] + expf(G[j]) * hc[j];
        }
        store_channels<P>(p.o.data, p.o.dtype, at(p.o, ch.s, ch.c0 + i, h) + key, o);
    });
}

/// dx_i = dh_i = z_i + exp(Λ − G_i) dh and dg_i = exp(g_i) h_{i-1} dh_i, with h_{i-1} the
/// stored entering state h or the recomputed output of row i − 1. One channel a thread: the
/// shared z of two would halve the blocks a multiprocessor holds, and measured slower.
__global__ void __launch_bounds__(kThreads, blocks_per_sm(2))
    chunk_grads(HgrnProblem p, HgrnGrads d, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of<1>(p, ch, h, key, slot)) return;
    // the reverse scan z of the chunk, a column per thread: in registers it would not fit, and
    // as a local array it would crowd the loads out of the L1 cache
    __shared__ float z[kMaxHgrnChunk][kThreads];
    float carry = 0.f;
    for_rows_reversed<1>(p.g, d.d_o, ch, h, key,
                         [&](int i, const float(&g)[1], const float(&d_o)[1]) {
                             z[i][threadIdx.x] = d_o[0] + carry;
                             carry = expf(g[0]) * z[i][threadIdx.x];
                         });
    const float hc = w.h[slot], dhc = w.dh[slot], last = w.g_last[slot];
    float y = 0.f, G = 0.f, G_prev = 0.f;
    for_rows<1>(p.g, p.x, ch, h, key, [&](int i, const float(&g)[1], const float(&x)[1]) {
        G += g[0];
        const float h_prev = i == 0 ? hc : y + expf(G_prev) * hc;
        const float dh = z[i][threadIdx.x] + expf(last - G) * dhc;
        const float a = expf(g[0]);
        store(d.dx.data, d.dx.dtype, at(d.dx, ch.s, ch.c0 + i, h) + key, dh);
        store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h) + key, a * h_prev * dh);
        y = a * y + x[0];
        G_prev = G;
    });
}

template <int P>
dim3 chunk_grid(const HgrnProblem& p) {
    return dim3(unsigned(chunk_slots(p.seqs, p.chunk)), unsigned(p.heads),
                unsigned((p.width + kThreads * P - 1) / (kThreads * P)));
}

/// Whether tensor x's channels pair up into aligned two-element words.
bool pairs_fit(const Strided& x) {
    const size_t bytes = x.dtype == DType::f32 ? 4 : 2;
    return x.sb % 2 == 0 && x.st % 2 == 0 && x.sh % 2 == 0 &&
           reinterpret_cast<uintptr_t>(x.data) % (2 * bytes) == 0;
}

/// Channels per thread: two where every tensor the pass touches takes them as one word.
int channels_per_thread(const HgrnProblem& p, std::initializer_list<Strided> also) {
    if (p.width % 2 != 0) return 1;
    for (const Strided& x : {p.x, p.g})
        if (!pairs_fit(x)) return 1;
    for (const Strided& x : also)
        if (!pairs_fit(x)) return 1;
    return 2;
}

void check_chunk(const HgrnProblem& p) {
    if (p.chunk < 1 || p.chunk > kMaxHgrnChunk)
        throw std::invalid_argument("hgrn chunk size " + std::to_string(p.chunk) +
                                    " is outside 1.." + std::to_string(kMaxHgrnChunk));
}

dim3 grid_of(const HgrnProblem& p) {
    return dim3(unsigned(p.seqs.n * p.heads), unsigned((p.width + kThreads - 1) / kThreads));
}

/// The local scans, two channels a thread where the tensors pair up.
void launch_local(const HgrnProblem& p, Strided d_o, ChunkScratch w, bool pairs,
                  cudaStream_t stream) {
    const bool backward = w.z_first != nullptr;
    if (pairs && backward)
        chunk_local<2, true><<<chunk_grid<2>(p), kThreads, 0, stream>>>(p, d_o, w);
    else if (pairs)
        chunk_local<2, false><<<chunk_grid<2>(p), kThreads, 0, stream>>>(p, d_o, w);
    else if (backward)
        chunk_local<1, true><<<chunk_grid<1>(p), kThreads, 0, stream>>>(p, d_o, w);
    else
        chunk_local<1, false><<<chunk_grid<1>(p), kThreads, 0, stream>>>(p, d_o, w);
}

}  // namespace

int64_t hgrn_chunk_workspace_floats(const HgrnProblem& p, bool backward) {
    return (backward ? 5 : 3) * chunk_slots(p.seqs, p.chunk) * p.heads * p.width;
}

void hgrn_chunk_fwd(const HgrnProblem& p, float* workspace, cudaStream_t stream) {
    check_chunk(p);
    if (p.seqs.n * p.heads * p.width == 0) return;
    const ChunkScratch w = scratch_of(p, workspace, false);
    const bool chunks = chunk_slots(p.seqs, p.chunk) > 0;
    if (chunks) launch_local(p, Strided{}, w, channels_per_thread(p, {}) == 2, stream);
    chunk_pass<<<grid_of(p), kThreads, 0, stream>>>(p, w, nullptr, nullptr);
    if (chunks && channels_per_thread(p, {p.o}) == 2)
        chunk_out<2><<<chunk_grid<2>(p), kThreads, 0, stream>>>(p, w);
    else if (chunks)
        chunk_out<1><<<chunk_grid<1>(p), kThreads, 0, stream>>>(p, w);
    LAV_CUDA_CHECK(cudaGetLastError(), "hgrn_chunk_fwd");
}

void hgrn_chunk_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream) {
    check_chunk(p);
    if (p.seqs.n * p.heads * p.width == 0) return;
    HgrnProblem q = p;
    q.ht = nullptr;
    const ChunkScratch w = scratch_of(p, d.workspace, true);
    const bool chunks = chunk_slots(p.seqs, p.chunk) > 0;
    if (chunks) launch_local(q, d.d_o, w, channels_per_thread(p, {d.d_o}) == 2, stream);
    chunk_pass<<<grid_of(p), kThreads, 0, stream>>>(q, w, d.dht, d.dh0);
    if (chunks) chunk_grads<<<chunk_grid<1>(p), kThreads, 0, stream>>>(q, d, w);
    LAV_CUDA_CHECK(cudaGetLastError(), "hgrn_chunk_bwd");
}

int64_t hgrn_workspace_floats(const HgrnProblem& p) {
    const int64_t rows = p.seqs.cu_seqlens != nullptr ? p.seqs.t : p.seqs.n * p.seqs.t;
    return rows * p.heads * p.width;
}

void hgrn_recurrent_fwd(const HgrnProblem& p, cudaStream_t stream) {
    if (p.seqs.n * p.heads * p.width == 0) return;
    recurrent_fwd<<<grid_of(p), kThreads, 0, stream>>>(p);
    LAV_CUDA_CHECK(cudaGetLastError(), "hgrn_recurrent_fwd");
}

void hgrn_recurrent_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream) {
    if (p.seqs.n * p.heads * p.width == 0) return;
    recurrent_bwd<<<grid_of(p), kThreads, 0, stream>>>(p, d);
    LAV_CUDA_CHECK(cudaGetLastError(), "hgrn_recurrent_bwd");
}

}  // namespace lav::cuda
