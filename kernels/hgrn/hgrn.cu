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
// (hgrn_cpu.cpp) in the same order.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda_tensor.cuh"
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

/// The channel of a per-chunk thread: chunk blockIdx.x, head blockIdx.y; false when idle.
__device__ __forceinline__ bool chunk_channel_of(const HgrnProblem& p, Chunk& ch, int& h, int& key,
                                                 int64_t& at_slot) {
    h = blockIdx.y;
    key = blockIdx.z * kThreads + threadIdx.x;
    if (key >= p.width) return false;
    ch = chunk_at(p.seqs, p.chunk, blockIdx.x);
    at_slot = (int64_t(blockIdx.x) * p.heads + h) * p.width + key;
    return ch.len > 0;
}

/// Per chunk: the local scan's last value y, the chunk's gate sum Λ (the cumsum's last G, in
/// the same order) and, for the backward, the reverse scan's carry into the chunk's start,
/// exp(g_0) z_0 with z_i = d_o_i + exp(g_{i+1}) z_{i+1} from a zero gradient at its end.
__global__ void __launch_bounds__(kThreads)
    chunk_local(HgrnProblem p, Strided d_o, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of(p, ch, h, key, slot)) return;
    float y = 0.f, G = 0.f;
    for (int i = 0; i < ch.len; ++i) {
        const float g = load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h) + key);
        G += g;
        y = expf(g) * y + load(p.x.data, p.x.dtype, at(p.x, ch.s, ch.c0 + i, h) + key);
    }
    w.y_last[slot] = y;
    w.g_last[slot] = G;
    if (w.z_first == nullptr) return;
    float carry = 0.f;
    for (int i = ch.len - 1; i >= 0; --i) {
        const float z = load(d_o.data, d_o.dtype, at(d_o, ch.s, ch.c0 + i, h) + key) + carry;
        carry = expf(load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h) + key)) * z;
    }
    w.z_first[slot] = carry;
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
    float S = p.h0 != nullptr ? load(p.h0, p.state, c.state) : 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
        w.h[at_slot(k)] = rounded(S, p.state);
        S = w.y_last[at_slot(k)] + expf(w.g_last[at_slot(k)]) * S;
    }
    if (p.ht != nullptr) store(p.ht, p.state, c.state, S);
    if (w.dh == nullptr) return;
    float dS = dht != nullptr ? load(dht, p.state, c.state) : 0.f;
    for (int64_t k = chunks - 1; k >= 0; --k) {
        w.dh[at_slot(k)] = rounded(dS, p.state);
        dS = w.z_first[at_slot(k)] + expf(w.g_last[at_slot(k)]) * dS;
    }
    if (dh0 != nullptr) store(dh0, p.state, c.state, dS);
}

/// o_i = y_i + exp(G_i) h: the local scan plus the decayed state entering the chunk.
__global__ void __launch_bounds__(kThreads) chunk_out(HgrnProblem p, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of(p, ch, h, key, slot)) return;
    const float hc = w.h[slot];
    float y = 0.f, G = 0.f;
    for (int i = 0; i < ch.len; ++i) {
        const float g = load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h) + key);
        G += g;
        y = expf(g) * y + load(p.x.data, p.x.dtype, at(p.x, ch.s, ch.c0 + i, h) + key);
        store(p.o.data, p.o.dtype, at(p.o, ch.s, ch.c0 + i, h) + key, y + expf(G) * hc);
    }
}

/// dx_i = dh_i = z_i + exp(Λ − G_i) dh and dg_i = exp(g_i) h_{i-1} dh_i, with h_{i-1} the
/// stored entering state h or the recomputed output of row i − 1.
__global__ void __launch_bounds__(kThreads)
    chunk_grads(HgrnProblem p, HgrnGrads d, ChunkScratch w) {
    Chunk ch;
    int h, key;
    int64_t slot;
    if (!chunk_channel_of(p, ch, h, key, slot)) return;
    const auto gate = [&](int i) {
        return load(p.g.data, p.g.dtype, at(p.g, ch.s, ch.c0 + i, h) + key);
    };
    float z[kMaxHgrnChunk];
    float carry = 0.f;
    for (int i = ch.len - 1; i >= 0; --i) {
        z[i] = load(d.d_o.data, d.d_o.dtype, at(d.d_o, ch.s, ch.c0 + i, h) + key) + carry;
        carry = expf(gate(i)) * z[i];
    }
    const float hc = w.h[slot], dhc = w.dh[slot], last = w.g_last[slot];
    float y = 0.f, G = 0.f, G_prev = 0.f;
    for (int i = 0; i < ch.len; ++i) {
        const float g = gate(i);
        G += g;
        const float h_prev = i == 0 ? hc : y + expf(G_prev) * hc;
        const float dh = z[i] + expf(last - G) * dhc;
        const float a = expf(g);
        store(d.dx.data, d.dx.dtype, at(d.dx, ch.s, ch.c0 + i, h) + key, dh);
        store(d.dg.data, d.dg.dtype, at(d.dg, ch.s, ch.c0 + i, h) + key, a * h_prev * dh);
        y = a * y + load(p.x.data, p.x.dtype, at(p.x, ch.s, ch.c0 + i, h) + key);
        G_prev = G;
    }
}

dim3 chunk_grid(const HgrnProblem& p) {
    return dim3(unsigned(chunk_slots(p.seqs, p.chunk)), unsigned(p.heads),
                unsigned((p.width + kThreads - 1) / kThreads));
}

void check_chunk(const HgrnProblem& p) {
    if (p.chunk < 1 || p.chunk > kMaxHgrnChunk)
        throw std::invalid_argument("hgrn chunk size " + std::to_string(p.chunk) +
                                    " is outside 1.." + std::to_string(kMaxHgrnChunk));
}

dim3 grid_of(const HgrnProblem& p) {
    return dim3(unsigned(p.seqs.n * p.heads), unsigned((p.width + kThreads - 1) / kThreads));
}

void check(const char* what) { check_cuda(cudaGetLastError(), what); }

}  // namespace

int64_t hgrn_chunk_workspace_floats(const HgrnProblem& p, bool backward) {
    return (backward ? 5 : 3) * chunk_slots(p.seqs, p.chunk) * p.heads * p.width;
}

void hgrn_chunk_fwd(const HgrnProblem& p, float* workspace, cudaStream_t stream) {
    check_chunk(p);
    if (p.seqs.n * p.heads * p.width == 0) return;
    const ChunkScratch w = scratch_of(p, workspace, false);
    if (chunk_slots(p.seqs, p.chunk) > 0)
        chunk_local<<<chunk_grid(p), kThreads, 0, stream>>>(p, Strided{}, w);
    chunk_pass<<<grid_of(p), kThreads, 0, stream>>>(p, w, nullptr, nullptr);
    if (chunk_slots(p.seqs, p.chunk) > 0) chunk_out<<<chunk_grid(p), kThreads, 0, stream>>>(p, w);
    check("hgrn_chunk_fwd");
}

void hgrn_chunk_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream) {
    check_chunk(p);
    if (p.seqs.n * p.heads * p.width == 0) return;
    HgrnProblem q = p;
    q.ht = nullptr;
    const ChunkScratch w = scratch_of(p, d.workspace, true);
    if (chunk_slots(p.seqs, p.chunk) > 0)
        chunk_local<<<chunk_grid(p), kThreads, 0, stream>>>(q, d.d_o, w);
    chunk_pass<<<grid_of(p), kThreads, 0, stream>>>(q, w, d.dht, d.dh0);
    if (chunk_slots(p.seqs, p.chunk) > 0)
        chunk_grads<<<chunk_grid(p), kThreads, 0, stream>>>(q, d, w);
    check("hgrn_chunk_bwd");
}

int64_t hgrn_workspace_floats(const HgrnProblem& p) {
    const int64_t rows = p.seqs.cu_seqlens != nullptr ? p.seqs.t : p.seqs.n * p.seqs.t;
    return rows * p.heads * p.width;
}

void hgrn_recurrent_fwd(const HgrnProblem& p, cudaStream_t stream) {
    if (p.seqs.n * p.heads * p.width == 0) return;
    recurrent_fwd<<<grid_of(p), kThreads, 0, stream>>>(p);
    check("hgrn_recurrent_fwd");
}

void hgrn_recurrent_bwd(const HgrnProblem& p, const HgrnGrads& d, cudaStream_t stream) {
    if (p.seqs.n * p.heads * p.width == 0) return;
    recurrent_bwd<<<grid_of(p), kThreads, 0, stream>>>(p, d);
    check("hgrn_recurrent_bwd");
}

}  // namespace lav::cuda
