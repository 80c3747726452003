// kernels/common/cuda/kda_chunk.cu — kda's chunk (WY / UT) forward on CUDA: the delta rule's chunk
// form with a log decay per key, in fp32 FMA arithmetic (no tensor cores yet).
//
// Three passes, as delta_chunk.cu splits the gated delta rule's; the decay is a [C, K] tile here,
// so every pairwise factor E_ijd = exp(G_id − G_jd) is taken per key inside the sums over keys:
//  1. a block per (chunk, value head): q̂, k̂ (the normalised q, k rounded to the input dtype),
//     G (the chunk-local cumsum per key), β as used, A_ij = β_i Σ_d k̂_id k̂_jd E_ijd (strictly
//     lower, fp32), Ti = (I + A)⁻¹ by forward substitution in fp32, then w = round(round(Ti)
//     round(β k̂ e^G)), u = round(round(Ti) round(β v)) and kg = round(k̂ e^{G_last − G});
//  2. a block per (sequence, value head, kTile value columns) carries the fp32 state S through
//     the chunks: h = round(S) in the state dtype, v_new = round(u − w h), then
//     S ← diag(e^{G_last}) S + kgᵀ v_new;
//  3. a block per (chunk, value head): o = A_qk v_new + (qg h) scale with
//     A_qk = round(scale Σ_d q̂_id k̂_jd E_ijd) and qg = round(q̂ e^G).
// Each value is rounded where kda's CPU chunk forward (kda/kda_cpu.cpp) rounds it, and its sums
// run in that forward's order. The passes hand their values over in the workspace
// (KdaChunkSaved), which the backward reads too.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_tc.cuh"
#include "common/cuda/kda_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kThreads = kDeltaChunkThreads;
constexpr int kTile = 32;  // value columns per block of the state pass, per step of the others

// at K = 128, C = 64: 105, 105 and 137 KB (of the 227 KB a block may have)
int64_t prep_floats(int K, int C) {
    return 2 * int64_t(C) * padded_keys(K) + C * (C + 1) + C * C + C * kTile + C;
}
int64_t state_floats(int K, int C) { return 2 * int64_t(C) * K + C * kTile + 2 * K * kTile + K; }
int64_t out_floats(int K, int C) {
    return 3 * int64_t(C) * padded_keys(K) + C * C + K * kTile + C * kTile;
}

/// f(i, j) for every i < rows, j < cols: a warp a row, a lane a column, no index divided.
template <typename F>
__device__ __forceinline__ void each_element(int rows, int cols, F&& f) {
    for (int i = threadIdx.x / 32; i < rows; i += kThreads / 32)
        for (int j = threadIdx.x % 32; j < cols; j += 32) f(i, j);
}

/// Pass 1, a block per (chunk slot, value head).
__global__ void __launch_bounds__(kThreads) chunk_prep(DeltaChunkProblem p, KdaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, blockIdx.x);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const Span& s = ck.s;
    const int64_t t0 = ck.c0, r0 = row(p.seqs, s, t0);
    const DType in = p.q.dtype;
    float* k = sm;                 // [C, KP] k̂
    float* G = k + C * KP;         // [C, KP] the chunk-local cumsum per key, e^G, then kb
    float* A = G + C * KP;         // [C, C + 1] A (rows an odd number of floats apart for the
                                   // solve), then [C, C] the inverse rounded
    float* Ti = A + C * (C + 1);   // [C, C] (I + A)⁻¹ in fp32
    float* vb = Ti + C * C;        // [C, kTile] round(β v)
    float* beta = vb + C * kTile;  // [C] β as used
    key_rows<kMaxKdaChunkKeys>(p, ck, hv, k, KP, x.qn, x.kn);
    const float rate = p.gate_in_kernel ? expf(p.A_log[hv]) : 0.f;
    gather_tile(
        L, K, p.g.data, p.g.dtype, at(p.g, s, t0, hv), p.g.st, 0, K, [&](int i, int d, float g) {
            if (p.gate_in_kernel)
                g = activated_gate(
                    p, rate, g + (p.dt_bias != nullptr ? p.dt_bias[int64_t(hv) * K + d] : 0.f));
            G[i * KP + d] = g;
        });
    for (int i = tid; i < L; i += kThreads) {
        beta[i] = activated_beta(p, load(p.beta.data, p.beta.dtype, at(p.beta, s, t0 + i, hv)));
        x.beta[(r0 + i) * HV + hv] = beta[i];
    }
    __syncthreads();
    // a running fp32 sum down each key column, as the CPU forms G
    for (int d = tid; d < K; d += kThreads) {
        float acc = 0.f;
        for (int i = 0; i < L; ++i) {
            acc += G[i * KP + d];
            G[i * KP + d] = acc;
            x.G[((r0 + i) * HV + hv) * K + d] = acc;
        }
    }
    __syncthreads();
    // A_ij = β_i Σ_d (k̂_id k̂_jd) exp(G_id − G_jd) below the diagonal, in fp32 (the solve reads
    // no other entry)
    const auto key = [&](int i, int d) { return k[i * KP + d]; };
    decayed_products(
        L, K, key, key, [&](int i, int d) { return G[i * KP + d]; },
        [&](int i, int j, float a) { A[i * (C + 1) + j] = j < i ? a * beta[i] : 0.f; });
    // kg = round(k̂ exp(G_last − G)), which the state pass reads
    each_element(L, K, [&](int i, int d) {
        store(x.kg, in, ((r0 + i) * HV + hv) * K + d,
              k[i * KP + d] * expf(G[(L - 1) * KP + d] - G[i * KP + d]));
    });
    __syncthreads();
    solve_unit_lower(A, C + 1, Ti, C, L);
    // A has been read: it takes the inverse as stored; G (stored) becomes e^G
    each_element(L, L, [&](int i, int j) {
        A[i * C + j] = j <= i ? rounded(Ti[i * C + j], in) : 0.f;
        if (x.Tf != nullptr) x.Tf[((r0 + i) * HV + hv) * C + j] = j <= i ? Ti[i * C + j] : 0.f;
    });
    each_element(L, K, [&](int j, int d) { G[j * KP + d] = expf(G[j * KP + d]); });
    __syncthreads();
    if (x.Wf != nullptr) {
        // the backward's W = Ti (β (k̂ e^G)), unrounded, with the CPU backward's operand
        lower_products<false>(
            Ti, C, [&](int j, int d) { return beta[j] * (k[j * KP + d] * G[j * KP + d]); }, L, K,
            [&](int i, int d, float t) { x.Wf[((r0 + i) * HV + hv) * K + d] = t; });
        __syncthreads();
    }
    // e^G becomes w's operand round(β k̂ e^G)
    each_element(L, K, [&](int j, int d) {
        G[j * KP + d] = rounded(beta[j] * k[j * KP + d] * G[j * KP + d], in);
    });
    __syncthreads();
    // w = round(round(Ti) kb), u = round(round(Ti) round(β v)), each stored
    lower_products<false>(
        A, C, [&](int j, int d) { return G[j * KP + d]; }, L, K,
        [&](int i, int d, float t) { store(x.w, in, ((r0 + i) * HV + hv) * K + d, t); });
    for (int c0 = 0; c0 < V; c0 += kTile) {
        gather_tile(L, kTile, p.v.data, p.v.dtype, at(p.v, s, t0, hv), p.v.st, c0, V,
                    [&](int j, int c, float v) { vb[j * kTile + c] = rounded(beta[j] * v, in); });
        __syncthreads();
        lower_products<false>(
            A, C, [&](int j, int c) { return vb[j * kTile + c]; }, L, kTile,
            [&](int i, int c, float t) {
                if (c0 + c < V) store(x.u, in, ((r0 + i) * HV + hv) * V + c0 + c, t);
            });
        __syncthreads();
    }
}

/// Pass 2, a block per (sequence, value head, kTile value columns), through the chunks in order.
__global__ void __launch_bounds__(kThreads) chunk_state(DeltaChunkProblem p, KdaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV;
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x;
    const DType in = p.q.dtype;
    float* w = sm;                 // [C, K]
    float* kg = w + C * K;         // [C, K]
    float* vn = kg + C * K;        // [C, kTile] u, then v_new
    float* S = vn + C * kTile;     // [K, kTile] the carried fp32 state
    float* hs = S + K * kTile;     // [K, kTile] the state as stored
    float* last = hs + K * kTile;  // [K] exp(G_last)
    const int64_t state = (int64_t(n) * HV + hv) * K * V;
    load_tile(S, kTile, K, kTile, p.h0, p.state, state, V, col0, p.h0 != nullptr ? V : 0);
    __syncthreads();  // the loops below take other elements of S than load_tile gave a thread
    const int64_t first = first_slot(p.seqs, C, n, s);
    for (int64_t ch = 0; ch * C < s.len; ++ch) {
        const int64_t t0 = ch * C, r0 = row(p.seqs, s, t0);
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        __syncthreads();  // the previous chunk is done with every tile
        load_tile(w, K, L, K, x.w, in, (r0 * HV + hv) * K, HV * K);
        load_tile(kg, K, L, K, x.kg, in, (r0 * HV + hv) * K, HV * K);
        load_tile(vn, kTile, L, kTile, x.u, in, (r0 * HV + hv) * V, HV * V, col0, V);
        for (int d = tid; d < K; d += kThreads)
            last[d] = expf(x.G[((r0 + L - 1) * HV + hv) * K + d]);
        // the state as stored (FLA's h) is what v_new and the output read
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int d = e / kTile, c = col0 + e % kTile;
            hs[e] = rounded(S[e], p.state);
            if (c >= V) continue;
            store(x.h, p.state, (((first + ch) * HV + hv) * K + d) * V + c, hs[e]);
            if (p.h != nullptr)
                store(p.h, p.state,
                      ((p.first_chunk[n] + ch) * HV + hv) * K * V + int64_t(d) * V + c, S[e]);
        }
        __syncthreads();
        // v_new = round(u − w h)
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float t = 0.f;
            for (int d = 0; d < K; ++d) t += w[i * K + d] * hs[d * kTile + c];
            const float v_new = rounded(vn[e] - t, in);
            if (col0 + c < V) store(x.v_new, in, ((r0 + i) * HV + hv) * V + col0 + c, v_new);
            vn[e] = v_new;
        }
        __syncthreads();
        // S ← diag(exp(G_last)) S + kgᵀ v_new
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int d = e / kTile, c = e % kTile;
            float t = 0.f;
            for (int j = 0; j < L; ++j) t += kg[j * K + d] * vn[j * kTile + c];
            S[e] = S[e] * last[d] + t;
        }
    }
    __syncthreads();
    if (p.ht == nullptr) return;
    store_state_tile(p.ht, p.state, state, V, col0, S, K, kTile);
}

/// Pass 3, a block per (chunk slot, value head).
__global__ void __launch_bounds__(kThreads) chunk_out(DeltaChunkProblem p, KdaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    float* q = sm;               // [C, KP] q̂, then qg = round(q̂ e^G)
    float* k = q + C * KP;       // [C, KP] k̂
    float* G = k + C * KP;       // [C, KP]
    float* P = G + C * KP;       // [C, C] A_qk as stored
    float* hs = P + C * C;       // [K, kTile] h as stored
    float* vn = hs + K * kTile;  // [C, kTile] v_new
    load_tile(q, KP, L, K, x.qn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(k, KP, L, K, x.kn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(G, KP, L, K, x.G, DType::f32, (r0 * HV + hv) * K, HV * K);
    __syncthreads();
    // A_qk = round(scale Σ_d (q̂_id k̂_jd) exp(G_id − G_jd)) for j ≤ i
    decayed_products(
        L, K, [&](int i, int d) { return q[i * KP + d]; },
        [&](int j, int d) { return k[j * KP + d]; }, [&](int i, int d) { return G[i * KP + d]; },
        [&](int i, int j, float t) { P[i * C + j] = rounded(p.scale * t, in); });
    for (int e = tid; e < L * L; e += kThreads)
        if (e % L > e / L) P[e / L * C + e % L] = 0.f;  // above the diagonal

    __syncthreads();
    for (int e = tid; e < L * K; e += kThreads) {
        const int i = e / K, d = e % K;
        q[i * KP + d] = rounded(q[i * KP + d] * expf(G[i * KP + d]), in);
    }
    const int64_t state = (slot * HV + hv) * K * V;
    for (int c0 = 0; c0 < V; c0 += kTile) {
        __syncthreads();  // qg is in, or the previous columns are done
        load_tile(hs, kTile, K, kTile, x.h, p.state, state, V, c0, V);
        load_tile(vn, kTile, L, kTile, x.v_new, in, (r0 * HV + hv) * V, HV * V, c0, V);
        __syncthreads();
        // o = A_qk v_new + (qg h) scale
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            if (c0 + c >= V) continue;
            float a = 0.f;
            for (int d = 0; d < K; ++d) a += q[i * KP + d] * hs[d * kTile + c];
            float b = 0.f;
            for (int j = 0; j <= i; ++j) b += P[i * C + j] * vn[j * kTile + c];
            store(p.o.data, p.o.dtype, at(p.o, ck.s, ck.c0 + i, hv) + c0 + c, b + a * p.scale);
        }
    }
}

}  // namespace

KdaChunkSaved kda_chunk_saved(const DeltaChunkProblem& p, float* base, int64_t& floats,
                              bool backward) {
    const int64_t rows = packed_rows(p.seqs), slots = chunk_slots(p.seqs, p.chunk);
    const int64_t HV = p.value_heads, K = p.dk, V = p.dv;
    ChunkWorkspace ws(base);
    const auto take = [&](int64_t n) { return ws.take(n); };
    const DType in = p.q.dtype;
    KdaChunkSaved x;
    x.qn = ws.take(rows * p.heads * K, in);
    x.kn = ws.take(rows * p.heads * K, in);
    x.G = take(rows * HV * K);
    x.beta = take(rows * HV);
    x.w = ws.take(rows * HV * K, in);
    x.kg = ws.take(rows * HV * K, in);
    x.u = ws.take(rows * HV * V, in);
    x.v_new = ws.take(rows * HV * V, in);
    x.h = ws.take(slots * HV * K * V, p.state);
    if (backward) {
        x.Tf = take(rows * HV * p.chunk);
        x.Wf = take(rows * HV * K);
    }
    floats = ws.floats();
    return x;
}

int64_t kda_chunk_fwd_workspace_floats(const DeltaChunkProblem& p) {
    int64_t floats = 0;
    kda_chunk_saved(p, nullptr, floats, false);
    return floats;
}

void kda_chunk_fwd(const DeltaChunkProblem& p, const KdaChunkSaved& x, cudaStream_t stream) {
    if (p.gate != DeltaGate::per_key)
        throw std::invalid_argument("the kda chunk forward takes a per-key gate only");
    if (p.dk < 1 || p.dk > kMaxKdaChunkKeys || p.chunk < 1 || p.chunk > kMaxDeltaChunk)
        throw std::invalid_argument("the kda chunk forward takes keys up to " +
                                    std::to_string(kMaxKdaChunkKeys) + " and chunks up to " +
                                    std::to_string(kMaxDeltaChunk) + ", got " +
                                    std::to_string(p.dk) + " and " + std::to_string(p.chunk));
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    const unsigned HV = unsigned(p.value_heads);
    if (slots > 0)
        launch_chunk_kernel(chunk_prep, dim3(unsigned(slots), HV), prep_floats(p.dk, p.chunk),
                            stream, p, x);
    if (delta_chunk_tensor_cores(p))
        kda_chunk_state_tc(p, x, stream);
    else
        launch_chunk_kernel(chunk_state,
                            dim3(unsigned(p.seqs.n) * HV, unsigned((p.dv + kTile - 1) / kTile)),
                            state_floats(p.dk, p.chunk), stream, p, x);
    if (slots > 0 && p.o.data != nullptr) {
        if (delta_chunk_tensor_cores(p))
            kda_chunk_out_tc(p, x, slots, stream);
        else
            launch_chunk_kernel(chunk_out, dim3(unsigned(slots), HV), out_floats(p.dk, p.chunk),
                                stream, p, x);
    }
    LAV_CUDA_CHECK(cudaGetLastError(), "kda_chunk_fwd");
}

void kda_chunk_fwd(const DeltaChunkProblem& p, float* workspace, cudaStream_t stream) {
    int64_t floats = 0;
    kda_chunk_fwd(p, kda_chunk_saved(p, workspace, floats, false), stream);
}

}  // namespace lav::cuda
