// kernels/common/cuda/delta_chunk.cu — the delta rule's chunk (WY / UT) forward on CUDA for
// delta_rule and gated_delta_rule, in fp32 FMA arithmetic; with bf16 inputs (or fp16 ones and an
// fp16 state) the three passes run on tensor cores (delta_chunk_tc.cu).
//
// Three passes, as the chunk form splits the work: what is local to a chunk runs for every
// chunk side by side, and only the state runs through the chunks in order.
//  1. a block per (chunk, value head): q̂, k̂ (the normalised q, k rounded to the input dtype),
//     G (the chunk-local cumsum of the log decay), β as used, A = β_i (k̂_i·k̂_j) exp(G_i − G_j)
//     (strictly lower, fp32), Ti = (I + A)⁻¹ by forward substitution in fp32 then rounded,
//     w = round(Ti round(k̂ β e^G)) and u = round(Ti round(v β));
//  2. a block per (sequence, value head, kTile value columns) carries the fp32 state S through
//     the chunks: h = round(S) in the state dtype, v_new = round(u − w h), then
//     S ← e^{G_last} S + k̂ᵀ round(v_new e^{G_last − G});
//  3. a block per (chunk, value head): o = scale [(q̂ h) e^G + round(q̂ k̂ᵀ ⊙ e^{G_i − G_j}) v_new].
// Each value is rounded where the CPU chunk forward's contract stores it (common/cpu/delta_chunk.h
// chunk_fwd), and the FMA passes sum in that forward's order. The passes hand their values over in
// the workspace (DeltaChunkSaved), which the backward reads too.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk.cuh"

namespace lav::cuda {
namespace {

constexpr int kThreads = kDeltaChunkThreads;
constexpr int kTile = 32;  // value columns per block of the state pass, per step of the others

int64_t prep_floats(int K, int C) {
    return int64_t(C) * padded_keys(K) + C * (C + 1) + C * C + C * kTile + 3 * C;
}
int64_t state_floats(int K, int C) { return 2 * int64_t(C) * K + C * kTile + 2 * K * kTile + C; }
int64_t out_floats(int K, int C) {
    return 2 * int64_t(C) * padded_keys(K) + C * C + K * kTile + C * kTile + C;
}

/// Pass 1, a block per (chunk slot, value head).
__global__ void __launch_bounds__(kThreads) chunk_prep(DeltaChunkProblem p, DeltaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, blockIdx.x);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const Span& s = ck.s;
    const int64_t t0 = ck.c0, r0 = row(p.seqs, s, t0);
    const DType in = p.q.dtype;
    float* k = sm;                 // [C, KP] k̂ as stored, then kb
    float* A = k + C * KP;         // [C, C + 1]: rows an odd number of floats apart for the solve
    float* Ti = A + C * (C + 1);   // [C, C] (I + A)⁻¹
    float* vb = Ti + C * C;        // [C, kTile] round(v β)
    float* beta = vb + C * kTile;  // [C] β as used
    float* G = beta + C;           // [C] chunk-local cumsum of the log decay
    float* decay = G + C;          // [C] exp(G)
    prep_rows<kMaxDeltaChunkKeys>(p, x, ck, hv, k, KP, beta, G, decay);
    // A_ij = ((k̂_i·k̂_j) exp(G_i − G_j)) β_i below the diagonal, in fp32 (the solve reads no
    // other entry)
    row_products<true>(
        k, KP, k, KP, L, K, [&](int) { return K; },
        [&](int i, int j, float a) { A[i * (C + 1) + j] = a * expf(G[i] - G[j]) * beta[i]; });
    __syncthreads();
    // A has read k̂: it becomes kb = round(k̂ β e^G), w's factor
    for (int e = tid; e < L * K; e += kThreads) {
        const int j = e / K, d = e % K;
        k[j * KP + d] = rounded(k[j * KP + d] * (beta[j] * decay[j]), in);
    }
    // (I + A) Ti = I in fp32; then stored
    solve_unit_lower(A, C + 1, Ti, C, L);
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        if (j <= i) Ti[i * C + j] = rounded(Ti[i * C + j], in);
        store(x.Ti, in, ((r0 + i) * HV + hv) * C + j, j <= i ? Ti[i * C + j] : 0.f);
    }
    __syncthreads();
    // w = Ti kb, u = Ti round(v β), each stored
    lower_products<false>(
        Ti, C, [&](int j, int d) { return k[j * KP + d]; }, L, K,
        [&](int i, int d, float t) { store(x.w, in, ((r0 + i) * HV + hv) * K + d, t); });
    for (int c0 = 0; c0 < V; c0 += kTile) {
        gather_tile(L, kTile, p.v.data, p.v.dtype, at(p.v, s, t0, hv), p.v.st, c0, V,
                    [&](int j, int c, float v) { vb[j * kTile + c] = rounded(v * beta[j], in); });
        __syncthreads();
        lower_products<false>(
            Ti, C, [&](int j, int c) { return vb[j * kTile + c]; }, L, kTile,
            [&](int i, int c, float t) {
                if (c0 + c < V) store(x.u, in, ((r0 + i) * HV + hv) * V + c0 + c, t);
            });
        __syncthreads();
    }
}

/// Pass 2, a block per (sequence, value head, kTile value columns), through the chunks in order.
__global__ void __launch_bounds__(kThreads) chunk_state(DeltaChunkProblem p, DeltaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x;
    const DType in = p.q.dtype;
    float* w = sm;                   // [C, K]
    float* k = w + C * K;            // [C, K] k̂
    float* vn = k + C * K;           // [C, kTile] u, then round(v_new e^{G_last − G})
    float* S = vn + C * kTile;       // [K, kTile] the carried fp32 state
    float* hs = S + K * kTile;       // [K, kTile] the state as stored
    float* to_end = hs + K * kTile;  // [C] exp(G_last − G)
    const int64_t state = (int64_t(n) * HV + hv) * K * V;
    load_tile(S, kTile, K, kTile, p.h0, p.state, state, V, col0, p.h0 != nullptr ? V : 0);
    __syncthreads();  // the loops below take other elements of S than load_tile gave a thread
    const int64_t first = first_slot(p.seqs, C, n, s);
    for (int64_t ch = 0; ch * C < s.len; ++ch) {
        const int64_t t0 = ch * C, r0 = row(p.seqs, s, t0);
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        const float G_last = x.G[(r0 + L - 1) * HV + hv];
        __syncthreads();  // the previous chunk is done with every tile
        load_tile(w, K, L, K, x.w, in, (r0 * HV + hv) * K, HV * K);
        load_tile(k, K, L, K, x.kn, in, (r0 * p.heads + h) * K, p.heads * K);
        load_tile(vn, kTile, L, kTile, x.u, in, (r0 * HV + hv) * V, HV * V, col0, V);
        for (int i = tid; i < L; i += kThreads) to_end[i] = expf(G_last - x.G[(r0 + i) * HV + hv]);
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
            vn[e] = rounded(v_new * to_end[i], in);
        }
        __syncthreads();
        // S ← e^{G_last} S + k̂ᵀ round(v_new e^{G_last − G})
        const float last = expf(G_last);
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int d = e / kTile, c = e % kTile;
            float t = S[e] * last;
            for (int j = 0; j < L; ++j) t += k[j * K + d] * vn[j * kTile + c];
            S[e] = t;
        }
    }
    __syncthreads();
    if (p.ht == nullptr) return;
    store_state_tile(p.ht, p.state, state, V, col0, S, K, kTile);
}

/// Pass 3, a block per (chunk slot, value head).
__global__ void __launch_bounds__(kThreads) chunk_out(DeltaChunkProblem p, DeltaChunkSaved x) {
    extern __shared__ float sm[];
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    const DType in = p.q.dtype;
    float* q = sm;               // [C, KP] q̂
    float* k = q + C * KP;       // [C, KP] k̂
    float* P = k + C * KP;       // [C, C] the rounded scores
    float* hs = P + C * C;       // [K, kTile] h as stored
    float* vn = hs + K * kTile;  // [C, kTile] v_new
    float* G = vn + C * kTile;   // [C]
    load_tile(q, KP, L, K, x.qn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(k, KP, L, K, x.kn, in, (r0 * p.heads + h) * K, p.heads * K);
    for (int i = tid; i < L; i += kThreads) G[i] = x.G[(r0 + i) * HV + hv];
    __syncthreads();
    // the scores round((q̂_i·k̂_j) exp(G_i − G_j)) for j ≤ i
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        float t = 0.f;
        if (j <= i) {
            for (int d = 0; d < K; ++d) t += q[i * KP + d] * k[j * KP + d];
            t = rounded(t * expf(G[i] - G[j]), in);
        }
        P[i * C + j] = t;
    }
    const int64_t state = (slot * HV + hv) * K * V;
    for (int c0 = 0; c0 < V; c0 += kTile) {
        __syncthreads();  // the scores are in, or the previous columns are done
        load_tile(hs, kTile, K, kTile, x.h, p.state, state, V, c0, V);
        load_tile(vn, kTile, L, kTile, x.v_new, in, (r0 * HV + hv) * V, HV * V, c0, V);
        __syncthreads();
        // o = ((q̂ h) e^G + scores v_new) scale
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            if (c0 + c >= V) continue;
            float a = 0.f;
            for (int d = 0; d < K; ++d) a += q[i * KP + d] * hs[d * kTile + c];
            a *= expf(G[i]);
            float b = 0.f;
            for (int j = 0; j <= i; ++j) b += P[i * C + j] * vn[j * kTile + c];
            store(p.o.data, p.o.dtype, at(p.o, ck.s, ck.c0 + i, hv) + c0 + c, (a + b) * p.scale);
        }
    }
}

}  // namespace

DeltaChunkSaved delta_chunk_saved(const DeltaChunkProblem& p, float* base, int64_t& floats) {
    const int64_t rows = packed_rows(p.seqs), slots = chunk_slots(p.seqs, p.chunk);
    const int64_t HV = p.value_heads, K = p.dk, V = p.dv;
    ChunkWorkspace ws(base);
    const auto take = [&](int64_t n, DType dtype) { return ws.take(n, dtype); };
    const DType in = p.q.dtype;
    DeltaChunkSaved x;
    x.qn = take(rows * p.heads * K, in);
    x.kn = take(rows * p.heads * K, in);
    x.w = take(rows * HV * K, in);
    x.Ti = take(rows * HV * p.chunk, in);
    x.u = take(rows * HV * V, in);
    x.v_new = take(rows * HV * V, in);
    x.G = ws.take(rows * HV);
    x.beta = ws.take(rows * HV);
    x.h = take(slots * HV * K * V, p.state);
    floats = ws.floats();
    return x;
}

int64_t delta_chunk_fwd_workspace_floats(const DeltaChunkProblem& p) {
    int64_t floats = 0;
    delta_chunk_saved(p, nullptr, floats);
    return floats;
}

void delta_chunk_fwd(const DeltaChunkProblem& p, float* workspace, cudaStream_t stream) {
    if (p.gate == DeltaGate::per_key)
        throw std::invalid_argument("the delta rule chunk forward takes no per-key gate");
    if (p.dk < 1 || p.dk > kMaxDeltaChunkKeys || p.chunk < 1 || p.chunk > kMaxDeltaChunk)
        throw std::invalid_argument("the delta rule chunk forward takes keys up to " +
                                    std::to_string(kMaxDeltaChunkKeys) + " and chunks up to " +
                                    std::to_string(kMaxDeltaChunk) + ", got " +
                                    std::to_string(p.dk) + " and " + std::to_string(p.chunk));
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    int64_t floats = 0;
    const DeltaChunkSaved x = delta_chunk_saved(p, workspace, floats);
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    const unsigned HV = unsigned(p.value_heads);
    // on tensor cores where h fits the input type's range (delta_chunk_tc.cu)
    const bool tensor_cores = delta_chunk_tensor_cores(p);
    if (slots > 0 && tensor_cores)
        delta_chunk_prep_tc(p, x, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(chunk_prep, dim3(unsigned(slots), HV), prep_floats(p.dk, p.chunk),
                            stream, p, x);
    if (tensor_cores)
        delta_chunk_state_tc(p, x, stream);
    else
        launch_chunk_kernel(chunk_state,
                            dim3(unsigned(p.seqs.n) * HV, unsigned((p.dv + kTile - 1) / kTile)),
                            state_floats(p.dk, p.chunk), stream, p, x);
    if (slots > 0 && p.o.data != nullptr) {
        if (tensor_cores)
            delta_chunk_out_tc(p, x, slots, stream);
        else
            launch_chunk_kernel(chunk_out, dim3(unsigned(slots), HV), out_floats(p.dk, p.chunk),
                                stream, p, x);
    }
    LAV_CUDA_CHECK(cudaGetLastError(), "delta_chunk_fwd");
}

}  // namespace lav::cuda
