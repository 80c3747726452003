// kernels/common/cuda/kda_chunk_bwd.cu — kda's chunk (WY / UT) backward on CUDA, in fp32 FMA
// arithmetic; where the forward's state pass runs on tensor cores, pass 3 does too
// (delta_chunk_bwd_tc.cu).
//
// kda's CPU chunk backward (kda/kda_cpu.cpp chunk_backward, derived in kda/README.md) in five
// passes, each value rounded where that contract rounds it:
//  1. the chunk forward again (kda_chunk.cu), keeping what the later passes read: q̂, k̂, G, β,
//     w, kg, v_new and the stored chunk states h, and for the gradients the fp32 inverse
//     Tf = (I + A)⁻¹ and W = Tf (β k̂ e^G);
//  2. a block per (chunk, value head) makes A_qk = scale Σ_d q̂_id k̂_jd E_ijd in fp32, with
//     E_ijd = exp(G_id − G_jd) per key; then a block per (sequence, value head, 32 value columns)
//     walks the chunks backwards carrying dS in fp32: it keeps each chunk's dH = round(dS) and
//     dv_new = (k̂ e^{G_last − G}) dH + A_qkᵀ dO, then
//     dS ← diag(e^{G_last}) dS + scale (q̂ e^G)ᵀ dO − Wᵀ dv_new;
//  3. a block per (chunk, value head) adds the sums over the value columns: dW = −dv_new hᵀ,
//     dO hᵀ, d_kg = v_new dHᵀ, dA_qk = dO v_newᵀ, dv_new (β v)ᵀ and Σ h ⊙ dH per key, and writes
//     dv = β Tfᵀ dv_new;
//  4. a block per (chunk, value head) goes back through W = Tf kb, Tf = (I + A)⁻¹, A and A_qk,
//     whose factors E it takes per key inside the sums: dq̂, dk̂ per value head, dβ and ∂L/∂G;
//     then the reverse running sum of ∂L/∂G within the chunk and the gate's backward, with the
//     in-kernel gate's dA_log and ddt_bias terms per row for the glue to sum;
//  5. a warp per (row, key head) adds dq̂ and dk̂ over the key head's value heads in order and
//     takes them back through the l2norm with the fp32 unit vectors.
// No atomics: every sum has one order, so two runs give the same bits.
#include <cuda_runtime.h>

#include <stdexcept>
#include <type_traits>

#include "common/cuda/cuda_check.h"
#include "common/cuda/cuda_tensor.cuh"
#include "common/cuda/delta_activations.cuh"
#include "common/cuda/delta_chunk_tc.cuh"
#include "common/cuda/kda_chunk_cuda.h"

namespace lav::cuda {
namespace {

constexpr int kThreads = kDeltaChunkThreads;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // value columns per block of the dS pass
constexpr int kCols = kChunkCols, kStepCols = kChunkStepCols, kColRow = kChunkColRow;

/// The scratch: the forward's kept values, then the backward's, in fp32 elements.
struct Scratch {
    KdaChunkSaved f;
    float* P;       // [slots, HV, C, C] A_qk in fp32, then dA_qk = dO v_newᵀ
    void* dH;       // [slots, HV, K, V] round(dS) entering each chunk's reverse step, in `st`
    float* dvn;     // [rows, HV, V] dv_new
    float* dw;      // [rows, HV, K] dW = −dv_new hᵀ, then dkb = Tfᵀ dW, then dk̂
    float* dq;      // [rows, HV, K] Σ dO hᵀ, then dq̂
    float* dkg;     // [rows, HV, K] d_kg = Σ v_new dHᵀ
    float* dT;      // [slots, HV, C, C] Σ dv_new vbᵀ
    float* dbv;     // [rows, HV] Σ dvb ⊙ v, dβ's value term
    float* hdH;     // [slots, HV, K] Σ h ⊙ dH per key
    float* dA_log;  // [rows, HV] the in-kernel gate's terms
    float* ddt;     // [rows, HV, K]
};

/// The scratch at `base` (nullptr: only its size, in `floats`).
Scratch scratch_of(const DeltaChunkProblem& p, float* base, int64_t& floats) {
    const int64_t rows = packed_rows(p.seqs), slots = chunk_slots(p.seqs, p.chunk);
    const int64_t HV = p.value_heads, K = p.dk, V = p.dv, C = p.chunk;
    Scratch x;
    x.f = kda_chunk_saved(p, base, floats, true);
    ChunkWorkspace ws(base, floats);
    const auto take = [&](int64_t n) { return ws.take(n); };
    x.P = take(slots * HV * C * C);
    x.dH = ws.take(slots * HV * K * V, p.state);
    x.dvn = take(rows * HV * V);
    x.dw = take(rows * HV * K);
    x.dq = take(rows * HV * K);
    x.dkg = take(rows * HV * K);
    x.dT = take(slots * HV * C * C);
    x.dbv = take(rows * HV);
    x.hdH = take(slots * HV * K);
    x.dA_log = take(rows * HV);  // last, as kda_chunk_terms() finds them
    x.ddt = take(rows * HV * K);
    floats = ws.floats();
    return x;
}

/// Pass 2a, a block per (chunk slot, value head): A_qk = scale Σ_d (q̂_id k̂_jd) exp(G_id − G_jd)
/// for j ≤ i in fp32, into P (pass 3 writes dA_qk there once pass 2b has read A_qk).
// two blocks a multiprocessor by shared memory: without the 2, ptxas kept it to 64 registers
// and spilled
__global__ void __launch_bounds__(kThreads, 2)
    scores_bwd(DeltaChunkProblem p, DeltaGrads, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0);
    float* q = sm;          // [C, KP] q̂
    float* k = q + C * KP;  // [C, KP] k̂
    float* G = k + C * KP;  // [C, KP]
    load_tile(q, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, p.heads * K);
    load_tile(G, KP, L, K, x.f.G, DType::f32, (r0 * HV + hv) * K, HV * K);
    __syncthreads();
    float* P = x.P + (slot * HV + hv) * C * C;
    decayed_products(
        L, K, [&](int i, int dd) { return q[i * KP + dd]; },
        [&](int j, int dd) { return k[j * KP + dd]; },
        [&](int i, int dd) { return G[i * KP + dd]; },
        [&](int i, int j, float a) { P[i * C + j] = a * p.scale; });
    for (int e = tid; e < L * L; e += kThreads)
        if (e % L > e / L) P[e / L * C + e % L] = 0.f;  // above the diagonal
}

/// Pass 2b, a block per (sequence, value head, kTile value columns). One key tile at a time
/// (k̂ e^{G_last − G} for dv_new, then q̂ e^G and W for dS).
// shared memory, not registers, bounds its blocks per multiprocessor: without the 1, ptxas kept
// it to 64 registers and spilled
__global__ void __launch_bounds__(kThreads, 1)
    state_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads, V = p.dv;
    const int n = blockIdx.x / HV, hv = blockIdx.x % HV, h = hv / (HV / p.heads);
    const int col0 = blockIdx.y * kTile;
    const Span s = span(p.seqs, n);
    const int tid = threadIdx.x;
    float* X = sm;                 // [C, KP] kg, then q̂ e^G, then W
    float* P = X + C * KP;         // [C, C] A_qk
    float* dO = P + C * C;         // [C, kTile]
    float* dvn = dO + C * kTile;   // [C, kTile]
    float* dS = dvn + C * kTile;   // [K, kTile] the carried fp32 dS
    float* dH = dS + K * kTile;    // [K, kTile] dS as stored, then the dO term of the new dS
    float* last = dH + K * kTile;  // [K] exp(G_last)
    const int64_t state = (int64_t(n) * HV + hv) * K * V, gs = int64_t(HV) * K;
    load_tile(dS, kTile, K, kTile, d.dht, p.state, state, V, col0, d.dht != nullptr ? V : 0);
    const int64_t first = first_slot(p.seqs, C, n, s);
    for (int64_t ch = (s.len + C - 1) / C; ch-- > 0;) {
        const int64_t t0 = ch * C;
        const int L = int(s.len - t0 < C ? s.len - t0 : C);
        const int64_t r0 = row(p.seqs, s, t0), slot = (first + ch) * HV + hv;
        const float* G = x.f.G + (r0 * HV + hv) * K;  // row i at G[i * gs]
        __syncthreads();                              // the later chunk is done with every tile
        load_tile(X, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, p.heads * K);
        for (int dd = tid; dd < K; dd += kThreads) last[dd] = expf(G[(L - 1) * gs + dd]);
        for (int e = tid; e < L * L; e += kThreads) {
            const int i = e / L, j = e % L;
            P[i * C + j] = x.P[(slot * C + i) * C + j];
        }
        load_tile(dO, kTile, L, kTile, d.d_o.data, d.d_o.dtype, at(d.d_o, s, t0, hv), d.d_o.st,
                  col0, V);
        // the stored copy of dS, which this chunk's passes read
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = col0 + e % kTile;
            dH[e] = rounded(dS[e], p.state);
            if (c < V) store(x.dH, p.state, (slot * K + dd) * V + c, dH[e]);
        }
        __syncthreads();  // the loop takes other elements of X than load_tile gave a thread
        // kg in fp32 (the backward's), k̂ exp(G_last − G)
        for (int e = tid; e < L * K; e += kThreads) {
            const int64_t i = e / K, dd = e % K;
            X[i * KP + dd] *= expf(G[(L - 1) * gs + dd] - G[i * gs + dd]);
        }
        __syncthreads();
        // dv_new = kg dH + A_qkᵀ dO
        for (int e = tid; e < L * kTile; e += kThreads) {
            const int i = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int dd = 0; dd < K; ++dd) a += X[i * KP + dd] * dH[dd * kTile + c];
            float b = 0.f;
            for (int j = i; j < L; ++j) b += P[j * C + i] * dO[j * kTile + c];
            dvn[e] = a + b;
            if (col0 + c < V) x.dvn[((r0 + i) * HV + hv) * V + col0 + c] = dvn[e];
        }
        __syncthreads();
        // dS ← exp(G_last) ⊙ dS + scale (q̂ ⊙ exp(G))ᵀ dO − Wᵀ dv_new: the middle term into dH's
        // place, which dv_new has read
        load_tile(X, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, p.heads * K);
        __syncthreads();
        for (int e = tid; e < L * K; e += kThreads)
            X[e / K * KP + e % K] *= expf(G[e / K * gs + e % K]);
        __syncthreads();
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float a = 0.f;
            for (int i = 0; i < L; ++i) a += X[i * KP + dd] * dO[i * kTile + c];
            dH[e] = a;
        }
        __syncthreads();
        for (int e = tid; e < L * K; e += kThreads) {
            const int64_t i = e / K, dd = e % K;
            X[i * KP + dd] = x.f.Wf[((r0 + i) * HV + hv) * K + dd];
        }
        __syncthreads();
        for (int e = tid; e < K * kTile; e += kThreads) {
            const int dd = e / kTile, c = e % kTile;
            float b = 0.f;
            for (int i = 0; i < L; ++i) b += X[i * KP + dd] * dvn[i * kTile + c];
            dS[e] = dS[e] * last[dd] + dH[e] * p.scale - b;
        }
    }
    __syncthreads();
    if (d.dh0 == nullptr) return;
    store_state_tile(d.dh0, p.state, state, V, col0, dS, K, kTile);
}

/// Pass 3, a block per (chunk slot, value head): the sums over the value columns, kCols at a
/// time, each thread adding to the elements it owns.
// one block a multiprocessor by its shared memory (as state_bwd)
__global__ void __launch_bounds__(kThreads, 1)
    values_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, C = p.chunk, HV = p.value_heads, V = p.dv;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y;
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), state = (slot * HV + hv) * K * V;
    float* Ti = sm;                        // [C, C] the fp32 inverse
    float* h = Ti + whole_float4s(C * C);  // [K, kColRow] the stored state
    float* dH = h + K * kColRow;           // [K, kColRow]
    float* dO = dH + K * kColRow;          // [C, kColRow]
    float* vn = dO + C * kColRow;          // [C, kColRow] v_new
    float* dvn = vn + C * kColRow;         // [C, kColRow] dv_new
    float* vb = dvn + C * kColRow;         // [C, kColRow] β v in fp32
    float* dw = vb + C * kColRow;          // [C, K] Σ dv_new hᵀ
    float* dqh = dw + C * K;               // [C, K] Σ dO hᵀ
    float* dkh = dqh + C * K;              // [C, K] Σ v_new dHᵀ
    float* dov = dkh + C * K;              // [C, C] Σ dO v_newᵀ
    float* dTv = dov + C * C;              // [C, C] Σ dv_new vbᵀ
    float* beta = dTv + C * C;             // [C]
    float* dbv = beta + C;                 // [C] Σ dvb ⊙ v
    float* hd = dbv + C;                   // [K] Σ h ⊙ dH
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        Ti[i * C + j] = x.f.Tf[((r0 + i) * HV + hv) * C + j];
        dov[e] = dTv[e] = 0.f;
    }
    for (int i = tid; i < L; i += kThreads) {
        beta[i] = x.f.beta[(r0 + i) * HV + hv];
        dbv[i] = 0.f;
    }
    for (int e = tid; e < L * K; e += kThreads) dw[e] = dqh[e] = dkh[e] = 0.f;
    for (int dd = tid; dd < K; dd += kThreads) hd[dd] = 0.f;
    for (int c0 = 0; c0 < V; c0 += kStepCols) {
        __syncthreads();  // the previous columns are done with every tile
        const int64_t vo = (r0 * HV + hv) * V;
        load_tile(h, kColRow, K, kStepCols, x.f.h, p.state, state, V, c0, V);
        load_tile(dH, kColRow, K, kStepCols, x.dH, p.state, state, V, c0, V);
        load_tile(dO, kColRow, L, kStepCols, d.d_o.data, d.d_o.dtype, at(d.d_o, ck.s, ck.c0, hv),
                  d.d_o.st, c0, V);
        load_tile(vn, kColRow, L, kStepCols, x.f.v_new, in, vo, int64_t(HV) * V, c0, V);
        load_tile(dvn, kColRow, L, kStepCols, x.dvn, DType::f32, vo, int64_t(HV) * V, c0, V);
        gather_tile(L, kStepCols, p.v.data, p.v.dtype, at(p.v, ck.s, ck.c0, hv), p.v.st, c0, V,
                    [&](int i, int c, float v) { vb[i * kColRow + c] = beta[i] * v; });
        __syncthreads();
        // the step's columns kCols at a time, as every sum adds them
        for (int sub = 0; sub < kStepCols && c0 + sub < V; sub += kCols) {
            const int nc = V - c0 - sub < kCols ? V - c0 - sub : kCols;
            for (int dd = tid; dd < K; dd += kThreads) {
                float r[kCols];
                tile_row(r, dH + dd * kColRow + sub);
                hd[dd] += row_dot(0.f, h + dd * kColRow + sub, r);
            }
            key_column_sums(L, K, h + sub, dH + sub, dO + sub, vn + sub, dvn + sub, dw, dqh, dkh);
            value_column_sums(p, d, ck, hv, c0 + sub, nc, Ti, dO + sub, vn + sub, dvn + sub,
                              vb + sub, beta, dov, dTv, dbv);
        }
    }
    __syncthreads();
    for (int e = tid; e < L * K; e += kThreads) {
        const int64_t i = e / K, dd = e % K, o = ((r0 + i) * HV + hv) * K + dd;
        x.dw[o] = -dw[e];
        x.dq[o] = dqh[e];
        x.dkg[o] = dkh[e];
    }
    for (int dd = tid; dd < K; dd += kThreads) x.hdH[(slot * HV + hv) * K + dd] = hd[dd];
    for (int e = tid; e < L * L; e += kThreads) {
        const int i = e / L, j = e % L;
        const int64_t o = ((slot * HV + hv) * C + i) * C + j;
        x.P[o] = dov[e];
        x.dT[o] = dTv[e];
    }
    for (int i = tid; i < L; i += kThreads) x.dbv[(r0 + i) * HV + hv] = dbv[i];
}

/// Pass 4, a block per (chunk slot, value head): through W = Tf kb, Tf = (I + A)⁻¹, A and A_qk,
/// then G's cumsum and the gate.
// one block a multiprocessor by shared memory: without the 1, ptxas kept it to 80 registers and
// spilled
__global__ void __launch_bounds__(kThreads, 1)
    keys_bwd(DeltaChunkProblem p, DeltaGrads d, Scratch x) {
    extern __shared__ float sm[];
    const DType in = p.q.dtype;
    const int K = p.dk, KP = padded_keys(K), C = p.chunk, HV = p.value_heads;
    const int64_t slot = blockIdx.x;
    const int hv = blockIdx.y, h = hv / (HV / p.heads);
    const Chunk ck = chunk_at(p.seqs, C, slot);
    if (ck.len == 0) return;
    const int L = ck.len, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int64_t r0 = row(p.seqs, ck.s, ck.c0), cc = (slot * HV + hv) * C * C;
    float* k = sm;              // [C, KP] k̂
    float* G = k + C * KP;      // [C, KP]
    float* Y = G + C * KP;      // [C, KP] dW, then q̂
    float* Z = Y + C * KP;      // [C, KP] kb = β k̂ e^G, then ∂L/∂G
    const int CP = C + 1;       // the row stride of Ti and X, which row_products reads 16 rows of
    float* Ti = Z + C * KP;     // [C, CP] the fp32 inverse
    float* dT = Ti + C * CP;    // [C, C] dT, then dA
    float* X = dT + C * C;      // [C, CP] Tfᵀ dT
    float* dov = X + C * CP;    // [C, C] scale dA_qk
    float* beta = dov + C * C;  // [C]
    load_tile(k, KP, L, K, x.f.kn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    load_tile(G, KP, L, K, x.f.G, DType::f32, (r0 * HV + hv) * K, int64_t(HV) * K);
    load_tile(Y, KP, L, K, x.dw, DType::f32, (r0 * HV + hv) * K, int64_t(HV) * K);
    load_tile(Ti, CP, L, L, x.f.Tf, DType::f32, (r0 * HV + hv) * C, int64_t(HV) * C);
    load_tile(dT, C, L, L, x.dT, DType::f32, cc, C);
    gather_tile(L, L, x.P, DType::f32, cc, C, 0, L,
                [&](int i, int j, float a) { dov[i * C + j] = p.scale * a; });
    for (int i = tid; i < L; i += kThreads) beta[i] = x.f.beta[(r0 + i) * HV + hv];
    __syncthreads();
    for (int e = tid; e < L * K; e += kThreads) {
        const int j = e / K, dd = e % K;
        Z[j * KP + dd] = beta[j] * (k[j * KP + dd] * expf(G[j * KP + dd]));
    }
    __syncthreads();
    // dT = dv_new vbᵀ + dW kbᵀ
    row_products<false>(
        Y, KP, Z, KP, L, K, [&](int) { return K; },
        [&](int i, int j, float a) { dT[i * C + j] += a; });
    __syncthreads();
    // X = Tfᵀ dT and dkb = Tfᵀ dW (Tf is lower triangular), dkb in dW's place in the scratch
    lower_transposed_all(Ti, CP, dT, C, L, L, [&](int i, int j, float a) { X[i * CP + j] = a; });
    lower_transposed_all(Ti, CP, Y, KP, L, K,
                         [&](int i, int dd, float a) { x.dw[((r0 + i) * HV + hv) * K + dd] = a; });
    __syncthreads();
    load_tile(Y, KP, L, K, x.f.qn, in, (r0 * p.heads + h) * K, int64_t(p.heads) * K);
    // dA = −X Tfᵀ (Tf is lower triangular: m ≤ j), read below the diagonal only (A lives there)
    row_products<true>(
        X, CP, Ti, CP, L, L - 1, [](int j) { return j + 1; },
        [&](int i, int j, float a) { dT[i * C + j] = -a; });
    __syncthreads();
    const float* q = Y;
    const float* dA = dT;
    // a warp per row, a lane per key: with X_ij = β_i dA_ij (j < i) and Y_ij = scale dA_qk[i, j]
    // (j ≤ i), each pair passes E_ij ⊙ k̂_j to row i and E_ij ⊙ k̂_i (or q̂_i) to column j; the
    // lane takes its row's pairs (j ≤ i) and its column's (m ≥ i), forming each E once per use.
    // A lane's NV keys lane + 32 v go through the pairs together: they share each pair's reads
    // of dA and dA_qk, and their sums are independent chains. A warp takes two rows i and
    // i + kWarps at once, which share each j's and m's reads of G, k̂ and q̂; each row's sums run
    // in the same order as alone.
    const auto rows = [&](auto keys_per_lane) {
        constexpr int NV = decltype(keys_per_lane)::value;
        // f(v, key) for each of the lane's keys
        const auto keys = [&](auto&& f) {
#pragma unroll
            for (int v = 0; v < NV; ++v)
                if (lane + 32 * v < K) f(v, lane + 32 * v);
        };
        for (int i0 = warp; i0 < L; i0 += 2 * kWarps) {
            const int ir[2] = {i0, i0 + kWarps};
            const bool two = ir[1] < L;
            float Gi[2][NV] = {}, rowA[2][NV] = {}, qrow[2][NV] = {}, col[2][NV] = {},
                  qcol[2][NV] = {};
            // the rows' dkb, dq and d_kg from the scratch, loaded here to arrive during the sums
            float dkb[2][NV] = {}, dq0[2][NV] = {}, dkg[2][NV] = {};
            keys([&](int v, int dd) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    if (r == 1 && !two) break;
                    const int64_t o = ((r0 + ir[r]) * HV + hv) * K + dd;
                    Gi[r][v] = G[ir[r] * KP + dd];
                    dkb[r][v] = x.dw[o], dq0[r][v] = x.dq[o], dkg[r][v] = x.dkg[o];
                }
            });
            for (int j = 0; j <= (two ? ir[1] : i0); ++j) {
                float a[2] = {}, qa[2] = {};
                bool on[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    on[r] = j <= ir[r] && (r == 0 || two);
                    if (on[r]) a[r] = dA[ir[r] * C + j], qa[r] = dov[ir[r] * C + j];
                }
                keys([&](int v, int dd) {
                    const float gj = G[j * KP + dd], kj = k[j * KP + dd];
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        if (!on[r]) continue;
                        const float e = j == ir[r] ? 1.f : fast_exp(Gi[r][v] - gj);
                        if (j < ir[r]) rowA[r][v] += a[r] * e * kj;
                        qrow[r][v] += qa[r] * e * kj;
                    }
                });
            }
            for (int m = i0; m < L; ++m) {
                float a[2] = {}, qa[2] = {};
                bool on[2];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    on[r] = m >= ir[r] && (r == 0 || two);
                    if (on[r]) a[r] = beta[m] * dA[m * C + ir[r]], qa[r] = dov[m * C + ir[r]];
                }
                keys([&](int v, int dd) {
                    const float gm = G[m * KP + dd], km = k[m * KP + dd], qm = q[m * KP + dd];
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        if (!on[r]) continue;
                        const float e = m == ir[r] ? 1.f : fast_exp(gm - Gi[r][v]);
                        if (m > ir[r]) col[r][v] += a[r] * e * km;
                        qcol[r][v] += qa[r] * e * qm;
                    }
                });
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (r == 1 && !two) break;
                const int i = ir[r];
                float sb = 0.f;  // Σ_d dkb ⊙ k̂ e^G + k̂ ⊙ Σ_j dA_ij E_ij k̂_j: dβ's key terms
                keys([&](int v, int dd) {
                    const int64_t o = ((r0 + i) * HV + hv) * K + dd;
                    const float ki = k[i * KP + dd], qi = q[i * KP + dd];
                    const float decay = expf(Gi[r][v]),
                                to_end = expf(G[(L - 1) * KP + dd] - Gi[r][v]);
                    const float dq = dq0[r][v] * decay * p.scale + qrow[r][v];
                    const float dk_kd = dkb[r][v] * beta[i] * decay;
                    const float dk_kg = dkg[r][v] * to_end;
                    const float dk_row = beta[i] * rowA[r][v];
                    x.dq[o] = dq;
                    x.dw[o] = dk_kd + dk_kg + dk_row + col[r][v] + qcol[r][v];
                    Z[i * KP + dd] =
                        qi * dq + ki * (dk_kd + dk_row - col[r][v] - qcol[r][v] - dk_kg);
                    sb += dkb[r][v] * (ki * decay) + ki * rowA[r][v];
                });
                sb = warp_sum(sb);
                if (lane == 0) {
                    const int64_t t = ck.c0 + i;
                    const float raw = load(p.beta.data, p.beta.dtype, at(p.beta, ck.s, t, hv));
                    store(d.dbeta.data, d.dbeta.dtype, at(d.dbeta, ck.s, t, hv),
                          beta_backward(p, raw, x.dbv[(r0 + i) * HV + hv] + sb));
                }
            }
        }
    };
    using std::integral_constant;
    if (K <= 64)
        rows(integral_constant<int, 2>{});
    else if (K <= 128)
        rows(integral_constant<int, 4>{});
    else
        rows(integral_constant<int, kMaxDeltaChunkKeys / 32>{});
    __syncthreads();
    // G_last's share (exp(G_last) Σ h ⊙ dH + Σ_j kg_j ⊙ d_kg_j), then the reverse running sum
    // G's cumsum takes back, a thread per key
    for (int dd = tid; dd < K; dd += kThreads) {
        const float G_last = G[(L - 1) * KP + dd];
        float carry = 0.f;
        // unrolled: d_kg's loads go out eight at a time, not each after the last one's sum
#pragma unroll 8
        for (int j = 0; j < L; ++j)
            carry += k[j * KP + dd] * expf(G_last - G[j * KP + dd]) *
                     x.dkg[((r0 + j) * HV + hv) * K + dd];
        Z[(L - 1) * KP + dd] += expf(G_last) * x.hdH[(slot * HV + hv) * K + dd] + carry;
        float acc = 0.f;
        for (int i = L; i-- > 0;) Z[i * KP + dd] = acc += Z[i * KP + dd];
    }
    __syncthreads();
    // back through the gate, a warp per row
    const float rate = p.gate_in_kernel ? expf(p.A_log[hv]) : 0.f;
    for (int i = warp; i < L; i += kWarps) {
        const int64_t t = ck.c0 + i, item = (r0 + i) * HV + hv;
        const int64_t go = at(p.g, ck.s, t, hv), dgo = at(d.dg, ck.s, t, hv);
        float dA_log = 0.f;
        for (int dd = lane; dd < K; dd += 32) {
            const float dg = Z[i * KP + dd];
            if (!p.gate_in_kernel) {
                store(d.dg.data, d.dg.dtype, dgo + dd, dg);
                continue;
            }
            const float bias = p.dt_bias != nullptr ? p.dt_bias[int64_t(hv) * K + dd] : 0.f;
            const GateGrads gg =
                gate_backward(p, rate, load(p.g.data, p.g.dtype, go + dd) + bias, dg);
            store(d.dg.data, d.dg.dtype, dgo + dd, gg.d_arg);
            x.ddt[item * K + dd] = gg.d_arg;
            dA_log += gg.d_A_log;
        }
        if (!p.gate_in_kernel) continue;
        dA_log = warp_sum(dA_log);
        if (lane == 0) x.dA_log[item] = dA_log;
    }
}

}  // namespace

int64_t kda_chunk_workspace_floats(const DeltaChunkProblem& p) {
    int64_t floats = 0;
    scratch_of(p, nullptr, floats);
    return floats;
}

DeltaGateTerms kda_chunk_terms(const DeltaChunkProblem& p) {
    // the scratch ends with the [rows, HV] terms of dA_log and the [rows, HV, K] of ddt_bias
    DeltaGateTerms t;
    t.rows = packed_rows(p.seqs);
    t.width = p.dk;
    t.ddt_bias = kda_chunk_workspace_floats(p) - t.rows * p.value_heads * p.dk;
    t.dA_log = t.ddt_bias - t.rows * p.value_heads;
    return t;
}

void kda_chunk_bwd(const DeltaChunkProblem& p, const DeltaGrads& d, cudaStream_t stream) {
    if (p.seqs.n == 0 || p.value_heads == 0 || p.dv == 0) return;
    int64_t floats = 0;
    const Scratch x = scratch_of(p, d.workspace, floats);
    DeltaChunkProblem f = p;  // pass 1: the forward, keeping what the backward reads
    f.o.data = nullptr;
    f.ht = nullptr;
    f.h = nullptr;
    kda_chunk_fwd(f, x.f, stream);
    const int64_t K = p.dk, C = p.chunk, HV = p.value_heads;
    const int64_t slots = chunk_slots(p.seqs, p.chunk);
    const int64_t KP = padded_keys(p.dk);
    // at K = 128, C = 64: 97 KB, 97 KB, 217 KB and 197 KB
    if (slots > 0)
        launch_chunk_kernel(scores_bwd, dim3(unsigned(slots), unsigned(HV)), 3 * C * KP, stream, p,
                            d, x);
    const bool tensor_cores =
        delta_chunk_tensor_cores(p) && d.d_o.dtype == p.q.dtype && p.v.dtype == p.q.dtype;
    if (tensor_cores)
        kda_chunk_state_bwd_tc(p, d, x.f, x.P, x.dH, x.dvn, stream);
    else
        launch_chunk_kernel(state_bwd,
                            dim3(unsigned(p.seqs.n * HV), unsigned((p.dv + kTile - 1) / kTile)),
                            C * KP + C * C + 2 * C * kTile + 2 * K * kTile + K, stream, p, d, x);
    if (slots > 0 && tensor_cores)
        kda_chunk_values_bwd_tc(
            p, d, x.f, {x.dH, x.dvn, x.dw, x.dq, x.dkg, x.P, x.dT, x.dbv, x.hdH}, slots, stream);
    else if (slots > 0)
        launch_chunk_kernel(values_bwd, dim3(unsigned(slots), unsigned(HV)),
                            whole_float4s(C * C) + 2 * C * C + 2 * K * kColRow + 4 * C * kColRow +
                                3 * C * K + 2 * C + K,
                            stream, p, d, x);
    if (slots > 0)
        launch_chunk_kernel(keys_bwd, dim3(unsigned(slots), unsigned(HV)),
                            4 * C * KP + 2 * C * C + 2 * C * (C + 1) + C, stream, p, d, x);
    finish_chunk_keys(p, d, x.dq, x.dw, nullptr, nullptr, stream);
    LAV_CUDA_CHECK(cudaGetLastError(), "kda_chunk_bwd");
}

}  // namespace lav::cuda
